"""A regex as a shared syntax tree over bytes, and the DFA its derivatives build on demand.

Why not the eager DFA of regex_dfa.py here: interegular builds every state of the whole
DFA before the first token, and some schemas have far too many. A string with
`maxLength: 1000` is a chain of 1,000 states (10 s); a 599-value enum a trie of every
value (25 s); `$ref`s inlined into the regex text grow it about 16x per level, and
each copy becomes states of its own. Generation only ever visits a few hundred of those
states. So this module builds a state when generation reaches it (what llguidance's
lexer does, with regex derivatives), and its cost follows the regex, not its DFA.

The pieces:
- `RegexNode`: a node of the syntax tree over BYTES (characters are UTF-8 encoded while
  parsing). Nodes are hash-consed by `RegexPool`: two structurally equal sub-expressions
  are one object, so a group repeated in the text (an inlined `$ref`) is one node, and
  equal regexes are identical objects (the state table is a dict keyed by node).
- `RegexPool.derivative(r, byte)`: Brzozowski's derivative, the regex matching what may
  follow `byte` (Brzozowski 1964; "Regular-expression derivatives re-examined", Owens,
  Reppy and Turon 2009, for the byte classes and the simplifications). With alternation
  kept as a SET (associative, commutative, idempotent: Brzozowski's condition), a regex
  has finitely many distinct derivatives: they are the DFA's states.
- `parse_regex` (lazy_regex_parser.py): our own small parser for Python's regex syntax (the subset the JSON
  Schema compiler and the tests write: classes, escapes, `{m,n}`, groups, alternation,
  `\\uXXXX`); it keeps class ranges as ranges (interegular lists every character of a
  class, which is slow at Unicode scale) and memoises groups by their text.
- `RegexPool.members`: an operator regex text cannot write compactly, the members of a
  JSON object in ANY order (each at most once, the required ones present, separators
  between them, any number of "extra" entries anywhere). As a regex it is every
  permutation (n! alternatives); as a node it is the set of members written so far, and
  its derivative unfolds one level: "a member not written yet, then the rest". So only
  the sets generation reaches become states. The JSON Schema compiler writes it in a
  private syntax only `parse_regex` reads (see MEMBERS_SYNTAX).
- `RegexPool.intersect` / `RegexPool.difference`: `A & B` and `A - B` (Brzozowski's
  derivatives handle both: d(A & B) = dA & dB, d(A - B) = dA - dB). The JSON Schema
  compiler needs them for a `pattern` with minLength/maxLength and for the keys of
  patternProperties (a pattern's keys minus the listed names); private syntax
  `(?@and(A)(B))`, `(?@diff(A)(B))`. A new one is searched (its derivatives, best
  first) until a match is found, or it is EMPTY: so no state hides an empty language.
- `LazyByteDFA` (lazy_byte_dfa.py): state = a regex node; a state's row of 256 next states is computed on
  its first visit, one derivative per byte class (bytes no sub-expression tells apart).

Semantics are the eager DFA's: the regex must match the whole output (a leading `^` and
trailing `$` are ignored), and it reads as Python's `re` reads a str pattern
(python_regex.py): `\\d \\w \\s` are Unicode-wide, `.` is anything but a newline.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable
from typing import Final, Literal, overload

from .regex_dfa import RegexError
from .work_slices import OutOfTime, checkpoint

# Node kinds. (Final: the compiled build reads them as constants, not module attributes.)
EMPTY: Final = 0
EPSILON: Final = 1
BYTES: Final = 2
CONCAT: Final = 3
ALT: Final = 4
REPEAT: Final = 5
MEMBERS: Final = 6
AND: Final = 7
DIFF: Final = 8
# The private syntax of a MEMBERS node (Python's `re` rejects `(?@`, so no ordinary regex
# means something else by it): `(?@members(SEP)(!M)(~M)(&E))`, the separator group first,
# then one group per member: `!` required, `~` optional (each at most once), `&` an extra
# entry (any number of times, at most one such group). Nothing else may follow `(?@`.
MEMBERS_SYNTAX = "(?@members"
# Intersection and difference of two regexes: `(?@and(A)(B))`, `(?@diff(A)(B))` (A minus B).
AND_SYNTAX, DIFF_SYNTAX = "(?@and", "(?@diff"
# A sub-expression written once and used in many places: `(?@def:NAME(R))` (matches the
# empty string, defines NAME as R) before any `(?@ref:NAME)` (matches what R matches).
# NAME is a hash of R's text (the JSON Schema compiler's choice), so two regexes put
# together never mean different things by one name.
DEF_SYNTAX, REF_SYNTAX = "(?@def:", "(?@ref:"
_PRIVATE_GROUP = re.compile(r"\(\?@(?:members|and|diff|def:|ref:)")
# How many nodes one search for a match of a new `&`/`-` node may visit; and how many
# derivatives all the searches of one pool may compute together, until its owner lifts that
# second bound (`RegexPool.searched_limit`).
MAX_SET_SEARCH: Final = 100_000
MAX_SEARCH_DERIVATIVES: Final = 300_000
# How deeply a node may nest (RegexNode.depth): the derivative, `cuts` and `clip` recurse
# that deep. Checked when a node is made, so both builds refuse the same regexes by name: the
# pure one would otherwise stop at Python's recursion limit, and the compiled one (mypyc's
# native calls run on the C stack, unchecked) crash the process past a few thousand levels.
MAX_NESTING: Final = 256
NEVER: Final = 1 << 40  # the min_len of the empty language


# A key of the pool's table: a CONCAT's (head uid << 32 | tail uid), or a tuple (kind, ...).
PoolKey = int | tuple[int | None, ...]


class AutomatonLimitError(RegexError):
    """Building this regex's automaton would exceed one of the declared limits."""


