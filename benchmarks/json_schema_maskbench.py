"""MaskBench-style coverage: real-world-like schemas with valid and invalid instances.

The sample is tests/data/maskbench/*.json (seeded, written by maskbench_schemas.py; each
file a schema and instances labelled by `jsonschema`). For every system and file: does
the schema compile (within COMPILE_TIMEOUT_S), and is every instance judged right? An
instance is judged as json_schema_conformance.py judges a test case (`judge`: written
with json.dumps and compactly). Per system:

- compiled: files whose schema compiled;
- passing: compiled files where every instance is judged right in both writings;
- false positives: instances accepted but invalid (a generator could emit them: a bug),
  and the files holding one;
- false negatives: instances rejected but valid (only narrows what a generator writes);
- reasons: the compile errors, grouped by the first quoted keyword of the message.

    python benchmarks/json_schema_maskbench.py   # writes benchmarks/results/maskbench.md
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))   # json_schema_conformance, _results
from json_schema_conformance import (  # noqa: E402
    error_reason,
    judge,
    llguidance_accepts,
    minisglang_lazy_accepts,
    outlines_core_accepts,
    xgrammar_accepts,
)

REPO = Path(__file__).resolve().parents[1]
SAMPLE_DIR = REPO / "tests" / "data" / "maskbench"
RESULTS = REPO / "benchmarks" / "results" / "maskbench.md"
# Compiling one schema and judging its instances may take this long; past it, the file
# counts as not compiled (reason "timeout"), so one pathological schema cannot stall a run.
COMPILE_TIMEOUT_S = 20.0

SYSTEMS: dict[str, Callable[[object], Callable[[str], bool]]] = {
    "minisglang fsm (lazy)": minisglang_lazy_accepts,
    "xgrammar 0.2.9": xgrammar_accepts,
    "llguidance 1.9.1": llguidance_accepts,
    "outlines-core 0.2.14": outlines_core_accepts,
}


@dataclass
class MaskBenchCounts:
    """What one system did on the sample."""

    files: int = 0
    compiled: int = 0
    passing: int = 0
    instances: int = 0
    false_positives: int = 0        # instances (either writing)
    false_negatives: int = 0        # instances (either writing)
    files_with_fp: list[str] = field(default_factory=list)
    files_with_fn: list[str] = field(default_factory=list)
    reasons: Counter = field(default_factory=Counter)   # compile error reason -> files
    per_subset: dict[str, Counter] = field(default_factory=dict)  # subset -> files/compiled/passing


def load_sample(sample_dir: Path = SAMPLE_DIR) -> list[tuple[str, dict]]:
    """(file name, {"schema", "tests"}) for every sample file, sorted by name."""
    files = sorted(sample_dir.glob("*---*.json"))
    if not files:
        raise FileNotFoundError(f"no sample in {sample_dir}: run benchmarks/maskbench_schemas.py")
    return [(f.name, json.loads(f.read_text(encoding="utf-8"))) for f in files]


class CompileTimeout(Exception):
    pass


@contextmanager
def time_limit(seconds: float):
    """Raise CompileTimeout in this (main) thread after `seconds` (SIGALRM; native code
    is interrupted when it returns to Python)."""
    def expire(signum, frame):
        raise CompileTimeout(f"timeout: more than {seconds:.0f} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_sample(accepts_factory: Callable[[object], Callable[[str], bool]], sample: list[tuple[str, dict]],
               timeout_s: float = COMPILE_TIMEOUT_S) -> MaskBenchCounts:
    """Compile every file's schema and judge its instances."""
    counts = MaskBenchCounts()
    for name, content in sample:
        subset = counts.per_subset.setdefault(name.split("---")[0], Counter())
        counts.files += 1
        subset["files"] += 1
        try:
            with time_limit(timeout_s):
                accepts = accepts_factory(content["schema"])
                verdicts = [judge(accepts, test) for test in content["tests"]]
        except CompileTimeout:
            counts.reasons["timeout"] += 1
            continue
        except Exception as e:  # any failure to compile is a compile error
            counts.reasons[error_reason(e)] += 1
            continue
        counts.compiled += 1
        subset["compiled"] += 1
        counts.instances += len(verdicts)
        fp = sum("false_positive" in v.values() for v in verdicts)
        fn = sum("false_negative" in v.values() for v in verdicts)
        counts.false_positives += fp
        counts.false_negatives += fn
        if fp:
            counts.files_with_fp.append(name)
        if fn:
            counts.files_with_fn.append(name)
        if not fp and not fn:
            counts.passing += 1
            subset["passing"] += 1
    return counts


