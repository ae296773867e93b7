"""A regex as a typed syntax tree: the one form between the JSON Schema compiler and the automata.

The JSON Schema compiler builds these nodes (json_schema/), the regex parser reads text into
them (lazy_regex_parser.py), and from here they go two ways:

- `render(node, dialect)`: regex text, written in this one place. Dialect "python" is
  Python's `re` syntax, what the eager stages (s1-s4's regex_dfa), `re.fullmatch` and the
  library backends read; a node only the lazy automaton has (intersection, difference,
  members in any order) is a RegexError there, naming it. Dialect "lazy" also writes those
  as lazy_regex.py's private groups (`(?@and(A)(B))`, `(?@diff(A)(B))`,
  `(?@members...)`, `(?@def:NAME(R))`/`(?@ref:NAME)`), for teaching and for sending a
  compiled schema across a process; `parse_regex(text, pool, members=True)` reads it back.
- `lower(node, pool)`: the nodes of lazy_regex.py's `RegexPool`, where derivatives build
  the lazy automaton. The schema compiler's tree goes there directly: no text is written
  and parsed back inside a compile.

Nodes are frozen dataclasses compared by structure (a node caches its hash, so an
alternation's duplicates and a table keyed by node cost one comparison per level). "No
string at all" is written None by the builders below (`alt`, `concat`, `repeat`), as the
compiler needs it: a part with no value drops out of an alternation and voids a sequence.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, overload

from .lazy_regex import EMPTY, MAX_NESTING, TOO_DEEP, AutomatonLimitError, RegexNode, RegexPool
from .python_regex import CARET, normalize
from .regex_dfa import RegexError, _complement, _escape_char, _remove_surrogates, utf8_sequences
from .work_slices import checkpoint

Ranges = tuple[tuple[int, int], ...]  # sorted, disjoint, inclusive code point ranges
Dialect = Literal["python", "lazy"]
# How long a `(?@ref:NAME)` is: what a shared sub-expression costs where it is used.
REF_CHARS = len("(?@ref:") + 16 + len(")")


# Characters that stand for themselves in regex text are most of a schema's literal text.
_PLAIN_TEXT = re.compile(r"[^\\.^$*+?()\[\]{}|]*")


# The longest text the caches keyed by a schema's own strings remember (here and in
# json_schema/string_chars.py); a longer one is worked out again each time. They are bounded by
# count only, and a client's 50 KB property names were kept ~150 KiB a schema, refused or not,
# until the count filled: ~180 MiB per 1,000 requests (a stranger's soak test).
REMEMBERED_TEXT_CHARS = 256


def _escaped_text(text: str) -> str:
    """`text` as regex text (`a.b` is `a\\.b`): a Text node's size and its rendering,
    worked out once per short text (keys and punctuation come back in every schema)."""
    return _remembered_escape(text) if len(text) <= REMEMBERED_TEXT_CHARS else _escape_text(text)


@functools.lru_cache(maxsize=16384)
def _remembered_escape(text: str) -> str:
    return _escape_text(text)


def _escape_text(text: str) -> str:
    if text.isascii() and text.isprintable() and _PLAIN_TEXT.fullmatch(text):
        return text
    return "".join(_escape_char(c, in_class=False) for c in text)


def _quantifier(low: int, high: int | None) -> str:
    if high is None:
        return "*" if low == 0 else "+" if low == 1 else f"{{{low},}}"
    if low == high:
        return f"{{{low}}}"
    return "?" if (low, high) == (0, 1) else f"{{{low},{high}}}"


@functools.lru_cache(maxsize=4096)
def _class_text(ranges: Ranges) -> str:
    """One character of `ranges` as regex text: the character, or a class (negated when
    that lists fewer ranges). Surrogates have no UTF-8 form: a negated class leaves them
    out of what it lists, as the automata do."""
    if not ranges:
        return "[^\\x00-\\U0010ffff]"  # no character at all
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return _escape_char(chr(ranges[0][0]), in_class=False)
    others = _remove_surrogates(_complement(list(ranges)))
    if not others:  # every character (GBNF's `.`): negated, that lists nothing, and `[^]` is no regex
        return "[\\x00-\\U0010ffff]"
    negated = len(others) < len(_remove_surrogates(list(ranges)))

    def item(lo: int, hi: int) -> str:
        first = _escape_char(chr(lo), in_class=True)
        if lo == hi:
            return first
        return first + ("" if hi == lo + 1 else "-") + _escape_char(chr(hi), in_class=True)  # [89], [0-9]

    items = list(others if negated else ranges)
    if not negated and items[0][0] == CARET:
        # xgrammar reads a class that opens with a caret as negated, however it is escaped
        # (`[\^é]` let "b" through a JSON pattern; a stranger's fuzzing): '^' goes last
        lo, hi = items.pop(0)
        items = ([(lo + 1, hi)] if hi > lo else []) + items + [(CARET, CARET)]
    return ("[^" if negated else "[") + "".join(item(lo, hi) for lo, hi in items) + "]"


# A node's repr writes its regex text up to this length (`Regex.__repr__`).
REPR_CHARS = 2000


class Regex:
    """A node of the tree (one of the dataclasses below). `size`: about how many characters
    its text takes in the lazy dialect (a Shared node counts as its reference), what the
    compiler checks against max_regex_chars; `nullable`: it matches the empty string;
    `has_shared`: it is or holds a Shared node (the walks for Shared nodes skip the rest)."""

    __slots__ = ("_hash", "size", "nullable", "has_shared")
    _hash: int
    size: int
    nullable: bool
    has_shared: bool

    def _fields(self) -> tuple[object, ...]:
        """What the node is (its dataclass fields), each node under it one item (`__eq__`)."""
        raise NotImplementedError

    def _cache(self, key: tuple[object, ...], size: int, nullable: bool, has_shared: bool = False) -> None:
        """Set the cached fields; `key` is the class and the fields (what the hash is of)."""
        # (The dataclasses are frozen: their own fields are set once, these cached ones too.)
        object.__setattr__(self, "_hash", hash(key))
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "nullable", nullable)
        object.__setattr__(self, "has_shared", has_shared)

    def __eq__(self, other: object) -> bool:
        # Node by node, with a stack of the pairs left to compare: two equal trees built apart
        # may nest deeper than Python's recursion limit, and comparing their fields with `==`
        # recursed once per level (in the compiled build, a comparison that met the limit
        # aborted the whole process instead of raising). Each pair is compared once: a tree
        # uses a sub-tree in several places, and the paths to it can be exponentially many.
        todo: list[tuple[Regex, object]] = [(self, other)]
        seen: set[tuple[int, int]] = set()
        while todo:
            a, b = todo.pop()
            # (Not their cached hashes: a dict compared those already, and in the compiled build
            # two hashes past 62 bits are compared by a call back into Python, which at the end
            # of Python's stack aborts the process instead of raising RecursionError.)
            if type(b) is not type(a) or not isinstance(b, Regex):
                return False
            fields_a, fields_b = a._fields(), b._fields()
            if len(fields_a) != len(fields_b):
                return False
            for x, y in zip(fields_a, fields_b):
                if x is y:
                    continue
                if not isinstance(x, Regex):  # a text, ranges, a bound, the required flags
                    if x != y:
                        return False
                elif isinstance(x, Text):  # (most nodes: compared here, not one more turn)
                    if not (isinstance(y, Text) and x.text == y.text):
                        return False
                elif (id(x), id(y)) not in seen:
                    seen.add((id(x), id(y)))
                    todo.append((x, y))
        return True

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        """The node's text in the lazy dialect (each shared part written once), or only its
        length past REPR_CHARS: the dataclasses' own repr wrote a shared part in full at every
        use, and printing a chain of rules that each use the next twice (a failing test's
        traceback) never finished."""
        size = text_size(self)
        if size > REPR_CHARS:
            return f"<{type(self).__name__}: a regex of about {size:,} characters>"
        return f"{type(self).__name__}({render(self, 'lazy')!r})"

    def __add__(self, other: Regex) -> Regex:
        """`a + b`: a then b (`concat`)."""
        if not isinstance(other, Regex):
            return NotImplemented
        return concat(self, other)

    def __radd__(self, other: object) -> Regex:
        """`x + a` with x not a node (`sum(nodes)` starts from 0): a TypeError. Written out
        for the compiled build: without it Python found `__add__`'s own slot under the name
        `__radd__` and called it again, over and over, to a RecursionError."""
        raise TypeError(f"unsupported operand type(s) for +: {type(other).__name__!r} and {type(self).__name__!r}")


@dataclass(frozen=True, eq=False, slots=True, repr=False)
class Text(Regex):
    """These characters, literally (never empty: the empty string is EPSILON)."""

    text: str

    def _fields(self) -> tuple[object, ...]:
        return (self.text,)

    def __post_init__(self) -> None:
        self._cache((Text, self.text), len(_escaped_text(self.text)), not self.text)


@dataclass(frozen=True, eq=False, slots=True, repr=False)
class Chars(Regex):
    """One character out of `ranges` (code points, sorted and disjoint); no range: no string."""

    ranges: Ranges

    def _fields(self) -> tuple[object, ...]:
        return (self.ranges,)

    def __post_init__(self) -> None:
        self._cache((Chars, self.ranges), len(_class_text(self.ranges)), False)


@dataclass(frozen=True, eq=False, slots=True, repr=False)
class Seq(Regex):
    """The parts one after the other (no part: the empty string, EPSILON)."""

    parts: tuple[Regex, ...]

    def _fields(self) -> tuple[object, ...]:
        return self.parts

    def __post_init__(self) -> None:
        parts = self.parts
        self._cache(
            (Seq, *parts),
            sum([p.size for p in parts]),
            all([p.nullable for p in parts]),
            any([p.has_shared for p in parts]),
        )


@dataclass(frozen=True, eq=False, slots=True, repr=False)
class Alt(Regex):
    """Any one of the options (at least two)."""

    options: tuple[Regex, ...]

    def _fields(self) -> tuple[object, ...]:
        return self.options

    def __post_init__(self) -> None:
        options = self.options
        self._cache(
            (Alt, *options),
            sum([o.size for o in options]) + len(options) + 3,
            any([o.nullable for o in options]),
            any([o.has_shared for o in options]),
        )


def _is_unit(node: Regex) -> bool:
    """Whether a quantifier may follow the lazy dialect's text of `node` directly: one
    character, a class, or a group."""
    return isinstance(node, (Chars, Alt, And, Diff, Members, Shared)) or (
        isinstance(node, Text) and len(node.text) == 1
    )


@dataclass(frozen=True, eq=False, slots=True, repr=False)
class Repeat(Regex):
    """`body` from `low` to `high` times (`high` None: no bound): `*` is (0, None)."""

    body: Regex
    low: int
    high: int | None

    def _fields(self) -> tuple[object, ...]:
        return (self.body, self.low, self.high)

    def __post_init__(self) -> None:
        group = 0 if _is_unit(self.body) else len("(?:)")
        self._cache(
            (Repeat, self.body, self.low, self.high),
            self.body.size + group + len(_quantifier(self.low, self.high)),
            self.low == 0 or self.body.nullable,
            self.body.has_shared,
        )


@dataclass(frozen=True, eq=False, slots=True, repr=False)
class And(Regex):
    """The strings both `a` and `b` match (lazy automaton only)."""

    a: Regex
    b: Regex

    def _fields(self) -> tuple[object, ...]:
        return (self.a, self.b)

    def __post_init__(self) -> None:
        a, b = self.a, self.b
        self._cache((And, a, b), a.size + b.size + 11, a.nullable and b.nullable, a.has_shared or b.has_shared)


@dataclass(frozen=True, eq=False, slots=True, repr=False)
class Diff(Regex):
    """The strings `a` matches and `b` does not (lazy automaton only)."""

    a: Regex
    b: Regex

    def _fields(self) -> tuple[object, ...]:
        return (self.a, self.b)

    def __post_init__(self) -> None:
        a, b = self.a, self.b
        self._cache((Diff, a, b), a.size + b.size + 12, a.nullable and not b.nullable, a.has_shared or b.has_shared)


@dataclass(frozen=True, eq=False, slots=True, repr=False)
class Members(Regex):
    """JSON object members in any order (lazy automaton only): each of `members` at most
    once, `required[i]` ones present, `separator` between two, and `extra` (None: none) any
    number of times anywhere. A member must not match the empty string."""

    separator: Regex
    members: tuple[Regex, ...]
    required: tuple[bool, ...]
    extra: Regex | None = None

    def _fields(self) -> tuple[object, ...]:
        return (self.separator, *self.members, self.required, self.extra)

    def __post_init__(self) -> None:
        if len(self.members) != len(self.required):
            raise ValueError("Members: one `required` flag per member")
        if any(m.nullable for m in self.members):
            raise RegexError("a member of a (?@members ...) group must match a non-empty string")
        size = self.separator.size + sum(m.size + 3 for m in self.members) + 13
        self._cache(
            (Members, *self._fields()),
            size + (0 if self.extra is None else self.extra.size + 3),
            not any(self.required),
            any([n.has_shared for n in children(self)]),
        )


@dataclass(frozen=True, eq=False, slots=True, repr=False)
class Shared(Regex):
    """`body`, written once in the lazy dialect (`(?@def:NAME(body))` in front, `(?@ref:NAME)`
    where it is used) and in full in the Python dialect. Only a mark for the text: the
    automaton shares every repeated sub-expression anyway (lowering and the pool's
    hash-consing make each one node).

    `uses`: the Shared nodes nearest under `body` (none of them inside another), in the
    order a walk meets them; worked out once here, so that `shared_in_order` and
    `text_size` step from definition to definition instead of walking every node."""

    body: Regex
    uses: tuple[Shared, ...] = field(init=False, repr=False)  # (not compared: it follows from body)

    def _fields(self) -> tuple[object, ...]:
        return (self.body,)

    def __post_init__(self) -> None:
        self._cache((Shared, self.body), REF_CHARS, self.body.nullable, True)
        object.__setattr__(self, "uses", _nearest_shared(self.body) if self.body.has_shared else ())


EPSILON: Regex = Seq(())  # the empty string (typed Regex: it stands where any node may)
NOTHING = Chars(())  # no string at all (where a node is needed; the builders say None)


# ---------------------------------------------------------------------------------------
# Building: the simplifications the compiler's regexes always had
# ---------------------------------------------------------------------------------------
def lit(text: str) -> Regex:
    """`text` literally."""
    return Text(text) if text else EPSILON


def chars(ranges: Iterable[tuple[int, int]]) -> Regex:
    """One character of `ranges` (any order, overlaps allowed); a single character is its
    Text, so that `concat` joins it with its neighbours (a key, an enum value: one run)."""
    out = normalize(ranges)
    if len(out) == 1 and out[0][0] == out[0][1]:
        return Text(chr(out[0][0]))
    return Chars(out)


# Typed twice: with every part a node the sequence is one too (only a None part voids it).
@overload
def concat(*parts: Regex) -> Regex: ...
@overload
def concat(*parts: Regex | None) -> Regex | None: ...
def concat(*parts: Regex | None) -> Regex | None:
    """The parts in order; None when one matches nothing. Nested sequences are flattened and
    neighbouring texts joined (the text they write is the same)."""
    flat: list[Regex] = []
    run: list[Text] = []  # neighbouring texts not joined yet
    for part in parts:
        if part is None:
            return None
        for p in part.parts if type(part) is Seq else (part,):
            if type(p) is Text:
                run.append(p)
                continue
            if run:  # (written out twice, here and below: a nested function per call cost more)
                flat.append(run[0] if len(run) == 1 else Text("".join([t.text for t in run])))
                run.clear()
            flat.append(p)
    if run:
        flat.append(run[0] if len(run) == 1 else Text("".join([t.text for t in run])))
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def alt(options: Iterable[Regex | None]) -> Regex | None:
    """Any of the options that match something (duplicates once); None if none does. An
    empty option makes the rest optional: `alt([a, EPSILON])` is `a?`."""
    unique = list(dict.fromkeys(o for o in options if o is not None))
    if not unique:
        return None
    if EPSILON in unique:
        rest = alt([o for o in unique if o != EPSILON])
        return EPSILON if rest is None else repeat(rest, 0, 1)
    return unique[0] if len(unique) == 1 else Alt(tuple(unique))


# Typed twice, as concat: a node repeated is a node (EPSILON when high is 0).
@overload
def repeat(body: Regex, low: int, high: int | None) -> Regex: ...
@overload
def repeat(body: Regex | None, low: int, high: int | None) -> Regex | None: ...
def repeat(body: Regex | None, low: int, high: int | None) -> Regex | None:
    """`body` low..high times (high None: no bound); None when that matches nothing."""
    if body is None or body == EPSILON:
        return EPSILON if low == 0 or body == EPSILON else None
    if high == 0:
        return EPSILON
    if low == high == 1:
        return body
    return Repeat(body, low, high)


def intersect(a: Regex | None, b: Regex | None) -> Regex | None:
    return None if a is None or b is None else And(a, b)


def difference(a: Regex | None, b: Regex | None) -> Regex | None:
    return None if a is None else a if b is None else Diff(a, b)


# ---------------------------------------------------------------------------------------
# Rendering: the one place a tree becomes regex text
# ---------------------------------------------------------------------------------------
def render(node: Regex, dialect: Dialect = "python") -> str:
    """The regex text of `node` (see the module doc for the two dialects). Raises RegexError
    for a lazy-only node in the Python dialect."""
    return _Renderer(dialect).whole(node)


class _Renderer:
    def __init__(self, dialect: Dialect):
        self.dialect = dialect
        self.texts: dict[int, str] = {}  # id(node) -> its text: a shared node is written once
        self.keep: list[Regex] = []  # (the nodes behind those ids stay alive)
        self.definitions: dict[int, str] = {}  # id(Shared) -> its `(?@ref:NAME)` (lazy dialect)
        self.written: list[str] = []  # the `(?@def:...)` groups, each after the ones it uses

    def whole(self, node: Regex) -> str:
        try:
            if self.dialect == "lazy":  # each definition after the ones it uses, none nested in another
                for shared in shared_in_order(node):
                    self.text(shared)
            body = self.text(node)
        except RecursionError:  # (Python's stack used up already where this was called)
            raise AutomatonLimitError(TOO_DEEP) from None
        return "".join(self.written) + body

    def text(self, node: Regex) -> str:
        done = self.texts.get(id(node))
        if done is None:
            for n in _new_nodes_below_first(node, self.texts):  # (no recursion: see there)
                self.texts[id(n)] = self._text(n)
                self.keep.append(n)
            done = self.texts[id(node)]
        return done

    def atom(self, node: Regex) -> str:
        """The text of `node` as one unit a quantifier may follow."""
        text = self.text(node)
        if _is_unit(node) and (self.dialect == "lazy" or not isinstance(node, Shared)):
            return text
        return f"(?:{text})"

    def lazy_only(self, what: str) -> RegexError:
        return RegexError(f"{what} has no Python regex syntax: only the lazy automaton reads it (automaton='lazy')")

    def _text(self, node: Regex) -> str:
        if isinstance(node, Text):
            return _escaped_text(node.text)
        if isinstance(node, Chars):
            return _class_text(node.ranges)
        checkpoint()  # a large tree is rendered on a compile thread that yields to the scheduler
        # (The nodes under `node` are written already, `text` saw to it: these calls find them.)
        if isinstance(node, Seq):
            return "".join(self.text(p) for p in node.parts)  # an Alt is a group already
        if isinstance(node, Alt):
            return "(?:" + "|".join(self.text(o) for o in node.options) + ")"
        if isinstance(node, Repeat):
            return self.atom(node.body) + _quantifier(node.low, node.high)
        if isinstance(node, Shared):
            if self.dialect == "python":
                return self.text(node.body)
            body = self.text(node.body)
            name = hashlib.blake2b(body.encode("utf-8"), digest_size=8).hexdigest()
            self.written.append(f"(?@def:{name}({body}))")
            return f"(?@ref:{name})"
        if self.dialect == "python":
            raise self.lazy_only(
                {And: "an intersection", Diff: "a difference", Members: "members in any order"}[type(node)]
            )
        if isinstance(node, (And, Diff)):
            op = "and" if isinstance(node, And) else "diff"
            return f"(?@{op}({self.text(node.a)})({self.text(node.b)}))"
        assert isinstance(node, Members)
        groups = "".join(f"({'!' if req else '~'}{self.text(m)})" for m, req in zip(node.members, node.required))
        extra = "" if node.extra is None else f"(&{self.text(node.extra)})"
        return f"(?@members({self.text(node.separator)}){groups}{extra})"


def _new_nodes_below_first(root: Regex, done: Container[int]) -> list[Regex]:
    """The nodes under `root` (itself included) whose ids `done` does not hold, each once and
    after the nodes under it: the order in which `render` and `lower` make them, so that
    making one only reads its children's results. A walk with its own stack, not recursion:
    how deep Python's stack already is where a compile asks (deep inside a schema) must not
    decide, and compiled code has no recursion limit at all. A tree nested more than
    MAX_NESTING new nodes deep is refused, in both builds alike (the automaton's own limit)."""
    order: list[Regex] = []
    seen: set[int] = set()
    stack: list[tuple[Regex, int, bool]] = [(root, 1, False)]  # (node, its depth, children pushed)
    while stack:
        node, depth, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in done or id(node) in seen:
            continue
        if depth > MAX_NESTING:
            raise AutomatonLimitError(TOO_DEEP)
        seen.add(id(node))
        stack.append((node, depth, True))
        for child in reversed(children(node)):
            stack.append((child, depth + 1, False))
    return order


def is_plain(node: Regex) -> bool:
    """Whether `node` has Python regex syntax (no intersection, difference or members)."""
    seen: set[int] = set()
    todo = [node]
    while todo:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, (And, Diff, Members)):
            return False
        todo.extend(children(n))
    return True


