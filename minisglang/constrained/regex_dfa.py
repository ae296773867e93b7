"""Regex -> deterministic finite automaton, at character level and at byte level.

`compile_regex` turns a regular expression into a `CharDFA` whose edges carry character
classes (`[0-9]`, `[^"\\]`, ...). `ByteDFA.from_char_dfa` turns that into a byte-level DFA
(a numpy table [num_states, 256]) so that tokens holding half a UTF-8 character (byte
fallback `<0xE4>`, byte-level BPE pieces of Chinese or emoji) can be walked too.

The regex always has to match the WHOLE output (like `re.fullmatch`), so a leading `^` and
a trailing `$` are accepted and ignored. Shorthand classes (`\\d`, `\\w`, `\\s`) are ASCII
only, as with Python's `re.ASCII` flag; this is what interegular implements.

The state numbering is deterministic (classes in sorted order, states in breadth-first
order from state 0), so equal regexes give identical automata in every process: the FSM
caches of later stages depend on this, as SGLang's first release did.
"""
from __future__ import annotations

import re
import threading
from collections import defaultdict, deque
from dataclasses import dataclass, field

import interegular
import interegular.fsm
import numpy as np
from interegular.fsm import FSM, OblivionError, anything_else
from interegular.patterns import Pattern, _CharGroup, _Concatenation, _NonCapturing, _Repeated

MAX_CODE_POINT = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)  # code points that have no UTF-8 encoding
# A regex whose character classes name more characters than this is refused: interegular
# stores every named character explicitly, which takes tens of seconds at Unicode scale.
MAX_NAMED_CHARACTERS = 200_000


class RegexError(ValueError):
    """The regex is invalid, unsupported, matches nothing, or is too complex."""


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
    return (f"'{''.join(map(_shown_char, head))}'...'{''.join(map(_shown_char, tail))}' "
            f"({len(regex):,} characters)")


# ---------------------------------------------------------------------------------------
# Character classes
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CharClass:
    """A set of characters: `chars`, or (negated) every character except `chars`."""

    chars: frozenset[str]
    negated: bool = False

    def __contains__(self, ch: str) -> bool:
        return (ch in self.chars) != self.negated

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
        named = _merge_code_points(sorted(ord(c) for c in self.chars))
        return _complement(named) if self.negated else named

    def label(self) -> str:
        """A regex-like label: `a`, `[0-9]`, `[A-Z_a-z]`, `[^"\\\\]`, `(any)`, `(none)`."""
        ranges = _merge_code_points(sorted(ord(c) for c in self.chars))
        if not ranges:
            return "(any)" if self.negated else "(none)"
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
    """Inclusive ranges -> the ranges of all other code points in [0, MAX_CODE_POINT]."""
    out, start = [], 0
    for lo, hi in ranges:
        if lo > start:
            out.append((start, lo - 1))
        start = hi + 1
    if start <= MAX_CODE_POINT:
        out.append((start, MAX_CODE_POINT))
    return out


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
    # character -> its class, for the classes that name characters (filled in __post_init__)
    _class_of: dict[str, CharClass] = field(init=False, repr=False, compare=False)
    _other: CharClass | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        class_of = {ch: c for c in self.classes if not c.negated for ch in c.chars}
        other = next((c for c in self.classes if c.negated), None)
        object.__setattr__(self, "_class_of", class_of)
        object.__setattr__(self, "_other", other)

    def step(self, state: int, ch: str) -> int | None:
        """The state after reading one character, or None if the regex can no longer match."""
        cls = self._class_of.get(ch, self._other)
        if cls is None:
            return None
        return self.transitions[state].get(cls)

    def walk(self, state: int, text: str) -> int | None:
        """The state after reading `text` from `state`, or None if it dies on the way."""
        for ch in text:
            state = self.step(state, ch)
            if state is None:
                return None
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
_limit = threading.local()   # .states: the most states one crawl may make here (None: no limit)


def construction_limit(max_states: int) -> int:
    """How many states one step of building a DFA may make when the DFA may have `max_states`."""
    return max(CONSTRUCTION_FACTOR * max_states, CONSTRUCTION_FLOOR)


class _TooManyStates(Exception):
    """A crawl made more states than this thread's limit allows."""


