"""The lazy token FSM of our s5 backend: a state's token row is made on its first visit.

`compile_lazy_token_fsm(regex, vocab, vocab_size)` parses the regex into a shared syntax
tree (lazy_regex.py) and computes ONE row, the start state's, so compile cost follows the
regex's length, not its DFA's size. Every later row is computed when generation first
reaches its state, and cached:

- the row's tokens: the vocabulary trie (token_index.VocabTrie) is walked from the state
  by a compiled loop (lazy_trie_walk.py); a subtree is dropped as soon as the automaton
  dies on its prefix, and the table entries the walk needs are computed (derivatives,
  one per byte class) when first touched. Rows are shared: a permissive repetition
  `C{lo,hi}` takes the tokens that spell at most `hi` repetitions of C (counted once per
  vocabulary, no walk), a state `H T` with a permissive head reuses H's row plus the few
  tokens that can leave H, an alternation is the union of its members' rows, states no
  token can tell apart (RegexPool.clip) share one walk, and sub-expression rows are
  shared by all grammars (SHARED_ROWS). The shortcuts that skip the walk (repetition,
  head, alternation, and two more) are lazy_row_shortcuts.py; this module is the plain
  walk they fall back to;
- `TokenRow` (lazy_rows.py, with SHARED_ROWS): the packed int32 mask row (token t is bit
  t % 32 of word t // 32; EOS allowed exactly in accepting states) and how many tokens it
  allows. Where a token leads is computed when it is accepted (`next_state` walks its bytes).

The result is a `TokenFSM` (token_fsm.py), so the "fsm" backend's matcher drives it
exactly like the eager one: `index.next_state`, `state_row[state]`, `jump_map.jump_forward`,
`is_complete`, `walk`. The numbers of states and of states built by one row's walk are
bounded (`LazyLimits`); exceeding a bound raises AutomatonLimitError naming the option.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from .lazy_byte_dfa import LazyByteDFA
from .lazy_regex import TOO_DEEP, AutomatonLimitError, RegexNode, RegexPool, describe
from .lazy_regex_parser import lower_checked, parse_regex
from .lazy_row_shortcuts import LazyRowShortcuts
from .lazy_rows import SHARED_ROWS, RowKey, TokenRow
from .lazy_trie_walk import finish_row, vocab_arrays, walk_bytes, walk_rests, walk_trie
from .regex_ast import Regex, render
from .regex_dfa import RegexError, shown_regex
from .token_fsm import ConstraintError, TokenFSM, Vocabulary, check_regex_length
from .token_index import VocabularyCannotSpellError, vocab_trie
from .work_slices import unsliced

# A row's walk fills ahead along states with at most this many entries left to compute, at
# most FILL_AHEAD derivatives per entry it waited for (measured at 65k, side by side: per
# token p50 ~57 us with (1, 16), ~36 us with (2, 64), p99 and total CPU unchanged).
FILL_AHEAD_CLASSES = 2
FILL_AHEAD = 64
# `_walk_long` walks the long tokens of at most this many bytes from states clipped to their
# length (a clip walks that many bytes of the state's sequence).
MAX_LONG_CLIP = 64
# One jump forward reads at most this many forced bytes (each a new automaton state on its
# first visit): `a{100000}` forced 100,000 states in one step, seconds of the scheduler's
# thread for everyone (and its 100,000-state limit hit mid-generation). The rest of a longer
# forced text is jumped at the next step.
MAX_JUMP_BYTES = 1024


def _length_bound(length: int) -> int:
    """The smallest 3 * 2^k or 2^(k+1) at least `length` (a few clipped states cover all lengths)."""
    top = 1 << (length - 1).bit_length()
    return top * 3 // 4 if top * 3 // 4 >= length else top


@dataclass(frozen=True)
class LazyLimits:
    """Bounds on what a lazy compile may build; the names are the fsm backend's options.

    - max_lazy_states: automaton states built over the grammar's life (1.3 KiB of table
      each, up to twice that while the table grows by doubling: `(a|b)*a(a|b){30}` walked
      3,000 random tokens to 94,140 states, 163 MiB, near the default limit);
    - max_row_expansions: automaton states one token row's trie walk may expand (the work
      of computing one row, beyond the trie walk itself, which the vocabulary bounds);
    - max_regex_nodes: syntax tree and derivative nodes (parsing and derivatives together).
    """

    max_lazy_states: int = 100_000
    max_row_expansions: int = 20_000
    max_regex_nodes: int = 2_000_000


class LazyStateIndex(LazyRowShortcuts):
    """The TokenIndex interface over a LazyByteDFA: rows computed on first visit, cached.

    Rows are shared two ways. A state `H T` whose head H is a repetition takes H's row
    and walks only the tokens that could leave H (`_row_from_head`). Otherwise the trie
    is walked, the short tokens (those in the trie) from `clip(node, max_short_bytes)`
    and the long ones from `clip(node, max_bytes)` (see RegexPool.clip): states no
    token can tell apart are one clipped state, walked once.

    (token_index.LazyTokenIndex is the same idea over an EAGER byte DFA: its rows are
    lazy but its states were all built up front; here the states are lazy too.)
    """

    def __init__(self, dfa: LazyByteDFA, vocab: Vocabulary, vocab_size: int, limits: LazyLimits):
        self.dfa, self.limits = dfa, limits
        self.trie = vocab_trie(vocab.token_bytes)
        self.arrays = vocab_arrays(self.trie, vocab.token_bytes)
        self.initial_state = dfa.initial
        self.eos_token_id = vocab.eos_token_id
        self.words = (vocab_size + 31) // 32
        self.rows: dict[int, TokenRow] = {}  # state -> its row, for the states generation asked about
        self._all_rows: dict[int, TokenRow] = {}  # the same and the rows of parts of states (heads, alternatives)
        self.rows_by_key: dict[tuple[int, int], TokenRow] = {}  # (short state, long state) -> the shared row
        self.short_rows: dict[int, np.ndarray] = {}  # clipped state -> uint32 bits [W] of its short tokens
        self.long_found: dict[int, np.ndarray] = {}  # clipped state -> long token ids allowed
        self._follow_all = np.ones(self.trie.num_nodes, dtype=bool)
        self._marks_none = np.zeros(self.trie.num_nodes, dtype=bool)
        # Output buffers of the trie walk (4 of the trie's size, 3 for needed entries) and its
        # stack (2, grown when a walk starts from more pairs), reused under the lock.
        self._buffers = [np.empty(self.trie.num_nodes, np.int64) for _ in range(4)] + [
            np.empty(4096, np.int64) for _ in range(3)
        ]
        self._stack = [np.empty(self.trie.num_nodes + 64, np.int64) for _ in range(2)]
        self._init_shortcut_caches(vocab)  # the row shortcuts' caches (lazy_row_shortcuts.py)
        self.lock = threading.RLock()  # the automaton and the caches grow under it (a row may ask for another)

    def row(self, state: int) -> TokenRow:
        """The row of `state`, computed on the first call (no lock once it exists)."""
        row = self.rows.get(state)
        if row is None:
            with self.lock:
                try:
                    row = self.rows[state] = self._row_of(state)
                except RecursionError:  # a row path that follows nested nodes (clip, keys)
                    raise AutomatonLimitError(TOO_DEEP) from None
        return row

    def _row_of(self, state: int, shared: bool = False) -> TokenRow:
        """The row of any state, cached (the lock is held). `shared`: `state` is a part of
        a state (a head, an alternative), whose row other grammars over the same
        vocabulary may reuse (SHARED_ROWS, keyed by the part's structure)."""
        row = self._all_rows.get(state)
        if row is not None:
            return row
        key = self._shared_key("row", state) if shared else None
        stored = None if key is None else SHARED_ROWS.get(key)
        row = stored if isinstance(stored, TokenRow) else None
        if row is None:
            self._spent = self.dfa.fills
            # The shortcuts first (lazy_row_shortcuts.py: each None when its shape does not fit),
            # then the plain walk of the vocabulary trie.
            row = self._row_from_alternatives(state)
            if row is None:
                row = self._row_from_repeat(state)
            if row is None:
                row = self._row_from_strings(state)
            if row is None:
                row = self._row_from_head(state)
            if row is None:
                row = self._row_from_closure(state)
            if row is None:
                row = self._row_by_walk(state)
            if key is not None:
                SHARED_ROWS.put(key, row)
        self._all_rows[state] = row
        return row

    @staticmethod
    def _byte_mask(byte_set: int) -> np.ndarray:
        """bool [257]: bit b of `byte_set` (a 256-bit int) at index b, False at 256 (no byte)."""
        bits = np.unpackbits(np.frombuffer(byte_set.to_bytes(32, "little"), dtype=np.uint8), bitorder="little")
        return np.append(bits.astype(bool), False)

    def _make_row(self, bits: np.ndarray, extra: np.ndarray, state: int) -> TokenRow:
        """A TokenRow from uint32 bits [W] (changed in place) plus the ids `extra`, the EOS
        bit set iff `state` accepts."""
        count = finish_row(bits, extra, self.eos_token_id, self.dfa.is_final(state))
        return TokenRow(torch.from_numpy(bits.view(np.int32)), count)

    def _row_by_walk(self, state: int) -> TokenRow:
        """The row of `state` from trie walks, shared through its clipped states."""
        dfa, pool, node, arrays = self.dfa, self.dfa.pool, self.dfa.nodes[state], self.arrays
        short_state = dfa._state(pool.clip(node, arrays.max_short_bytes))
        long_state = dfa._state(pool.clip(node, arrays.max_bytes)) if arrays.ids.shape[0] else -1
        row = self.rows_by_key.get((short_state, long_state))
        if row is not None:
            return row
        # Most states are a long remainder of the grammar, with no short structure text:
        # they are never looked up in SHARED_ROWS (a state near the end is).
        share = pool.key(node) is not None
        short, found = (
            self._shared(self.short_rows, "short", short_state, share),
            self._shared(self.long_found, "long", long_state, share),
        )
        if short is None and found is None and long_state == short_state:  # one walk does both
            short, found = self._walk(short_state, state, short=True, long=True)
            self._keep(self.short_rows, "short", short_state, short, share)
            self._keep(self.long_found, "long", long_state, found, share)
        if short is None:
            short, _ = self._walk(short_state, state, short=True, long=False)
            self._keep(self.short_rows, "short", short_state, short, share)
        if found is None:
            found = np.zeros(0, dtype=np.int64)
            if long_state >= 0:
                found = self._walk_long(long_state, state)
                self._keep(self.long_found, "long", long_state, found, share)
        # The clipped states accept exactly when `state` does.
        row = self.rows_by_key[short_state, long_state] = self._make_row(short.copy(), found, state)
        return row

    def _walk_long(self, state: int, origin: int) -> np.ndarray:
        """int64 ids of the tokens longer than the trie that the automaton reads from
        `state`. Where a repetition bounded above such a token's length starts within 2
        bytes of `state` (`_bound_near`: a string value's `C{0,120}`), each token whose first
        byte `state` allows is walked on its own from `clip(state, bound)`, `bound` its
        length rounded up to 3 * 2^k or 2^(k+1) (at most MAX_LONG_CLIP); else all of them
        through the trie (a bound searched for within 48 bytes instead made clipped states
        for every state near a string: per token p50 at 65k ~15% higher).

        Clipped at the longest token only (1,024 bytes at 65k), a `maxLength: 300` string
        keeps its counting states, and the 44-byte token ` "` + 14 U+FFFD built 42 of
        them in every string value's first row; clipped at 48 bytes, the string is `C*`,
        read by three states."""
        dfa, node = self.dfa, self.dfa.nodes[state]
        if not self._bound_near(node):
            return self._walk(state, origin, short=False, long=True)[1]
        ids, bounds = self._long_tokens(node.first)
        if not ids.shape[0]:
            return np.zeros(0, dtype=np.int64)
        walks: dict[int, list[int]] = {}  # clipped state -> the bounds it reads
        for bound in sorted(set(bounds.tolist())):
            # No clip longer than MAX_LONG_CLIP (each walks that many bytes of the sequence).
            clipped = dfa._state(dfa.pool.clip(node, bound)) if bound <= MAX_LONG_CLIP else state
            walks.setdefault(clipped, []).append(bound)
        found = [self._walk_tokens(ids[np.isin(bounds, read)], start) for start, read in walks.items()]
        self._charge(origin)
        return np.concatenate(found)

    def _bound_near(self, node: RegexNode) -> bool:
        """Whether a repetition bounded above the shortest long token's rounded length
        starts within 2 bytes of `node` (a string value's `C{0,120}` after `(\\x20){0,1}"`)."""
        shortest = _length_bound(self.arrays.max_short_bytes + 1)
        return node.max_bound > shortest and self.dfa.pool.bound_within(node, shortest, 2)

    def _long_tokens(self, first: int) -> tuple[np.ndarray, np.ndarray]:
        """(int64 ids of the tokens longer than the trie that start with a byte of `first`,
        int64 their lengths rounded as `_walk_long` says), by rounded length, cached per
        byte set for the vocabulary (grammar after grammar asks for the same few sets)."""
        key = ("long tokens", first, self.eos_token_id)
        found = self.arrays._derived.get(key)
        if found is None:
            arrays = self.arrays
            ids = arrays.ids[self._byte_mask(first)[arrays.first_bytes()[arrays.ids]]]
            ids = ids[ids != self.eos_token_id]
            bounds = np.asarray(
                [_length_bound(n) for n in (arrays.token_stop[ids] - arrays.token_start[ids]).tolist()], dtype=np.int64
            )
            order = np.argsort(bounds, kind="stable")
            if len(arrays._derived) >= 4096:
                arrays._derived.clear()
            found = arrays._derived[key] = (ids[order], bounds[order])
        return found

    def _shared_key(self, kind: str, state: int) -> RowKey | None:
        return self._node_key(kind, self.dfa.nodes[state])

    def _node_key(self, kind: str, node: RegexNode) -> RowKey | None:
        """The SHARED_ROWS key of what `kind` says about `node` (None: its text is too long)."""
        text = self.dfa.pool.key(node)
        return None if text is None else (self.trie, self.words, self.eos_token_id, kind, text)

    def _shared(self, cache: dict[int, np.ndarray], kind: str, state: int, share: bool = True) -> np.ndarray | None:
        """`cache[state]`, else (when `share`) what another grammar stored for the same
        structure, else None."""
        if state < 0 or state in cache or not share:
            return cache.get(state)
        key = self._shared_key(kind, state)
        found = None if key is None else SHARED_ROWS.get(key)
        if not isinstance(found, np.ndarray):
            return None
        cache[state] = found
        return found

    def _keep(self, cache: dict[int, np.ndarray], kind: str, state: int, value: np.ndarray, share: bool = True) -> None:
        cache[state] = value
        if share and (key := self._shared_key(kind, state)) is not None:
            SHARED_ROWS.put(key, value)

    def _charge(self, origin: int) -> None:
        """Raise AutomatonLimitError once one row's walk computed too many derivatives."""
        if self.dfa.fills - self._spent > self.limits.max_row_expansions:
            raise AutomatonLimitError(
                f"regex too complex: the token row of automaton state {origin} ({describe(self.dfa.nodes[origin])}) "
                f"would build more than {self.limits.max_row_expansions:,} states (limit max_row_expansions)"
            )

    def _walk(
        self, state: int, origin: int, short: bool, long: bool, starts: list[tuple[int, int]] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Walk the trie from `state`: (uint32 [W] the bits of the trie's tokens it can read,
        when `short`; int64 ids of the long tokens it can read, when `long`). `starts`: the
        walk begins at these (trie node, automaton state) pairs instead of the root in
        `state`: it finds the tokens that go on below those nodes."""
        trie, dfa, info = self.trie, self.dfa, self.arrays
        follow = self._follow_all if short else info.leads_to
        marks = info.has_items if long else self._marks_none
        bits = np.zeros(self.words if short else 0, dtype=np.uint32)
        long_nodes, long_states, pending_nodes, pending_states, need_states, need_bytes, need_nodes = self._buffers
        # (np.array of a list: a third of np.full's cost, and most rows start at the root.)
        nodes = np.array([0] if starts is None else [n for n, _ in starts], dtype=np.int64)
        states = np.array([state] if starts is None else [s for _, s in starts], dtype=np.int64)
        reached_nodes, reached_states = [], []
        while nodes.shape[0]:
            if self._stack[0].shape[0] < trie.num_nodes + nodes.shape[0]:
                self._stack = [np.empty(trie.num_nodes + nodes.shape[0], np.int64) for _ in range(2)]
            _, longs, pending, needs = walk_trie(
                trie.child_start,
                trie.child_stop,
                trie.byte,
                trie.end_start,
                trie.end_stop,
                trie.end_tokens,
                follow,
                marks,
                dfa.table,
                dfa.class_first,
                dfa.expanded,
                nodes,
                states,
                self.eos_token_id,
                bits,
                long_nodes,
                long_states,
                pending_nodes,
                pending_states,
                need_states,
                need_bytes,
                need_nodes,
                *self._stack,
            )
            if longs:
                reached_nodes += long_nodes[:longs].tolist()
                reached_states += long_states[:longs].tolist()
            if not pending:
                break  # (most walks: every entry they read was computed)
            nodes, states = pending_nodes[:pending].copy(), pending_states[:pending].copy()
            # Fill the entries the pending pairs wait for (the rest of a byte class comes
            # with each; entries past the buffer are found again on the next pass), and
            # ahead as far as a token below the waiting trie node still reads.
            reach: dict[tuple[int, int], int] = {}
            heights = info.height[need_nodes[:needs]].tolist()
            for s, b, h in zip(need_states[:needs].tolist(), need_bytes[:needs].tolist(), heights):
                reach[s, b] = max(reach.get((s, b), 0), h - 1)
            for (s, b), ahead in sorted(reach.items()):
                self._fill_forced(dfa.fill(s, b), ahead)
            self._charge(origin)
        return bits, self._walk_rests(reached_nodes, reached_states, origin)

    def _fill_forced(self, state: int, reach: int, budget: int = FILL_AHEAD) -> None:
        """Fill ahead along the states that have at most FILL_AHEAD_CLASSES entries left to
        compute (a key's letters: one live byte each; an optional space, a sign: two), at
        most `budget` derivatives and `reach` bytes deep, so the walk reads a literal or a
        small branch in one pass instead of one pass per byte (each pass is a compiled walk
        plus Python). `reach`: how many more bytes a token can read from `state` (the trie
        below the waiting node; unbounded, a row of five keys filled each key to its end
        and on into its value, 106 derivatives where tokens read at most 12 bytes: 69
        with the bound). Never more than half the row's max_row_expansions: the
        look-ahead alone does not make a row fail its limit. (The loop is the automaton's
        `fill_ahead`, compiled with it.)"""
        stop = self._spent + self.limits.max_row_expansions // 2
        self.dfa.fill_ahead(state, reach, FILL_AHEAD_CLASSES, budget, stop)

    def _walk_rests(self, nodes: list[int], states: list[int], origin: int) -> np.ndarray:
        """int64 ids of the long tokens that go on from the reached (trie node, state) pairs
        and whose remaining bytes the automaton reads."""
        arrays = self.arrays
        if not nodes:
            return np.zeros(0, dtype=np.int64)
        per_node = [arrays.items_of[n] for n in nodes]
        starts = np.repeat(np.asarray(states, dtype=np.int64), [len(i) for i in per_node])
        items = np.concatenate(per_node)
        found = self._run_items(arrays.rest_start, arrays.rest_stop, arrays.rest_bytes, items, starts, origin)
        found_ids: np.ndarray = arrays.ids[found]
        kept: np.ndarray = found_ids[found_ids != self.eos_token_id]
        return kept

    def readable_tokens(self, state: int, token_ids: np.ndarray) -> np.ndarray:
        """int64 the ids in `token_ids` (int64) whose bytes the automaton reads from `state`,
        each token walked on its own: no trie, no shared rows. The brute-force oracle the
        mask tests and benchmarks/bench_mask_oracle.py check the rows against."""
        ids = token_ids[
            (self.arrays.token_stop[token_ids] > self.arrays.token_start[token_ids]) & (token_ids != self.eos_token_id)
        ]
        with self.lock:
            return self._walk_tokens(ids, state)

    def _walk_tokens(self, token_ids: np.ndarray, state: int) -> np.ndarray:
        """int64 the ids in `token_ids` whose whole bytes the automaton reads from `state`."""
        arrays = self.arrays
        states = np.full(token_ids.shape[0], state, dtype=np.int64)
        return self._run_items(arrays.token_start, arrays.token_stop, arrays.all_bytes, token_ids, states, state)

    def _run_items(
        self,
        starts: np.ndarray,
        stops: np.ndarray,
        data: np.ndarray,
        items: np.ndarray,
        states: np.ndarray,
        origin: int,
    ) -> np.ndarray:
        """The items i (byte strings `data[starts[i]:stops[i]]`, each from `states`) the
        automaton reads to their end: the compiled loop, with missing entries filled."""
        dfa = self.dfa
        offsets = np.zeros_like(items)
        out, found = [], np.empty(items.shape[0], np.int64)
        pend = [np.empty(items.shape[0], np.int64) for _ in range(3)]
        while items.shape[0]:
            survivors, pending = walk_rests(starts, stops, data, dfa.table, items, offsets, states, found, *pend)
            out.append(found[:survivors].copy())
            items, offsets, states = (p[:pending].copy() for p in pend)
            # One item per (state, next byte) walks on to its end here, filling the entries it
            # meets; the others mostly follow the same path (runs of one character), so the
            # next pass moves them along without filling one byte per pass. (The first item of
            # each pair, in order, found by numpy: a loop over hundreds of pending tokens cost
            # ~40 us of Python.)
            at = starts[items] + offsets
            first = np.sort(np.unique(states * 256 + data[at], return_index=True)[1])
            for item, position, s in zip(items[first].tolist(), at[first].tolist(), states[first].tolist()):
                self._read(s, data, position, int(stops[item]))
                self._charge(origin)
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    # -- the TokenIndex interface ---------------------------------------------------------
    def allowed_token_ids(self, state: int) -> list[int]:
        """Sorted ids of the tokens allowed in `state` (EOS included when accepting)."""
        bits = np.unpackbits(self.row(state).packed.numpy().view(np.uint8), bitorder="little")
        ids: list[int] = np.flatnonzero(bits).tolist()
        return ids

    def next_state(self, state: int, token_id: int) -> int:
        """The state after `token_id`; -1 for EOS and for tokens that are not allowed.

        Walks the token's bytes through the automaton (a compiled loop); entries not
        computed yet are filled under the lock, one derivative each.
        """
        arrays = self.arrays
        if state < 0 or token_id == self.eos_token_id or not 0 <= token_id < arrays.token_start.shape[0]:
            return -1
        start, stop = arrays.token_start[token_id], arrays.token_stop[token_id]
        if start == stop:
            return -1  # a special token: no bytes, never allowed
        end, at = walk_bytes(self.dfa.table, arrays.all_bytes, start, stop, state)
        if at < stop and end >= 0:
            with self.lock:
                end = self._read(end, arrays.all_bytes, at, stop)
        return int(end)

    def _read(self, state: int, data: np.ndarray, at: int, stop: int) -> int:
        """The state after the bytes `data[at:stop]` (uint8) from `state`, -1 if the
        automaton dies: the compiled walk, each missing entry filled where it stops (the
        lock is held)."""
        end, at = walk_bytes(self.dfa.table, data, at, stop, state)
        while at < stop and end >= 0:
            self.dfa.fill(end, int(data[at]))
            end, at = walk_bytes(self.dfa.table, data, at, stop, end)
        return int(end)

    def is_final(self, state: int) -> bool:
        return state >= 0 and self.dfa.is_final(state)

    @property
    def num_states(self) -> int:
        """How many states have a token row (the states generation visited)."""
        return len(self.rows)

    def nbytes(self) -> int:
        short = sum(bits.nbytes for bits in list(self.short_rows.values()))
        return self.dfa.nbytes() + short + sum(r.nbytes for r in list(self.rows.values()))


class LazyRowMap(Mapping[int, torch.Tensor]):
    """{state: packed row} as TokenFSM.state_row, each row computed on first lookup."""

    def __init__(self, index: LazyStateIndex):
        self.index = index

    def __getitem__(self, state: int) -> torch.Tensor:
        return self.index.row(state).packed

    def __iter__(self) -> Iterator[int]:
        return iter(list(self.index.rows))

    def __len__(self) -> int:
        return len(self.index.rows)


@dataclass(frozen=True, eq=False)
class LazyJumpForward:
    """s4's jump-forward rule, asked of the lazy automaton state by state.

    A state jumps iff it is not accepting and exactly one CHARACTER can follow (one
    allowed byte, then forced continuation bytes); a state in the middle of a character
    (only continuation bytes allowed) first emits its forced continuation bytes.
    """

    dfa: LazyByteDFA

    def _forced_char(self, state: int) -> tuple[bytes, int] | None:
        """(the one character that must follow `state`, the state after it) or None."""
        lead = self.dfa.only_byte(state)
        if lead is None:
            return None
        size = 1 if lead < 0x80 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
        data = bytearray([lead])
        state = self.dfa.step(state, lead)
        for _ in range(size - 1):
            byte = self.dfa.only_byte(state)
            if byte is None:
                return None  # the lead byte is forced, the character is not
            data.append(byte)
            state = self.dfa.step(state, byte)
        return bytes(data), state

    def jump_forward(self, state: int) -> tuple[bytes, int] | None:
        """The forced bytes from `state` up to the next choice (at most about MAX_JUMP_BYTES
        of them: the rest at the next jump) and the state there, or None."""
        out = bytearray()
        while (byte := self.dfa.only_byte(state)) is not None and 0x80 <= byte < 0xC0:
            out.append(byte)  # finish the character the model stopped inside
            state = self.dfa.step(state, byte)
        seen = set()
        while not self.dfa.is_final(state) and state not in seen and len(out) < MAX_JUMP_BYTES:
            seen.add(state)  # live states cannot cycle without a choice; guard anyway
            forced = self._forced_char(state)
            if forced is None:
                break
            out += forced[0]
            state = forced[1]
        return (bytes(out), state) if out else None


class RegexText:
    """The `regex` field of a LazyTokenFSM (a descriptor): given regex text, or the JSON
    Schema compiler's tree, which is rendered into text (lazy dialect, `render`) the first
    time the field is read, and kept. The automaton is built from the tree; its text is
    read only by error messages, drawings and benchmarks, and rendering a large schema's
    tree at every compile was ~10% of a p95 compile (benchmarks/results/compile.md)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = name  # the instance's __dict__ holds the text (or the tree) under the field's name

    def __get__(self, fsm: object, owner: type | None = None) -> str:
        if fsm is None:  # asked of the class (dataclasses looking for a default): there is none
            raise AttributeError(self.key)
        value: str | Regex = fsm.__dict__[self.key]
        if not isinstance(value, str):
            # Read by an error message, perhaps inside a spent slice of grammar work: the
            # render's checkpoints must not cut it there (the text is kept only when whole).
            with unsliced():
                value = fsm.__dict__[self.key] = render(value, "lazy")
        return value

    def __set__(self, fsm: object, value: str | Regex) -> None:
        fsm.__dict__[self.key] = value  # (only the dataclass's __init__ sets it: the class is frozen)


@dataclass(frozen=True, eq=False)
class LazyTokenFSM(TokenFSM):
    """A TokenFSM whose index, rows and jump map are all computed on demand, and whose
    regex text is rendered when first read (`RegexText`)."""

    regex: RegexText = RegexText()
    # The same fields as TokenFSM's, narrowed; keyword-only, as no default fits them.
    # (LazyStateIndex and LazyJumpForward answer what TokenFSM's users ask of its index and jump
    # map, without being those classes: one is computed on demand, the other walks the automaton.)
    index: LazyStateIndex = field(kw_only=True)  # type: ignore[assignment]
    state_row: LazyRowMap = field(kw_only=True)
    jump_map: LazyJumpForward = field(kw_only=True)  # type: ignore[assignment]

    def build_row(self, state: int) -> None:
        self.index.row(state)

    def is_complete(self, state: int) -> bool:
        """Accepting, and no token but EOS can follow (the eager definition, from the row).

        False while the state's row is not made: making it is grammar work, which the
        matcher does in `build_row`, in slices the scheduler bounds per step
        (work_slices.py), not in the advance that asks this right after each token. The
        matcher asks again once the row is made.
        """
        row = self.index.rows.get(state)
        return row is not None and self.index.is_final(state) and row.count == 0

    def ends(self, state: int) -> bool:
        """Accepting, and no byte can follow: the match is over, read from the state's regex
        without making its row (is_complete, where every byte is a token; a state some byte
        could follow but no token can is not seen as over: it says False)."""
        return self.index.is_final(state) and self.index.dfa.nodes[state].first == 0

    def nbytes(self) -> int:
        return self.index.nbytes()


def compile_lazy_token_fsm(
    regex: str | Regex,
    vocab: Vocabulary,
    vocab_size: int,
    limits: LazyLimits | None = None,
    max_regex_chars: int | None = None,
    members: bool = False,
    text: str | None = None,
) -> LazyTokenFSM:
    """regex -> LazyTokenFSM with the start state's row computed. Raises ConstraintError.

    `regex` is text (parsed here), or a tree (regex_ast.py: what the JSON Schema compiler
    builds), lowered as it is. `vocab_size` is the logits' width (the packed rows have
    ceil(vocab_size / 32) words). Only the start state is checked for spellability: a later
    state whose continuation the vocabulary cannot spell gets an empty row, as in the eager
    index. `members`: the text may hold the lazy dialect's private groups (`(?@members...)`).
    `text`: the lazy-dialect text of a tree `regex`, when the caller has it (a schema compiled
    in a child process arrives as text), kept as TokenFSM.regex; without it the tree is kept
    there and rendered only if the text is read (`RegexText`).
    """
    limits = limits or LazyLimits()
    if isinstance(regex, str):
        check_regex_length(len(regex), max_regex_chars)
    try:
        pool = RegexPool(limits.max_regex_nodes)
        root = (
            parse_regex(regex, pool, members)
            if isinstance(regex, str)
            else lower_checked(regex, pool, "of the JSON schema")
        )
        if text is not None:  # (TokenFSM.regex: what errors quote; a tree is rendered when read)
            regex = text
        dfa = LazyByteDFA(root, pool, limits.max_lazy_states)
        index = LazyStateIndex(dfa, vocab, vocab_size, limits)
        start = index.row(index.initial_state)
    except RegexError as e:  # AutomatonLimitError included
        raise ConstraintError(str(e)) from e
    pool.searched_limit = None  # the compile's searches were bounded together; generation's one by one
    if start.count == 0 and not index.is_final(index.initial_state):
        allowed = bytes(dfa.allowed_bytes(index.initial_state).tolist()[:12])
        shown = shown_regex(regex if isinstance(regex, str) else render(regex, "lazy"))
        error = VocabularyCannotSpellError(
            f"the vocabulary cannot spell any string that matches regex {shown}: no token "
            f"starts with the bytes the regex needs first ({allowed!r})"
        )
        raise ConstraintError(str(error)) from error
    return LazyTokenFSM(regex, index=index, state_row=LazyRowMap(index), jump_map=LazyJumpForward(dfa))


def prepare_vocabulary(vocab: Vocabulary, vocab_size: int, bodies: tuple[str, ...] = ()) -> None:
    """The one-time preparation of a vocabulary for lazy grammars, done when a backend starts
    (as xgrammar's tokenizer info and llguidance's token trie are) so the first grammars'
    tokens do not pay it: the vocabulary trie and arrays, each compiled loop's first call
    (numba loads its machine code then, ~4 ms each), and the repetition counts of `bodies`
    (regexes of the bodies grammars repeat most: a JSON string's character, a digit), stored
    in SHARED_ROWS exactly as a grammar's first `C{lo,hi}` row would store them."""
    for body in bodies:
        # `(?:C)*`'s start state is the repetition itself: its row reads C's counts.
        compile_lazy_token_fsm(f"(?:{body})*", vocab, vocab_size)
    # A row by trie walk (walk_trie, finish_row), tokens walked one by one (walk_rests) and
    # one token's advance (walk_bytes).
    index = compile_lazy_token_fsm(r"[ -~]?[ -~]", vocab, vocab_size).index
    index.readable_tokens(index.initial_state, np.arange(min(64, len(vocab.token_bytes)), dtype=np.int64))
    allowed = index.allowed_token_ids(index.initial_state)
    if allowed:
        index.next_state(index.initial_state, allowed[0])


__all__ = [
    "AutomatonLimitError",
    "LazyLimits",
    "LazyTokenFSM",
    "LazyStateIndex",
    "TokenRow",
    "compile_lazy_token_fsm",
    "prepare_vocabulary",
]
