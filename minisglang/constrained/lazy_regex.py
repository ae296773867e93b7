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
- `parse_regex`: our own small parser for Python's regex syntax (the subset the JSON
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
  `(?@and(A)(B))`, `(?@diff(A)(B))`. A new one is searched (its derivatives, breadth
  first) until a match is found, or it is EMPTY: so no state hides an empty language.
- `LazyByteDFA`: state = a regex node; a state's row of 256 next states is computed on
  its first visit, one derivative per byte class (bytes no sub-expression tells apart).

Semantics are the eager DFA's: the regex must match the whole output (a leading `^` and
trailing `$` are ignored), and it reads as Python's `re` reads a str pattern
(python_regex.py): `\\d \\w \\s` are Unicode-wide, `.` is anything but a newline.
"""
from __future__ import annotations

import bisect
import functools
import heapq
import re
import unicodedata
import warnings

import numpy as np

from .python_regex import shorthand_ranges
from .regex_dfa import RegexError, _complement, _strip_anchors, shown_regex, utf8_sequences
from .work_slices import OutOfTime, checkpoint

# Node kinds.
EMPTY, EPSILON, BYTES, CONCAT, ALT, REPEAT, MEMBERS, AND, DIFF = range(9)
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
# How many nodes one search for a match of a new `&`/`-` node may visit.
MAX_SET_SEARCH = 100_000
NEVER = 1 << 40   # the min_len of the empty language


class AutomatonLimitError(RegexError):
    """Building this regex's automaton would exceed one of the declared limits."""


