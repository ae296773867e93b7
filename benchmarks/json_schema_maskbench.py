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

Real data: `--jsonschemabench DIR` reads JSONSchemaBench's MaskBench files (their
`maskbench/data/*.json`: a schema and labelled instances each) from a local copy of
github.com/guidance-ai/jsonschemabench: a checkout, or a bare git directory (read with
`git ls-tree`/`git cat-file`, nothing is written). It draws a seeded sample (`--files`,
`--seed`), runs the same systems plus ours with the permissive options (any_order and
extra_properties), and replaces the real-data section of the results file with the
numbers only: that repository has no license file, so none of its schemas or instances
is copied into this one.

    python benchmarks/json_schema_maskbench.py --jsonschemabench /path/to/jsonschemabench
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # json_schema_conformance, _results
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


def minisglang_with_options(schema, **options) -> Callable[[str], bool]:
    """Ours (fsm backend, lazy automaton) with SchemaOptions `options`."""
    from minisglang.constrained.json_schema import build_regex_from_schema
    from minisglang.constrained.lazy_byte_dfa import LazyByteDFA

    dfa = LazyByteDFA.from_regex(build_regex_from_schema(schema, automaton="lazy", **options), members=True)
    return lambda text: dfa.matches(text.encode("utf-8"))


def minisglang_extra_accepts(schema) -> Callable[[str], bool]:
    """Ours with unlisted keys allowed (extra_properties: JSON Schema's own meaning)."""
    return minisglang_with_options(schema, extra_properties=True)


def minisglang_permissive_accepts(schema) -> Callable[[str], bool]:
    """Ours with both policies widened: members in any order (any_order: one
    `(?@members...)` group of the lazy automaton, unlisted keys anywhere) and unlisted keys."""
    return minisglang_with_options(schema, any_order=True, extra_properties=True)


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
    false_positives: int = 0  # instances (either writing)
    false_negatives: int = 0  # instances (either writing)
    files_with_fp: list[str] = field(default_factory=list)
    files_with_fn: list[str] = field(default_factory=list)
    reasons: Counter = field(default_factory=Counter)  # compile error reason -> files
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


def run_sample(
    accepts_factory: Callable[[object], Callable[[str], bool]],
    sample: list[tuple[str, dict]],
    timeout_s: float = COMPILE_TIMEOUT_S,
) -> MaskBenchCounts:
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
        lines.append(
            f"| {name} | {c.files} | {c.compiled} | {c.passing} | {len(c.files_with_fp)} "
            f"| {c.false_positives} | {c.false_negatives} | {seconds:.1f} |"
        )
    subsets = list(next(iter(results.values()))[0].per_subset)
    lines += [
        "",
        "## Passing per subset (compiled in brackets)",
        "",
        "| subset | files | " + " | ".join(results) + " |",
        "|---|---" + "|---" * len(results) + "|",
    ]
    for subset in subsets:
        cells = [f"{c.per_subset[subset]['passing']} ({c.per_subset[subset]['compiled']})" for c, _ in results.values()]
        files = next(iter(results.values()))[0].per_subset[subset]["files"]
        lines.append(f"| {subset} | {files} | " + " | ".join(cells) + " |")
    for name, (c, _) in results.items():
        lines += ["", f"## {name}: why files fail", "", "| reason | files |", "|---|---|"]
        lines += [f"| {reason} | {n} |" for reason, n in c.reasons.most_common()]
        lines += [
            f"| false negative (compiled, a valid instance rejected) | {len(c.files_with_fn)} |",
            f"| false positive (compiled, an invalid instance accepted) | {len(c.files_with_fp)} |",
        ]
    return "\n".join(lines) + "\n"


# The real-data section of the results file lies between these lines (rewritten per run).
REAL_BEGIN = "<!-- jsonschemabench: begin -->"
REAL_END = "<!-- jsonschemabench: end -->"
REAL_SYSTEMS: dict[str, Callable[[object], Callable[[str], bool]]] = {
    "minisglang fsm (lazy), defaults": minisglang_lazy_accepts,
    "minisglang fsm (lazy), extra_properties": minisglang_extra_accepts,
    "minisglang fsm (lazy), any_order + extra_properties": minisglang_permissive_accepts,
    **{name: f for name, f in SYSTEMS.items() if not name.startswith("minisglang")},
}


def _git(git_dir: Path, *args: str, stdin: bytes | None = None) -> bytes:
    return subprocess.run(
        ["git", "--git-dir", str(git_dir), *args], input=stdin, capture_output=True, check=True
    ).stdout


def jsonschemabench_names(root: Path) -> list[str]:
    """The MaskBench file names (`maskbench/data/<subset>_<n>.json`) in a checkout or bare git dir."""
    data = root / "maskbench" / "data"
    if data.is_dir():
        return sorted(f.name for f in data.glob("*.json"))
    listing = _git(root, "ls-tree", "--name-only", "HEAD", "maskbench/data/").decode()
    return sorted(Path(line).name for line in listing.splitlines() if line.endswith(".json"))


