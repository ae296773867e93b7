"""A compiled FSM as flat numpy arrays: what a compile worker sends back and the disk keeps.

A `TokenFSM` holds Python dicts and torch tensors; a process boundary or a file wants a
few flat arrays instead (stage s3, chapters/03-fsm-cache.md):

- the token index as CSR by state: `states` (sorted), `offsets`, `tokens`, `nexts`,
  `header` = [initial state, EOS id], `finals`;
- `bitmasks` [S, W] int32: stage s2's packed rows, packed here with numpy (`pack_rows`,
  the same bits as constrained/bitmask.py's `pack_bits`, tested equal);
- `jump_char` / `jump_byte` [N, 3] (state, character or byte, next state) and
  `jump_states` [1]: stage s4's jump map, when asked for.

`compile_arrays` does the whole compile (one DFA for the index and the jump map) and is
what a worker process runs; `fsm_from_arrays` wraps the arrays into a `TokenFSM` cheaply:
no copy, and a state's dict and row view are made the first time a request reaches it
(`StateTable`, `StateRows`). This module imports no torch, so a worker stays small.
"""

from __future__ import annotations

import collections.abc
import hashlib
import itertools
from collections.abc import Iterator, KeysView
from typing import TYPE_CHECKING

import numpy as np

from .token_fsm import TokenFSM, Vocabulary, compile_dfa, index_from_dfa
from .token_index import TokenIndex

if TYPE_CHECKING:  # pragma: no cover   (not at run time: a worker needs no torch; jump_forward is s4's file)
    import torch

    from .jump_forward import JumpForwardMap

Arrays = dict[str, np.ndarray]


def index_to_arrays(index: TokenIndex) -> Arrays:
    """A TokenIndex as flat int32 arrays (CSR by state)."""
    table = index.state_to_tokens
    if isinstance(table, StateTable):
        return {k: v for k, v in table.arrays.items() if k in _INDEX_KEYS}  # it came as arrays
    states = sorted(table)
    counts = [len(table[s]) for s in states]
    total = sum(counts)
    tokens = np.fromiter(itertools.chain.from_iterable(table[s].keys() for s in states), np.int32, total)
    nexts = np.fromiter(itertools.chain.from_iterable(table[s].values() for s in states), np.int32, total)
    rows = np.repeat(np.arange(len(states)), counts)
    order = np.lexsort((tokens, rows))  # each state's tokens in increasing order
    return {
        "states": np.array(states, dtype=np.int32),
        "offsets": np.concatenate([[0], np.cumsum(counts)]).astype(np.int32),
        "tokens": tokens[order],
        "nexts": nexts[order],
        "header": np.array([index.initial_state, index.eos_token_id], dtype=np.int32),
        "finals": np.array(sorted(index.final_states), dtype=np.int32),
    }


_INDEX_KEYS = ("states", "offsets", "tokens", "nexts", "header", "finals")


