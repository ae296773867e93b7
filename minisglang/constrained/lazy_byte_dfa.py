"""The lazy automaton's byte DFA: states are lazy_regex.py's regex nodes, made when first
reached, and a state's row of 256 next states is computed on first visit (`LazyByteDFA`)."""

from __future__ import annotations

import bisect
import sys

import numpy as np

from .lazy_regex import EMPTY, TOO_DEEP, AutomatonLimitError, RegexNode, RegexPool
from .lazy_regex_parser import parse_regex
from .work_slices import checkpoint

# ---------------------------------------------------------------------------------------
# The DFA, one state at a time
# ---------------------------------------------------------------------------------------
UNEXPLORED = -2  # a row not computed yet (a -1 in a computed row means "dead")
_ORDER = sys.byteorder  # numpy's int32 in memory (`fill` writes the table's bytes)
# (cuts, first) -> LazyByteDFA._layout's answer
_LAYOUTS: dict[tuple[int, int], tuple[list[int], bytes, bytes, int]] = {}


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
        self.class_starts: list[list[int]] = []  # per state: where its byte classes start
        # per state: bit lo set = the live byte class starting at byte lo has no entry yet (an
        # int, so `fill_ahead` finds what is left without reading the numpy table)
        self.missing: list[int] = []
        self.fills = 0  # derivatives computed by `fill` (what a row's limit counts)
        self.state_of: dict[int, int] = {}  # node uid -> state id
        self.table = np.full((64, 256), UNEXPLORED, dtype=np.int32)
        self.accepting = np.zeros(64, dtype=bool)
        self.expanded = np.zeros(64, dtype=bool)
        self.class_first = np.zeros((64, 256), dtype=np.uint8)  # [state, byte]: the first byte of its class
        self._views()
        self.initial = self._state(root)

    @classmethod
    def from_regex(cls, pattern: str, members: bool = False, max_states: int = 100_000) -> LazyByteDFA:
        """The automaton of `pattern` in a pool of its own (`members`: also read the schema
        compiler's private groups, see `parse_regex`)."""
        pool = RegexPool()
        return cls(parse_regex(pattern, pool, members=members), pool, max_states)

    @property
    def num_states(self) -> int:
        return len(self.nodes)

    def is_final(self, state: int) -> bool:
        return bool(self.accepting[state])

    def _state(self, node: RegexNode) -> int:
        state = self.state_of.get(node.uid)
        if state is None:
            state = len(self.nodes)
            account = self.pool.account  # (a request's own room, see BuildAccount)
            if (state >= self.max_states) if account is None else (account.states <= 0):
                raise AutomatonLimitError(
                    f"regex too complex: generation reached more than {self.max_states:,} automaton "
                    f"states (limit max_lazy_states)"
                )
            if account is not None:
                account.states -= 1
            if state == self.table.shape[0]:  # grow by doubling
                self._grow()
            self.nodes.append(node)
            self.state_of[node.uid] = state
            try:
                starts, class_first, row, live = self._layout(node)
            except RecursionError:
                raise AutomatonLimitError(TOO_DEEP) from None
            self.class_starts.append(starts)
            self._class_first_bytes[state * 256 : state * 256 + 256] = class_first
            self._table_bytes[state * 1024 : state * 1024 + 1024] = row
            self.missing.append(live)
            self._accepting[state] = node.nullable
            self._expanded[state] = live == 0
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
        self._views()

    def _views(self) -> None:
        """Memoryviews of the per-state arrays, through which a new state and an entry are
        written: from compiled code a memoryview's item or slice costs ~0.05 us, numpy's
        indexing ~0.2-0.4 us (six of them were a fifth of a derivative's cost). The arrays
        stay numpy: the compiled walks (lazy_trie_walk.py) read them."""
        self._table_bytes = self.table.data.cast("B")  # 1,024 bytes a state
        self._cells = self._table_bytes.cast("i")  # the entries (int32: C's int), flat: state * 256 + byte
        self._class_first_bytes = self.class_first.data.cast("B")
        self._accepting = self.accepting.data.cast("B")  # (bool as a byte)
        self._expanded = self.expanded.data.cast("B")

    def _layout(self, node: RegexNode) -> tuple[list[int], bytes, bytes, int]:
        """A new state's byte classes: (the first byte of each and 256, uint8 [256] the first
        byte of each byte's class, int32 [256] its table row before any derivative (both as
        bytes, which `_state` copies into the tables), the live classes: bit lo set for each
        class starting at lo that a match can start with). A class no match starts with
        leads nowhere: its entries are -1 from the start, so no walk stops for it and no
        `fill` is spent on it. Cached by (classes, first bytes), for every automaton: most
        states share one of a few."""
        key = (self.pool.cuts(node), node.first)
        layout = _LAYOUTS.get(key)
        if layout is None:
            cuts, starts = key[0] | (1 << 256), []
            while cuts:  # the set bits, lowest first
                low = cuts & -cuts
                starts.append(low.bit_length() - 1)
                cuts ^= low
            class_first = np.repeat(np.asarray(starts[:-1], dtype=np.uint8), np.diff(starts))
            live = (
                np.unpackbits(np.frombuffer(node.first.to_bytes(32, "little"), dtype=np.uint8), bitorder="little")[
                    class_first
                ]
                == 1
            )
            row = np.where(live, UNEXPLORED, -1).astype(np.int32).tobytes()
            if len(_LAYOUTS) >= 4096:
                _LAYOUTS.clear()
            layout = _LAYOUTS[key] = (starts, class_first.tobytes(), row, key[0] & node.first)  # (`live`)
        return layout

    def live(self, state: int) -> int:
        """The live byte classes of `state` (bit lo set for each class starting at lo that a
        match can start with): `missing[state]` before any entry is computed."""
        node = self.nodes[state]
        return self.pool.cuts(node) & node.first

    def _class_starts(self, state: int) -> list[int]:
        """The first byte of each byte class of `state`, and 256 at the end."""
        return self.class_starts[state]

    def fill(self, state: int, byte: int) -> int:
        """Compute `table[state, byte]` and the rest of its byte class (one derivative)."""
        done: int = self._cells[state * 256 + byte]
        if done != UNEXPLORED:
            return done
        node, starts = self.nodes[state], self.class_starts[state]
        i = bisect.bisect_right(starts, byte) - 1
        lo, hi = starts[i], starts[i + 1]
        try:
            nxt = self.pool.derivative(node, lo) if node.first >> lo & 1 else self.pool.empty
        except RecursionError:
            raise AutomatonLimitError(TOO_DEEP) from None
        target = -1 if nxt.kind == EMPTY else self._state(nxt)  # (an AND's `first` may overstate)
        # The class's entries in one copy (after `_state`, which may have grown the table).
        self._table_bytes[(state * 256 + lo) * 4 : (state * 256 + hi) * 4] = target.to_bytes(4, _ORDER, signed=True) * (
            hi - lo
        )
        self.fills += 1
        self.missing[state] &= ~(1 << lo)
        if not self.missing[state]:
            self._expanded[state] = True  # every entry computed
        checkpoint(kept=True)  # the entry is stored: a row cut here resumes from it (work_slices.py)
        return target

    def fill_ahead(self, state: int, reach: int, classes: int, budget: int, stop: int) -> None:
        """Compute ahead of a walk: the missing entries of `state` and of the states they
        lead to, along the states with at most `classes` entries left to compute (a key's
        letters: one live byte each), at most `budget` derivatives, `reach` bytes deep,
        stopping once `fills` reaches `stop` (LazyStateIndex._fill_forced says why)."""
        todo = [(state, reach)]
        while todo and budget > 0 and self.fills < stop:
            state, left = todo.pop()
            if state < 0 or left <= 0:
                continue
            missing = self.missing[state]
            if missing.bit_count() > classes:
                continue
            while missing and budget > 0:  # the missing classes, lowest first
                low = missing & -missing
                missing ^= low
                todo.append((self.fill(state, low.bit_length() - 1), left - 1))
                budget -= 1

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

    def only_byte(self, state: int) -> int | None:
        """The one byte that can follow `state`, or None (no byte, or more than one).

        Derives only the live classes, lowest first, and stops at a second byte: expanding
        the whole row (`allowed_bytes`) built a state for every class, and the forced-text
        searches of s4 and s7 ask this at every step, nearly doubling the states a grammar
        builds (and reaching `max_lazy_states` where generation alone did not). A class is
        derived even when live, since an AND/DIFF node's `first` may overstate."""
        starts, live, found = self.class_starts[state], self.live(state), -1
        while live:
            low = live & -live
            live ^= low
            lo = low.bit_length() - 1
            if self.fill(state, lo) < 0:
                continue  # (an overstated class)
            if found >= 0 or starts[bisect.bisect_right(starts, lo)] - lo > 1:
                return None  # a second byte: a second class, or a class of two or more
            found = lo
        return found if found >= 0 else None

    def allowed_bytes(self, state: int) -> np.ndarray:
        """The bytes that can follow in `state` (sorted int array)."""
        self.expand(state)
        return np.flatnonzero(self.table[state] >= 0)

    def nbytes(self) -> int:
        """The table's arrays, and an estimate of the pool's nodes and derivative memo (about
        300 and 100 bytes each, measured with tracemalloc): what a grammar cache should count."""
        arrays = self.table.nbytes + self.accepting.nbytes + self.expanded.nbytes + self.class_first.nbytes
        return arrays + 300 * len(self.pool) + 100 * len(self.pool._derivatives)
