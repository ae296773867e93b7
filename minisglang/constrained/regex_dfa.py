"""Regex -> deterministic finite automaton, at character level and at byte level.

`compile_regex` turns a regular expression into a `CharDFA` whose edges carry character
classes (`[0-9]`, `[^"\\]`, ...). `ByteDFA.from_char_dfa` turns that into a byte-level DFA
(a numpy table [num_states, 256]) so that tokens holding half a UTF-8 character (byte
fallback `<0xE4>`, byte-level BPE pieces of Chinese or emoji) can be walked too.

The regex always has to match the WHOLE output (like `re.fullmatch`), so a leading `^` and
a trailing `$` are accepted and ignored. The dialect is Python's `re` for str patterns
(python_regex.py): `\\d`, `\\w`, `\\s` are Unicode-wide ('٣' is a digit, '艳' a word
character), `.` is anything but a newline, inline flags such as `(?i)` are refused.

interegular (the DFA library) lists every character of a class explicitly and reads
`\\w` as ASCII, so it never sees the regex as written: Python's parser reads it, the
code points are cut into ATOMS (the characters no set of the regex tells apart: for
`\\w+` two, word characters and the rest), and interegular compiles the regex over one
representative character per atom. Each class of its DFA then stands for the union of its
atoms (alphabet compression, as RE2 and Rust's regex do with byte classes).

The state numbering is deterministic (classes in sorted order, states in breadth-first
order from state 0), so equal regexes give identical automata in every process: the FSM
caches of later stages depend on this, as SGLang's first release did.
"""

from __future__ import annotations

import bisect
import functools
import re
import threading
from collections import defaultdict, deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

import interegular
import interegular.fsm
import numpy as np
from interegular.fsm import FSM, OblivionError, State, anything_else
from interegular.patterns import Pattern, _Concatenation, _Repeated

from .python_regex import MAX_CODE_POINT, NotWritable, PythonRegex, Ranges, complement, normalize, shorthand_name, size

SURROGATES = (0xD800, 0xDFFF)  # code points that have no UTF-8 encoding


class RegexError(ValueError):
    """The regex is invalid, unsupported, matches nothing, or is too complex."""


class EmptyLanguage(RegexError):
    """The regex matches no string at all (`[^\\s\\S]`): a search with it finds nothing."""

    def __init__(self, shown: str):
        super().__init__(f"regex {shown} matches no string at all (empty language)")


def _shown_char(c: str) -> str:
    """One character of a regex as an error message shows it: one that does not print escaped."""
    return c if c.isprintable() else repr(c)[1:-1]  # repr escapes a non-printing character alone


