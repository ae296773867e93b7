"""How much CPU time one compile may take in this process, checked where the compiler recurses.

A schema's compile in the server runs on a compile thread and holds the GIL between two
checkpoints (`tick`); a schema whose compile would run long there (hundreds of recursive
definitions, a huge enum) is better compiled in a child process, which holds no lock of
ours and takes its memory with it when it exits. The fsm backend gives the compiler a
budget: past it the compile stops with CompileBudgetError, and the backend sends the
schema to a child (constrained/schema_worker.py) instead. CPU time of the compiling
thread, not wall time: a compile thread waits for the scheduler's windows, and a loaded
machine makes wall time grow for reasons that are not the schema's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from minisglang.constrained.json_schema.errors import CompileBudgetError
from minisglang.constrained.work_slices import checkpoint

# The clock budgets read (a test replaces it with a counting one: no real time in tests).
CLOCK: Callable[[], float] = time.thread_time
# The clock is read at every CHECK_EVERY-th tick: reading it costs ~1 us, a tick ~0.2 us.
CHECK_EVERY = 8


@dataclass
class CpuBudget:
    """`seconds` of the compiling thread's CPU time, from when the budget is made."""

    seconds: float
    clock: Callable[[], float] = field(default_factory=lambda: CLOCK)
    stop: float = field(init=False)
    ticks: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.stop = self.clock() + self.seconds

    def tick(self, what: str) -> None:
        """A point where the compile may stop: raise CompileBudgetError once the budget is
        spent (`what` names the part being compiled)."""
        self.ticks += 1
        if self.ticks % CHECK_EVERY == 0 and self.clock() > self.stop:
            raise CompileBudgetError(
                f"compiling the schema took more than {self.seconds:g} s of CPU time in this process "
                f"(stopped at {what})"
            )


def tick(budget: CpuBudget | None, what: str) -> None:
    """One step of a compile: a compile thread yields to the scheduler here (`checkpoint`,
    which also stops a cancelled compile), and `budget` (None: none) is checked."""
    checkpoint()
    if budget is not None:
        budget.tick(what)
