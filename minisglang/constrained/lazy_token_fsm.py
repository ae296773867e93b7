"""The lazy token FSM of our s5 backend: a state's token row is made on its first visit.

`compile_lazy_token_fsm(regex, vocab, vocab_size)` parses the regex into a shared syntax
tree (lazy_regex.py) and computes ONE row, the start state's, so compile cost follows the
regex's length, not its DFA's size. Every later row is computed when generation first
reaches its state, and cached:

- the row's tokens: the vocabulary trie (token_index.VocabTrie, the same one the eager
  fast index walks) is walked from the state by a compiled loop (lazy_trie_walk.py); a
  subtree is dropped as soon as the automaton dies on its prefix, and automaton states
  the walk passes through are built (derivatives) when first touched;
- `TokenRow`: allowed token ids (sorted), the state each one leads to, and the packed
  int32 mask row (token t is bit t % 32 of word t // 32; EOS allowed exactly in
  accepting states).

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

from .lazy_regex import AutomatonLimitError, LazyByteDFA, RegexPool, describe, parse_regex
from .lazy_trie_walk import long_tokens, walk_bytes, walk_rests, walk_trie
from .regex_dfa import RegexError
from .token_fsm import ConstraintError, TokenFSM, Vocabulary, check_regex_length
from .token_index import VocabularyCannotSpellError, vocab_trie


@dataclass(frozen=True)
class LazyLimits:
    """Bounds on what a lazy compile may build; the names are the fsm backend's options.

    - max_lazy_states: automaton states built over the grammar's life (1 KiB each);
    - max_row_expansions: automaton states one token row's trie walk may expand (the work
      of computing one row, beyond the trie walk itself, which the vocabulary bounds);
    - max_regex_nodes: syntax tree and derivative nodes (parsing and derivatives together).
    """

    max_lazy_states: int = 100_000
    max_row_expansions: int = 20_000
    max_regex_nodes: int = 2_000_000


@dataclass(frozen=True, eq=False)
class TokenRow:
    """One state's tokens: `packed` int32 [W] the mask row (token t is bit t % 32 of word
    t // 32; the EOS bit set iff the state accepts) and `count`, how many tokens other
    than EOS it allows. Where each token leads is not stored: the advance step walks the
    one token chosen (`LazyStateIndex.next_state`)."""

    packed: torch.Tensor
    count: int

    @property
    def nbytes(self) -> int:
        return self.packed.nbytes


class LazyStateIndex:
    """The TokenIndex interface over a LazyByteDFA: rows computed on first visit, cached.

    A row is shared by every state that no token can tell apart from another: the short
    tokens (those in the trie, at most `short_bytes` long) are walked from
    `clip(node, short_bytes)`, the long ones from `clip(node, long_bytes)` (see
    RegexPool.clip), so the positions of a long bounded string share one walk.

    (token_index.LazyTokenIndex is the same idea over an EAGER byte DFA: its rows are
    lazy but its states were all built up front; here the states are lazy too.)
    """

    def __init__(self, dfa: LazyByteDFA, vocab: Vocabulary, vocab_size: int, limits: LazyLimits):
        self.dfa, self.limits = dfa, limits
        self.trie = vocab_trie(vocab.token_bytes)
        self.long = long_tokens(self.trie, vocab.token_bytes)
        self.initial_state = dfa.initial
        self.eos_token_id = vocab.eos_token_id
        self.words = (vocab_size + 31) // 32
        self.rows: dict[int, TokenRow] = {}            # state -> its row
        self.rows_by_key: dict[tuple[int, int], TokenRow] = {}   # (short state, long state) -> the shared row
        self.short_rows: dict[int, tuple[np.ndarray, int]] = {}   # clipped state -> (uint32 bits [W], count)
        self.long_found: dict[int, np.ndarray] = {}    # clipped state -> long token ids allowed
        self._follow_all = np.ones(self.trie.num_nodes, dtype=bool)
        self._marks_none = np.zeros(self.trie.num_nodes, dtype=bool)
        self._lock = threading.Lock()   # the automaton and the caches grow under it

    def row(self, state: int) -> TokenRow:
        """The row of `state`, computed on the first call (no lock once it exists)."""
        row = self.rows.get(state)
        if row is None:
            with self._lock:
                row = self.rows.get(state)
                if row is None:
                    row = self.rows[state] = self._build_row(state)
        return row

    def _build_row(self, state: int) -> TokenRow:
        dfa, pool, node, long = self.dfa, self.dfa.pool, self.dfa.nodes[state], self.long
        self._spent = dfa.fills
        short_state = dfa._state(pool.clip(node, long.max_short_bytes))
        long_state = dfa._state(pool.clip(node, long.max_bytes)) if long.ids.shape[0] else -1
        row = self.rows_by_key.get((short_state, long_state))
        if row is not None:
            return row
        short, found = self.short_rows.get(short_state), self.long_found.get(long_state)
        if short is None and found is None and long_state == short_state:   # one walk does both
            *short, found = self._walk(short_state, state, short=True, long=True)
            self.short_rows[short_state], self.long_found[long_state] = tuple(short), found
        if short is None:
            *short, _ = self._walk(short_state, state, short=True, long=False)
            self.short_rows[short_state] = tuple(short)
        if found is None and long_state >= 0:
            found = self.long_found[long_state] = self._walk(long_state, state, short=False, long=True)[2]
        bits, count = short
        bits = bits.copy()
        if found is not None:
            np.bitwise_or.at(bits, found >> 5, np.left_shift(1, found & 31).astype(np.uint32))
            count += found.shape[0]
        if dfa.is_final(state):   # the clipped states accept exactly when `state` does
            bits[self.eos_token_id >> 5] |= np.uint32(1 << (self.eos_token_id & 31))
        row = self.rows_by_key[short_state, long_state] = TokenRow(torch.from_numpy(bits.view(np.int32)), count)
        return row

    def _charge(self, origin: int) -> None:
        """Raise AutomatonLimitError once one row's walk computed too many derivatives."""
        if self.dfa.fills - self._spent > self.limits.max_row_expansions:
            raise AutomatonLimitError(
                f"regex too complex: the token row of automaton state {origin} ({describe(self.dfa.nodes[origin])}) "
                f"would build more than {self.limits.max_row_expansions:,} states (limit max_row_expansions)")

    def _walk(self, state: int, origin: int, short: bool, long: bool) -> tuple[np.ndarray, int, np.ndarray]:
        """Walk the trie from `state`: (uint32 [W] the bits of the trie's tokens it can read
        and their count, when `short`; int64 ids of the long tokens it can read, when `long`)."""
        trie, dfa, info = self.trie, self.dfa, self.long
        follow = self._follow_all if short else info.leads_to
        marks = info.has_items if long else self._marks_none
        bits = np.zeros(self.words if short else 0, dtype=np.uint32)
        buffers = [np.empty(trie.num_nodes, np.int64) for _ in range(4)]
        need_states, need_bytes = np.empty(4096, np.int64), np.empty(4096, np.int64)
        nodes, states, count = np.zeros(1, dtype=np.int64), np.asarray([state], dtype=np.int64), 0
        reached_nodes, reached_states = [], []
        while nodes.shape[0]:
            found, longs, pending, needs = walk_trie(
                trie.child_start, trie.child_stop, trie.byte, trie.end_start, trie.end_stop, trie.end_tokens,
                follow, marks, dfa.table, dfa.class_first, nodes, states, self.eos_token_id, bits, *buffers, need_states, need_bytes)
            count += found
            reached_nodes += buffers[0][:longs].tolist()
            reached_states += buffers[1][:longs].tolist()
            nodes, states = buffers[2][:pending].copy(), buffers[3][:pending].copy()
            # Fill the entries the pending pairs wait for (the rest of a byte class comes
            # with each; entries past the buffer are found again on the next pass).
            for s, b in sorted(set(zip(need_states[:needs].tolist(), need_bytes[:needs].tolist()))):
                dfa.fill(s, b)
            self._charge(origin)
        return bits, count, self._walk_rests(reached_nodes, reached_states, origin)

    def _walk_rests(self, nodes: list[int], states: list[int], origin: int) -> np.ndarray:
        """int64 ids of the long tokens that go on from the reached (trie node, state) pairs
        and whose remaining bytes the automaton reads (compiled loop, pending entries filled)."""
        info, dfa = self.long, self.dfa
        if not nodes:
            return np.zeros(0, dtype=np.int64)
        items = [info.items_of[n] for n in nodes]
        counts = [len(i) for i in items]
        items = np.concatenate(items)
        offsets, states = np.zeros_like(items), np.repeat(np.asarray(states, dtype=np.int64), counts)
        out, found = [], np.empty(items.shape[0], np.int64)
        pend = [np.empty(items.shape[0], np.int64) for _ in range(3)]
        while items.shape[0]:
            survivors, pending = walk_rests(info.rest_start, info.rest_stop, info.rest_bytes, dfa.table,
                                            items, offsets, states, found, *pend)
            out.append(info.ids[found[:survivors]])
            items, offsets, states = (p[:pending].copy() for p in pend)
            for item, offset, s in zip(items.tolist(), offsets.tolist(), states.tolist()):
                dfa.fill(s, int(info.rest_bytes[info.rest_start[item] + offset]))
            self._charge(origin)
        found_ids = np.concatenate(out)
        return found_ids[found_ids != self.eos_token_id]

    # -- the TokenIndex interface ---------------------------------------------------------
    def allowed_token_ids(self, state: int) -> list[int]:
        """Sorted ids of the tokens allowed in `state` (EOS included when accepting)."""
        bits = np.unpackbits(self.row(state).packed.numpy().view(np.uint8), bitorder="little")
        return np.flatnonzero(bits).tolist()

    def next_state(self, state: int, token_id: int) -> int:
        """The state after `token_id`; -1 for EOS and for tokens that are not allowed.

        Walks the token's bytes through the automaton (a compiled loop); entries not
        computed yet are filled under the lock, one derivative each.
        """
        long = self.long
        if state < 0 or token_id == self.eos_token_id or not 0 <= token_id < long.token_start.shape[0]:
            return -1
        start, stop = long.token_start[token_id], long.token_stop[token_id]
        if start == stop:
            return -1   # a special token: no bytes, never allowed
        end, at = walk_bytes(self.dfa.table, long.all_bytes, start, stop, state)
        if at < stop and end >= 0:
            with self._lock:
                while at < stop and end >= 0:
                    self.dfa.fill(end, int(long.all_bytes[at]))
                    end, at = walk_bytes(self.dfa.table, long.all_bytes, at, stop, end)
        return int(end)

    def is_final(self, state: int) -> bool:
        return state >= 0 and self.dfa.is_final(state)

    @property
    def num_states(self) -> int:
        """How many states have a token row (the states generation visited)."""
        return len(self.rows)

    def nbytes(self) -> int:
        short = sum(bits.nbytes for bits, _ in list(self.short_rows.values()))
        return self.dfa.nbytes() + short + sum(r.nbytes for r in list(self.rows.values()))


