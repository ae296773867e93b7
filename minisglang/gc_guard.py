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
later is never collected. A freeze under load keeps what is in flight then: a few hundred
objects (uvicorn's connections, asyncio's tasks), and a server whose long-lived objects turn
over (a grammar cache replacing entries) collects slowly and freezes again and again without
growing (a stranger's soak: 6 to 17 freezes in 10 minutes, ~270 objects kept by each). So `reclaim`
gives them back when nobody waits: unfreeze, collect, freeze again (one full walk of the heap,
~0.16 s for a served bundled model); the server calls it once its scheduler has been idle for
`gc_reclaim_idle_seconds` after a freeze (server/engine_loop.py). A server that is never idle
would keep them for good, ~270 objects a freeze, without bound: so after
`gc_reclaim_after_freezes` freezes it reclaims between two steps anyway, one ~0.16 s pause
where each of those freezes followed a full collection that had already paused for 20 ms or more.
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
        self.reclaims = 0  # reclaims done
        self.reclaimed = 0  # unreachable objects the reclaims collected (what the freezes had kept)
        self.unreclaimed = 0  # freezes since the last reclaim (what `reclaim` is for)
        self._reclaiming = False  # (the reclaim's own full collection is not judged)
        self._started: dict[int, float] = {}  # thread -> when its collection started (perf_counter)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2 or self._reclaiming:
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
            self.unreclaimed += 1

    def reclaim(self) -> int:
        """Collect what the freezes kept alive (cycles in flight at a freeze that died since),
        then freeze the survivors again; returns how many objects were collected. A full walk
        of every object, frozen ones included: call it when no client waits."""
        self._reclaiming = True
        try:
            gc.unfreeze()
            collected = gc.collect()
            gc.freeze()
        finally:
            self._reclaiming = False
        self.unreclaimed = 0
        self.reclaims += 1
        self.reclaimed += collected
        return collected

    def install(self) -> GcGuard:
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)
        return self

    def uninstall(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