def children(node: Regex) -> Sequence[Regex]:
    """The nodes directly under `node`."""
    if isinstance(node, Seq):
        return node.parts
    if isinstance(node, Alt):
        return node.options
    if isinstance(node, (Repeat, Shared)):
        return (node.body,)
    if isinstance(node, (And, Diff)):
        return (node.a, node.b)
    if isinstance(node, Members):
        return (node.separator, *node.members, *(() if node.extra is None else (node.extra,)))
    return ()


def _nearest_shared(node: Regex) -> tuple[Shared, ...]:
    """The Shared nodes under `node` (itself, if it is one) that no other Shared node under
    it holds, each once, in the order a depth-first walk meets them (children in order).
    A walk with its own stack: a tree may nest deeper than Python's recursion limit. It
    skips the parts with no Shared node (`has_shared`): a JSON string, a number, a key."""
    found: dict[int, Shared] = {}  # id -> node, in the order met
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Shared):
            found.setdefault(id(n), n)
            continue
        if id(n) in seen or not n.has_shared:
            continue
        seen.add(id(n))
        stack.extend(reversed(children(n)))
    return tuple(found.values())


def shared_in_order(node: Regex) -> list[Shared]:
    """The Shared nodes under `node` (itself included), each after the ones its body uses.

    A walk with its own stack, no recursion: a schema's shared parts may chain thousands
    deep (an object's member list, each tail shared), and handling them in this order
    keeps every other walk (render, lower) within one body's nesting. It steps along each
    Shared node's `uses`, so it walks the nodes outside every Shared body only: the same
    order as a walk of every node, depth first, each Shared node after its body."""
    out: list[Shared] = []
    seen: set[int] = set()
    stack: list[tuple[Shared, bool]] = [(s, False) for s in reversed(_nearest_shared(node))]
    while stack:
        shared, uses_done = stack.pop()
        if uses_done:
            out.append(shared)
            continue
        if id(shared) in seen:
            continue
        seen.add(id(shared))
        stack.append((shared, True))
        stack.extend((u, False) for u in reversed(shared.uses))
    return out


