"""Our JSON Schema backend on the MaskBench sample (tests/data/maskbench): no false positive.

The harness is benchmarks/json_schema_maskbench.py and the sample's generator
benchmarks/maskbench_schemas.py. Hard gate: no invalid instance is accepted by our fsm
backend's default automaton (lazy). Also checked: the committed sample is what the
seeded generator writes, and every label is `jsonschema`'s verdict.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from script_modules import load_script

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


maskbench = load_script(BENCHMARKS / "json_schema_maskbench.py")
generator = load_script(BENCHMARKS / "maskbench_schemas.py")


@pytest.fixture(scope="module")
def sample() -> list[tuple[str, dict]]:
    return maskbench.load_sample()


@pytest.fixture(scope="module")
def ours(sample) -> maskbench.MaskBenchCounts:
    return maskbench.run_sample(maskbench.minisglang_lazy_accepts, sample)


def test_the_committed_sample_is_the_seeded_generators_output(sample):
    assert dict(sample) == generator.generate()
    assert (generator.SAMPLE_DIR / "README.md").is_file()


def test_every_label_is_jsonschemas_verdict_and_each_file_has_both(sample):
    for name, content in sample:
        check = generator.validator_for(content["schema"])
        assert {t["valid"] for t in content["tests"]} == {True, False}, name
        for test in content["tests"]:
            assert check.is_valid(test["data"]) == test["valid"], (name, test)


def test_no_false_positive_on_the_sample(ours):
    # The hard gate: an accepted invalid instance is output a generator could emit.
    assert ours.false_positives == 0, ours.files_with_fp
    assert ours.files_with_fp == []


def test_the_harness_counts_add_up(ours, sample):
    assert ours.files == len(sample)
    assert ours.passing + len(set(ours.files_with_fn) | set(ours.files_with_fp)) == ours.compiled
    assert ours.compiled + sum(ours.reasons.values()) == ours.files
    assert sum(c["files"] for c in ours.per_subset.values()) == len(sample)


def test_the_harness_catches_a_false_positive_and_a_compile_error():
    sample = [
        (
            "X---0.json",
            {"schema": {"type": "integer"}, "tests": [{"data": 1, "valid": True}, {"data": "a", "valid": False}]},
        )
    ]
    loose = maskbench.run_sample(lambda schema: lambda text: True, sample)
    assert (loose.compiled, loose.passing, loose.false_positives) == (1, 0, 1)

    def refuse(schema):
        raise ValueError("keyword 'integer' is not supported")

    refused = maskbench.run_sample(refuse, sample)
    assert (refused.compiled, dict(refused.reasons)) == (0, {"ValueError: integer": 1})


def test_a_compile_that_runs_past_the_limit_counts_as_a_timeout():
    import time

    def slow(schema):
        time.sleep(5)
        return lambda text: True

    counts = maskbench.run_sample(slow, [("X---0.json", {"schema": {}, "tests": []})], timeout_s=0.2)
    assert dict(counts.reasons) == {"timeout": 1} and counts.compiled == 0


def test_the_results_table_shows_every_system_row(ours, sample):
    text = maskbench.results_table({"ours": (ours, 1.0)}, sample)
    assert f"| ours | {len(sample)} | {ours.compiled} | {ours.passing} | 0 | 0 |" in text
    assert "## Passing per subset" in text and all(f"| {s} |" in text for s in ours.per_subset)
