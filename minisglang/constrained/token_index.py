"""Token index: for every DFA state, which tokens may come next and where each one leads.

The model does not produce characters, it produces tokens: multi-byte strings such as
`":`, ` the`, `2024`, or half of a Chinese character. So the regex's byte DFA is turned
into a map {state: {token_id: next_state}} by walking every token's bytes from every
reachable state (SGLang's first release: `create_fsm_index_end_to_end`). A token is
allowed only if ALL its bytes can be walked; EOS is allowed exactly in accepting states
and leads to -1.

Three builders give identical results:
- `build_index_reference`: the readable worklist, one token walk at a time (slow);
- `build_index_fast`: the vocabulary as a byte trie, walked level by level for many
  states at once with numpy (each trie node is one table lookup per state);
- `LazyTokenIndex`: the fast walk, one state at a time, on first visit.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from tqdm.auto import tqdm

from minisglang.constrained.regex_dfa import ByteDFA, shown_regex


class VocabularyCannotSpellError(ValueError):
    """No accepting state of the regex can be reached with the vocabulary's tokens."""


@dataclass
class TokenIndex:
    """{state: {token_id: next_state}} for every state reachable from `initial_state`.

    EOS maps to -1, and appears exactly in the accepting states. A state with no entry
    (or an empty one) allows nothing.
    """

    state_to_tokens: Mapping[int, dict[int, int]]  # a dict, or fsm_arrays' StateTable over flat arrays
    initial_state: int
    final_states: frozenset[int]
    eos_token_id: int

    def allowed_token_ids(self, state: int) -> list[int]:
        """Sorted ids of the tokens allowed in `state` (EOS included when accepting)."""
        return sorted(self.state_to_tokens.get(state, {}))

    def next_state(self, state: int, token_id: int) -> int:
        """The state after `token_id`; -1 for EOS and for tokens that are not allowed."""
        return self.state_to_tokens.get(state, {}).get(token_id, -1)

    def is_final(self, state: int) -> bool:
        return state in self.final_states

    @property
    def num_states(self) -> int:
        """How many states are reachable from the initial state."""
        return len(self.state_to_tokens)


def _usable_tokens(vocab: Sequence[bytes | None], eos_token_id: int) -> list[tuple[int, bytes]]:
    """(id, bytes) of the tokens that can ever be allowed: no specials, no empty strings."""
    return [(i, b) for i, b in enumerate(vocab) if b and i != eos_token_id]


def _add_eos(state_to_tokens: dict[int, dict[int, int]], dfa: ByteDFA, eos_token_id: int) -> None:
    for state, tokens in state_to_tokens.items():
        if dfa.is_final(state):
            tokens[eos_token_id] = -1


def _check_can_finish(index: TokenIndex, dfa: ByteDFA, vocab: Sequence[bytes | None]) -> None:
    """Raise VocabularyCannotSpellError when no accepting state was reached."""
    if any(dfa.is_final(s) for s in index.state_to_tokens):
        return
    # Say what was missing: bytes the DFA could read next that no allowed token starts with.
    missing: set[bytes] = set()
    for state, tokens in index.state_to_tokens.items():
        started = {spelled[0] for t in tokens if t != index.eos_token_id and (spelled := vocab[t])}
        expected = np.flatnonzero(dfa.table[state] >= 0)
        missing.update(bytes([b]) for b in expected if b not in started)
    regex = f"regex {shown_regex(dfa.pattern)}" if dfa.pattern is not None else "the regex"
    shown = ", ".join(repr(b) for b in sorted(missing)[:12]) or "(nothing: every path loops)"
    raise VocabularyCannotSpellError(
        f"the vocabulary cannot spell any string that matches {regex}: from the "
        f"{index.num_states} reachable states no accepting state can be reached; no token "
        f"starts with the next byte(s) needed: {shown}"
    )