def pack_rows(arrays: Arrays, vocab_size: int) -> np.ndarray:
    """Stage s2's packed rows from the flat arrays: int32 [S, ceil(vocab_size / 32)], row i
    for state `arrays["states"][i]` (sorted, as `bitmask.with_rows` orders them).

    `np.packbits` with `bitorder="little"` puts 8 tokens in a byte, first token lowest, and
    four bytes read little-endian are one word. Rows go in chunks so the bool scratch
    stays under 64 MB whatever the state count.
    """
    states, offsets, tokens = arrays["states"], arrays["offsets"], arrays["tokens"]
    if len(tokens) and int(tokens.max()) >= vocab_size:
        raise ValueError(f"token id {int(tokens.max())} is outside the logits' width {vocab_size}")
    words = (vocab_size + 31) // 32
    packed = np.empty((len(states), words), dtype=np.int32)
    chunk = max(1, (64 << 20) // (words * 32))
    for lo in range(0, len(states), chunk):
        hi = min(lo + chunk, len(states))
        bits = np.zeros((hi - lo, words * 32), dtype=bool)
        first, last = offsets[lo], offsets[hi]
        bits[np.repeat(np.arange(hi - lo), np.diff(offsets[lo : hi + 1])), tokens[first:last]] = True
        packed[lo:hi] = np.packbits(bits, axis=-1, bitorder="little").view("<i4")
    return packed


def jump_map_to_arrays(jump_map: JumpForwardMap) -> Arrays:
    char = [(s, ord(c), n) for s, (c, n) in sorted(jump_map.char_edges.items())]
    byte = [(s, b, n) for s, (b, n) in sorted(jump_map.byte_edges.items())]
    return {
        "jump_char": np.array(char, dtype=np.int32).reshape(-1, 3),
        "jump_byte": np.array(byte, dtype=np.int32).reshape(-1, 3),
        "jump_states": np.array([jump_map.num_char_states], dtype=np.int32),
    }


def jump_map_from_arrays(arrays: Arrays) -> JumpForwardMap:
    from .jump_forward import JumpForwardMap  # stage s4's file: a checkout of s3 has none

    char = {s: (chr(c), n) for s, c, n in arrays["jump_char"].tolist()}
    byte = {s: (b, n) for s, b, n in arrays["jump_byte"].tolist()}
    return JumpForwardMap(char, byte, int(arrays["jump_states"][0]))


def compile_arrays(
    regex: str,
    vocab: Vocabulary,
    max_states: int,
    vocab_size: int,
    *,
    jump_map: bool = False,
    max_regex_chars: int | None = None,
) -> Arrays:
    """regex -> everything a TokenFSM needs, as flat arrays: the token index, the packed
    rows and (with `jump_map`) the jump map, all from ONE DFA. Raises ConstraintError."""
    dfa = compile_dfa(regex, max_states, max_regex_chars)
    byte_dfa, index = index_from_dfa(dfa, vocab)
    arrays = index_to_arrays(index)
    arrays["bitmasks"] = pack_rows(arrays, vocab_size)
    if jump_map:
        from .jump_forward import JumpForwardMap  # stage s4's file

        arrays.update(jump_map_to_arrays(JumpForwardMap.build(dfa, byte_dfa)))
    return arrays


class StateTable(collections.abc.Mapping[int, dict[int, int]]):
    """{state: {token_id: next_state}} read from flat arrays; a state's dict is built the
    first time someone asks for it.

    Building every state's dict up front is a Python loop over every (state, token) pair
    (about 0.9 M for the benchmark's regex): on the scheduler's process that would take the
    GIL for a tenth of a second. A request visits a few dozen states.
    """

    def __init__(self, arrays: Arrays):
        self.arrays = arrays
        self.row = {s: i for i, s in enumerate(arrays["states"].tolist())}
        self.built: dict[int, dict[int, int]] = {}

    def __getitem__(self, state: int) -> dict[int, int]:
        tokens = self.built.get(state)
        if tokens is None:
            i = self.row[state]  # KeyError for an unknown state, as a dict would raise
            lo, hi = self.arrays["offsets"][i : i + 2].tolist()
            tokens = dict(zip(self.arrays["tokens"][lo:hi].tolist(), self.arrays["nexts"][lo:hi].tolist()))
            self.built[state] = tokens
        return tokens

    def __iter__(self) -> Iterator[int]:
        return iter(self.row)

    def __len__(self) -> int:
        return len(self.row)


class StateRows(dict[int, "torch.Tensor"]):
    """`TokenFSM.state_row` ({state: a view of its packed row}), each view made the first
    time a state is asked for.

    `bitmask.with_rows` builds all S views at once; at about 3 us a view that is 6 ms of the
    GIL for 1,900 states (30 ms for 10,000), taken from the scheduler right when a compile
    lands. A hit is a plain dict lookup (the fill's hot path); only a miss runs
    `__missing__`. Length, membership and iteration answer for every state, built or not.
    """

    def __init__(self, bitmasks: torch.Tensor, row: dict[int, int]):
        super().__init__()
        self.bitmasks, self.row = bitmasks, row

    def __missing__(self, state: int) -> torch.Tensor:
        view = self.bitmasks[self.row[state]]  # KeyError for an unknown state
        dict.__setitem__(self, state, view)
        return view

    # dict's own `get` and views would see only the states built so far; these answer for
    # every state, so their signatures differ from dict's (the ignores below).
    def get(self, state: int, default: torch.Tensor | None = None) -> torch.Tensor | None:  # type: ignore[override]
        return self[state] if state in self.row else default

    def __contains__(self, state: object) -> bool:
        return state in self.row

    def __len__(self) -> int:
        return len(self.row)

    def __iter__(self) -> Iterator[int]:
        return iter(self.row)

    def keys(self) -> KeysView[int]:  # type: ignore[override]
        return self.row.keys()

    def items(self) -> Iterator[tuple[int, torch.Tensor]]:  # type: ignore[override]
        return ((s, self[s]) for s in self.row)

    def values(self) -> Iterator[torch.Tensor]:  # type: ignore[override]
        return (self[s] for s in self.row)


def index_from_arrays(a: Arrays) -> TokenIndex:
    """The TokenIndex of the flat arrays (no copy; states' dicts built on first use)."""
    initial, eos = a["header"].tolist()
    rows = a.get("bitmasks")
    if rows is not None and (rows.dtype != np.int32 or rows.ndim != 2 or rows.shape[0] != len(a["states"])):
        raise ValueError(f"packed rows {rows.dtype} {rows.shape} do not fit {len(a['states'])} states")
    return TokenIndex(
        state_to_tokens=StateTable(a),
        initial_state=initial,
        final_states=frozenset(a["finals"].tolist()),
        eos_token_id=eos,
    )


def fsm_from_arrays(regex: str, arrays: Arrays) -> TokenFSM:
    """Wrap `compile_arrays`' result into a TokenFSM: `torch.from_numpy` (no copy), lazy
    dicts and row views, and the jump map when the arrays carry one."""
    import torch  # here, not at the top: compile workers import this module and need no torch

    index = index_from_arrays(arrays)
    table = index.state_to_tokens  # a StateTable: its `row` numbers each state's packed row
    assert isinstance(table, StateTable)
    bitmasks = torch.from_numpy(arrays["bitmasks"])
    jump = jump_map_from_arrays(arrays) if "jump_char" in arrays else None
    return TokenFSM(regex, index, bitmasks=bitmasks, state_row=StateRows(bitmasks, table.row), jump_map=jump)


def arrays_nbytes(arrays: Arrays) -> int:
    return sum(a.nbytes for a in arrays.values())


def checksum(arrays: Arrays) -> str:
    h = hashlib.sha256()
    for name in sorted(arrays):
        h.update(name.encode())
        h.update(np.ascontiguousarray(arrays[name]).tobytes())
    return h.hexdigest()
