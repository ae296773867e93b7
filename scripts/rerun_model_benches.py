"""Rerun, one after another, every measurement the chapters quote from the bundled model.

A newly bundled model makes the results files the previous model's (training/candidates/
README.md, "Bundling a candidate"). This runs the list in that README's order, each command's
output kept in ``--logs``, and ends with ``scripts/requote_tables.py --write`` so the quoted
tables follow; the prose around them, chapter 04's sampled re-cut seed (``chapter_facts.py``'s
``BRANCH_SEED``) and the model card are still read by hand.

    python scripts/rerun_model_benches.py --label "stage 27 (bundled since 2026-12-04)"
    python scripts/rerun_model_benches.py --label ... --from bench_production   # resume
    python scripts/rerun_model_benches.py --label ... --dry-run                 # list only

About 35 minutes on a quiet 2-core machine. Run it on a quiet machine: several of the
results files quote requests/s.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from tqdm import tqdm

REPO = Path(__file__).resolve().parents[1]
MODEL = "minisglang/assets/tiny-json-llama"
RESULTS = "benchmarks/results"


def steps(label: str) -> list[tuple[str, list[str]]]:
    """(name, argv after python) of every rerun, in the README's order; ``label`` heads the
    sections that the evaluation scripts add to their results files."""
    return [
        ("bench_extraction_accuracy", ["benchmarks/bench_extraction_accuracy.py"]),
        ("bench_tool_calls", ["benchmarks/bench_tool_calls.py"]),
        *(
            (
                f"eval_generalisation {fields}",
                ["scripts/eval_generalisation.py", "--model", MODEL, "--fields", fields]
                + ["--label", f"Ten openers: {label}, {words}"]
                + ["--results", f"{RESULTS}/extraction_generalisation.md"],
            )
            for fields, words in (("name,age,hobbies", "name, age, hobbies"), ("name,age", "name and age"))
        ),
        *(
            (
                f"eval_stranger_names {which}",
                ["scripts/eval_stranger_names.py", "--model", MODEL, "--set", which]
                + ["--label", f"{prefix}{label}, name, age and hobbies"]
                + ["--results", f"{RESULTS}/extraction_stranger.md"],
            )
            for which, prefix in (("first", ""), ("second", "second set: "), ("third", "third set: "))
        ),
        ("bench_extraction_service", ["benchmarks/bench_extraction_service.py"]),
        # the probe only prints (its log is read by hand: chapter 06 quotes it)
        ("bench_extraction_service --probe", ["benchmarks/bench_extraction_service.py", "--probe", "48"]),
        ("bench_speculative", ["benchmarks/bench_speculative.py"]),
        ("bench_draft_ceiling", ["benchmarks/bench_draft_ceiling.py"]),
        ("bench_jump_forward", ["benchmarks/bench_jump_forward.py"]),
        ("bench_backends", ["benchmarks/bench_backends.py"]),
        ("bench_production", ["benchmarks/bench_production.py"]),
        ("bench_latency", ["benchmarks/bench_latency.py"]),
        ("bench_trace", ["benchmarks/bench_trace.py"]),
        ("make_figures", ["scripts/make_figures.py"]),
        ("requote_tables", ["scripts/requote_tables.py", "--write"]),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--label", required=True, help="the model's name in the results files' new sections")
    ap.add_argument("--from", dest="start", default=None, help="skip the steps before this one (resume)")
    ap.add_argument("--logs", type=Path, default=REPO / ".cache" / "rerun-model-benches")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = ap.parse_args()
    todo = steps(args.label)
    names = [name for name, _ in todo]
    if args.start is not None:
        if args.start not in names:
            ap.error(f"--from {args.start!r} is not a step; the steps are: {', '.join(names)}")
        todo = todo[names.index(args.start) :]
    if args.dry_run:
        for name, argv in todo:
            print(f"{name}: python {subprocess.list2cmdline(argv)}")
        return
    args.logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for name, argv in tqdm(todo, desc="reruns", unit="step"):
        log = args.logs / (name.replace(" ", "_").replace("--", "") + ".log")
        t0, load = time.perf_counter(), os.getloadavg()[0]
        with log.open("w") as out:
            rc = subprocess.call([sys.executable, *argv], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        tqdm.write(f"{name}: exit {rc}, {time.perf_counter() - t0:.0f} s, load {load:.1f} before; log {log}")
        if rc != 0:
            sys.exit(f"{name} failed (exit {rc}); fix it, then resume with --from {name!r}")


if __name__ == "__main__":
    main()
