"""Python's full garbage collections kept short while grammars grow (issue 30).

CPython collects its oldest generation once it has grown by a quarter since the last full
collection, and a full collection walks every tracked object that is not frozen, holding the
GIL. The engine freezes what exists at start (`gc.freeze`: the model, the libraries), but a
server makes more: a hostile grammar's lazy automaton is a million small objects, and each
full collection walked them again, 0.3-0.8 s on whichever thread allocated (the event loop,
the scheduler, a compile), while every client waited (benchmarks/bench_server_stalls.py). It
found nothing to free: grammars hold no reference cycles (tests/test_gc_guard.py), so
reference counting frees them when they are dropped, frozen or not.

So `GcGuard` freezes again after a full collection that took longer than `slow_seconds`:
what survived it leaves the collector's reach, and the next full collection walks only what
came after. The price is bounded: a reference cycle that was alive at a freeze and dies
later is never collected. Freezes happen only after slow collections, that is once per
some 10^5 objects of growth, and what is in flight then is a few requests' cycles (measured:
about 10 cyclic objects per request, most of them collected young).
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Any


class GcGuard:
    """Freezes the survivors of every full collection slower than `slow_seconds`."""

    def __init__(self, slow_seconds: float = 0.02):
        self.slow_seconds = slow_seconds
        self.freezes = 0  # freezes done (for /metrics and tests)
        self.longest = 0.0  # the longest full collection seen (seconds)
        self._started: dict[int, float] = {}  # thread -> when its collection started (perf_counter)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        thread = threading.get_ident()  # (a collection runs on the thread that allocated)
        if phase == "start":
            self._started[thread] = time.perf_counter()
            return
        took = time.perf_counter() - self._started.pop(thread, time.perf_counter())
        self.longest = max(self.longest, took)
        if took > self.slow_seconds:
            gc.freeze()  # survivors only: the collection that just ended freed the garbage
            self.freezes += 1

    def install(self) -> GcGuard:
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)
        return self

    def uninstall(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
