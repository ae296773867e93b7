"""json_schema/budget.py: the CPU time one schema compile may take in this process.

No real time here: the budget reads a counting clock (each reading one "second" later),
so the tests check where the compile stops, not how fast it is. Oracle: the compile with
no budget (the same regex when the budget suffices)."""

from __future__ import annotations

import threading

import pytest

from minisglang.constrained.json_schema import (
    CompileBudgetError,
    CpuBudget,
    build_regex_from_schema,
    build_schema_tree,
)
from minisglang.constrained.json_schema import budget as budget_module
from minisglang.constrained.work_slices import Baton, CompileCancelled, FairCompilePool

SCHEMA = {
    "type": "object",
    "properties": {f"p{k}": {"type": "object", "properties": {"a": {"type": "integer"}}} for k in range(40)},
}


class CountingClock:
    """A clock that moves one second per reading."""

    def __init__(self) -> None:
        self.readings = 0

    def __call__(self) -> float:
        self.readings += 1
        return float(self.readings)


def test_a_budget_the_compile_stays_within_changes_nothing():
    clock = CountingClock()
    with_budget = build_regex_from_schema(SCHEMA, automaton="lazy", budget=CpuBudget(1e9, clock=clock))
    assert with_budget == build_regex_from_schema(SCHEMA, automaton="lazy")
    # 81 subschemas: the clock was read when the budget was made and at every 8th of them
    assert clock.readings == 1 + 81 // budget_module.CHECK_EVERY


def test_a_compile_past_its_budget_stops_with_the_limit_and_the_place():
    """The budget's clock says 3 s have passed at its third reading (the 16th subschema)."""
    with pytest.raises(CompileBudgetError, match=r"more than 2 s of CPU time in this process \(stopped at #/"):
        build_regex_from_schema(SCHEMA, automaton="lazy", budget=CpuBudget(2, clock=CountingClock()))


def test_a_large_enum_is_checked_value_by_value():
    """One subschema of 100 values: the budget is read inside it, not only between subschemas."""
    clock = CountingClock()
    with pytest.raises(CompileBudgetError, match="stopped at #"):
        build_regex_from_schema({"enum": [f"v{i}" for i in range(100)]}, budget=CpuBudget(5, clock=clock))
    assert clock.readings == 7  # (made, then every 8th of the root's tick and the values' ticks)


def test_a_cancelled_compile_stops_at_the_compiler_s_checkpoint():
    """On a compile thread the compiler calls `checkpoint` at every subschema: a compile whose
    requests left stops there (without it, the whole schema was compiled for nobody)."""
    pool = FairCompilePool(1, Baton())
    started, go = threading.Event(), threading.Event()

    def compile_it():
        started.set()
        go.wait(10)
        return build_schema_tree(SCHEMA, automaton="lazy")  # (the tree: no rendering, whose checkpoints are its own)

    try:
        future, job = pool.submit("A", compile_it)
        started.wait(10)
        pool.cancel(job)  # (running: marked, to be stopped at its next checkpoint)
        go.set()
        with pytest.raises(CompileCancelled):
            future.result(30)
    finally:
        pool.shutdown()