# ---------------------------------------------------------------------------------------
# Reference builder: the readable version
# ---------------------------------------------------------------------------------------
def build_index_reference(
    dfa: ByteDFA, vocab: Sequence[bytes | None], eos_token_id: int, progress: bool = True
) -> TokenIndex:
    """Worklist from the initial state; walk every vocabulary string from every state.

    vocab[i] is token i's exact bytes, None for special tokens. Tokens with identical bytes
    are walked once (the first release grouped them the same way).
    """
    same_bytes: dict[bytes, list[int]] = {}
    for token_id, data in _usable_tokens(vocab, eos_token_id):
        same_bytes.setdefault(data, []).append(token_id)

    state_to_tokens: dict[int, dict[int, int]] = {}
    worklist = deque([dfa.initial])
    seen = {dfa.initial}
    bar = tqdm(total=1, desc="token index (reference)", unit="state", disable=not progress, delay=1.0)
    while worklist:
        state = worklist.popleft()
        # BEGIN SOLUTION task1_2
        tokens: dict[int, int] = {}
        for data, token_ids in same_bytes.items():
            end = dfa.walk_bytes(state, data)
            if end < 0:
                continue
            for token_id in token_ids:
                tokens[token_id] = end
            if end not in seen:
                seen.add(end)
                worklist.append(end)
                bar.total += 1
        state_to_tokens[state] = dict(sorted(tokens.items()))
        # END SOLUTION
        bar.update(1)
    bar.close()
    _add_eos(state_to_tokens, dfa, eos_token_id)
    index = TokenIndex(state_to_tokens, dfa.initial, dfa.finals, eos_token_id)
    _check_can_finish(index, dfa, vocab)
    return index


# ---------------------------------------------------------------------------------------
# The vocabulary as a byte trie, stored level by level (shared by the fast and lazy builds)
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class VocabTrie:
    """The distinct token byte strings as a trie, nodes numbered level by level.

    Node 0 is the root (the empty string); node k > 0 extends `parent[k]` by `byte[k]`.
    Nodes are sorted by depth and, within a depth, by their strings, so the children of a
    node are the contiguous range `child_start[k]:child_stop[k]`, and the token ids whose
    string ends at node k are `end_tokens[end_start[k]:end_stop[k]]`.
    Only the first MAX_DEPTH bytes are in the trie: a longer token (runs of spaces or
    dashes, up to 1024 bytes) is listed in `long_tokens[node of its first MAX_DEPTH bytes]`
    with the rest of its bytes, and walked on its own, so the level loop stays short.
    """

    MAX_DEPTH = 32

    parent: np.ndarray  # [num_nodes] int64
    byte: np.ndarray  # [num_nodes] int64
    child_start: np.ndarray  # [num_nodes] int64
    child_stop: np.ndarray  # [num_nodes] int64
    end_tokens: np.ndarray  # [num_tokens_in_trie] int64, token ids sorted by end node
    end_start: np.ndarray  # [num_nodes] int64
    end_stop: np.ndarray  # [num_nodes] int64
    long_tokens: dict[int, list[tuple[int, bytes]]]  # node -> [(token id, remaining bytes)]

    @property
    def num_nodes(self) -> int:
        return int(self.parent.shape[0])

    @classmethod
    def from_vocab(cls, vocab: Sequence[bytes | None]) -> VocabTrie:
        """Build the trie of all non-empty, non-special token strings."""
        max_depth = cls.MAX_DEPTH
        strings = sorted({b[:max_depth] for b in vocab if b})
        # Insert strings in sorted order: a string shares its nodes with the previous one
        # up to their common prefix, so only the rest needs new nodes.
        parent, byte, depth = [0], [0], [0]
        node_of: dict[bytes, int] = {}
        path = [0]  # node ids along the previous string: path[k] = node of its first k bytes
        previous = b""
        for s in strings:
            common = 0
            limit = min(len(s), len(previous))
            while common < limit and s[common] == previous[common]:
                common += 1
            del path[common + 1 :]
            for k in range(common, len(s)):
                parent.append(path[k])
                byte.append(s[k])
                depth.append(k + 1)
                path.append(len(parent) - 1)
            node_of[s] = path[len(s)]
            previous = s
        # Renumber by depth (stable: within a depth the order stays the sorted order).
        order = np.argsort(np.asarray(depth), kind="stable")
        new_id = np.empty_like(order)
        new_id[order] = np.arange(order.shape[0])
        parent_arr = new_id[np.asarray(parent)[order]]
        parent_arr[0] = -1  # the root has no parent
        byte_arr = np.asarray(byte, dtype=np.int64)[order]
        nodes = np.arange(parent_arr.shape[0])
        # parent_arr is non-decreasing, so each node's children are one contiguous range.
        child_start = np.searchsorted(parent_arr, nodes, side="left")
        child_stop = np.searchsorted(parent_arr, nodes, side="right")

        ends: list[tuple[int, int]] = []  # (trie node, token id)
        long_tokens: dict[int, list[tuple[int, bytes]]] = {}
        for token_id, data in enumerate(vocab):
            if not data:
                continue
            node = int(new_id[node_of[data[:max_depth]]])
            if len(data) <= max_depth:
                ends.append((node, token_id))
            else:
                long_tokens.setdefault(node, []).append((token_id, data[max_depth:]))
        ends.sort()
        end_node = np.asarray([n for n, _ in ends], dtype=np.int64)
        end_tokens = np.asarray([t for _, t in ends], dtype=np.int64)
        end_start = np.searchsorted(end_node, nodes, side="left")
        end_stop = np.searchsorted(end_node, nodes, side="right")
        return cls(parent_arr, byte_arr, child_start, child_stop, end_tokens, end_start, end_stop, long_tokens)