def read_jsonschemabench(root: Path, names: list[str]) -> list[tuple[str, dict]]:
    """(`<subset>---<file>`, {"schema", "tests"}) for each of `names`, in order."""
    data = root / "maskbench" / "data"
    if data.is_dir():
        texts = [(data / name).read_bytes() for name in names]
    else:  # one `git cat-file --batch` for all: "<sha> blob <size>\n<bytes>\n" per file
        out = _git(root, "cat-file", "--batch", stdin="".join(f"HEAD:maskbench/data/{n}\n" for n in names).encode())
        texts, at = [], 0
        for _name in names:
            header_end = out.index(b"\n", at)
            size = int(out[at:header_end].split()[2])
            texts.append(out[header_end + 1 : header_end + 1 + size])
            at = header_end + 2 + size
    sample = []
    for name, text in zip(names, texts):
        content = json.loads(text)
        # Files are named `<subset>---<name>.json` or `<subset>_<n>.json` (BFCL, JME, ...).
        label = name if "---" in name else f"{re.sub(r'_[0-9]+[.]json$', '', name)}---{name}"
        sample.append((label, {"schema": content["schema"], "tests": content.get("tests", [])}))
    return sample


def draw_jsonschemabench(root: Path, files: int, seed: int) -> tuple[list[tuple[str, dict]], int]:
    """A seeded draw of `files` MaskBench files; returns (the drawn files that have
    instances, sorted by name; how many were drawn)."""
    names = random.Random(seed).sample(jsonschemabench_names(root), files)
    drawn = read_jsonschemabench(root, sorted(names))
    return [(n, c) for n, c in drawn if c["tests"]], len(drawn)


def real_data_section(
    results: dict[str, tuple[MaskBenchCounts, float]],
    sample: list[tuple[str, dict]],
    drawn: int,
    seed: int,
    source: str,
    load: float,
) -> str:
    """The results file's real-data section: counts only (the data is not redistributed)."""
    table = results_table(results, sample).split("\n", 3)[3]  # drop the synthetic sample's title
    from _results import machine_line

    return (
        "\n".join(
            [
                REAL_BEGIN,
                "# Real data: JSONSchemaBench's MaskBench files",
                "",
                f"A seeded draw (seed {seed}) of {drawn} files from `maskbench/data` of "
                f"github.com/guidance-ai/jsonschemabench ({source}); the {len(sample)} with instances are run. "
                "That repository has no license file, so none of its schemas or instances is copied here: "
                "only counts. Reproduce with a local clone:",
                "",
                "    git clone https://github.com/guidance-ai/jsonschemabench /tmp/jsonschemabench",
                f"    python benchmarks/json_schema_maskbench.py --jsonschemabench /tmp/jsonschemabench --seed {seed} "
                f"--files {drawn}",
                "",
                "Ours runs three times: with its defaults (schema key order, no unlisted keys), with the option "
                "extra_properties (unlisted keys after the listed ones), and with any_order too (members and unlisted "
                "keys in any order: for the lazy automaton one `(?@members...)` group whose state is the set of members "
                "written, so no limit on the number of members).",
                "",
                table.rstrip("\n"),
                "",
                machine_line(f"load average {load:.1f} before the runs"),
                REAL_END,
            ]
        )
        + "\n"
    )


def run_jsonschemabench(root: Path, files: int, seed: int, systems: list[str] | None) -> None:
    sample, drawn = draw_jsonschemabench(root, files, seed)
    head = _git(root, "rev-parse", "--short", "HEAD").decode().strip() if not (root / "maskbench").is_dir() else None
    source = f"commit {head}" if head else "a checkout"
    load_before = os.getloadavg()[0]
    results = {}
    for name, factory in REAL_SYSTEMS.items():
        if systems and not any(s in name for s in systems):
            continue
        start = time.perf_counter()
        counts = run_sample(factory, sample)
        results[name] = (counts, time.perf_counter() - start)
        print(
            f"{name}: compiled {counts.compiled}/{counts.files}, passing {counts.passing}, "
            f"FP {counts.false_positives} in {len(counts.files_with_fp)} files, FN {counts.false_negatives}",
            flush=True,
        )
    section = real_data_section(results, sample, drawn, seed, source, load_before)
    text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else ""
    if REAL_BEGIN in text:
        text = text[: text.index(REAL_BEGIN)] + section + text[text.index(REAL_END) + len(REAL_END) + 1 :]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    RESULTS.write_text(text, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jsonschemabench", type=Path, help="a local copy of guidance-ai/jsonschemabench")
    parser.add_argument("--files", type=int, default=500, help="how many files to draw (real data)")
    parser.add_argument("--seed", type=int, default=0, help="the draw's seed (real data)")
    parser.add_argument("--systems", nargs="*", help="run only systems whose name contains one of these")
    args = parser.parse_args()
    if args.jsonschemabench:
        run_jsonschemabench(args.jsonschemabench, args.files, args.seed, args.systems)
        return
    sample = load_sample()
    load_before = os.getloadavg()[0]
    results = {}
    for name, factory in SYSTEMS.items():
        start = time.perf_counter()
        counts = run_sample(factory, sample)
        results[name] = (counts, time.perf_counter() - start)
        print(
            f"{name}: compiled {counts.compiled}/{counts.files}, passing {counts.passing}, "
            f"FP {counts.false_positives} in {len(counts.files_with_fp)} files, FN {counts.false_negatives}"
        )
    from _results import machine_line, write_results

    previous = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else ""
    real = previous[previous.index(REAL_BEGIN) :] if REAL_BEGIN in previous else ""  # kept as it was
    write_results(
        results_table(results, sample)
        + "\n"
        + machine_line(f"load average {load_before:.1f} before the runs")
        + "\n"
        + ("\n" + real if real else ""),
        RESULTS,
    )


if __name__ == "__main__":
    main()