# A derivative, a node's byte classes and the parser recurse into nested nodes. Simplifying
# a derivative nests: `[0-9]?` written 400 times, after one digit, is a chain of 400
# alternatives each inside the one before, and the next derivative ran into Python's
# recursion limit (a RecursionError that read "maximum recursion depth exceeded in
# comparison", at compile or, worse, mid-generation as an internal error).
TOO_DEEP = ("regex too complex: its automaton nests more deeply than Python's recursion limit lets the "
            "lazy automaton follow (hundreds of optional copies of one piece in a row, or groups nested "
            "hundreds deep); write a counted repetition such as (?:X){0,400} instead")


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

    __slots__ = ("uid", "kind", "parts", "byte_set", "low", "high", "nullable", "first", "max_bound",
                 "min_len", "key_len", "_cuts")

    def __init__(self, uid: int, kind: int, parts: tuple = (), byte_set: int = 0,
                 low: int = 0, high: int | None = 0, nullable: bool = False, first: int = 0):
        self.uid, self.kind, self.parts, self.byte_set = uid, kind, parts, byte_set
        self.low, self.high = low, high
        self.nullable = nullable   # matches the empty string: an accepting state
        self.first = first         # 256-bit int: the bytes some match can start with
        self._cuts: int | None = None   # RegexPool.cuts, once computed
        # max_bound: the largest repetition bound in the subtree (what `RegexPool.clip` may
        # lower). min_len: the fewest bytes a match takes (NEVER for the empty language).
        # key_len: how long RegexPool.key's text is at least (a tag letter, parentheses,
        # spaces; the hex digits of a byte set): a large grammar's key is refused unwritten.
        # CONCAT and ALT first, in one pass each: most nodes a derivative makes are those.
        if kind == CONCAT:   # key "c(HEAD TAIL)"
            head, tail = parts
            self.max_bound = head.max_bound if head.max_bound > tail.max_bound else tail.max_bound
            self.min_len = head.min_len + tail.min_len
            if self.min_len > NEVER:
                self.min_len = NEVER
            self.key_len = head.key_len + tail.key_len + 4
            return
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
            sep, members, left = parts[0], parts[2:], high & ~low
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
    """

    def __init__(self, max_nodes: int = 2_000_000):
        self.max_nodes = max_nodes
        self._table: dict[tuple | int, RegexNode] = {}
        self._clipped: dict[tuple[int, int], RegexNode] = {}
        self._keys: dict[int, str | None] = {}
        self._live: dict[int, bool] = {}   # AND/DIFF node uid -> whether its language is non-empty
        self._searching: dict[int, tuple] = {}   # AND/DIFF node uid -> a cut search's (parent, frontier)
        # Derivatives computed, keyed by `uid << 8 | byte`: one int per entry rather than a dict
        # per node, so a new node is two objects for Python's collector to scan (itself and its
        # parts), and no node points back at a derivative (r*'s is r* itself: no cycle to collect).
        self._derivatives: dict[int, RegexNode] = {}
        self.empty = self._make((EMPTY,), EMPTY)
        self.epsilon = self._make((EPSILON,), EPSILON, nullable=True)

    def __len__(self) -> int:
        return len(self._table)

    def _make(self, key: tuple, kind: int, **fields) -> RegexNode:
        """The node under `key`, made (RegexNode's fields) when there is none yet."""
        node = self._table.get(key)
        return node if node is not None else self._add(key, kind, **fields)

    def _add(self, key: tuple | int, kind: int, parts: tuple = (), byte_set: int = 0, low: int = 0,
             high: int | None = 0, nullable: bool = False, first: int = 0) -> RegexNode:
        """A new node under `key` (which the table does not hold yet)."""
        if len(self._table) >= self.max_nodes:
            raise AutomatonLimitError(f"regex too complex: its syntax tree and derivatives need more than "
                                      f"{self.max_nodes:,} nodes (limit max_regex_nodes)")
        node = self._table[key] = RegexNode(len(self._table), kind, parts, byte_set, low, high, nullable, first)
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
        node = self._table.get(key)   # most calls (a derivative's) find the node: skip the rest
        if node is not None:
            return node
        first = head.first | tail.first if head.nullable else head.first
        return self._add(key, CONCAT, (head, tail), 0, 0, 0, head.nullable and tail.nullable, first)

    def concat_all(self, nodes: list[RegexNode]) -> RegexNode:
        out = self.epsilon
        for node in reversed(nodes):
            out = self.concat(node, out)
        return out

    def alt(self, nodes) -> RegexNode:
        """Any of `nodes`, as a set: nested alternatives flattened, EMPTY dropped, duplicates
        merged, single-byte alternatives merged into one byte set, order canonical."""
        if isinstance(nodes, list):   # the common cases of a derivative, without the set work
            if len(nodes) == 1:   # a sequence whose head cannot be skipped (most of them)
                return nodes[0]   # (EMPTY included: it is canonical too)
            nodes = [n for n in nodes if n.kind != EMPTY]
            if len(nodes) <= 1:
                return nodes[0] if nodes else self.empty   # a node is canonical already
        members: dict[int, RegexNode] = {}
        bytes_mask = 0
        for node in nodes:
            kind = node.kind
            if kind == ALT:
                for m in node.parts:
                    if m.kind == BYTES:
                        bytes_mask |= m.byte_set
                    else:
                        members[m.uid] = m   # (an ALT holds no EMPTY)
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
        node = self._table.get(key)   # most alternations a derivative makes exist already
        if node is not None:
            return node
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
            return members   # no two share a head (the common case: checked without grouping)
        by_head: dict[int, list[RegexNode]] = {}
        for m in members.values():
            if m.kind == CONCAT:
                by_head.setdefault(m.parts[0].uid, []).append(m)
        out = {uid: m for uid, m in members.items() if m.kind != CONCAT}
        for group in by_head.values():
            node = (group[0] if len(group) == 1
                    else self.concat(group[0].parts[0], self.alt([m.parts[1] for m in group])))
            out[node.uid] = node
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
            return body   # (r*)* = (r*)+ = r*
        return self._make((REPEAT, body.uid, low, high), REPEAT, parts=(body,), low=low, high=high,
                          nullable=low == 0 or body.nullable, first=body.first)

    def members(self, separator: RegexNode, members: list[RegexNode], required: list[bool],
                extra: RegexNode | None = None, written: int = 0, started: bool = False) -> RegexNode:
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
            if i == 0 or not written >> (i - 1) & 1:   # the extra, or a member still to write
                first |= m.first
        if started:
            first = separator.first | (first if separator.nullable else 0)
            if not any(not written >> i & 1 for i in range(len(members))) and extra.kind == EMPTY:
                first = 0   # everything written: only the end is left
        return self._make((MEMBERS, *(p.uid for p in parts), written, required_mask, int(started)), MEMBERS,
                          parts=parts, low=written, high=required_mask, byte_set=int(started),
                          nullable=required_mask & ~written == 0, first=first)

    def unfold(self, node: RegexNode) -> RegexNode:
        """A MEMBERS node as an ordinary one, one level deep: ε when every required member
        is written, or (separator, if started) a member not written yet and the rest."""
        separator, extra, *members = node.parts
        lead = separator if node.byte_set else self.epsilon
        required = [bool(node.high >> i & 1) for i in range(len(members))]
        options = [self.epsilon] if node.nullable else []
        for i, m in enumerate(members):
            if not node.low >> i & 1:
                rest = self.members(separator, members, required, extra, node.low | 1 << i, True)
                options.append(self.concat(lead, self.concat(m, rest)))
        if extra.kind != EMPTY:
            options.append(self.concat(lead, self.concat(extra, self.members(separator, members, required, extra,
                                                                               node.low, True))))
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
            a, b = (a, b) if a.uid < b.uid else (b, a)   # commutative: one node for both orders
            first = a.first & b.first
            if not first:   # no common first byte: at most the empty string in common
                return self.epsilon if a.nullable and b.nullable else self.empty
            return self._make((AND, a.uid, b.uid), AND, parts=(a, b),
                              nullable=a.nullable and b.nullable, first=first)
        if a.kind == EMPTY or a is b:
            return self.empty
        if b.kind == EMPTY or (not a.first & b.first and not b.nullable):
            return a
        return self._make((DIFF, a.uid, b.uid), DIFF, parts=(a, b),
                          nullable=a.nullable and not b.nullable, first=a.first)

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
        parent, frontier = self._searching.pop(start.uid, None) or ({start.uid: None}, [(start.min_len, 0, start)])
        found = None
        while frontier:
            item = heapq.heappop(frontier)
            try:
                found = self._search_step(item[2], parent, frontier)
            except OutOfTime:   # cut inside its step: searched again next time (what it added stays)
                heapq.heappush(frontier, item)
                self._searching[start.uid] = (parent, frontier)
                raise
            if found is not None:
                break
            if len(parent) > MAX_SET_SEARCH:
                raise AutomatonLimitError(f"regex too complex: deciding whether an intersection or difference "
                                          f"matches anything visited more than {MAX_SET_SEARCH:,} states")
            try:
                checkpoint(kept=True)   # one more state searched: the frontier moved
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

    def _search_step(self, node: RegexNode, parent: dict[int, RegexNode | None],
                     frontier: list[tuple[int, int, RegexNode]]) -> RegexNode | None:
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
                return node   # an ordinary node never has an empty language
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
        if node.kind == CONCAT:   # a long right spine: walk it, no recursion along it
            # A tail that starts more than `length` bytes in is out of a token's reach: it
            # stays as it is, so a state whose big bounds are all far ahead is its own clip.
            spine, x, reach = [], node, 0
            while x.kind == CONCAT and x.max_bound > length and reach <= length:
                spine.append(x)
                reach += x.parts[0].min_len
                x = x.parts[1]
            if reach <= length and x.max_bound > length:
                out = self.clip(x, length)
            else:   # x stays, and so do the heads after the last one the clip changes
                out = x
                while spine and spine[-1].parts[0].max_bound <= length:
                    out = spine.pop()
            for part in reversed(spine):
                out = self.concat(self.clip(part.parts[0], length), out)
        elif node.kind == ALT:
            out = self.alt([self.clip(m, length) for m in node.parts])
        else:   # REPEAT
            cap = length + 1
            out = self.repeat(self.clip(node.parts[0], length), min(node.low, cap),
                              None if node.high is None or node.high > length else node.high)
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
        if node.kind == BYTES:
            out = f"b{node.byte_set:x}"
        elif node.kind in (EMPTY, EPSILON):
            out = "0" if node.kind == EMPTY else "e"
        else:
            parts, size = [], 0
            for part in node.parts:   # stop at the first part that makes it too long
                text = self.key(part, limit)
                size += len(text) + 1 if text is not None else limit + 1
                if size > limit:
                    parts = None
                    break
                parts.append(text)
            if parts is None:
                out = None
            else:
                tag = {CONCAT: "c", ALT: "a", AND: "n", DIFF: "d",
                       MEMBERS: f"m{node.low},{node.high},{node.byte_set}"}.get(
                    node.kind, f"r{node.low},{node.high}")
                out = f"{tag}({' '.join(parts)})"
                out = out if len(out) <= limit else None
        self._keys[node.uid] = out
        return out

    # -- derivatives ------------------------------------------------------------------------
    def derivative(self, node: RegexNode, byte: int) -> RegexNode:
        """The regex of what may follow `byte` in a match of `node` (EMPTY: nothing)."""
        if not node.first >> byte & 1:
            return self.empty   # no match starts with this byte (and no node hides an empty language)
        memo = node.uid << 8 | byte
        done = self._derivatives.get(memo)
        if done is not None:
            return done
        checkpoint()   # a new derivative may be large work: a slice may end here (work_slices.py)
        kind = node.kind
        if kind == MEMBERS:   # not the exercise's: the derivative of its one-level unfolding
            out = self._derivatives[memo] = self.derivative(self.unfold(node), byte)
            return out
        if kind in (AND, DIFF):   # not the exercise's either: d(A op B) = dA op dB
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
        else:   # CONCAT: walk the right spine while the heads may be skipped (no recursion)
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
            out = (node.byte_set ^ (node.byte_set << 1)) | 1   # where membership changes
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
        if n.kind == CONCAT:
            return text(n.parts[0]) + text(n.parts[1])
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


# ---------------------------------------------------------------------------------------
# Parsing: Python regex syntax -> byte-level nodes
# ---------------------------------------------------------------------------------------
def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inclusive code point ranges -> sorted, disjoint, non-adjacent ranges."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


# `\\d \\D \\w \\W \\s \\S`: Python's Unicode classes (python_regex.shorthand_ranges, computed
# on first use): `\\w` is 733 ranges, the alternation of their UTF-8 byte sequences.
SHORTHANDS = "dDwWsS"
SINGLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "a": "\a"}
ANCHOR_ESCAPES = "AZbB"   # \b is a backspace inside a class, a word boundary outside


