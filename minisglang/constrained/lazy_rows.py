"""Token rows of the lazy automaton (lazy_token_fsm.py) and the store of rows shared by every
grammar over one vocabulary (SHARED_ROWS): the walk and its shortcuts both make and reuse them."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import torch

# A SHARED_ROWS key: (trie, words, EOS id, kind, the node's structure text).
RowKey = tuple[object, ...]


class SharedRows:
    """Token rows of sub-expressions (and the walks behind them), shared by every grammar
    over one vocabulary.

    The inside of a JSON string, the digits of a number: the same sub-expressions come
    back in grammar after grammar, and their rows are the costly ones (a string allows
    nearly every token). Keyed by (trie, words, EOS id, the node's structure text); the
    trie in the key keeps it alive, so its id cannot be reused by another vocabulary.
    Least recently used rows are dropped past `capacity`. Repetition counts (kind "reps",
    `LazyStateIndex._repetitions`) have a store of their own (`counts_capacity`): a grammar
    reads them once, so among the rows it writes meanwhile they were pushed out and the
    string and digit counts were recounted per grammar (~1 ms each at 65k); their bodies are
    few (a string's character, a digit, a hex digit).
    """

    def __init__(self, capacity: int = 256, counts_capacity: int = 32):
        self.capacity, self.counts_capacity = capacity, counts_capacity
        self._rows: OrderedDict[RowKey, object] = OrderedDict()  # a TokenRow, (bits, count) or long ids
        self._counts: OrderedDict[RowKey, object] = OrderedDict()  # int32 [tokens] repetition counts or False
        self._lock = threading.Lock()

    def _store(self, key: RowKey) -> tuple[OrderedDict[RowKey, object], int]:
        return (self._counts, self.counts_capacity) if key[3] == "reps" else (self._rows, self.capacity)

    def get(self, key: RowKey) -> object | None:
        store, _ = self._store(key)
        with self._lock:
            row = store.get(key)
            if row is not None:
                store.move_to_end(key)
            return row

    def put(self, key: RowKey, row: object) -> None:
        store, capacity = self._store(key)
        with self._lock:
            store[key] = row
            while len(store) > capacity:
                store.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()
            self._counts.clear()


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


SHARED_ROWS = SharedRows()