def _crawl(alphabet, initial, final, follow) -> FSM:
    """interegular's crawl (see above), with a dict and this thread's state limit: the DFA
    whose states are what `follow` reaches from `initial`, numbered in breadth-first order."""
    limit = getattr(_limit, "states", None)
    states, number, finals, transitions = [initial], {_key(initial): 0}, set(), {}
    for i, state in enumerate(states):   # the list grows while it is walked
        if final(state):
            finals.add(i)
        row = transitions[i] = {}
        for symbol in alphabet.by_transition:
            try:
                target = follow(state, symbol)
            except OblivionError:   # the dead state: no edge
                continue
            key = _key(target)
            if key not in number:
                if limit is not None and len(states) >= limit:
                    raise _TooManyStates(len(states))
                number[key] = len(states)
                states.append(target)
            row[symbol] = number[key]
    return FSM(alphabet=alphabet, states=range(len(states)), initial=0, finals=finals, map=transitions,
               __no_validation__=True)


def _key(state):
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
    dead = len(fsm.states)   # one explicit dead state: every missing edge goes there
    symbols = list(fsm.alphabet.by_transition)
    sources: dict = defaultdict(set)   # (symbol, target) -> the states with that edge
    for state in [*fsm.states, dead]:
        row = fsm.map.get(state, {})
        for symbol in symbols:
            sources[symbol, row.get(symbol, dead)].add(state)
    finals = set(fsm.finals)
    blocks = [b for b in (set(finals), {*fsm.states, dead} - finals) if b]   # (refined in place)
    block_of = {s: i for i, b in enumerate(blocks) for s in b}
    pending = {min(range(len(blocks)), key=lambda i: len(blocks[i]))}   # splitters still to use
    while pending:
        splitter = list(blocks[pending.pop()])
        for symbol in symbols:
            into: dict[int, set] = defaultdict(set)   # block -> its states with an edge into the splitter
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
    transitions = {i: {symbol: block_of[t] for symbol, t in fsm.map.get(s, {}).items() if block_of[t] in speaker}
                   for i, s in speaker.items()}
    return FSM(alphabet=fsm.alphabet, states=set(speaker) | {block_of[fsm.initial]}, initial=block_of[fsm.initial],
               finals={i for i, s in speaker.items() if s in finals}, map=transitions, __no_validation__=True)


def compile_regex(pattern: str, max_states: int = 10_000) -> CharDFA:
    """Compile a regex into a minimal CharDFA with deterministic numbering.

    Raises RegexError for invalid or unsupported regexes, an empty language, or more than
    `max_states` states, which is known as the states are made: no step of the
    construction makes more than `construction_limit(max_states)` of them.
    """
    body = _strip_anchors(pattern)
    try:
        re.compile(body)
    except re.error as e:
        raise RegexError(f"invalid regex {shown_regex(pattern)}: {e}") from None
    try:
        parsed = interegular.parse_pattern(_expand_unicode_escapes(body))
    except Exception as e:  # interegular's parser raises several exception types
        reason = str(e) or type(e).__name__
        raise RegexError(f"unsupported regex {shown_regex(pattern)}: interegular says: {reason}") from None
    _check_supported(parsed, pattern, max_states)
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
    dfa = _renumber(fsm, pattern)
    if not dfa.finals:
        raise RegexError(f"regex {shown_regex(pattern)} matches no string at all (empty language)")
    if dfa.num_states > max_states:
        raise RegexError(
            f"regex too complex: more than {max_states} states ({dfa.num_states}) for {shown_regex(pattern)}"
        )
    return dfa


def _strip_anchors(pattern: str) -> str:
    """Drop a leading `^` and a trailing unescaped `$`: the whole output must match anyway."""
    if pattern.startswith("^"):
        pattern = pattern[1:]
    if pattern.endswith("$"):
        backslashes = len(pattern[:-1]) - len(pattern[:-1].rstrip("\\"))
        if backslashes % 2 == 0:  # an odd count means the `$` itself is escaped
            pattern = pattern[:-1]
    return pattern