def shown_regex(regex: str, limit: int = 120) -> str:
    """`regex` quoted for an error message, exactly as the client wrote it.

    Backslashes stay single (`'\\d{3}'`, not repr's `'\\\\d{3}'`), so a client can compare
    the text with what it sent. Only what would make the message unreadable is escaped: a
    character that does not print (newline, tab, NUL, other controls, a space other than
    " ", a line separator, a format character) appears as its Python escape (`\\n`, `\\t`,
    `\\x00`, `\\xa0`, `\\u2028`), which reads like the regex escape matching that character.
    A quote inside the regex is left as is, never escaped: the outer quotes only delimit,
    and a backslash put before a quote would read as part of the regex.

    A regex longer than `limit` characters is cut in the middle: its first and last
    characters, each quoted, around `...`, then its total length:
    `'abc'...'xyz' (5,000 characters)`.
    """
    if len(regex) <= limit:
        return "'" + "".join(map(_shown_char, regex)) + "'"
    head, tail = regex[: limit - limit // 3], regex[len(regex) - limit // 3 :]
    return f"'{''.join(map(_shown_char, head))}'...'{''.join(map(_shown_char, tail))}' ({len(regex):,} characters)"


# ---------------------------------------------------------------------------------------
# Character classes
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True, repr=False)
class CharClass:
    """A set of characters: `chars`, or (negated) every character except `chars`."""

    chars: frozenset[str]
    negated: bool = False

    @classmethod
    def from_ranges(cls, ranges: Ranges) -> CharClass:
        """The class of the code points in `ranges` (sorted, disjoint): negated, naming the
        others, when that names fewer (so `.` names one character, not a million)."""
        negated = 2 * size(ranges) > MAX_CODE_POINT + 1
        named = tuple(_complement(list(ranges))) if negated else ranges
        out = cls(_chars_of(named), negated)
        out.__dict__["_named"] = list(named)  # what `_named` would compute, known already
        return out

    @functools.cached_property
    def _named(self) -> list[tuple[int, int]]:
        """`chars` as sorted ranges, computed once (a Unicode class names 100k characters)."""
        return _merge_code_points(sorted(ord(c) for c in self.chars))

    def __contains__(self, ch: str) -> bool:
        return (ch in self.chars) != self.negated

    def __repr__(self) -> str:  # its label: `\\w` names 133k characters
        label = self.label()
        return f"CharClass({label if len(label) <= 80 else label[:60] + '...'})"

    def union(self, other: CharClass) -> CharClass:
        """The class of characters in `self` or in `other` (used to merge drawn edges)."""
        if not self.negated and not other.negated:
            return CharClass(self.chars | other.chars)
        if self.negated and other.negated:
            return CharClass(self.chars & other.chars, negated=True)
        positive, negative = (other, self) if self.negated else (self, other)
        return CharClass(negative.chars - positive.chars, negated=True)

    def code_point_ranges(self) -> list[tuple[int, int]]:
        """The class as sorted, disjoint, inclusive code point ranges."""
        return _complement(self._named) if self.negated else list(self._named)

    def label(self) -> str:
        """A regex-like label: `a`, `[0-9]`, `[A-Z_a-z]`, `[^"\\\\]`, `(any)`, `(none)`, and
        `\\d`, `\\W`, ... for exactly a Unicode shorthand class (hundreds of ranges)."""
        ranges = self._named
        if not ranges:
            return "(any)" if self.negated else "(none)"
        if len(ranges) >= 10:  # the fewest ranges a shorthand class has (\s: 10)
            name = shorthand_name(tuple(self.code_point_ranges()))
            if name is not None:
                return name
        if not self.negated and len(self.chars) == 1:
            return _escape_char(next(iter(self.chars)), in_class=False)
        parts = []
        for lo, hi in ranges:
            if hi == lo:
                parts.append(_escape_char(chr(lo), in_class=True))
            elif hi == lo + 1:
                parts.append(_escape_char(chr(lo), True) + _escape_char(chr(hi), True))
            else:
                parts.append(f"{_escape_char(chr(lo), True)}-{_escape_char(chr(hi), True)}")
        return "[" + ("^" if self.negated else "") + "".join(parts) + "]"


@functools.lru_cache(maxsize=256)
def _chars_of(ranges: Ranges) -> frozenset[str]:
    """The characters of `ranges`, kept for the classes that come back (`\\w` is 133k)."""
    return frozenset(chr(c) for lo, hi in ranges for c in range(lo, hi + 1))


def _merge_code_points(points: list[int]) -> list[tuple[int, int]]:
    """Sorted code points -> inclusive ranges of consecutive code points."""
    ranges: list[tuple[int, int]] = []
    for p in points:
        if ranges and ranges[-1][1] + 1 == p:
            ranges[-1] = (ranges[-1][0], p)
        else:
            ranges.append((p, p))
    return ranges