def text_size(node: Regex) -> int:
    """About how long the lazy dialect's text of `node` is: its size plus each shared
    definition it uses, once (the length limits of the backends read this)."""
    return node.size + sum(s.body.size + REF_CHARS + 2 for s in shared_in_order(node))  # (?@def:NAME(body))


def python_text_size(node: Regex) -> int:
    """About how long `render(node)` (the Python dialect) is: `size` with each Shared part
    written out in full wherever it is used. That can be exponentially longer than the tree
    (a GBNF chain `a ::= b b`, `b ::= c c`, ... 30 deep: a tree of 30 parts, 2^30 characters
    of text); worked out here once per node, without writing any of it."""
    if not node.has_shared:
        return node.size
    full: dict[int, int] = {}
    for n in _new_nodes_below_first(node, full):  # (each node after the ones under it)
        if isinstance(n, Shared):
            full[id(n)] = full[id(n.body)]
        else:
            full[id(n)] = n.size + sum(full[id(c)] - c.size for c in children(n))
    return full[id(node)]


# ---------------------------------------------------------------------------------------
# Lowering: the tree into lazy_regex's pool
# ---------------------------------------------------------------------------------------
# The UTF-8 byte ranges of code point ranges: the same few classes come back in every regex.
_utf8_sequences = functools.lru_cache(maxsize=4096)(utf8_sequences)


