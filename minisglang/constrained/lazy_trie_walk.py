"""The compiled loops (numba) of the lazy token FSM: one row's trie walk, one token's walk.

A row is the set of tokens whose bytes the automaton can read from one state. The walk
goes depth first through the vocabulary trie (token_index.VocabTrie) holding one
automaton state per trie node, and drops a subtree as soon as the automaton dies on its
prefix. The numpy level-by-level walk of the eager index pays ~10 array calls per trie
level even when two tokens survive; these loops cost a few nanoseconds per live node.

The automaton is lazy: an entry `table[state, byte]` may be UNEXPLORED (-2) because its
derivative was not computed yet, and computing it is Python. So a loop never guesses: at
a trie node whose state lacks an entry one of its children needs, it stops and returns
that (node, state) pair as *pending* (before reading any child, so nothing is found
twice); the caller fills the missing entries and calls again from the pending pairs.

Tokens longer than the trie (VocabTrie.MAX_DEPTH bytes) are walked here too: the trie
reports the nodes where they continue, and `walk_rests` reads their remaining bytes from
a flat byte buffer (`VocabArrays`), and so are the few tokens the advance step or a
row's correction walks one by one (`walk_rests` over every token's bytes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numba
import numpy as np

from minisglang.constrained.token_index import VocabTrie

UNEXPLORED = -2  # must equal lazy_regex.UNEXPLORED


@numba.njit(cache=True, nogil=True)
def walk_trie(
    child_start: np.ndarray,
    child_stop: np.ndarray,
    byte: np.ndarray,
    end_start: np.ndarray,
    end_stop: np.ndarray,
    end_tokens: np.ndarray,
    follow: np.ndarray,
    marks: np.ndarray,
    table: np.ndarray,
    class_first: np.ndarray,
    complete: np.ndarray,
    start_nodes: np.ndarray,
    start_states: np.ndarray,
    eos: int,
    bits: np.ndarray,
    long_nodes: np.ndarray,
    long_states: np.ndarray,
    pending_nodes: np.ndarray,
    pending_states: np.ndarray,
    need_states: np.ndarray,
    need_bytes: np.ndarray,
    need_nodes: np.ndarray,
    stack_nodes: np.ndarray,
    stack_states: np.ndarray,
) -> tuple[int, int, int, int]:
    """Walk the trie from the (start_nodes[i], start_states[i]) pairs, following only the
    children with `follow[child]` set. `stack_nodes` and `stack_states` are the walk's stack,
    the caller's buffers of at least (trie nodes + start pairs) entries: allocated here, at
    65k (129k nodes) they cost ~10 us a call, as much as a typical row's whole walk.

    When `bits` (uint32 [W]) is not empty, sets bit t % 32 of `bits[t // 32]` for every
    token t found, EOS skipped; writes the reached (node, state) pairs of the nodes with
    `marks[node]` (where long tokens go on) and the pending pairs, with the (state, byte)
    entries they wait for in `need_states`, `need_bytes` and the trie node waiting in
    `need_nodes` (repeats possible). Returns (tokens found, long pairs, pending pairs,
    needed entries).
    Arrays int64 except `table` (int32 [S, 256]), `class_first` (uint8 [S, 256]: the
    first byte of each byte's class), `complete` (bool [S]: every entry computed) and
    `follow`, `marks` (bool [nodes]).
    """
    top = 0
    for i in range(start_nodes.shape[0]):
        stack_nodes[top] = start_nodes[i]
        stack_states[top] = start_states[i]
        top += 1
    found = longs = pending = needs = 0
    collect = bits.shape[0] > 0
    while top > 0:
        top -= 1
        node, state = stack_nodes[top], stack_states[top]
        missing = False
        if not complete[state]:  # a state with every entry computed needs no check
            for child in range(child_start[node], child_stop[node]):
                if follow[child] and table[state, byte[child]] == UNEXPLORED:
                    missing = True
                    need = class_first[state, byte[child]]  # one need per byte class
                    if needs > 0 and need_states[needs - 1] == state and need_bytes[needs - 1] == need:
                        continue  # the same as the last one (most repeats are in a row)
                    if needs < need_states.shape[0]:
                        need_states[needs] = state
                        need_bytes[needs] = need
                        need_nodes[needs] = node
                        needs += 1
        if missing:
            pending_nodes[pending] = node
            pending_states[pending] = state
            pending += 1
            continue
        for child in range(child_start[node], child_stop[node]):
            if not follow[child]:
                continue
            nxt = table[state, byte[child]]
            if nxt < 0:
                continue  # the automaton dies on this prefix: skip the whole subtree
            if collect:
                for k in range(end_start[child], end_stop[child]):
                    t = end_tokens[k]
                    if t != eos:
                        bits[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
                        found += 1
            if marks[child]:
                long_nodes[longs] = child
                long_states[longs] = nxt
                longs += 1
            if child_start[child] < child_stop[child]:
                stack_nodes[top] = child
                stack_states[top] = nxt
                top += 1
    return found, longs, pending, needs


@numba.njit(cache=True, nogil=True)
def walk_rests(
    rest_start: np.ndarray,
    rest_stop: np.ndarray,
    rest_bytes: np.ndarray,
    table: np.ndarray,
    items: np.ndarray,
    offsets: np.ndarray,
    states: np.ndarray,
    out_items: np.ndarray,
    pending_items: np.ndarray,
    pending_offsets: np.ndarray,
    pending_states: np.ndarray,
) -> tuple[int, int]:
    """Read the remaining bytes of long tokens: item i is `rest_bytes[rest_start[i]:rest_stop[i]]`.

    Starts each `items[j]` at byte `offsets[j]` of its rest in `states[j]`; writes the
    items that survive to their end (`out_items`) and those that stopped at an UNEXPLORED
    entry (item, offset, state) as pending. Returns (survivors, pending).
    """
    found = pending = 0
    for j in range(items.shape[0]):
        item, state = items[j], states[j]
        k = rest_start[item] + offsets[j]
        while k < rest_stop[item]:
            nxt = table[state, rest_bytes[k]]
            if nxt == UNEXPLORED:
                break
            if nxt < 0:
                state = -1
                break
            state = nxt
            k += 1
        if state < 0:
            continue
        if k < rest_stop[item]:
            pending_items[pending] = item
            pending_offsets[pending] = k - rest_start[item]
            pending_states[pending] = state
            pending += 1
        else:
            out_items[found] = item
            found += 1
    return found, pending


@numba.njit(cache=True, nogil=True)
def walk_bytes(table: np.ndarray, data: np.ndarray, start: int, stop: int, state: int) -> tuple[int, int]:
    """Walk `data[start:stop]` from `state`: (end state or -1 if it dies, position reached).

    Stops early at an UNEXPLORED entry: then the position is < stop and the state is the
    one whose entry for `data[position]` is missing.
    """
    for k in range(start, stop):
        nxt = table[state, data[k]]
        if nxt == UNEXPLORED:
            return state, k
        if nxt < 0:
            return -1, k
        state = nxt
    return state, stop


@numba.njit(cache=True, nogil=True)
def token_repetitions(
    table: np.ndarray, data: np.ndarray, token_start: np.ndarray, token_stop: np.ndarray, start: int, out: np.ndarray
) -> None:
    """How many repetitions of a body C each token spells, read by the automaton of `C*`.

    `table` (int32 [S, 256]) is that automaton, every entry reachable from `start` (the
    state `C*`) computed; C is prefix-free, so the walk is back in `start` exactly when a
    repetition ends. Writes `out[t]` (int32): the repetitions token t's bytes
    (`data[token_start[t]:token_stop[t]]`) begin, an unfinished last one counted, or -1
    when `C*` cannot read them (and for tokens without bytes).
    """
    for t in range(token_start.shape[0]):
        state, count = start, 0
        if token_start[t] == token_stop[t]:
            out[t] = -1
            continue
        for k in range(token_start[t], token_stop[t]):
            state = table[state, data[k]]
            if state < 0:
                break
            if state == start:
                count += 1
        out[t] = -1 if state < 0 else count + (state != start)


@numba.njit(cache=True, nogil=True)
def finish_row(bits: np.ndarray, extra: np.ndarray, eos: int, accepting: bool) -> int:
    """Complete a token row in place: set the bits of the ids `extra` (int64) in `bits`
    (uint32 [W]), the EOS bit iff `accepting`; return how many tokens other than EOS it
    allows (a population count, word by word)."""
    for i in range(extra.shape[0]):
        t = extra[i]
        bits[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
    eos_bit = np.uint32(1) << np.uint32(eos & 31)
    if accepting:
        bits[eos >> 5] |= eos_bit
    else:
        bits[eos >> 5] &= ~eos_bit
    count = 0
    for i in range(bits.shape[0]):
        x = np.uint64(bits[i])  # the classic SWAR population count, in 64-bit arithmetic
        x = x - ((x >> np.uint64(1)) & np.uint64(0x55555555))
        x = (x & np.uint64(0x33333333)) + ((x >> np.uint64(2)) & np.uint64(0x33333333))
        x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F)
        count += int(((x * np.uint64(0x01010101)) & np.uint64(0xFFFFFFFF)) >> np.uint64(24))
    return count - (1 if accepting else 0)


@dataclass(frozen=True, eq=False)
class VocabArrays:
    """The vocabulary as the compiled loops read it, beside the trie (built once per trie).

    The tokens longer than the trie:
    Item i is token `ids[i]`; its first MAX_DEPTH bytes end at trie node `node[i]`, its
    other bytes are `rest_bytes[rest_start[i]:rest_stop[i]]`. `items_of` maps a trie node
    to its items (`has_items[node]`); `leads_to[n]` marks node n and its ancestors when n has items (the only
    nodes a walk for long tokens follows). `all_bytes`/`token_start`/`token_stop` hold
    every token's bytes (the advance step walks one token), uint8/int64; `containing[b]`
    the sorted ids of the tokens whose bytes include byte b; `height[n]` (int64) the most
    bytes a path below trie node n spells (how far a walk waiting at n can still read).
    """

    ids: np.ndarray
    rest_start: np.ndarray
    rest_stop: np.ndarray
    rest_bytes: np.ndarray
    items_of: dict[int, np.ndarray]
    leads_to: np.ndarray
    has_items: np.ndarray
    max_bytes: int  # the longest token
    max_short_bytes: int  # the longest token that ends inside the trie
    all_bytes: np.ndarray
    token_start: np.ndarray
    token_stop: np.ndarray
    containing: list[np.ndarray]
    height: np.ndarray
    _first: list[np.ndarray] = field(default_factory=list, repr=False)  # [`first_bytes()`] once computed
    # trie node -> `children(trie, node)`
    _children: dict[int, dict[int, int]] = field(default_factory=dict, repr=False)
    # what a grammar's index derives for the vocabulary: (what, byte set, EOS id) -> two id arrays
    # (LazyStateIndex._long_tokens, LazyRowShortcuts._containing; None: too many to list)
    _derived: dict[tuple[str, int, int], tuple[np.ndarray, np.ndarray] | None] = field(default_factory=dict, repr=False)

    def children(self, trie: VocabTrie, node: int) -> dict[int, int]:
        """{byte: child} of a node of `trie` (this vocabulary's trie), cached: a walk in
        Python (an enum's values) comes back to the same nodes grammar after grammar."""
        found = self._children.get(node)
        if found is None:
            lo, hi = int(trie.child_start[node]), int(trie.child_stop[node])
            found = dict(zip(trie.byte[lo:hi].tolist(), range(lo, hi)))
            if len(self._children) >= 65536:
                self._children.clear()
            self._children[node] = found
        return found

    def first_bytes(self) -> np.ndarray:
        """int64 [tokens]: each token's first byte (256 for a token without bytes)."""
        if not self._first:
            first = np.full(self.token_start.shape[0], 256, dtype=np.int64)
            some = self.token_stop > self.token_start
            first[some] = self.all_bytes[self.token_start[some]]
            self._first.append(first)
        return self._first[0]

    @classmethod
    def build(cls, trie: VocabTrie, token_bytes: Sequence[bytes | None]) -> VocabArrays:
        ids: list[int] = []
        starts, stops, chunks, items_of, offset = [], [], [], {}, 0
        leads_to = np.zeros(trie.num_nodes, dtype=bool)
        has_items = np.zeros(trie.num_nodes, dtype=bool)
        for node, entries in sorted(trie.long_tokens.items()):
            first = len(ids)
            for token_id, rest in entries:
                ids.append(token_id)
                starts.append(offset)
                offset += len(rest)
                stops.append(offset)
                chunks.append(rest)
            items_of[node] = np.arange(first, len(ids), dtype=np.int64)
            has_items[node] = True
            while node > 0 and not leads_to[node]:
                leads_to[node] = True
                node = trie.parent[node]
        lengths = np.asarray([len(b) if b else 0 for b in token_bytes], dtype=np.int64)
        token_stop = np.cumsum(lengths)
        owner = np.repeat(np.arange(lengths.shape[0]), lengths)
        all_bytes = np.frombuffer(b"".join(b or b"" for b in token_bytes), dtype=np.uint8).copy()
        pairs = np.unique(all_bytes.astype(np.int64) * lengths.shape[0] + owner)  # (byte, token), sorted
        bounds = np.searchsorted(pairs // lengths.shape[0], np.arange(257))
        containing = [pairs[a:b] % lengths.shape[0] for a, b in zip(bounds[:-1], bounds[1:])]
        long_ids = set(ids)
        short = [n for t, n in enumerate(lengths.tolist()) if t not in long_ids]
        return cls(
            np.asarray(ids, dtype=np.int64),
            np.asarray(starts, dtype=np.int64),
            np.asarray(stops, dtype=np.int64),
            np.frombuffer(b"".join(chunks), dtype=np.uint8).copy(),
            items_of,
            leads_to,
            has_items,
            int(lengths.max(initial=0)),
            max(short, default=0),
            all_bytes,
            token_stop - lengths,
            token_stop,
            containing,
            trie_heights(trie),
        )


def trie_heights(trie: VocabTrie) -> np.ndarray:
    """int64 [nodes]: the most bytes a path below each node of `trie` spells (0 at a leaf).
    The nodes are numbered level by level, so each level is one range of ids, children after
    their parents: the levels are done deepest first, one array call each."""
    levels, lo, hi = [], 0, 1
    while lo < hi:
        levels.append((lo, hi))
        lo, hi = int(trie.child_start[lo]), int(trie.child_stop[hi - 1])
    height = np.zeros(trie.num_nodes, dtype=np.int64)
    for lo, hi in reversed(levels[1:]):
        np.maximum.at(height, trie.parent[lo:hi], height[lo:hi] + 1)
    return height


_ARRAYS_CACHE: dict[int, tuple[VocabTrie, VocabArrays]] = {}


def vocab_arrays(trie: VocabTrie, token_bytes: Sequence[bytes | None]) -> VocabArrays:
    """The VocabArrays of `trie` (itself cached per vocabulary by token_index.vocab_trie)."""
    entry = _ARRAYS_CACHE.get(id(trie))
    if entry is None or entry[0] is not trie:
        if len(_ARRAYS_CACHE) >= 4:
            _ARRAYS_CACHE.pop(next(iter(_ARRAYS_CACHE)))
        entry = _ARRAYS_CACHE[id(trie)] = (trie, VocabArrays.build(trie, token_bytes))
    return entry[1]