def results_table(results: dict[str, tuple[MaskBenchCounts, float]], sample: list[tuple[str, dict]]) -> str:
    instances = sum(len(c["tests"]) for _, c in sample)
    valid = sum(t["valid"] for _, c in sample for t in c["tests"])
    lines = [
        "# MaskBench sample: real-world-like schemas with valid and invalid instances",
        "",
        f"{len(sample)} schemas with {instances} instances ({valid} valid, {instances - valid} invalid), "
        "generated with a fixed seed by benchmarks/maskbench_schemas.py in the shapes of JSONSchemaBench's "
        "subsets, labelled by `jsonschema` (tests/data/maskbench/README.md). A file passes when its schema "
        "compiles and every instance, written with `json.dumps` and compactly, is judged right. A false "
        "positive (accepted but invalid) lets a generator emit invalid output; a false negative only narrows "
        f"what it may write. Each file has {COMPILE_TIMEOUT_S:.0f} s to compile and judge. Systems run with "
        "their defaults, as in json_schema_conformance.md; ours is the fsm backend's default, the lazy automaton.",
        "",
        "| system | files | compiled | passing | files with FP | FP instances | FN instances | seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, (c, seconds) in results.items():
        lines.append(f"| {name} | {c.files} | {c.compiled} | {c.passing} | {len(c.files_with_fp)} "
                     f"| {c.false_positives} | {c.false_negatives} | {seconds:.1f} |")
    subsets = list(next(iter(results.values()))[0].per_subset)
    lines += ["", "## Passing per subset (compiled in brackets)", "",
              "| subset | files | " + " | ".join(results) + " |", "|---|---" + "|---" * len(results) + "|"]
    for subset in subsets:
        cells = [f"{c.per_subset[subset]['passing']} ({c.per_subset[subset]['compiled']})" for c, _ in results.values()]
        files = next(iter(results.values()))[0].per_subset[subset]["files"]
        lines.append(f"| {subset} | {files} | " + " | ".join(cells) + " |")
    for name, (c, _) in results.items():
        lines += ["", f"## {name}: why files fail", "", "| reason | files |", "|---|---|"]
        lines += [f"| {reason} | {n} |" for reason, n in c.reasons.most_common()]
        lines += [f"| false negative (compiled, a valid instance rejected) | {len(c.files_with_fn)} |",
                  f"| false positive (compiled, an invalid instance accepted) | {len(c.files_with_fp)} |"]
    return "\n".join(lines) + "\n"


def main() -> None:
    sample = load_sample()
    load_before = os.getloadavg()[0]
    results = {}
    for name, factory in SYSTEMS.items():
        start = time.perf_counter()
        counts = run_sample(factory, sample)
        results[name] = (counts, time.perf_counter() - start)
        print(f"{name}: compiled {counts.compiled}/{counts.files}, passing {counts.passing}, "
              f"FP {counts.false_positives} in {len(counts.files_with_fp)} files, FN {counts.false_negatives}")
    from _results import machine_line, write_results

    write_results(results_table(results, sample) + "\n" + machine_line(f"load average {load_before:.1f} before the runs")
                  + "\n", RESULTS)


if __name__ == "__main__":
    main()