# Group boundaries found by one C-speed scan: escapes and classes are skipped whole, so
# the parentheses left are the real ones.
_PAREN_SCAN = re.compile(r"\\.|\[\^?\]?(?:\\.|[^\]\\])*\]|[()]", re.S)
# A run of plain characters (a key's name, a structure's text): no special meaning.
_LITERAL_RUN = re.compile(r"[^\\\[\](){}|.*+?^$]+")
_QUANTIFIER_START = "*+?{"
_SIMPLE_QUANTIFIERS = {"*": (0, None), "+": (1, None), "?": (0, 1)}
_BOUNDS = re.compile(r"\{(\d*)(,(\d*))?\}")
# The UTF-8 byte ranges of code point ranges: the same few classes come back in every regex.
_utf8_sequences = functools.lru_cache(maxsize=4096)(utf8_sequences)


class _Parser:
    """Recursive descent over a pattern that `re.compile` has already accepted."""

    def __init__(self, pattern: str, source: str, pool: RegexPool):
        self.p, self.source, self.pool, self.i = pattern, source, pool, 0
        self.class_nodes: dict[tuple, RegexNode] = {}
        self.group_nodes: dict[str, RegexNode] = {}   # group text -> node: a repeated group is parsed once
        self.group_end: dict[int, int] = {}
        self.definitions: dict[str, RegexNode] = {}   # (?@def:NAME(...)) -> its node
        stack = []
        for m in _PAREN_SCAN.finditer(pattern):
            if m.group() == "(":
                stack.append(m.start())
            elif m.group() == ")" and stack:
                self.group_end[stack.pop()] = m.start()

    def fail(self, what: str) -> RegexError:
        return RegexError(f"unsupported regex {shown_regex(self.source)}: {what}")

    def parse(self) -> RegexNode:
        node = self.alternation()
        if self.i != len(self.p):
            raise self.fail(f"unexpected {self.p[self.i]!r} at position {self.i}")
        return node

    def alternation(self) -> RegexNode:
        branches = [self.sequence()]
        while self.i < len(self.p) and self.p[self.i] == "|":
            self.i += 1
            branches.append(self.sequence())
        return self.pool.alt(branches)

    def sequence(self) -> RegexNode:
        items = []
        p, byte_set = self.p, self.pool.byte_set
        while self.i < len(p) and p[self.i] not in "|)":
            checkpoint()   # a long regex is parsed on a compile thread that yields to the scheduler
            run = _LITERAL_RUN.match(p, self.i)
            if run is not None:
                # Plain characters read in one step (most of a JSON Schema's regex); the
                # last one stays for `atom` when a quantifier follows it.
                end = run.end()
                if end < len(p) and p[end] in _QUANTIFIER_START:
                    end -= 1
                if end > self.i:
                    items += [byte_set(1 << b) for b in p[self.i:end].encode("utf-8")]
                    self.i = end
                    continue
            items.append(self.quantified(self.atom()))
        return self.pool.concat_all(items)

    def quantified(self, node: RegexNode) -> RegexNode:
        bounds = self.quantifier()
        if bounds is None:
            return node
        if self.p.startswith("+", self.i):
            raise self.fail(f"possessive quantifier at position {self.i}")
        if self.p.startswith("?", self.i):
            self.i += 1   # lazy: matches the same strings as greedy under fullmatch
        return self.pool.repeat(node, *bounds)

    def quantifier(self) -> tuple[int, int | None] | None:
        p, i = self.p, self.i
        if i >= len(p):
            return None
        simple = _SIMPLE_QUANTIFIERS.get(p[i])
        if simple is not None:
            self.i += 1
            return simple
        if p[i] == "{":
            m = _BOUNDS.match(p, i)
            if m and (m.group(1) or m.group(2)):   # `{}`, `{,}` and an unclosed `{` are literal
                low = int(m.group(1) or 0)
                high = low if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
                self.i = m.end()
                return low, high
        return None

    def atom(self) -> RegexNode:
        c = self.p[self.i]
        if c == "(":
            return self.group()
        if c == "[":
            return self.char_class()
        if c == "\\":
            return self.escape()
        if c == ".":
            self.i += 1
            return self.ranges_node(_complement([(10, 10)]))
        if c in "^$":
            raise self.fail(f"anchor {c!r} at position {self.i} (only at the very start or end)")
        self.i += 1
        return self.literal(c)

    def literal(self, ch: str) -> RegexNode:
        pool = self.pool
        return pool.concat_all([pool.byte_set(1 << b) for b in ch.encode("utf-8")])

    def group(self) -> RegexNode:
        start, p = self.i, self.p
        end = self.group_end.get(start)
        text = p[start : end + 1] if end is not None else None
        if text is not None and text in self.group_nodes:
            self.i = end + 1
            return self.group_nodes[text]
        if p.startswith(REF_SYNTAX, start):
            name = p[start + len(REF_SYNTAX):end]
            if name not in self.definitions:
                raise self.fail(f"(?@ref:{name}) at position {start} comes before its (?@def:{name}...)")
            self.i = end + 1
            return self.definitions[name]
        if p.startswith(DEF_SYNTAX, start):
            name_end = p.index("(", start + len(DEF_SYNTAX))
            self.i = name_end + 1
            body = self.alternation()
            if not p.startswith("))", self.i):
                raise self.fail(f"a (?@def: group at position {start} must be (?@def:NAME(R))")
            self.i += 2
            self.definitions[p[start + len(DEF_SYNTAX):name_end]] = body
            return self.pool.epsilon
        if p.startswith(MEMBERS_SYNTAX, start) or p.startswith(AND_SYNTAX, start) or p.startswith(DIFF_SYNTAX, start):
            node = self.members_group() if p.startswith(MEMBERS_SYNTAX, start) else self.set_group()
            if text is not None:
                self.group_nodes[text] = node
            return node
        self.i += 1
        if p.startswith("?", self.i):
            ext = p[self.i + 1 : self.i + 3]
            if ext.startswith(":"):
                self.i += 2
            elif ext.startswith("P<"):
                self.i = p.index(">", self.i) + 1   # a named group matches like a plain one
            elif ext.startswith("#"):
                self.i = p.index(")", self.i) + 1   # a comment
                return self.pool.epsilon
            else:
                kinds = {"=": "lookahead", "!": "lookahead", "<=": "lookbehind", "<!": "lookbehind",
                         "P=": "group reference", ">": "atomic group", "(": "conditional group"}
                name = next((v for k, v in kinds.items() if ext.startswith(k)), "inline flags")
                raise self.fail(f"{name} at position {start} is not supported")
        node = self.alternation()
        self.i += 1   # the closing parenthesis (re.compile checked it is there)
        if text is not None:
            self.group_nodes[text] = node
        return node

    def members_group(self) -> RegexNode:
        """`(?@members(SEP)(!M)(~M)(&E))` (see MEMBERS_SYNTAX) -> a MEMBERS node."""
        p, start = self.p, self.i
        self.i += len(MEMBERS_SYNTAX)
        separator, members, required, extra = None, [], [], None
        while p.startswith("(", self.i):
            self.i += 1
            flag = None if separator is None else p[self.i : self.i + 1]
            if flag is not None:
                if flag not in "!~&" or not flag:
                    raise self.fail(f"a (?@members group at position {start}: a member group must start "
                                    f"with !, ~ or &, not {flag!r}")
                self.i += 1
            node = self.alternation()
            if not p.startswith(")", self.i):
                raise self.fail(f"a (?@members group at position {start} is not closed")
            self.i += 1
            if flag is None:
                separator = node
            elif flag == "&":
                if extra is not None:
                    raise self.fail(f"a (?@members group at position {start} has two & groups")
                extra = node
            else:
                members.append(node)
                required.append(flag == "!")
        if separator is None or not p.startswith(")", self.i):
            raise self.fail(f"a (?@members group at position {start} must be (?@members(SEP)(!M)...)")
        self.i += 1
        try:
            return self.pool.members(separator, members, required, extra)
        except RegexError as e:
            raise self.fail(f"a (?@members group at position {start}: {e}") from None

    def set_group(self) -> RegexNode:
        """`(?@and(A)(B))` or `(?@diff(A)(B))` -> the intersection or difference of A and B."""
        p, start = self.p, self.i
        intersect = p.startswith(AND_SYNTAX, start)
        self.i += len(AND_SYNTAX if intersect else DIFF_SYNTAX)
        operands = []
        while p.startswith("(", self.i):
            self.i += 1
            operands.append(self.alternation())
            if not p.startswith(")", self.i):
                raise self.fail(f"a private group at position {start} is not closed")
            self.i += 1
        if len(operands) != 2 or not p.startswith(")", self.i):
            raise self.fail(f"a private group at position {start} must be (?@and(A)(B)) or (?@diff(A)(B))")
        self.i += 1
        return (self.pool.intersect if intersect else self.pool.difference)(*operands)

    def escape(self, in_class: bool = False) -> RegexNode | list[tuple[int, int]] | str:
        """Outside a class: a node. Inside: a one-character string or a list of ranges."""
        p = self.p
        c = p[self.i + 1]
        self.i += 2
        if c in SHORTHANDS:
            ranges = list(shorthand_ranges(c))
            return ranges if in_class else self.ranges_node(ranges)
        if c == "b" and in_class:
            ch = "\b"
        elif c in ANCHOR_ESCAPES:
            raise self.fail(f"the anchor \\{c} is not supported")
        elif c in SINGLE_ESCAPES:
            ch = SINGLE_ESCAPES[c]
        elif c in "xuU":
            digits = {"x": 2, "u": 4, "U": 8}[c]
            ch = chr(int(p[self.i : self.i + digits], 16))
            self.i += digits
        elif c == "N":
            close = p.index("}", self.i)
            ch = unicodedata.lookup(p[self.i + 1 : close])
            self.i = close + 1
        elif c == "0" or (c in "1234567" and in_class):
            m = re.compile(r"[0-7]{0,2}").match(p, self.i)
            ch = chr(int(c + m.group(), 8))
            self.i = m.end()
        elif c.isdigit():
            m = re.compile(r"[0-7]{2}").match(p, self.i)
            if c in "1234567" and m:   # three octal digits: a character
                ch = chr(int(c + m.group(), 8))
                self.i = m.end()
            else:
                raise self.fail(f"group reference \\{c} is not supported")
        else:
            ch = c   # an escaped punctuation character is itself
        return ch if in_class else self.literal(ch)

    def char_class(self) -> RegexNode:
        p = self.p
        self.i += 1
        negated = p.startswith("^", self.i)
        self.i += negated
        ranges: list[tuple[int, int]] = []
        first = True
        while first or p[self.i] != "]":
            first = False
            if p[self.i] == "\\":
                item = self.escape(in_class=True)
                if isinstance(item, list):
                    ranges.extend(item)
                    continue
                lo = ord(item)
            else:
                lo = ord(p[self.i])
                self.i += 1
            if p[self.i] == "-" and p[self.i + 1] != "]":
                self.i += 1
                if p[self.i] == "\\":
                    hi = ord(self.escape(in_class=True))
                else:
                    hi = ord(p[self.i])
                    self.i += 1
                ranges.append((lo, hi))
            else:
                ranges.append((lo, lo))
        self.i += 1
        ranges = _merge(ranges)
        return self.ranges_node(_complement(ranges) if negated else ranges)

    def ranges_node(self, ranges: list[tuple[int, int]]) -> RegexNode:
        """Code point ranges -> the alternation of their UTF-8 byte sequences."""
        key = tuple(ranges)
        node = self.class_nodes.get(key)
        if node is None and key and max(hi for _, hi in key) < 0x80:   # ASCII only: one byte set
            node = self.class_nodes[key] = self.pool.byte_set(sum((1 << (hi + 1)) - (1 << lo) for lo, hi in ranges))
        if node is None:
            pool = self.pool
            options = []
            for lo, hi in ranges:
                for seq in _utf8_sequences(lo, hi):
                    options.append(pool.concat_all([pool.byte_set((1 << (b_hi + 1)) - (1 << b_lo))
                                                     for b_lo, b_hi in seq]))
            node = self.class_nodes[key] = pool.alt(options)
        return node