_TRIE_CACHE: dict[int, tuple[Sequence[bytes | None], VocabTrie]] = {}


def vocab_trie(vocab: Sequence[bytes | None]) -> VocabTrie:
    """The VocabTrie of `vocab`, built once per vocabulary object and then reused.

    The cache is keyed by the object's identity (a tokenizer's `token_bytes` list), which
    costs nothing to look up; it keeps the object alive so the id cannot be reused. Do not
    mutate a vocabulary list after building an index from it.
    """
    entry = _TRIE_CACHE.get(id(vocab))
    if entry is None:
        if len(_TRIE_CACHE) >= 4:
            _TRIE_CACHE.pop(next(iter(_TRIE_CACHE)))  # drop the oldest
        entry = _TRIE_CACHE[id(vocab)] = (vocab, VocabTrie.from_vocab(vocab))
    return entry[1]


def _expand(starts: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ranges starts[i]:stops[i], return (i repeated per element, the elements)."""
    counts = stops - starts
    owner = np.repeat(np.arange(counts.shape[0]), counts)
    offsets = np.cumsum(counts) - counts
    return owner, np.arange(owner.shape[0]) - (offsets - starts)[owner]


class _TrieWalker:
    """Walks the vocabulary trie from a batch of DFA states at once, with numpy.

    The walk keeps only live (row, trie node, DFA state) triples, one trie level at a
    time: a subtree whose prefix is already rejected is never visited, so restrictive
    states (digits, punctuation) cost little and permissive ones (inside a string) cost
    one table lookup per trie node.
    """

    def __init__(self, dfa: ByteDFA, trie: VocabTrie, eos_token_id: int):
        self.dfa, self.trie, self.eos_token_id = dfa, trie, eos_token_id
        self.flat = dfa.table.astype(np.int64).ravel()  # flat[state * 256 + byte]

    def token_maps(self, states: Sequence[int]) -> tuple[list[dict[int, int]], np.ndarray]:
        """{token_id: next_state} for each of (at most 256) `states`, EOS not included.

        Also returns the distinct next states reached, so a worklist needs no extra pass.
        """
        assert len(states) <= 256, "rows are numbered in uint8"
        trie, flat = self.trie, self.flat
        rows = np.arange(len(states), dtype=np.uint8)  # uint8: grouping rows is a radix sort
        nodes = np.zeros(len(states), dtype=np.int64)
        at = np.asarray(states, dtype=np.int64)  # DFA state of each (row, node) pair
        found_rows, found_tokens, found_states = [], [], []
        for _depth in range(VocabTrie.MAX_DEPTH):
            owner, child = _expand(trie.child_start[nodes], trie.child_stop[nodes])
            nxt = flat[at[owner] * 256 + trie.byte[child]]
            live = nxt >= 0
            rows, nodes, at = rows[owner[live]], child[live], nxt[live]
            if rows.shape[0] == 0:
                break
            owner, position = _expand(trie.end_start[nodes], trie.end_stop[nodes])
            found_rows.append(rows[owner])
            found_tokens.append(trie.end_tokens[position])
            found_states.append(at[owner])
        # Tokens longer than the trie: walk the rest of their bytes one by one.
        if trie.long_tokens and rows.shape[0]:
            extra = [
                (row, token_id, end)
                for row, node, state in zip(rows.tolist(), nodes.tolist(), at.tolist())
                for token_id, rest in trie.long_tokens.get(node, ())
                if (end := self.dfa.walk_bytes(state, rest)) >= 0
            ]
            found_rows.append(np.asarray([r for r, _, _ in extra], dtype=np.uint8))
            found_tokens.append(np.asarray([t for _, t, _ in extra], dtype=np.int64))
            found_states.append(np.asarray([e for _, _, e in extra], dtype=np.int64))
        if not found_rows:
            return [{} for _ in states], np.zeros(0, dtype=np.int64)
        row_of, token_of, state_of = (np.concatenate(x) for x in (found_rows, found_tokens, found_states))
        keep = token_of != self.eos_token_id
        row_of, token_of, state_of = row_of[keep], token_of[keep], state_of[keep]
        order = np.argsort(row_of, kind="stable")
        token_list, state_list = token_of[order].tolist(), state_of[order].tolist()
        bounds = np.searchsorted(row_of[order], np.arange(len(states) + 1)).tolist()
        maps = [dict(zip(token_list[a:b], state_list[a:b])) for a, b in zip(bounds, bounds[1:])]
        return maps, np.unique(state_of)


def build_index_fast(
    dfa: ByteDFA, vocab: Sequence[bytes | None], eos_token_id: int, progress: bool = True
) -> TokenIndex:
    """Same result as `build_index_reference`, using the numpy trie walk."""
    walker = _TrieWalker(dfa, vocab_trie(vocab), eos_token_id)
    state_to_tokens: dict[int, dict[int, int]] = {}
    frontier = [dfa.initial]
    seen = {dfa.initial}
    bar = tqdm(total=1, desc="token index (fast)", unit="state", disable=not progress, delay=1.0)
    while frontier:
        states, frontier = frontier[:256], frontier[256:]  # walk up to 256 states together
        maps, reached = walker.token_maps(states)
        state_to_tokens.update(zip(states, maps))
        new_states = [s for s in reached.tolist() if s not in seen]
        seen.update(new_states)
        frontier.extend(new_states)
        bar.total += len(new_states)
        bar.update(len(states))
    bar.close()
    state_to_tokens = {s: state_to_tokens[s] for s in sorted(state_to_tokens)}
    _add_eos(state_to_tokens, dfa, eos_token_id)
    index = TokenIndex(state_to_tokens, dfa.initial, dfa.finals, eos_token_id)
    _check_can_finish(index, dfa, vocab)
    return index


class LazyTokenIndex:
    """The TokenIndex interface, computing a state's token map on its first visit.

    Compilation is nearly free and the first mask is ready after one state's walk; the
    price is that an unspellable regex is not detected up front (no
    VocabularyCannotSpellError), and `num_states` counts only the states visited so far.
    """

    def __init__(self, dfa: ByteDFA, vocab: Sequence[bytes | None], eos_token_id: int):
        self.initial_state = dfa.initial
        self.final_states = dfa.finals
        self.eos_token_id = eos_token_id
        self.state_to_tokens: dict[int, dict[int, int]] = {}  # the states visited so far
        self._dfa = dfa
        self._walker = _TrieWalker(dfa, vocab_trie(vocab), eos_token_id)

    def _tokens(self, state: int) -> dict[int, int]:
        tokens = self.state_to_tokens.get(state)
        if tokens is None:
            if not 0 <= state < self._dfa.num_states:
                return {}
            tokens = self._walker.token_maps([state])[0][0]
            if self._dfa.is_final(state):
                tokens[self.eos_token_id] = -1
            self.state_to_tokens[state] = tokens
        return tokens

    def allowed_token_ids(self, state: int) -> list[int]:
        return sorted(self._tokens(state))

    def next_state(self, state: int, token_id: int) -> int:
        return self._tokens(state).get(token_id, -1)

    def is_final(self, state: int) -> bool:
        return state in self.final_states

    @property
    def num_states(self) -> int:
        """How many states have been visited so far."""
        return len(self.state_to_tokens)


# ---------------------------------------------------------------------------------------
# A human-readable listing ("print the allowed token set": the first look when a constraint misbehaves)
# ---------------------------------------------------------------------------------------
class _NamedTokens(Protocol):
    @property
    def token_bytes(self) -> Sequence[bytes | None]: ...
    def id_to_token(self, token_id: int) -> str | None: ...


def allowed_tokens_table(
    index: TokenIndex | LazyTokenIndex, tokenizer: _NamedTokens, state: int, limit: int = 20
) -> str:
    """A text table of the tokens allowed in `state`: id, token, its text, next state.

    `tokenizer` needs `token_bytes` (exact bytes per id) and `id_to_token(id)`.
    """
    allowed = index.allowed_token_ids(state)
    kind = "accepting" if index.is_final(state) else "not accepting"
    lines = [
        f"state {state} ({kind}): {len(allowed)} of {len(tokenizer.token_bytes)} tokens allowed",
        f"{'id':>8}  {'token':<20} {'text':<20} next",
    ]
    for token_id in allowed[:limit]:
        nxt = index.next_state(state, token_id)
        if token_id == index.eos_token_id:
            lines.append(f"{token_id:>8}  {tokenizer.id_to_token(token_id)!s:<20} {'(end)':<20} -")
            continue
        data = tokenizer.token_bytes[token_id] or b""  # an allowed token has bytes
        try:
            text = repr(data.decode("utf-8"))
        except UnicodeDecodeError:
            text = repr(data)  # a piece of a multi-byte character
        lines.append(f"{token_id:>8}  {tokenizer.id_to_token(token_id)!s:<20} {text:<20} {nxt}")
    if len(allowed) > limit:
        lines.append(f"… +{len(allowed) - limit} more")
    return "\n".join(lines)