class BuildAccount:
    """One request's own room in a lazy automaton it shares with other requests: how many
    more automaton states (`states`, of max_lazy_states) and regex nodes (`nodes`, of
    max_regex_nodes) it may make. A compiled grammar is cached and every request over it
    walks the same automaton; counted over the automaton, the bounds let one client's
    requests use up another's: sixteen requests sampling at temperature 5 over
    `(a|b)*a(a|b){12}` filled 600 states and a short request beside them was aborted where
    alone it was served. So each request's matcher starts with the room a fresh compile
    would leave it and opens its account (`RegexPool.account`) before each call into the
    automaton; what is made is taken from the open account. A request is refused only for
    what it built itself (states another made are free to reach), as it would be alone on a
    fresh compile, and the automaton holds at most the sum of its requests' rooms."""

    def __init__(self, states: int, nodes: int):
        self.states = states
        self.nodes = nodes


# A derivative, a node's byte classes and the parser recurse into nested nodes. Simplifying
# a derivative nests: `[0-9]?` written 400 times, after one digit, is a chain of 400
# alternatives each inside the one before, and the next derivative ran into Python's
# recursion limit (a RecursionError that read "maximum recursion depth exceeded in
# comparison", at compile or, worse, mid-generation as an internal error).
TOO_DEEP = (
    "regex too complex: its automaton nests more deeply than the lazy automaton follows "
    "(hundreds of optional copies of one piece in a row, or groups nested hundreds deep); write a "
    "counted repetition such as (?:X){0,400} instead"
)


class RegexNode:
    """One hash-consed node. Never build one directly: ask a `RegexPool`.

    kind EMPTY: matches nothing; EPSILON: the empty string; BYTES: one byte out of
    `byte_set` (a 256-bit int, bit b = byte b); CONCAT: `parts = (head, tail)` (a sequence
    is right-nested, a group inside it is one head); ALT: `parts` = the alternatives, a sorted tuple
    without duplicates; REPEAT: `parts = (body,)` from `low` to `high` times (None: no bound).
    MEMBERS: `parts = (separator, extra, *members)` (extra EMPTY: none), `low` = bitmask of
    the members written so far, `high` = bitmask of the required ones, `byte_set` = 1 once
    something is written (the next member needs the separator first).
    AND: `parts = (a, b)`, what both match; DIFF: `parts = (a, b)`, what a matches and b
    does not. Their `first` may hold a byte whose derivative is EMPTY (never a non-EMPTY
    node with an empty language: the pool searches each new one).
    """

    __slots__ = (
        "uid",
        "kind",
        "parts",
        "byte_set",
        "low",
        "high",
        "nullable",
        "first",
        "max_bound",
        "min_len",
        "key_len",
        "depth",
        "_cuts",
    )
    max_bound: int
    min_len: int
    key_len: int
    depth: int

    def __init__(
        self,
        uid: int,
        kind: int,
        parts: tuple[RegexNode, ...] = (),
        byte_set: int = 0,
        low: int = 0,
        high: int | None = 0,
        nullable: bool = False,
        first: int = 0,
    ) -> None:
        self.uid, self.kind, self.parts, self.byte_set = uid, kind, parts, byte_set
        self.low, self.high = low, high
        self.nullable = nullable  # matches the empty string: an accepting state
        self.first = first  # 256-bit int: the bytes some match can start with
        self._cuts: int | None = None  # RegexPool.cuts, once computed
        # max_bound: the largest repetition bound in the subtree (what `RegexPool.clip` may
        # lower). min_len: the fewest bytes a match takes (NEVER for the empty language).
        # key_len: how long RegexPool.key's text is at least (a tag letter, parentheses,
        # spaces; the hex digits of a byte set): a large grammar's key is refused unwritten.
        # depth: how deeply the recursive walks (derivative, cuts, clip) go below this node;
        # a CONCAT's tail is walked in a loop, not a call, so it adds no level.
        # CONCAT and ALT first, in one pass each: most nodes a derivative makes are those.
        if kind == CONCAT:  # key "c(HEAD TAIL)"
            head, tail = parts
            self.depth = head.depth + 1 if head.depth >= tail.depth else tail.depth
            self.max_bound = head.max_bound if head.max_bound > tail.max_bound else tail.max_bound
            self.min_len = head.min_len + tail.min_len
            if self.min_len > NEVER:
                self.min_len = NEVER
            self.key_len = head.key_len + tail.key_len + 4
            return
        self.depth = 1 + max([p.depth for p in parts]) if parts else 0
        if kind == ALT:
            max_bound, min_len, key_len = 0, NEVER, 2 + len(parts)
            for p in parts:
                if p.max_bound > max_bound:
                    max_bound = p.max_bound
                if p.min_len < min_len:
                    min_len = p.min_len
                key_len += p.key_len
            self.max_bound, self.min_len, self.key_len = max_bound, min_len, key_len
            return
        if kind == REPEAT:
            self.max_bound = max(low, high or 0, parts[0].max_bound)
            self.min_len = min(low * parts[0].min_len, NEVER)
        elif kind == MEMBERS:
            # max_bound 0: `clip` leaves it whole (a member's bounds are clipped once it is
            # in progress, as the head of a CONCAT); min_len: the required members left.
            sep, members, left = parts[0], parts[2:], (high or 0) & ~low  # (a MEMBERS node's high is an int)
            needed = [m.min_len for i, m in enumerate(members) if left >> i & 1]
            self.max_bound = 0
            self.min_len = min(sum(needed) + sep.min_len * max(len(needed) - (not byte_set), 0), NEVER)
        elif kind in (AND, DIFF):
            # max_bound 0: `clip` leaves it whole (bounds past a token's reach still decide
            # whether the two parts can end together).
            self.max_bound = 0
            self.min_len = max(p.min_len for p in parts) if kind == AND else parts[0].min_len
        else:
            self.max_bound = 0
            self.min_len = NEVER if kind == EMPTY else 0 if kind == EPSILON else 1
        if kind == BYTES:
            self.key_len = 1 + (byte_set.bit_length() + 3) // 4
        else:
            self.key_len = 2 + len(parts) + sum([p.key_len for p in parts]) if parts else 1

    def __repr__(self) -> str:
        return f"RegexNode#{self.uid}({describe(self)})"