def _expand_unicode_escapes(pattern: str) -> str:
    """Replace `\\uXXXX` and `\\UXXXXXXXX` (which interegular lacks) by the character itself."""
    out, i = [], 0
    while i < len(pattern):
        if pattern[i] != "\\":
            out.append(pattern[i])
            i += 1
            continue
        kind = pattern[i + 1 : i + 2]
        digits = {"u": 4, "U": 8}.get(kind, 0)
        code = pattern[i + 2 : i + 2 + digits]
        if digits and len(code) == digits and all(c in "0123456789abcdefABCDEF" for c in code):
            ch = chr(int(code, 16))
            # ASCII punctuation may be special ("[", "-"): keep it escaped; the rest is literal
            out.append("\\" + ch if ch.isascii() and not ch.isalnum() else ch)
            i += 2 + digits
        else:
            out.append(pattern[i : i + 2])  # any other escape, including an escaped backslash
            i += 2
    return "".join(out)


def _check_supported(parsed: Pattern, pattern: str, max_states: int) -> None:
    """Refuse lookarounds, and patterns whose size alone would exceed the limits.

    interegular silently gives wrong answers for lookaheads, and spends minutes on huge
    repetitions, so both are caught on the parse tree before building anything.
    """
    named_chars = 0

    def positions(node) -> int:
        """How many single-character positions the pattern expands to (a size estimate)."""
        nonlocal named_chars
        if isinstance(node, _NonCapturing):
            kind = "lookbehind" if node.backwards else "lookahead"
            raise RegexError(f"unsupported regex {shown_regex(pattern)}: {kind} assertions are not supported")
        if isinstance(node, Pattern):
            return sum(positions(o) for o in node.options)
        if isinstance(node, _Concatenation):
            return sum(positions(p) for p in node.parts)
        if isinstance(node, _Repeated):
            times = node.max if node.max is not None else max(node.min, 1)
            return positions(node.base) * max(times, 1)
        if isinstance(node, _CharGroup):
            named_chars += len(node.chars)
            return 1
        return 1  # `.` and the empty pattern

    size = positions(parsed)
    if named_chars > MAX_NAMED_CHARACTERS:
        raise RegexError(
            f"regex too complex: {shown_regex(pattern)} names {named_chars} characters in its classes "
            f"(limit {MAX_NAMED_CHARACTERS}); write a negated class such as [^...] instead"
        )
    if size > 4 * max_states:
        raise RegexError(
            f"regex too complex: more than {max_states} states would be needed; {shown_regex(pattern)} "
            f"expands to {size} character positions (limit {4 * max_states})"
        )


def _renumber(fsm, pattern: str) -> CharDFA:
    """interegular FSM -> CharDFA: sorted classes, live states only, BFS numbering."""
    # 1. The alphabet partition as CharClasses, in sorted order.
    groups = fsm.alphabet.by_transition  # interegular class id -> list of symbols
    named = {s for symbols in groups.values() for s in symbols if s is not anything_else}
    class_of_key: dict[int, CharClass] = {}
    for key, symbols in groups.items():
        own = frozenset(s for s in symbols if s is not anything_else)
        if anything_else in symbols:
            class_of_key[key] = CharClass(frozenset(named - own), negated=True)
        else:
            class_of_key[key] = CharClass(own)
    classes = sorted(class_of_key.values(), key=lambda c: (c.negated, sorted(c.chars)))
    order = {c: i for i, c in enumerate(classes)}

    # 2. Live states: those from which an accepting state can be reached.
    edges = {s: {class_of_key[k]: t for k, t in fsm.map.get(s, {}).items()} for s in fsm.states}
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


def _split_utf8(lo: int, hi: int, out: list) -> None:
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
        return self.table.shape[0]

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
        ids: dict[frozenset, int] = {}
        pending: deque[frozenset] = deque()
        sequences: dict[CharClass, list] = {}

        def intermediate(items: frozenset) -> int:
            if items not in ids:
                ids[items] = n + len(ids)
                rows.append(np.full(256, -1, dtype=np.int32))
                pending.append(items)
            return ids[items]

        def fill(row: np.ndarray, items: list[tuple[tuple, int]]) -> None:
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
            items = []
            for char_class, dst in dfa.transitions[state].items():
                if char_class not in sequences:
                    sequences[char_class] = [
                        seq for lo, hi in char_class.code_point_ranges() for seq in utf8_sequences(lo, hi)
                    ]
                items.extend((seq, dst) for seq in sequences[char_class])
            fill(rows[state], items)
        while pending:
            items = pending.popleft()
            fill(rows[ids[items]], sorted(items))
        return cls(np.stack(rows), dfa.finals, n, dfa.pattern)