def parse_regex(pattern: str, pool: RegexPool, members: bool = False) -> RegexNode:
    """Parse `pattern` (Python syntax, whole-output match) into a node of `pool`.

    With `members`, it also reads our private groups (what the JSON Schema compiler writes
    for the lazy automaton): `(?@members...)` (MEMBERS_SYNTAX: object members in any
    order), `(?@and(A)(B))` and `(?@diff(A)(B))` (intersection, difference),
    `(?@def:NAME(R))` and `(?@ref:NAME)` (one sub-expression used in many places); a
    user's regex is parsed without, so there `(?@` is the error Python says.
    Raises RegexError for an invalid pattern (Python's message), an unsupported construct
    (lookarounds, backreferences, inner anchors, possessive quantifiers, inline flags),
    or a regex that matches no string at all.
    """
    body = _strip_anchors(pattern)
    try:
        with warnings.catch_warnings():   # "possible nested set": we read `[[` as re does today
            warnings.simplefilter("ignore", FutureWarning)
            # Our private groups read as plain ones for this check (`(!M)` is a group
            # starting with a literal "!"): the rest must be a regex Python accepts.
            re.compile(_PRIVATE_GROUP.sub("(?:", body) if members else body)
    except re.error as e:
        raise RegexError(f"invalid regex {shown_regex(pattern)}: {e}") from None
    except RecursionError:   # Python's own parser, on groups nested a few hundred deep
        raise AutomatonLimitError(TOO_DEEP) from None
    try:
        node = _Parser(body, pattern, pool).parse()
    except RecursionError:
        raise AutomatonLimitError(TOO_DEEP) from None
    if node.kind == EMPTY:
        raise RegexError(f"regex {shown_regex(pattern)} matches no string at all (empty language)")
    return node