class RegexPool:
    """The interning table: every node is made here, equal nodes once.

    `max_nodes` bounds how many nodes may exist (parsing and derivatives together), so a
    regex that would blow up fails with AutomatonLimitError instead of eating memory.
    `searched_limit` bounds the derivatives all searches of `&`/`-` nodes compute together
    (each search alone visits at most MAX_SET_SEARCH nodes): a schema of nested `not`s of
    `allOf`s of patterns (JSONSchemaBench's Handwritten allany17) made 18 searches whose
    nodes were large products, 1.2 million derivatives and 10 s of Python per parse, twice
    per compile. compile_lazy_token_fsm lifts it (None) once the start row is made: in
    generation, searches are bounded one by one.
    """

    def __init__(self, max_nodes: int = 2_000_000, searched_limit: int | None = MAX_SEARCH_DERIVATIVES):
        self.max_nodes = max_nodes
        self.searched_limit = searched_limit
        self.searched = 0  # derivatives computed by the searches so far
        self._table: dict[PoolKey, RegexNode] = {}
        self._clipped: dict[tuple[int, int], RegexNode] = {}
        self._keys: dict[int, str | None] = {}
        self._live: dict[int, bool] = {}  # AND/DIFF node uid -> whether its language is non-empty
        # AND/DIFF node uid -> a cut search's (parent, frontier)
        self._searching: dict[int, tuple[dict[int, RegexNode | None], list[tuple[int, int, RegexNode]]]] = {}
        # Derivatives computed, keyed by `uid << 8 | byte`: one int per entry rather than a dict
        # per node, so a new node is two objects for Python's collector to scan (itself and its
        # parts), and no node points back at a derivative (r*'s is r* itself: no cycle to collect).
        self._derivatives: dict[int, RegexNode] = {}
        self._factor_level = 0  # `_factor_heads` calls inside one another now
        # The account charged for what is made now (None: the bounds count the whole pool and
        # automaton): a request's matcher opens its own before each call (BuildAccount).
        self.account: BuildAccount | None = None
        self.empty = self._make((EMPTY,), EMPTY)
        self.epsilon = self._make((EPSILON,), EPSILON, nullable=True)

    def __len__(self) -> int:
        return len(self._table)

    def _make(
        self,
        key: PoolKey,
        kind: int,
        parts: tuple[RegexNode, ...] = (),
        byte_set: int = 0,
        low: int = 0,
        high: int | None = 0,
        nullable: bool = False,
        first: int = 0,
    ) -> RegexNode:
        """The node under `key`, made (RegexNode's fields) when there is none yet."""
        node = self._table.get(key)
        return node if node is not None else self._add(key, kind, parts, byte_set, low, high, nullable, first)

    def _add(
        self,
        key: PoolKey,
        kind: int,
        parts: tuple[RegexNode, ...] = (),
        byte_set: int = 0,
        low: int = 0,
        high: int | None = 0,
        nullable: bool = False,
        first: int = 0,
    ) -> RegexNode:
        """A new node under `key` (which the table does not hold yet)."""
        account = self.account
        if (len(self._table) >= self.max_nodes) if account is None else (account.nodes <= 0):
            raise AutomatonLimitError(
                f"regex too complex: its syntax tree and derivatives need more than "
                f"{self.max_nodes:,} nodes (limit max_regex_nodes)"
            )
        node = RegexNode(len(self._table), kind, parts, byte_set, low, high, nullable, first)
        if node.depth > MAX_NESTING:
            raise AutomatonLimitError(TOO_DEEP)
        if account is not None:
            account.nodes -= 1
        self._table[key] = node
        return node

    # -- constructors, with the simplifications that keep the derivatives finite --------
    def byte_set(self, mask: int) -> RegexNode:
        """One byte out of `mask` (bit b = byte b)."""
        if mask == 0:
            return self.empty
        return self._make((BYTES, mask), BYTES, byte_set=mask, first=mask)

    def concat(self, head: RegexNode, tail: RegexNode) -> RegexNode:
        """head then tail. A CONCAT head is kept as it is (not re-associated to the right):
        a group's node is shared by every place it appears, whatever follows it."""
        if head.kind == EMPTY or tail.kind == EMPTY:
            return self.empty
        if head.kind == EPSILON:
            return tail
        if tail.kind == EPSILON:
            return head
        # An int key (the only kind of int key in the table): no tuple to build and hash on
        # every call, and none kept alive per node.
        key = head.uid << 32 | tail.uid
        node = self._table.get(key)  # most calls (a derivative's) find the node: skip the rest
        if node is not None:
            return node
        first = head.first | tail.first if head.nullable else head.first
        return self._add(key, CONCAT, (head, tail), 0, 0, 0, head.nullable and tail.nullable, first)

    def concat_all(self, nodes: list[RegexNode]) -> RegexNode:
        out = self.epsilon
        for node in reversed(nodes):
            out = self.concat(node, out)
        return out

    def literal(self, data: bytes) -> RegexNode:
        """These bytes in order: `concat_all` of one byte set per byte, made in one call (the
        JSON Schema compiler's trees are mostly literal text: keys, punctuation)."""
        return self.concat_all([self.byte_set(1 << b) for b in data])

    def alt(self, nodes: Iterable[RegexNode]) -> RegexNode:
        """Any of `nodes`, as a set: nested alternatives flattened, EMPTY dropped, duplicates
        merged, single-byte alternatives merged into one byte set, order canonical."""
        items = nodes if isinstance(nodes, list) else list(nodes)
        # The common cases of a derivative first, without the set work.
        if len(items) == 1:  # a sequence whose head cannot be skipped (most of them)
            return items[0]  # (EMPTY included: it is canonical too)
        items = [n for n in items if n.kind != EMPTY]
        if len(items) <= 1:
            return items[0] if items else self.empty  # a node is canonical already
        members: dict[int, RegexNode] = {}
        bytes_mask = 0
        for node in items:
            kind = node.kind
            if kind == ALT:
                for m in node.parts:
                    if m.kind == BYTES:
                        bytes_mask |= m.byte_set
                    else:
                        members[m.uid] = m  # (an ALT holds no EMPTY)
            elif kind == BYTES:
                bytes_mask |= node.byte_set
            elif kind != EMPTY:
                members[node.uid] = node
        if bytes_mask:
            merged = self.byte_set(bytes_mask)
            members[merged.uid] = merged
        members = self._factor_heads(members)
        if not members:
            return self.empty
        if len(members) == 1:
            return next(iter(members.values()))
        uids = sorted(members)
        key = (ALT, *uids)
        found = self._table.get(key)  # most alternations a derivative makes exist already
        if found is not None:
            return found
        parts = tuple([members[uid] for uid in uids])
        first, nullable = 0, False
        for m in parts:
            first |= m.first
            nullable = nullable or m.nullable
        return self._add(key, ALT, parts, 0, 0, 0, nullable, first)

    def _factor_heads(self, members: dict[int, RegexNode]) -> dict[int, RegexNode]:
        """ab|ac -> a(b|c): alternatives with the same head node share it (hash-consing
        makes "the same head" one uid). A big enum becomes a trie of its values, so each
        derivative touches the values that still match, not all of them."""
        heads = [m.parts[0].uid for m in members.values() if m.kind == CONCAT]
        if len(heads) == len(set(heads)):
            return members  # no two share a head (the common case: checked without grouping)
        by_head: dict[int, list[RegexNode]] = {}
        for m in members.values():
            if m.kind == CONCAT:
                by_head.setdefault(m.parts[0].uid, []).append(m)
        out = {uid: m for uid, m in members.items() if m.kind != CONCAT}
        # Each level nests the result one node deeper, so past MAX_NESTING levels `_add` would
        # refuse it anyway, but only once every level was done: `(?:a|b)?` written 7,600 times
        # factored 7,600 levels of 7,600 tails each (13 s holding the GIL, every client stalled)
        # before its refusal. Counted here, the refusal comes after MAX_NESTING levels.
        self._factor_level += 1
        try:
            if self._factor_level > MAX_NESTING:
                raise AutomatonLimitError(TOO_DEEP)
            for group in by_head.values():
                node = (
                    group[0]
                    if len(group) == 1
                    else self.concat(group[0].parts[0], self.alt([m.parts[1] for m in group]))
                )
                out[node.uid] = node
        finally:
            self._factor_level -= 1
        return out

    def repeat(self, body: RegexNode, low: int, high: int | None) -> RegexNode:
        """body from `low` to `high` times (`high` None: unbounded)."""
        if high == 0 or body.kind == EPSILON:
            return self.epsilon
        if body.kind == EMPTY:
            return self.epsilon if low == 0 else self.empty
        if low == 1 and high == 1:
            return body
        if body.kind == REPEAT and body.low == 0 and body.high is None and high is None:
            return body  # (r*)* = (r*)+ = r*
        return self._make(
            (REPEAT, body.uid, low, high),
            REPEAT,
            parts=(body,),
            low=low,
            high=high,
            nullable=low == 0 or body.nullable,
            first=body.first,
        )

    def members(
        self,
        separator: RegexNode,
        members: list[RegexNode],
        required: list[bool],
        extra: RegexNode | None = None,
        written: int = 0,
        started: bool = False,
    ) -> RegexNode:
        """The members in any order, each at most once, the `required` ones present, one
        `separator` between two, and `extra` (None: none) any number of times anywhere.
        `written` (bitmask) and `started` are the state: what is done already.

        Its language is `unfold`'s: nothing (once every required member is written), or a
        member not written yet (or an extra) behind the separator, then the rest. Members
        must not match the empty string (a JSON member starts with its key's quote)."""
        if any(m.nullable or m.kind == EMPTY for m in members):
            raise RegexError("a member of a (?@members ...) group must match a non-empty string")
        extra = self.empty if extra is None else extra
        required_mask = sum(1 << i for i, req in enumerate(required) if req)
        parts = (separator, extra, *members)
        first = 0
        for i, m in enumerate(parts[1:]):
            if i == 0 or not written >> (i - 1) & 1:  # the extra, or a member still to write
                first |= m.first
        if started:
            first = separator.first | (first if separator.nullable else 0)
            if not any(not written >> i & 1 for i in range(len(members))) and extra.kind == EMPTY:
                first = 0  # everything written: only the end is left
        return self._make(
            (MEMBERS, *(p.uid for p in parts), written, required_mask, int(started)),
            MEMBERS,
            parts=parts,
            low=written,
            high=required_mask,
            byte_set=int(started),
            nullable=required_mask & ~written == 0,
            first=first,
        )

    def unfold(self, node: RegexNode) -> RegexNode:
        """A MEMBERS node as an ordinary one, one level deep: ε when every required member
        is written, or (separator, if started) a member not written yet and the rest."""
        separator, extra, *members = node.parts
        lead = separator if node.byte_set else self.epsilon
        required = [bool((node.high or 0) >> i & 1) for i in range(len(members))]  # (an int for MEMBERS)
        options = [self.epsilon] if node.nullable else []
        for i, m in enumerate(members):
            if not node.low >> i & 1:
                rest = self.members(separator, members, required, extra, node.low | 1 << i, True)
                options.append(self.concat(lead, self.concat(m, rest)))
        if extra.kind != EMPTY:
            options.append(
                self.concat(lead, self.concat(extra, self.members(separator, members, required, extra, node.low, True)))
            )
        return self.alt(options)

    def intersect(self, a: RegexNode, b: RegexNode) -> RegexNode:
        """The strings both `a` and `b` match (EMPTY when there is none)."""
        return self._checked(self._set_node(AND, a, b))

    def difference(self, a: RegexNode, b: RegexNode) -> RegexNode:
        """The strings `a` matches and `b` does not (EMPTY when there is none)."""
        return self._checked(self._set_node(DIFF, a, b))

    def _set_node(self, kind: int, a: RegexNode, b: RegexNode) -> RegexNode:
        """An AND/DIFF node, simplified where no search is needed; it may have an empty
        language (`_checked` decides). `a` and `b` never do."""
        if kind == AND:
            if a.kind == EMPTY or b.kind == EMPTY:
                return self.empty
            if a is b:
                return a
            a, b = (a, b) if a.uid < b.uid else (b, a)  # commutative: one node for both orders
            first = a.first & b.first
            if not first:  # no common first byte: at most the empty string in common
                return self.epsilon if a.nullable and b.nullable else self.empty
            return self._make((AND, a.uid, b.uid), AND, parts=(a, b), nullable=a.nullable and b.nullable, first=first)
        if a.kind == EMPTY or a is b:
            return self.empty
        if b.kind == EMPTY or (not a.first & b.first and not b.nullable):
            return a
        return self._make(
            (DIFF, a.uid, b.uid), DIFF, parts=(a, b), nullable=a.nullable and not b.nullable, first=a.first
        )

    def _checked(self, node: RegexNode) -> RegexNode:
        """`node`, or EMPTY when it is an AND/DIFF node that matches nothing."""
        if node.kind not in (AND, DIFF):
            return node
        live = self._live.get(node.uid)
        if live is None:
            live = self._search(node)
        return node if live else self.empty

    def _search(self, start: RegexNode) -> bool:
        """Whether an AND/DIFF node matches some string: a walk of its derivatives to an
        accepting one. The nodes on the path found are live; when the walk ends without
        one, every node it met is dead (it met all it can reach).

        The walk goes best first: the node nearest a match by its `min_len` (a lower bound
        on what it still needs), the newest on ties. Breadth first reached a match only
        after every node at a smaller depth: `^(x|y)*x(x|y){14}$` within a length took
        2^16 nodes for one search, and each new state of the intersection needs one (the
        issue-30 attack: 30 s of compile, then a GC pause per million nodes); best first,
        it walks the ~16 bytes to a match. Which match is found does not matter, only
        whether one is. A language with no match is walked whole either way.

        A search cut by `checkpoint` (OutOfTime, work_slices.py) keeps its frontier and
        goes on from it when it is asked again: no step redoes the work of the last."""
        parent: dict[int, RegexNode | None] = {start.uid: None}
        frontier: list[tuple[int, int, RegexNode]] = [(start.min_len, 0, start)]
        if start.uid in self._searching:
            parent, frontier = self._searching.pop(start.uid)
        found = None
        while frontier:
            item = heapq.heappop(frontier)
            made = len(self._derivatives)
            try:
                found = self._search_step(item[2], parent, frontier)
            except OutOfTime:  # cut inside its step: searched again next time (what it added stays)
                heapq.heappush(frontier, item)
                self._searching[start.uid] = (parent, frontier)
                raise
            if found is not None:
                break
            if len(parent) > MAX_SET_SEARCH:
                raise AutomatonLimitError(
                    f"regex too complex: deciding whether an intersection or difference "
                    f"matches anything visited more than {MAX_SET_SEARCH:,} states"
                )
            self.searched += len(self._derivatives) - made
            if self.searched_limit is not None and self.searched > self.searched_limit:
                raise AutomatonLimitError(
                    f"regex too complex: deciding whether its intersections and differences "
                    f"match anything took more than {self.searched_limit:,} derivatives"
                )
            try:
                checkpoint(kept=True)  # one more state searched: the frontier moved
            except OutOfTime:
                self._searching[start.uid] = (parent, frontier)
                raise
        if found is None:
            for uid in parent:
                self._live[uid] = False
            return False
        while found is not None:
            self._live[found.uid] = True
            found = parent[found.uid]
        return True

    def _search_step(
        self, node: RegexNode, parent: dict[int, RegexNode | None], frontier: list[tuple[int, int, RegexNode]]
    ) -> RegexNode | None:
        """One node of `_search`: `node` if it leads to a match at once, else None after
        adding its unseen AND/DIFF derivatives to the frontier (a heap: nearest a match
        first, then newest; see `_search`)."""
        if node.nullable:
            return node
        a, b = node.parts
        cuts = self.cuts(a) | self.cuts(b)
        while cuts:
            low = cuts & -cuts
            byte, cuts = low.bit_length() - 1, cuts ^ low
            if byte > 255 or not node.first >> byte & 1:
                continue
            nxt = self._set_node(node.kind, self.derivative(a, byte), self.derivative(b, byte))
            if nxt.kind == EMPTY or self._live.get(nxt.uid) is False:
                continue
            if nxt.kind not in (AND, DIFF) or self._live.get(nxt.uid):
                return node  # an ordinary node never has an empty language
            if nxt.uid not in parent:
                parent[nxt.uid] = node
                heapq.heappush(frontier, (nxt.min_len, -len(parent), nxt))
        return None

    # -- bounded views: states that no token can tell apart ----------------------------------
    def clip(self, node: RegexNode, length: int) -> RegexNode:
        """`node` with every repetition bound above `length` lifted: a maximum above it
        dropped (no maximum), a minimum above it lowered to `length + 1`.

        Read at most `length` bytes, the two cannot be told apart: a string of `length`
        bytes completes at most `length` non-empty repetitions, so whether it can still be
        extended to a match, and whether it matches, do not depend on a bound above that
        (nor on whether a bound above that is a minimum). Dropping a big maximum rather
        than lowering it matters: `C{0,120}`'s clip is `C*`, whose derivative is itself, so
        the walk builds no chain of counting states and every bounded string shares the
        unbounded string's row. So a token of at most `length`
        bytes is allowed in `node` exactly when it is allowed in `clip(node, length)`: the
        positions of a `maxLength: 1000` string more than `length` characters from its end
        all share one token row. (xgrammar and llguidance share masks between equivalent
        states too; this is our own bounded form of it.)
        """
        if node.max_bound <= length:
            return node
        key = (node.uid, length)
        done = self._clipped.get(key)
        if done is not None:
            return done
        if node.kind == CONCAT:  # a long right spine: walk it, no recursion along it
            # A tail that starts more than `length` bytes in is out of a token's reach: it
            # stays as it is, so a state whose big bounds are all far ahead is its own clip.
            spine, x, reach = [], node, 0
            while x.kind == CONCAT and x.max_bound > length and reach <= length:
                spine.append(x)
                reach += x.parts[0].min_len
                x = x.parts[1]
            if reach <= length and x.max_bound > length:
                out = self.clip(x, length)
            else:  # x stays, and so do the heads after the last one the clip changes
                out = x
                while spine and spine[-1].parts[0].max_bound <= length:
                    out = spine.pop()
            for part in reversed(spine):
                out = self.concat(self.clip(part.parts[0], length), out)
        elif node.kind == ALT:
            out = self.alt([self.clip(m, length) for m in node.parts])
        else:  # REPEAT
            cap = length + 1
            out = self.repeat(
                self.clip(node.parts[0], length),
                min(node.low, cap),
                None if node.high is None or node.high > length else node.high,
            )
        self._clipped[key] = out
        return out

    def bound_within(self, node: RegexNode, length: int, reach: int) -> bool:
        """Whether a repetition bounded above `length` starts within `reach` bytes of
        `node`'s start (a walk along the right spine; no node is made)."""
        x, at = node, 0
        while x.kind == CONCAT and at <= reach:
            head = x.parts[0]
            if head.max_bound > length:
                return True
            at += head.min_len
            x = x.parts[1]
        return at <= reach and x.max_bound > length

    def key(self, node: RegexNode, limit: int = 4096) -> str | None:
        """A text that names `node`'s structure in any pool (equal texts, equal languages),
        or None when it would be longer than `limit` characters. What a cache shared by
        several grammars keys a sub-expression's token row on."""
        if node.uid in self._keys:
            return self._keys[node.uid]
        if node.key_len > limit:
            self._keys[node.uid] = None
            return None
        out: str | None
        if node.kind == BYTES:
            out = f"b{node.byte_set:x}"
        elif node.kind in (EMPTY, EPSILON):
            out = "0" if node.kind == EMPTY else "e"
        else:
            parts: list[str] = []
            size = 0
            for part in node.parts:  # stop at the first part that makes it too long
                text = self.key(part, limit)
                size += len(text) + 1 if text is not None else limit + 1
                if text is None or size > limit:
                    break
                parts.append(text)
            if len(parts) < len(node.parts):
                out = None
            else:
                tag = {
                    CONCAT: "c",
                    ALT: "a",
                    AND: "n",
                    DIFF: "d",
                    MEMBERS: f"m{node.low},{node.high},{node.byte_set}",
                }.get(node.kind, f"r{node.low},{node.high}")
                out = f"{tag}({' '.join(parts)})"
                out = out if len(out) <= limit else None
        self._keys[node.uid] = out
        return out

    # -- derivatives ------------------------------------------------------------------------
    def derivative(self, node: RegexNode, byte: int) -> RegexNode:
        """The regex of what may follow `byte` in a match of `node` (EMPTY: nothing)."""
        if not node.first >> byte & 1:
            return self.empty  # no match starts with this byte (and no node hides an empty language)
        memo = node.uid << 8 | byte
        done = self._derivatives.get(memo)
        if done is not None:
            return done
        checkpoint()  # a new derivative may be large work: a slice may end here (work_slices.py)
        kind = node.kind
        if kind == MEMBERS:  # not the exercise's: the derivative of its one-level unfolding
            out = self._derivatives[memo] = self.derivative(self.unfold(node), byte)
            return out
        if kind in (AND, DIFF):  # not the exercise's either: d(A op B) = dA op dB
            a, b = node.parts
            out = self._checked(self._set_node(kind, self.derivative(a, byte), self.derivative(b, byte)))
            self._derivatives[memo] = out
            return out
        # BEGIN SOLUTION task5_3
        if kind == BYTES:
            out = self.epsilon
        elif kind == ALT:
            out = self.alt([self.derivative(m, byte) for m in node.parts if m.first >> byte & 1])
        elif kind == REPEAT:
            (body,) = node.parts
            rest = self.repeat(body, max(node.low - 1, 0), None if node.high is None else node.high - 1)
            out = self.concat(self.derivative(body, byte), rest)
        else:  # CONCAT: walk the right spine while the heads may be skipped (no recursion)
            options, x = [], node
            while True:
                if x.kind != CONCAT:
                    options.append(self.derivative(x, byte))
                    break
                head, tail = x.parts
                options.append(self.concat(self.derivative(head, byte), tail))
                if not head.nullable:
                    break
                x = tail
            out = self.alt(options)
        # END SOLUTION
        self._derivatives[memo] = out
        return out

    def cuts(self, node: RegexNode) -> int:
        """The byte classes of `node` as a 257-bit int: bit p set = a class starts at byte p.

        Bytes within one class (between two cuts) give the same derivative, so a state's
        row needs one derivative per class, not per byte.
        """
        if node._cuts is not None:
            return node._cuts
        kind = node.kind
        if kind == BYTES:
            out = (node.byte_set ^ (node.byte_set << 1)) | 1  # where membership changes
        elif kind == ALT:
            out = 1
            for m in node.parts:
                out |= self.cuts(m)
        elif kind == REPEAT:
            out = self.cuts(node.parts[0])
        elif kind == CONCAT:
            out, x = 1, node
            while x.kind == CONCAT:
                head, x = x.parts
                out |= self.cuts(head)
                if not head.nullable:
                    break
            else:
                out |= self.cuts(x)
        elif kind == MEMBERS:
            out = self.cuts(self.unfold(node))
        elif kind in (AND, DIFF):
            out = self.cuts(node.parts[0]) | self.cuts(node.parts[1])
        else:
            out = 1
        node._cuts = out
        return out


