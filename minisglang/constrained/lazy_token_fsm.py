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

from .lazy_regex import AutomatonLimitError, LazyByteDFA, RegexPool, parse_regex
from .regex_dfa import RegexError
from .token_fsm import ConstraintError, TokenFSM, Vocabulary, check_regex_length
from .lazy_trie_walk import walk_from
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
    """One state's tokens: `tokens` int64 [n] sorted ids (EOS excluded), `next_states`
    int64 [n] where each leads, `packed` int32 [W] the mask row (EOS bit set iff accepting)."""

    tokens: np.ndarray
    next_states: np.ndarray
    packed: torch.Tensor

    @property
    def nbytes(self) -> int:
        return self.tokens.nbytes + self.next_states.nbytes + self.packed.nbytes


class LazyStateIndex:
    """The TokenIndex interface over a LazyByteDFA: rows computed on first visit, cached.

    (token_index.LazyTokenIndex is the same idea over an EAGER byte DFA: its rows are
    lazy but its states were all built up front; here the states are lazy too.)
    """

    def __init__(self, dfa: LazyByteDFA, vocab: Vocabulary, vocab_size: int, limits: LazyLimits):
        self.dfa, self.limits = dfa, limits
        self.trie = vocab_trie(vocab.token_bytes)
        self.initial_state = dfa.initial
        self.eos_token_id = vocab.eos_token_id
        self.words = (vocab_size + 31) // 32
        self.rows: dict[int, TokenRow] = {}
        self.has_long = np.zeros(self.trie.num_nodes, dtype=bool)   # nodes with tokens past the trie
        self.has_long[list(self.trie.long_tokens)] = True
        self._lock = threading.Lock()   # rows are built by whichever thread asks first

    def row(self, state: int) -> TokenRow:
        """The row of `state`, computed on the first call."""
        row = self.rows.get(state)
        if row is None:
            with self._lock:
                row = self.rows.get(state)
                if row is None:
                    row = self.rows[state] = self._build_row(state)
        return row

    def _build_row(self, state: int) -> TokenRow:
        tokens, next_states = self._walk_trie(state)
        keep = tokens != self.eos_token_id
        tokens, next_states = tokens[keep], next_states[keep]
        order = np.argsort(tokens, kind="stable")
        tokens, next_states = tokens[order], next_states[order]
        bits = np.zeros(self.words * 32, dtype=bool)
        bits[tokens] = True
        if self.dfa.is_final(state):
            bits[self.eos_token_id] = True
        # Little-endian bit order: bit t % 32 of word t // 32 is token t.
        packed = np.packbits(bits, bitorder="little").view("<i4").astype(np.int32)
        return TokenRow(tokens, next_states, torch.from_numpy(packed))

    def _walk_trie(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        """(token ids, their end states) of every token whose bytes `state` can read.

        The compiled walk (lazy_trie_walk.py) stops at states whose rows do not exist yet;
        those are expanded here (at most `max_row_expansions` for one row) and the walk
        goes on from where it stopped.
        """
        trie, dfa = self.trie, self.dfa
        nodes, states = np.zeros(1, dtype=np.int64), np.asarray([state], dtype=np.int64)
        found_tokens, found_states = [], []
        out_tokens, out_states = np.empty_like(trie.end_tokens), np.empty_like(trie.end_tokens)
        buffers = [np.empty(trie.num_nodes, dtype=np.int64) for _ in range(4)]
        spent = 0   # states expanded for this row
        while nodes.shape[0]:
            found, pending, longs = walk_from(
                trie.child_start, trie.child_stop, trie.byte, trie.end_start, trie.end_stop, trie.end_tokens,
                self.has_long, dfa.table, dfa.expanded, nodes, states, out_tokens, out_states, *buffers)
            found_tokens.append(out_tokens[:found].copy())
            found_states.append(out_states[:found].copy())
            # Tokens longer than the trie: walk the rest of their bytes one by one.
            for node, s in zip(buffers[2][:longs].tolist(), buffers[3][:longs].tolist()):
                for token_id, rest in trie.long_tokens[node]:
                    end = dfa.walk_bytes(s, rest)
                    if end >= 0:
                        found_tokens.append(np.asarray([token_id]))
                        found_states.append(np.asarray([end]))
            nodes, states = buffers[0][:pending].copy(), buffers[1][:pending].copy()
            spent = dfa.expand_all(states, spent, self.limits.max_row_expansions, state)
        return np.concatenate(found_tokens), np.concatenate(found_states)

    # -- the TokenIndex interface ---------------------------------------------------------
    def allowed_token_ids(self, state: int) -> list[int]:
        """Sorted ids of the tokens allowed in `state` (EOS included when accepting)."""
        ids = self.row(state).tokens.tolist()
        return sorted(ids + [self.eos_token_id]) if self.is_final(state) else ids

    def next_state(self, state: int, token_id: int) -> int:
        """The state after `token_id`; -1 for EOS and for tokens that are not allowed."""
        if state < 0 or token_id == self.eos_token_id:
            return -1
        row = self.row(state)
        i = int(np.searchsorted(row.tokens, token_id))
        if i < row.tokens.shape[0] and row.tokens[i] == token_id:
            return int(row.next_states[i])
        return -1

    def is_final(self, state: int) -> bool:
        return state >= 0 and self.dfa.is_final(state)

    @property
    def num_states(self) -> int:
        """How many states have a token row (the states generation visited)."""
        return len(self.rows)

    def nbytes(self) -> int:
        return self.dfa.nbytes() + sum(r.nbytes for r in list(self.rows.values()))


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
        return self.index.is_final(state) and row.tokens.shape[0] == 0

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
    if start.tokens.shape[0] == 0 and not index.is_final(index.initial_state):
        allowed = bytes(dfa.allowed_bytes(index.initial_state).tolist()[:12])
        error = VocabularyCannotSpellError(
            f"the vocabulary cannot spell any string that matches regex {regex!r}: no token "
            f"starts with the bytes the regex needs first ({allowed!r})")
        raise ConstraintError(str(error)) from error
    return LazyTokenFSM(regex, index=index, state_row=LazyRowMap(index), jump_map=LazyJumpForward(dfa))


__all__ = ["AutomatonLimitError", "LazyLimits", "LazyTokenFSM", "LazyStateIndex", "TokenRow",
           "compile_lazy_token_fsm"]