# ---------------------------------------------------------------------------------------
# The DFA, one state at a time
# ---------------------------------------------------------------------------------------
UNEXPLORED = -2   # a row not computed yet (a -1 in a computed row means "dead")
_LAYOUTS: dict[tuple[int, int], tuple] = {}   # (cuts, first) -> LazyByteDFA._layout's answer


class LazyByteDFA:
    """A byte DFA whose states are regex nodes, made when first reached.

    `table[state, byte]` is the next state (-1: dead, UNEXPLORED: not computed yet),
    int32 [capacity, 256], grown by doubling. `fill(state, byte)` computes one entry (and
    the other bytes of its byte class: one derivative); `expand(state)` the whole row.
    State 0 is the regex itself. Every state can still reach an accepting one (derivatives
    never hide an empty language), so -1 is the only dead end.
    """

    def __init__(self, root: RegexNode, pool: RegexPool, max_states: int = 100_000):
        self.pool, self.max_states = pool, max_states
        self.nodes: list[RegexNode] = []
        self.class_starts: list[list[int]] = []   # per state: where its byte classes start
        self.missing_classes: list[int] = []   # per state: byte classes whose entry is not computed
        self.fills = 0   # derivatives computed by `fill` (what a row's limit counts)
        self.state_of: dict[int, int] = {}   # node uid -> state id
        self.table = np.full((64, 256), UNEXPLORED, dtype=np.int32)
        self.accepting = np.zeros(64, dtype=bool)
        self.expanded = np.zeros(64, dtype=bool)
        self.class_first = np.zeros((64, 256), dtype=np.uint8)   # [state, byte]: the first byte of its class
        self.initial = self._state(root)

    @classmethod
    def from_regex(cls, pattern: str, members: bool = False, **limits) -> LazyByteDFA:
        """The automaton of `pattern` in a pool of its own (`members`: also read the schema
        compiler's private groups, see `parse_regex`)."""
        pool = RegexPool()
        return cls(parse_regex(pattern, pool, members=members), pool, **limits)

    @property
    def num_states(self) -> int:
        return len(self.nodes)

    def is_final(self, state: int) -> bool:
        return bool(self.accepting[state])

    def _state(self, node: RegexNode) -> int:
        state = self.state_of.get(node.uid)
        if state is None:
            state = len(self.nodes)
            if state >= self.max_states:
                raise AutomatonLimitError(
                    f"regex too complex: generation reached more than {self.max_states:,} automaton "
                    f"states (limit max_lazy_states)")
            if state == self.table.shape[0]:   # grow by doubling
                self._grow()
            self.nodes.append(node)
            self.state_of[node.uid] = state
            self.accepting[state] = node.nullable
            try:
                starts, class_first, row, live = self._layout(node)
            except RecursionError:
                raise AutomatonLimitError(TOO_DEEP) from None
            self.class_starts.append(starts)
            self.class_first[state] = class_first
            self.table[state] = row
            self.missing_classes.append(live)
            self.expanded[state] = live == 0
        return state

    def _grow(self) -> None:
        """Double the per-state arrays. The new rows are left unwritten (`np.empty`): `_state`
        writes each one whole when it makes the state, and nothing reads a row before. Filled
        here, they cost the page faults of the whole new half at once: 0.16 s for the 64 MB
        of a 64k-state table on a shared 2-CPU machine, on the scheduler's thread between two
        checkpoints (issue 30); left empty, each page is touched when its states are made."""
        n = self.table.shape[0]
        for name in ("table", "class_first", "accepting", "expanded"):
            old = getattr(self, name)
            new = np.empty((2 * n, *old.shape[1:]), dtype=old.dtype)
            new[:n] = old
            setattr(self, name, new)

    def _layout(self, node: RegexNode) -> tuple[list[int], np.ndarray, np.ndarray, int]:
        """A new state's byte classes: (the first byte of each and 256, uint8 [256] the first
        byte of each byte's class, int32 [256] its table row before any derivative, how many
        classes are live). A class no match starts with leads nowhere: its entries are -1
        from the start, so no walk stops for it and no `fill` is spent on it. Cached by
        (classes, first bytes), for every automaton: most states share one of a few."""
        key = (self.pool.cuts(node), node.first)
        layout = _LAYOUTS.get(key)
        if layout is None:
            cuts, starts = key[0] | (1 << 256), []
            while cuts:   # the set bits, lowest first
                low = cuts & -cuts
                starts.append(low.bit_length() - 1)
                cuts ^= low
            class_first = np.repeat(np.asarray(starts[:-1], dtype=np.uint8), np.diff(starts))
            live = np.unpackbits(np.frombuffer(node.first.to_bytes(32, "little"), dtype=np.uint8),
                                 bitorder="little")[class_first] == 1
            row = np.where(live, UNEXPLORED, -1).astype(np.int32)
            if len(_LAYOUTS) >= 4096:
                _LAYOUTS.clear()
            layout = _LAYOUTS[key] = (starts, class_first, row, sum(node.first >> lo & 1 for lo in starts[:-1]))
        return layout

    def _class_starts(self, state: int) -> list[int]:
        """The first byte of each byte class of `state`, and 256 at the end."""
        return self.class_starts[state]

    def fill(self, state: int, byte: int) -> int:
        """Compute `table[state, byte]` and the rest of its byte class (one derivative)."""
        done = int(self.table[state, byte])
        if done != UNEXPLORED:
            return done
        node, starts = self.nodes[state], self.class_starts[state]
        i = bisect.bisect_right(starts, byte) - 1
        lo, hi = starts[i], starts[i + 1]
        try:
            nxt = self.pool.derivative(node, lo) if node.first >> lo & 1 else self.pool.empty
        except RecursionError:
            raise AutomatonLimitError(TOO_DEEP) from None
        target = -1 if nxt.kind == EMPTY else self._state(nxt)   # (an AND's `first` may overstate)
        self.table[state, lo:hi] = target   # `_state` may have grown the table: index it after
        self.fills += 1
        self.missing_classes[state] -= 1
        if self.missing_classes[state] == 0:
            self.expanded[state] = True   # every entry computed
        checkpoint(kept=True)   # the entry is stored: a row cut here resumes from it (work_slices.py)
        return target

    def expand(self, state: int) -> None:
        """Compute the whole row of `state`: one derivative per byte class."""
        if self.expanded[state]:
            return
        for lo in self._class_starts(state)[:-1]:
            self.fill(state, lo)

    def step(self, state: int, byte: int) -> int:
        return self.fill(state, byte)

    def walk_bytes(self, state: int, data: bytes) -> int:
        """The state after `data` from `state`; -1 if the walk dies."""
        for b in data:
            state = self.step(state, b)
            if state < 0:
                return -1
        return state

    def matches(self, data: bytes) -> bool:
        """Whether the whole of `data` is a string of the regex (a walk from the start)."""
        state = self.walk_bytes(self.initial, data)
        return state >= 0 and self.is_final(state)

    def allowed_bytes(self, state: int) -> np.ndarray:
        """The bytes that can follow in `state` (sorted int array)."""
        self.expand(state)
        return np.flatnonzero(self.table[state] >= 0)

    def nbytes(self) -> int:
        """The table's arrays, and an estimate of the pool's nodes and derivative memo (about
        300 and 100 bytes each, measured with tracemalloc): what a grammar cache should count."""
        arrays = self.table.nbytes + self.accepting.nbytes + self.expanded.nbytes + self.class_first.nbytes
        return arrays + 300 * len(self.pool) + 100 * len(self.pool._derivatives)