# -- literal text at the start of a node (the row shortcut `_row_from_strings`) -----------
# (Here, compiled with the pool, not in lazy_row_shortcuts.py: a row that does not fit that
# shortcut paid ~40 us of interpreted steps to find out, ~15% of the slowest 3% of steps.)
def narrow(part: RegexNode) -> bool:
    """A byte set `_row_from_strings` follows through the trie: one byte. (A class such as
    `[0-9]` in an integer's range, `9|[1-9]([0-9]|[0-9]{2})`, opens one path per byte and
    alternative, which the automaton's states would merge: there the walk is cheaper.)"""
    return part.kind == BYTES and part.byte_set.bit_count() == 1


@overload
def literal_heads(
    parts: tuple[RegexNode, ...], steps: list[int], strict: Literal[False] = False
) -> list[tuple[RegexNode, ...]]: ...
@overload
def literal_heads(
    parts: tuple[RegexNode, ...], steps: list[int], strict: bool
) -> list[tuple[RegexNode, ...]] | None: ...
def literal_heads(
    parts: tuple[RegexNode, ...], steps: list[int], strict: bool = False
) -> list[tuple[RegexNode, ...]] | None:
    """The ways `parts` (a sequence) can begin, each a sequence whose first part is a
    byte set or a part the literal walk stops at (a repetition other than `R{0,1}`, an
    object's members), or empty (the sequence matched ε): sequences, alternations, ε
    and `R{0,1}` opened. Counts its steps in `steps[0]`. `strict`: None as soon as one
    begins with something other than one byte (ε aside), before opening the rest."""
    out: list[tuple[RegexNode, ...]] = []
    todo = [parts]
    while todo:
        parts = todo.pop()
        steps[0] += 1
        if not parts:
            out.append(parts)
            continue
        part, rest = parts[0], parts[1:]
        kind = part.kind
        if kind == CONCAT:
            todo.append((part.parts[0], part.parts[1], *rest))
        elif kind == ALT:
            for p in part.parts:
                todo.append((p, *rest))
        elif kind == EPSILON:
            todo.append(rest)
        elif kind == REPEAT and part.low == 0 and part.high == 1:
            todo.append(rest)
            todo.append((part.parts[0], *rest))
        elif strict and not narrow(part):
            return None
        else:
            out.append(parts)
    return out