class LazyRowMap(Mapping):
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

    def _only_byte(self, state: int) -> int | None:
        allowed = self.dfa.allowed_bytes(state)
        return int(allowed[0]) if allowed.shape[0] == 1 else None

    def _forced_char(self, state: int) -> tuple[bytes, int] | None:
        """(the one character that must follow `state`, the state after it) or None."""
        lead = self._only_byte(state)
        if lead is None:
            return None
        size = 1 if lead < 0x80 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
        data = bytearray([lead])
        state = self.dfa.step(state, lead)
        for _ in range(size - 1):
            byte = self._only_byte(state)
            if byte is None:
                return None   # the lead byte is forced, the character is not
            data.append(byte)
            state = self.dfa.step(state, byte)
        return bytes(data), state

    def jump_forward(self, state: int) -> tuple[bytes, int] | None:
        """The forced bytes from `state` up to the next choice and the state there, or None."""
        out = bytearray()
        while (byte := self._only_byte(state)) is not None and 0x80 <= byte < 0xC0:
            out.append(byte)   # finish the character the model stopped inside
            state = self.dfa.step(state, byte)
        seen = set()
        while not self.dfa.is_final(state) and state not in seen:
            seen.add(state)   # live states cannot cycle without a choice; guard anyway
            forced = self._forced_char(state)
            if forced is None:
                break
            out += forced[0]
            state = forced[1]
        return (bytes(out), state) if out else None


