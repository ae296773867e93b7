"""Rerun every plausible mistake (MUTATIONS in tests/plausible_mistakes/) N times, each time with
a fresh random hypothesis seed, the way a student meets the grader; say how often each is caught.

The suite runs each mutant once, derandomized: that proves "caught with the fixed seed", not
"caught in every grading run". Here every (rerun, stage) runs through tests/mutants.py's
`run_all` with its own random seed, which is recorded, so a miss replays (--replay).

Results are appended to a JSON-lines file (one line per rerun and stage), so a killed run
continues where it stopped. The machine is shared: run it niced, one at a time, in the background.

Usage:
    nice -n 19 python scripts/mutant_reruns.py [--reruns 10] [--only REGEX] [--out FILE] &
    python scripts/mutant_reruns.py --report [--out FILE]       # the table so far, in markdown
    python scripts/mutant_reruns.py --replay ID_REGEX --seed S  # one miss again, with its seed
    nice -n 19 python scripts/mutant_reruns.py --explicit-only --reruns 1 --out FILE &
        # which mutants only generated examples catch (those are caught by luck, or by most seeds)
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from tqdm import tqdm

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
import mutants  # noqa: E402
from plausible_mistakes import MUTATIONS  # noqa: E402

from minisglang.checkout import task_key  # noqa: E402

DEFAULT_OUT = REPO / ".cache" / "mutant_reruns.jsonl"


def jobs(only: str | None) -> dict[str, list[dict]]:
    """The mutations run_all takes, by stage ("s3"), those whose id matches `only` if given."""
    by_stage: dict[str, list[dict]] = defaultdict(list)
    for task, what, old, new in MUTATIONS:
        m = {"id": f"{task}: {what}", "task": task, "old": old, "new": new}
        if only is None or re.search(only, m["id"]):
            by_stage[f"s{task_key(task)[0]}"].append(m)
    return dict(sorted(by_stage.items(), key=lambda kv: int(kv[0][1:])))


def load(out: Path) -> list[dict]:
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines() if line.strip()]


def measure(reruns: int, only: str | None, out: Path, explicit_only: bool = False) -> None:
    """Run what `out` does not hold yet: every selected mutation `reruns` times (with
    `explicit_only`, only the property tests' explicit examples: no seed plays a part)."""
    by_stage = jobs(only)
    done = {(rec["rerun"], id_) for rec in load(out) for id_ in rec["results"]}
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    total = reruns * sum(len(ms) for ms in by_stage.values())
    out.parent.mkdir(parents=True, exist_ok=True)
    with tqdm(total=total, desc="mutant reruns", unit="mutant") as bar:
        bar.update(
            sum(1 for r, id_ in done if r < reruns and any(m["id"] == id_ for ms in by_stage.values() for m in ms))
        )
        for rerun in range(reruns):
            for stage, ms in by_stage.items():
                todo = [m for m in ms if (rerun, m["id"]) not in done]
                if not todo:
                    continue
                seed = None if explicit_only else random.SystemRandom().getrandbits(32)
                bar.set_postfix_str(f"rerun {rerun + 1}, {stage}, seed {seed}")
                started = time.monotonic()
                results, references = mutants.run_all(todo, seed=seed, explicit_only=explicit_only)
                record = {
                    "rerun": rerun,
                    "stage": stage,
                    "seed": seed,
                    "explicit_only": explicit_only,
                    "commit": commit,
                    "seconds": round(time.monotonic() - started, 1),
                    "references": references,
                    "results": results,
                }
                with out.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(record) + "\n")
                bar.update(len(todo))


def report(out: Path, explicit: Path | None = None) -> str:
    """Per mutation: caught k/N, the rows its failures land in, the seeds of its misses, and
    (from `explicit`, an --explicit-only run's file) the fixed input that caught it there."""
    records = load(out)
    fixed = {
        id_: r["failed"] if r["caught"] else "NOT CAUGHT"
        for rec in (load(explicit) if explicit else [])
        for id_, r in rec["results"].items()
    }
    caught: dict[str, list[bool]] = defaultdict(list)
    rows: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    misses: dict[str, list[int]] = defaultdict(list)
    bad_reference = [(rec["rerun"], rec["stage"], rec["seed"]) for rec in records if not all(rec["references"])]
    for rec in records:
        for id_, r in rec["results"].items():
            caught[id_].append(r["caught"])
            task = id_.split(":")[0]
            if r["caught"]:
                # The grader moves a failure raised in another task's region to that task's
                # row (when that task fails a test of its own too): say where it may land.
                other = r.get("raised_in")
                rows[id_][task if not other or f"task{other}" == task else f"{task}, raised in {other}"] += 1
            else:
                misses[id_].append(rec["seed"])
    order = [f"{t}: {w}" for t, w, _, _ in MUTATIONS]
    lines = [
        "| mutation | caught | row | seeds of the misses |"
        + (" caught with explicit examples only by |" if fixed else ""),
        "|---|---|---|---|" + ("---|" if fixed else ""),
    ]
    for id_ in sorted(caught, key=lambda i: order.index(i) if i in order else len(order)):
        k, n = sum(caught[id_]), len(caught[id_])
        where = "; ".join(f"{row} ({c})" if len(rows[id_]) > 1 else row for row, c in rows[id_].items()) or "-"
        lines.append(
            f"| {id_.replace('|', '/')} | {k}/{n} | {where} | {', '.join(map(str, misses[id_])) or '-'} |"
            + (f" {_short(fixed.get(id_, '-'))} |" if fixed else "")
        )
    full = sum(all(v) for v in caught.values())
    lines.append(
        f"\n{full} of {len(caught)} mutations caught in every rerun; "
        f"{sum(len(v) for v in caught.values())} mutant runs in all."
    )
    if bad_reference:
        lines.append(f"The reference failed after the mutants in (rerun, stage, seed): {bad_reference}")
    return "\n".join(lines)


def _short(nodeid: str) -> str:
    """tests/test_x.py::test_y[case] as `test_x::test_y[case]`, pipes escaped for a table."""
    return "`" + nodeid.removeprefix("tests/").replace(".py::", "::").replace("|", "\\|") + "`"


def replay(only: str, seed: int) -> None:
    for stage, ms in jobs(only).items():
        results, references = mutants.run_all(ms, seed=seed)
        print(json.dumps({"stage": stage, "seed": seed, "references": references, "results": results}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reruns", type=int, default=10, help="runs of each mutation (default 10)")
    parser.add_argument("--only", metavar="REGEX", help="only the mutations whose id ('task3_1: what') matches")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"results file (default {DEFAULT_OUT})")
    parser.add_argument("--report", action="store_true", help="print the table of what --out holds")
    parser.add_argument(
        "--explicit",
        type=Path,
        metavar="FILE",
        help="with --report: an --explicit-only run's file, for a column of the tests that caught each",
    )
    parser.add_argument("--replay", metavar="REGEX", help="run the matching mutations once with --seed")
    parser.add_argument("--seed", type=int, help="hypothesis's seed, for --replay")
    parser.add_argument(
        "--explicit-only",
        action="store_true",
        help="run only the property tests' explicit examples (no seed plays a part)",
    )
    args = parser.parse_args()
    if args.replay:
        if args.seed is None:
            parser.error("--replay needs --seed (a miss's seed, from --report)")
        replay(args.replay, args.seed)
    elif args.report:
        print(report(args.out, args.explicit))
    else:
        measure(args.reruns, args.only, args.out, args.explicit_only)
        print(report(args.out))


if __name__ == "__main__":
    main()