def fans_out(heads: list[tuple[RegexNode, ...]], steps: list[int], fan_out: int, fan_out_bytes: int) -> bool:
    """Whether at least `fan_out` literal strings are open within `fan_out_bytes` bytes of
    `heads` (`literal_heads` of a state, each starting with a narrow byte set or empty):
    an object's keys after `{"`, an enum's values."""
    level = [parts for parts in heads if parts]
    for _ in range(fan_out_bytes):
        if len(level) >= fan_out or not level:
            break
        deeper: list[tuple[RegexNode, ...]] = []
        for parts in level:
            for m in literal_heads(parts[1:], steps):
                if m and narrow(m[0]):
                    deeper.append(m)
        level = deeper
    return len(level) >= fan_out


def describe(node: RegexNode, limit: int = 60) -> str:
    """A short regex-like text of a node (for errors and debugging)."""

    def text(n: RegexNode) -> str:
        if n.kind == EMPTY:
            return "∅"
        if n.kind == EPSILON:
            return "ε"
        if n.kind == BYTES:
            bits = [b for b in range(256) if n.byte_set >> b & 1]
            if len(bits) == 1:
                return bytes(bits).decode("latin-1") if 0x20 < bits[0] < 0x7F else f"\\x{bits[0]:02x}"
            return f"[{len(bits)} bytes]"
        if n.kind == CONCAT:  # along the spine in a loop (a long literal is a long spine)
            pieces: list[str] = []
            size = 0
            while n.kind == CONCAT and size <= limit:
                pieces.append(text(n.parts[0]))
                size += len(pieces[-1])
                n = n.parts[1]
            return "".join(pieces) + (text(n) if n.kind != CONCAT else "")
        if n.kind == ALT:
            return "(" + "|".join(text(m) for m in n.parts) + ")"
        if n.kind == MEMBERS:
            return "(?@members" + "".join(f"({text(p)})" for p in n.parts) + f"){{{n.low:b}}}"
        if n.kind in (AND, DIFF):
            return f"({text(n.parts[0])}{'&' if n.kind == AND else '-'}{text(n.parts[1])})"
        high = "" if n.high is None else n.high
        return f"({text(n.parts[0])}){{{n.low},{high}}}"

    out = text(node)
    return out if len(out) <= limit else out[: limit - 1] + "…"