def _complement(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inclusive ranges (sorted, disjoint) -> the ranges of all other code points in
    [0, MAX_CODE_POINT] (python_regex.complement, as a list)."""
    return list(complement(tuple(ranges)))


def _remove_surrogates(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    s_lo, s_hi = SURROGATES
    out = []
    for lo, hi in ranges:
        if lo < s_lo:
            out.append((lo, min(hi, s_lo - 1)))
        if hi > s_hi:
            out.append((max(lo, s_hi + 1), hi))
    return out


def _escape_char(ch: str, in_class: bool) -> str:
    """Write one character the way it would appear in a regex."""
    special = "\\]^-[" if in_class else "\\.^$*+?()[]{}|"
    if ch in special:
        return "\\" + ch
    if ch == "\n":
        return "\\n"
    if ch == "\t":
        return "\\t"
    if ch == "\r":
        return "\\r"
    if not ch.isprintable() or (ch.isspace() and ch != " "):
        code = ord(ch)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
    return ch


# ---------------------------------------------------------------------------------------
# Character-level DFA
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CharDFA:
    """A deterministic automaton over characters.

    `transitions[state]` maps a CharClass to the next state (every state has an entry,
    possibly empty). Missing edges lead to the dead state; no state is dead itself: from
    every state some accepting state is reachable. `classes` is the alphabet partition in
    sorted order (the class of "every other character", if any, comes last).
    """

    pattern: str
    classes: tuple[CharClass, ...]
    transitions: dict[int, dict[CharClass, int]]
    finals: frozenset[int]
    num_states: int
    initial: int = 0
    # The positive classes' ranges, sorted (filled in __post_init__): `step` finds a
    # character's class by bisection; a character in none is in the negated class, if any.
    _starts: list[int] = field(init=False, repr=False, compare=False)
    _ends: list[tuple[int, CharClass]] = field(init=False, repr=False, compare=False)
    _other: CharClass | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        spans = sorted((lo, hi, c) for c in self.classes if not c.negated for lo, hi in c.code_point_ranges())
        object.__setattr__(self, "_starts", [lo for lo, _, _ in spans])
        object.__setattr__(self, "_ends", [(hi, c) for _, hi, c in spans])
        object.__setattr__(self, "_other", next((c for c in self.classes if c.negated), None))

    def step(self, state: int, ch: str) -> int | None:
        """The state after reading one character, or None if the regex can no longer match."""
        code = ord(ch)
        i = bisect.bisect_right(self._starts, code) - 1
        cls = self._ends[i][1] if i >= 0 and code <= self._ends[i][0] else self._other
        if cls is None:
            return None
        return self.transitions[state].get(cls)

    def walk(self, state: int, text: str) -> int | None:
        """The state after reading `text` from `state`, or None if it dies on the way."""
        for ch in text:
            nxt = self.step(state, ch)
            if nxt is None:
                return None
            state = nxt
        return state

    def accepts(self, text: str) -> bool:
        """Whether the whole of `text` matches the regex (like `re.fullmatch`)."""
        end = self.walk(self.initial, text)
        return end is not None and end in self.finals


# Every interegular FSM operation (concatenation, union, star, repetition, reversal) makes
# its states in one function, `interegular.fsm.crawl`, which finds each new state with a
# linear `list.index` (quadratic in all) and has no limit: `(a|b)*a(a|b){16}` ran for
# minutes before our check after the fact. We replace that one function by `_crawl`, the
# same breadth-first walk with a dict and a per-thread limit, so a compile stops at the
# first state past it. How many states one operation may make, as a multiple of
# max_states: the operations' DFAs are not minimal yet (the limit on the result is checked
# once minimised), so they get room: twice the limit, and at least CONSTRUCTION_FLOOR
# (cheap: 1,000 states take milliseconds).
CONSTRUCTION_FACTOR = 2
CONSTRUCTION_FLOOR = 1_000
_limit = threading.local()  # .states: the most states one crawl may make here (None: no limit)


def construction_limit(max_states: int) -> int:
    """How many states one step of building a DFA may make when the DFA may have `max_states`."""
    return max(CONSTRUCTION_FACTOR * max_states, CONSTRUCTION_FLOOR)


class _TooManyStates(Exception):
    """A crawl made more states than this thread's limit allows."""


def _crawl(
    alphabet: interegular.fsm.Alphabet, initial: Any, final: Callable[[Any], bool], follow: Callable[[Any, Any], Any]
) -> FSM:
    """interegular's crawl (see above), with a dict and this thread's state limit: the DFA
    whose states are what `follow` reaches from `initial`, numbered in breadth-first order."""
    limit = getattr(_limit, "states", None)
    states, number = [initial], {_key(initial): 0}
    finals: set[int] = set()
    transitions: dict[int, dict[Any, int]] = {}
    for i, state in enumerate(states):  # the list grows while it is walked
        if final(state):
            finals.add(i)
        row = transitions[i] = {}
        for symbol in alphabet.by_transition:
            try:
                target = follow(state, symbol)
            except OblivionError:  # the dead state: no edge
                continue
            key = _key(target)
            if key not in number:
                if limit is not None and len(states) >= limit:
                    raise _TooManyStates(len(states))
                number[key] = len(states)
                states.append(target)
            row[symbol] = number[key]
    return FSM(
        alphabet=alphabet, states=range(len(states)), initial=0, finals=finals, map=transitions, __no_validation__=True
    )


def _key(state: Any) -> Hashable:
    """A crawl state as a dict key, equal keys for equal states: `parallel` (union) makes
    its states dicts, and `star` and `times` start from a set (then frozensets follow)."""
    if isinstance(state, dict):
        return frozenset(state.items())
    return frozenset(state) if isinstance(state, set) else state


interegular.fsm.crawl = _crawl


def _minimise(fsm: FSM) -> FSM:
    """The minimal DFA of `fsm` by Hopcroft's partition refinement (O(n k log n)).

    interegular's own `reduce()` reverses the DFA twice (Brzozowski), and a reversal can be
    exponentially larger than the DFA: `(a|b){16}a(a|b)*` has 19 states, its reversal
    2^17. Dead states (those no final state is reachable from) are left out.
    """
    dead = State(len(fsm.states))  # one explicit dead state: every missing edge goes there
    symbols = list(fsm.alphabet.by_transition)
    sources: dict[tuple[Any, State], set[State]] = defaultdict(set)  # (symbol, target) -> the states with that edge
    for state in [*fsm.states, dead]:
        row = fsm.map.get(state, {})
        for symbol in symbols:
            sources[symbol, row.get(symbol, dead)].add(state)
    finals = set(fsm.finals)
    blocks = [b for b in (set(finals), {*fsm.states, dead} - finals) if b]  # (refined in place)
    block_of = {s: i for i, b in enumerate(blocks) for s in b}
    pending = {min(range(len(blocks)), key=lambda i: len(blocks[i]))}  # splitters still to use
    while pending:
        splitter = list(blocks[pending.pop()])
        for symbol in symbols:
            into: dict[int, set[State]] = defaultdict(set)  # block -> its states with an edge into the splitter
            for target in splitter:
                for source in sources.get((symbol, target), ()):
                    into[block_of[source]].add(source)
            for b, part in into.items():
                if len(part) == len(blocks[b]):
                    continue
                blocks[b] -= part
                blocks.append(part)
                for state in part:
                    block_of[state] = len(blocks) - 1
                if b in pending or len(part) <= len(blocks[b]):
                    pending.add(len(blocks) - 1)
                else:
                    pending.add(b)
    # A block's states agree on everything: one of them speaks for it.
    speaker = {i: next(iter(b)) for i, b in enumerate(blocks) if dead not in b}
    transitions = {
        i: {symbol: block_of[t] for symbol, t in (fsm.map.get(s) or {}).items() if block_of[t] in speaker}
        for i, s in speaker.items()
    }
    return FSM(
        alphabet=fsm.alphabet,
        states=set(speaker) | {block_of[fsm.initial]},
        initial=block_of[fsm.initial],
        finals={i for i, s in speaker.items() if s in finals},
        map=transitions,
        __no_validation__=True,
    )


def compile_regex(pattern: str, max_states: int = 10_000) -> CharDFA:
    """Compile a regex into a minimal CharDFA with deterministic numbering.

    Raises RegexError for invalid or unsupported regexes, an empty language, or more than
    `max_states` states, which is known as the states are made: no step of the
    construction makes more than `construction_limit(max_states)` of them.
    """
    body = _strip_anchors(pattern)
    try:
        python = PythonRegex(body)
    except re.error as e:
        raise RegexError(f"invalid regex {shown_regex(pattern)}: {e}") from None
    except NotWritable as e:
        raise RegexError(f"unsupported regex {shown_regex(pattern)}: {e}") from None
    except RecursionError:  # Python's own parser, on groups nested a few hundred deep
        raise RegexError(f"regex too complex: {shown_regex(pattern)} nests groups too deeply") from None
    alphabet = Alphabet(python.char_sets())
    text = python.write(alphabet.representatives)
    if text is None:
        raise EmptyLanguage(shown_regex(pattern))
    try:
        parsed = interegular.parse_pattern(text)
    except Exception as e:  # interegular's parser raises several exception types
        reason = str(e) or type(e).__name__
        raise RegexError(f"unsupported regex {shown_regex(pattern)}: interegular says: {reason}") from None
    _check_size(parsed, pattern, max_states)
    _limit.states = construction_limit(max_states)
    try:
        fsm = _minimise(parsed.to_fsm())
    except _TooManyStates:
        raise RegexError(
            f"regex too complex: more than {max_states} states (max_fsm_states) for {shown_regex(pattern)}; "
            f"one step of building its DFA reached {construction_limit(max_states)} states and was stopped there"
        ) from None
    except Exception as e:
        reason = str(e) or type(e).__name__
        raise RegexError(f"unsupported regex {shown_regex(pattern)}: interegular says: {reason}") from None
    finally:
        _limit.states = None
    dfa = _renumber(fsm, pattern, alphabet)
    if not dfa.finals:
        raise EmptyLanguage(shown_regex(pattern))
    if dfa.num_states > max_states:
        raise RegexError(
            f"regex too complex: more than {max_states} states ({dfa.num_states}) for {shown_regex(pattern)}"
        )
    return dfa


# `_strip_anchors` looks into groups that are a whole alternative this many levels deep (a
# regex of 3,000 nested groups is the reader's to refuse, not a recursion here).
ANCHOR_GROUP_LEVELS = 8


def _strip_anchors(pattern: str, level: int = 0) -> str:
    """Drop the anchors that stand where a whole-output match starts or ends, where they
    always hold: a `^` opening and an unescaped `$` closing the regex or any of its top-level
    alternatives (`^yes$|^no$`), and the same inside a group that is a whole alternative
    (`(^yes$|^no$)`, `^(?:a|b)$`). Any other anchor stays for the reader to refuse."""
    branches = _top_level_branches(pattern)
    if branches is None:  # (unbalanced: the reader says what is wrong with it)
        branches = [pattern]
    out = []
    for branch in branches:
        branch = branch[1:] if branch.startswith("^") else branch
        if branch.endswith("$") and unescaped(branch[:-1]):
            branch = branch[:-1]
        # A group that is the whole alternative, with no quantifier after it: its own alternatives
        # start and end where the match does.
        for opening in ("(?:", "(?P<", "(") if level < ANCHOR_GROUP_LEVELS else ():
            if branch.startswith(opening) and branch.endswith(")") and _top_level_branches(branch[1:-1]) is not None:
                if opening == "(" and branch.startswith("(?"):
                    break  # (a lookaround, flags or a comment: not a plain group)
                head = branch.index(">") + 1 if opening == "(?P<" else len(opening)
                branch = branch[:head] + _strip_anchors(branch[head:-1], level + 1) + ")"
                break
        out.append(branch)
    return "|".join(out)


def unescaped(before: str) -> bool:
    """Whether what follows `before` is not escaped (an even run of backslashes ends it)."""
    return (len(before) - len(before.rstrip("\\"))) % 2 == 0


def _top_level_branches(pattern: str) -> list[str] | None:
    """`pattern` cut at its top-level `|` (outside groups, classes and escapes); None when a
    parenthesis is unbalanced."""
    branches, depth, start, i = [], 0, 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":  # a class, to its closing `]` (a `]` right after `[` or `[^` is literal)
            i += 2 if pattern[i + 1 : i + 2] == "^" else 1
            i += 1 if pattern[i : i + 1] == "]" else 0
            while i < len(pattern) and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth < 0:
                return None
        elif c == "|" and depth == 0:
            branches.append(pattern[start:i])
            start = i + 1
        i += 1
    if depth:
        return None
    branches.append(pattern[start:])
    return branches


class Alphabet:
    """The code points cut into atoms by a regex's character sets, one representative each.

    Two code points are in one atom when every set of the regex holds both or neither: no
    string of the regex can tell them apart. An atom's representative is its smallest code
    point; a set is written for interegular as the class of its atoms' representatives, so
    interegular handles a few characters whatever the sets' sizes. Code points in no set
    form one atom with no representative (no edge ever reads them).
    """

    def __init__(self, sets: set[Ranges]):
        ordered = sorted(sets)  # a fixed order: equal regexes cut equal atoms
        cuts = sorted({0, MAX_CODE_POINT + 1} | {b for ranges in ordered for lo, hi in ranges for b in (lo, hi + 1)})
        # The signature of each elementary interval [cuts[k], cuts[k+1]): the sets holding it.
        signature = [0] * (len(cuts) - 1)
        for i, ranges in enumerate(ordered):
            for lo, hi in ranges:
                for k in range(bisect.bisect_left(cuts, lo), bisect.bisect_left(cuts, hi + 1)):
                    signature[k] |= 1 << i
        atoms: dict[int, list[tuple[int, int]]] = {}
        for k, sig in enumerate(signature):
            atoms.setdefault(sig, []).append((cuts[k], cuts[k + 1] - 1))
        self.unused: Ranges = normalize(atoms.pop(0, []))
        # representative character -> the code point ranges it stands for
        self.atom_of: dict[str, Ranges] = {chr(spans[0][0]): tuple(spans) for spans in atoms.values()}
        members: list[list[str]] = [[] for _ in ordered]  # set -> its atoms' representatives
        for sig, spans in atoms.items():
            for i in range(sig.bit_length()):
                if sig >> i & 1:
                    members[i].append(_escape_representative(chr(spans[0][0])))
        self._class_text = {ranges: "[" + "".join(reps) + "]" for ranges, reps in zip(ordered, members)}

    def representatives(self, ranges: Ranges) -> str:
        """The set `ranges` (one of the regex's) as a class of its atoms' representatives."""
        return self._class_text[ranges]

    def char_class(self, representatives: Iterable[str]) -> CharClass:
        """The CharClass of the code points some of `representatives` stand for."""
        spans = [span for r in representatives for span in self.atom_of[r]]
        return CharClass.from_ranges(normalize(spans))


def _escape_representative(ch: str) -> str:
    """A representative inside interegular's `[...]`: the class's own syntax escaped."""
    return "\\" + ch if ch in "\\]^-[" else ch


def _check_size(parsed: Pattern, pattern: str, max_states: int) -> None:
    """Refuse a pattern whose size alone would exceed the limit: interegular spends minutes
    on huge repetitions, so they are caught on the parse tree before building anything."""

    def positions(node: Any) -> int:  # a node of interegular's parse
        """How many single-character positions the pattern expands to (a size estimate)."""
        if isinstance(node, Pattern):
            return sum(positions(o) for o in node.options)
        if isinstance(node, _Concatenation):
            return sum(positions(p) for p in node.parts)
        if isinstance(node, _Repeated):
            times = node.max if node.max is not None else max(node.min, 1)
            return positions(node.base) * max(times, 1)
        return 1  # a character class, or the empty pattern

    size = positions(parsed)
    if size > 4 * max_states:
        raise RegexError(
            f"regex too complex: more than {max_states} states would be needed; {shown_regex(pattern)} "
            f"expands to {size} character positions (limit {4 * max_states})"
        )


def _renumber(fsm: FSM, pattern: str, alphabet: Alphabet) -> CharDFA:
    """interegular FSM -> CharDFA: sorted classes, live states only, BFS numbering."""
    # 1. The alphabet partition as CharClasses, in sorted order. interegular's
    # "anything else" stands for no code point: every one read is some representative's.
    groups = fsm.alphabet.by_transition  # interegular class id -> list of symbols
    class_of_key: dict[int, CharClass] = {}
    for key, symbols in groups.items():
        own = [s for s in symbols if s is not anything_else]
        if own:
            class_of_key[key] = alphabet.char_class(own)
    classes = list(class_of_key.values())
    if alphabet.unused:
        classes.append(CharClass.from_ranges(alphabet.unused))
    # Classes are disjoint, so their smallest named code points order them as their sorted
    # characters would (the negated one, at most one, last), without sorting 100k of them.
    classes.sort(key=lambda c: (c.negated, c._named[0][0] if c._named else -1))
    order = {c: i for i, c in enumerate(classes)}

    # 2. Live states: those from which an accepting state can be reached.
    edges = {s: {class_of_key[k]: t for k, t in fsm.map.get(s, {}).items() if k in class_of_key} for s in fsm.states}
    live = set(fsm.finals)
    changed = True
    while changed:
        changed = False
        for s, out in edges.items():
            if s not in live and any(t in live for t in out.values()):
                live.add(s)
                changed = True

    # 3. Breadth-first numbering from the initial state, following edges in class order.
    if fsm.initial not in live:
        return CharDFA(pattern, tuple(classes), {0: {}}, frozenset(), 1)
    new_id = {fsm.initial: 0}
    queue = deque([fsm.initial])
    transitions: dict[int, dict[CharClass, int]] = {}
    while queue:
        s = queue.popleft()
        row = {}
        for cls, t in sorted(edges[s].items(), key=lambda item: order[item[0]]):
            if t not in live:
                continue
            if t not in new_id:
                new_id[t] = len(new_id)
                queue.append(t)
            row[cls] = new_id[t]
        transitions[new_id[s]] = row
    finals = frozenset(new_id[s] for s in fsm.finals if s in new_id)
    return CharDFA(pattern, tuple(classes), transitions, finals, len(new_id))


# ---------------------------------------------------------------------------------------
# UTF-8 byte ranges
# ---------------------------------------------------------------------------------------
def utf8_sequences(lo: int, hi: int) -> list[tuple[tuple[int, int], ...]]:
    """Split the code points [lo, hi] into UTF-8 byte-range sequences.

    Each sequence is a tuple of inclusive (low byte, high byte) ranges, one per byte, and
    the byte strings it matches are exactly the encodings of a sub-range of [lo, hi].
    E.g. [0x80, 0x7FF] -> [((0xC2, 0xDF), (0x80, 0xBF))]. Surrogates (no UTF-8 encoding)
    are left out. (The splitting idea is the one RE2 and Rust's regex-syntax use: cut the
    range until every byte position is a plain range.)
    """
    out: list[tuple[tuple[int, int], ...]] = []
    for part_lo, part_hi in _remove_surrogates([(lo, hi)]):
        _split_utf8(part_lo, part_hi, out)
    return out


def _split_utf8(lo: int, hi: int, out: list[tuple[tuple[int, int], ...]]) -> None:
    for last in (0x7F, 0x7FF, 0xFFFF):  # never mix encodings of different lengths
        if lo <= last < hi:
            _split_utf8(lo, last, out)
            _split_utf8(last + 1, hi, out)
            return
    num_bytes = len(chr(lo).encode("utf-8"))
    for i in range(1, num_bytes):
        low_bits = (1 << (6 * i)) - 1  # the bits carried by the last i continuation bytes
        if lo & ~low_bits != hi & ~low_bits:
            # lo and hi differ before the last i bytes: those bytes must span 80..BF fully
            if lo & low_bits != 0:
                _split_utf8(lo, lo | low_bits, out)
                _split_utf8((lo | low_bits) + 1, hi, out)
                return
            if hi & low_bits != low_bits:
                _split_utf8(lo, (hi & ~low_bits) - 1, out)
                _split_utf8(hi & ~low_bits, hi, out)
                return
    first, last_bytes = chr(lo).encode("utf-8"), chr(hi).encode("utf-8")
    out.append(tuple(zip(first, last_bytes)))


# ---------------------------------------------------------------------------------------
# Byte-level DFA
# ---------------------------------------------------------------------------------------
# While a character's UTF-8 bytes are read: (the byte ranges still to read, the char state to land in).
_Item = tuple[tuple[tuple[int, int], ...], int]


@dataclass(frozen=True, eq=False)
class ByteDFA:
    """A deterministic automaton over bytes, built from a CharDFA.

    `table[state, byte]` is the next state, -1 for dead; shape [num_states, 256], int32.
    States 0..num_char_states-1 are the CharDFA's states with the same ids (a whole number
    of characters has been read); higher ids are in the middle of a multi-byte character.
    """

    table: np.ndarray
    finals: frozenset[int]
    num_char_states: int
    pattern: str | None = None
    initial: int = 0
    _rows: list[list[int]] = field(init=False, repr=False)  # table as lists: fast to index

    def __post_init__(self) -> None:
        self.table.flags.writeable = False
        object.__setattr__(self, "_rows", self.table.tolist())

    @property
    def num_states(self) -> int:
        return int(self.table.shape[0])

    def is_final(self, state: int) -> bool:
        return state in self.finals

    def walk_bytes(self, state: int, data: bytes) -> int:
        """The state after reading `data` from `state`; -1 if the walk dies."""
        # BEGIN SOLUTION task1_1
        rows = self._rows
        for b in data:
            state = rows[state][b]
            if state < 0:
                return -1
        return state
        # END SOLUTION

    @classmethod
    def from_char_dfa(cls, dfa: CharDFA) -> ByteDFA:
        """UTF-8 encode every character edge; share the intermediate multi-byte states.

        An intermediate state is identified by what may still follow it: a set of
        (remaining byte ranges, char state to land in). Equal sets are one state, so e.g.
        all lead bytes E1..EC of `[^"]` share the state "two more continuation bytes".
        """
        n = dfa.num_states
        rows: list[np.ndarray] = [np.full(256, -1, dtype=np.int32) for _ in range(n)]
        ids: dict[frozenset[_Item], int] = {}
        pending: deque[frozenset[_Item]] = deque()
        sequences: dict[CharClass, list[tuple[tuple[int, int], ...]]] = {}

        def intermediate(items: frozenset[_Item]) -> int:
            if items not in ids:
                ids[items] = n + len(ids)
                rows.append(np.full(256, -1, dtype=np.int32))
                pending.append(items)
            return ids[items]

        def fill(row: np.ndarray, items: list[_Item]) -> None:
            """Write the transitions for a set of (byte ranges, destination) items."""
            cuts = sorted({r[0][0] for r, _ in items} | {r[0][1] + 1 for r, _ in items})
            for start, stop in zip(cuts, cuts[1:]):  # byte segments with the same items
                here = [(r[1:], dst) for r, dst in items if r[0][0] <= start and stop - 1 <= r[0][1]]
                if not here:
                    continue
                if not here[0][0]:  # the character is complete: land in its char state
                    row[start:stop] = here[0][1]
                else:
                    row[start:stop] = intermediate(frozenset(here))

        for state in range(n):
            items: list[_Item] = []
            for char_class, dst in dfa.transitions[state].items():
                if char_class not in sequences:
                    sequences[char_class] = [
                        seq for lo, hi in char_class.code_point_ranges() for seq in utf8_sequences(lo, hi)
                    ]
                items.extend((seq, dst) for seq in sequences[char_class])
            fill(rows[state], items)
        while pending:
            group = pending.popleft()
            fill(rows[ids[group]], sorted(group))
        return cls(np.stack(rows), dfa.finals, n, dfa.pattern)