def lower(node: Regex, pool: RegexPool) -> RegexNode:
    """The pool node of `node` (characters become their UTF-8 bytes). A sub-tree used in
    several places is lowered once. Raises AutomatonLimitError past the pool's node limit
    or when the tree nests more than MAX_NESTING deep, RegexError for a bad members group."""
    lowering = _Lowering(pool)
    try:
        for shared in shared_in_order(node):  # (see shared_in_order: no deep recursion)
            lowering.node(shared)
        return lowering.node(node)
    except RecursionError:  # (Python's stack used up already where this was called)
        raise AutomatonLimitError(TOO_DEEP) from None


class _Lowering:
    def __init__(self, pool: RegexPool):
        self.pool = pool
        self.done: dict[int, RegexNode] = {}  # id(node) -> its pool node
        self.keep: list[Regex] = []  # (the nodes behind those ids stay alive)
        self.classes: dict[Ranges, RegexNode] = {}
        self.texts: dict[str, RegexNode] = {}

    def node(self, node: Regex) -> RegexNode:
        out = self.done.get(id(node))
        if out is None:
            for n in _new_nodes_below_first(node, self.done):  # (as in _Renderer.text)
                self.done[id(n)] = self._node(n)
                self.keep.append(n)
            out = self.done[id(node)]
        return out

    def _node(self, node: Regex) -> RegexNode:
        pool = self.pool
        if isinstance(node, Text):  # (the same text in another node: lowered once)
            out = self.texts.get(node.text)
            if out is None:
                out = self.texts[node.text] = pool.literal(node.text.encode("utf-8"))
            return out
        if isinstance(node, Chars):
            return self.ranges(node.ranges)
        checkpoint()  # a large tree is lowered on a compile thread that yields to the scheduler
        # (The nodes under `node` are lowered already, `node` saw to it: these calls find them.)
        if isinstance(node, Seq):
            return pool.concat_all([self.node(p) for p in node.parts])
        if isinstance(node, Alt):
            return pool.alt([self.node(o) for o in node.options])
        if isinstance(node, Repeat):
            return pool.repeat(self.node(node.body), node.low, node.high)
        if isinstance(node, Shared):
            return self.node(node.body)
        if isinstance(node, And):
            return pool.intersect(self.node(node.a), self.node(node.b))
        if isinstance(node, Diff):
            return pool.difference(self.node(node.a), self.node(node.b))
        assert isinstance(node, Members)
        # A member that matches nothing (an intersection found empty) is never written: an
        # optional one drops out, a required one leaves no object at all.
        members = [(self.node(m), req) for m, req in zip(node.members, node.required)]
        if any(m.kind == EMPTY and req for m, req in members):
            return pool.empty
        members = [(m, req) for m, req in members if m.kind != EMPTY]
        return pool.members(
            self.node(node.separator),
            [m for m, _ in members],
            [req for _, req in members],
            None if node.extra is None else self.node(node.extra),
        )

    def ranges(self, ranges: Ranges) -> RegexNode:
        """Code point ranges -> the alternation of their UTF-8 byte sequences."""
        out = self.classes.get(ranges)
        if out is not None:
            return out
        pool = self.pool
        if ranges and ranges[-1][1] < 0x80:  # ASCII only: one byte set
            out = pool.byte_set(sum((1 << (hi + 1)) - (1 << lo) for lo, hi in ranges))
        else:
            options = []
            for lo, hi in ranges:
                for seq in _utf8_sequences(lo, hi):
                    options.append(
                        pool.concat_all([pool.byte_set((1 << (b_hi + 1)) - (1 << b_lo)) for b_lo, b_hi in seq])
                    )
            out = pool.alt(options)
        self.classes[ranges] = out
        return out


__all__ = [
    "EPSILON",
    "NOTHING",
    "Alt",
    "And",
    "Chars",
    "Diff",
    "Members",
    "Regex",
    "Repeat",
    "Seq",
    "Shared",
    "Text",
    "alt",
    "chars",
    "concat",
    "difference",
    "intersect",
    "is_plain",
    "lit",
    "lower",
    "python_text_size",
    "render",
    "repeat",
    "text_size",
]
