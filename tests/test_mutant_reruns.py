"""scripts/mutant_reruns.py, the measurement behind "every plausible mistake fails its task's row
in every grading run": a killed measurement resumes where it stopped, each rerun draws and
records its own hypothesis seed, and the report counts the catches and names each miss's seed
(the mutants themselves are not run here: tests/test_autograder.py runs them)."""

import json
import unittest

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from script_modules import REPO, load_script

mutant_reruns = load_script(REPO / "scripts" / "mutant_reruns.py")


def test_a_measurement_resumes_and_the_report_names_the_seed_of_each_miss(tmp_path, monkeypatch):
    calls = []

    def run_all(mutations, seed=None, explicit_only=False):
        calls.append(([m["id"] for m in mutations], seed, explicit_only))
        missed = mutations[0]["id"] if len(calls) == 2 else None  # the second rerun misses one
        return {
            m["id"]: {
                "caught": m["id"] != missed,
                "failed": None if m["id"] == missed else "tests/t.py::test_a",
                "raised_in": None,
                "timed_out": None,
                "alarm": 15,
                "detail": "",
            }
            for m in mutations
        }, [True]

    monkeypatch.setattr(mutant_reruns.mutants, "run_all", run_all)
    out = tmp_path / "reruns.jsonl"
    stage = mutant_reruns.jobs("^task2_1: ")
    ids = [m["id"] for m in stage["s2"]]
    assert list(stage) == ["s2"] and len(ids) >= 3, stage

    mutant_reruns.measure(1, "^task2_1: ", out)
    mutant_reruns.measure(2, "^task2_1: ", out)  # rerun 1 is on file: only rerun 2 runs
    assert [c[0] for c in calls] == [ids, ids], f"each rerun must run each mutation once: {calls}"
    records = [json.loads(line) for line in out.read_text().splitlines()]
    seeds = [r["seed"] for r in records]
    assert [r["rerun"] for r in records] == [0, 1] and seeds == [c[1] for c in calls], records
    assert all(isinstance(s, int) for s in seeds) and seeds[0] != seeds[1], f"a fresh seed per rerun: {seeds}"

    table = mutant_reruns.report(out)
    assert f"| {ids[0]} | 1/2 | task2_1 | {seeds[1]} |" in table, table
    assert f"| {ids[1]} | 2/2 | task2_1 | - |" in table, table
    assert f"{len(ids) - 1} of {len(ids)} mutations caught in every rerun" in table, table


def test_with_generated_examples_off_a_property_test_runs_only_its_explicit_examples():
    """What test_every_plausible_mistake_fails_its_tasks_tests rests on: under the mutants'
    explicit-only profile no generated example runs (a property test without one is skipped),
    so a mutant caught there is caught by a fixed input, whatever seed a grading run draws."""
    seen = []

    @mutant_reruns.mutants.profile(None, explicit_only=True)
    @example(7)
    @given(st.integers())
    def with_an_example(x):
        seen.append(x)

    @mutant_reruns.mutants.profile(None, explicit_only=True)
    @given(st.integers())
    def without(x):
        seen.append(x)

    with_an_example()
    assert seen == [7], f"only the explicit example runs: {seen}"
    with pytest.raises(unittest.SkipTest, match="no test cases"):
        without()
    assert seen == [7], f"no generated example runs: {seen}"