@dataclass(frozen=True, eq=False)
class LazyTokenFSM(TokenFSM):
    """A TokenFSM whose index, rows and jump map are all computed on demand."""

    index: LazyStateIndex = field(default=None)
    state_row: LazyRowMap = field(default=None)
    jump_map: LazyJumpForward = field(default=None)

    def is_complete(self, state: int) -> bool:
        """Accepting, and no token but EOS can follow (the eager definition, from the row).

        The row is computed even when the state does not accept: the matcher asks this
        right after each token, so the row the next mask needs (and any limit error) comes
        here, in the request's own advance step, not in the batch's mask fill.
        """
        row = self.index.row(state)
        return self.index.is_final(state) and row.count == 0

    def nbytes(self) -> int:
        return self.index.nbytes()


def compile_lazy_token_fsm(regex: str, vocab: Vocabulary, vocab_size: int, limits: LazyLimits | None = None,
                           max_regex_chars: int | None = None) -> LazyTokenFSM:
    """regex -> LazyTokenFSM with the start state's row computed. Raises ConstraintError.

    `vocab_size` is the logits' width (the packed rows have ceil(vocab_size / 32) words).
    Only the start state is checked for spellability: a later state whose continuation
    the vocabulary cannot spell gets an empty row, as in the eager index.
    """
    limits = limits or LazyLimits()
    check_regex_length(regex, max_regex_chars)
    try:
        pool = RegexPool(limits.max_regex_nodes)
        dfa = LazyByteDFA(parse_regex(regex, pool), pool, limits.max_lazy_states)
        index = LazyStateIndex(dfa, vocab, vocab_size, limits)
        start = index.row(index.initial_state)
    except RegexError as e:   # AutomatonLimitError included
        raise ConstraintError(str(e)) from e
    if start.count == 0 and not index.is_final(index.initial_state):
        allowed = bytes(dfa.allowed_bytes(index.initial_state).tolist()[:12])
        error = VocabularyCannotSpellError(
            f"the vocabulary cannot spell any string that matches regex {regex!r}: no token "
            f"starts with the bytes the regex needs first ({allowed!r})")
        raise ConstraintError(str(error)) from error
    return LazyTokenFSM(regex, index=index, state_row=LazyRowMap(index), jump_map=LazyJumpForward(dfa))


__all__ = ["AutomatonLimitError", "LazyLimits", "LazyTokenFSM", "LazyStateIndex", "TokenRow",
           "compile_lazy_token_fsm"]
