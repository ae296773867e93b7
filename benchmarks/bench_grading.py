"""Grading runs forked from the zygote (minisglang/grade_zygote.py) against fresh processes.

One student copy of a stage (`minisglang checkout STAGE DIR --student`: every task blank) is
graded RUNS times in one process, as `minisglang grade` grades a class: once with every run
forked from the zygote, once with every run a fresh `python -m pytest` (the zygote switched
off), the two taking turns. The first zygote run also pays for starting the zygote.

    python benchmarks/bench_grading.py [--stage s2] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from _results import machine_line, write_results

from minisglang import grade_zygote
from minisglang.checkout import checkout
from minisglang.grading import run_task_tests

RESULTS = Path(__file__).parent / "results" / "grading.md"


def grade_seconds(stage: str, copy: Path, zygote: bool) -> tuple[float, int]:
    """(seconds, failed tests) of one grading of `copy`, its runs forked or fresh."""
    grade_zygote._ZYGOTE_FAILED = not zygote  # (switched off: every run a fresh process)
    started = time.perf_counter()
    report = run_task_tests(stage, copy)
    return time.perf_counter() - started, sum(len(t.failed) for t in report.tasks.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", default="s2")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "student"
        checkout(args.stage, copy, student=True)
        times: dict[bool, list[float]] = {True: [], False: []}
        failed: dict[bool, set[int]] = {True: set(), False: set()}
        for _ in range(args.runs):
            for zygote in (True, False):
                seconds, n = grade_seconds(args.stage, copy, zygote)
                times[zygote].append(seconds)
                failed[zygote].add(n)
    rows = [
        "| runs | first (s) | median of the rest (s) | failed tests (every grading) |",
        "|---|---:|---:|---|",
    ]
    for zygote, name in ((False, "fresh processes"), (True, "forked from the zygote")):
        rest = statistics.median(times[zygote][1:]) if len(times[zygote]) > 1 else float("nan")
        rows.append(f"| {name} | {times[zygote][0]:.1f} | {rest:.1f} | {sorted(failed[zygote])} |")
    fresh, forked = statistics.median(times[False][1:]), statistics.median(times[True][1:])
    text = "\n".join(
        [
            "# Grading runs: forked from the zygote against fresh processes",
            "",
            f"A blank student copy of {args.stage} graded {args.runs} times per kind in one process, the kinds "
            "taking turns (benchmarks/bench_grading.py). The zygote's first grading also starts it.",
            "",
            *rows,
            "",
            f"A grading after the first: {fresh / forked:.2f}x faster forked ({fresh:.1f} s -> {forked:.1f} s).",
            "",
            machine_line(),
        ]
    )
    write_results(text + "\n", RESULTS)


if __name__ == "__main__":
    main()
