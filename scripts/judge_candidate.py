"""Judge a candidate model on every measure issue 33's stages were weighed by, in one run.

A stage that wins on the project's own held-out generators can lose on texts made another way
(stage 18 read the digits of `高娟48岁` into the name, which only bench_production's texts
showed). So a candidate is judged on all of them, side by side with the bundled model:

- scripts/eval_generalisation.py, name/age/hobbies and name/age (the project's held-out generators);
- scripts/eval_stranger_names.py, `--set first`, `second` and `third` (three outsiders' names and texts);
- scripts/eval_extraction.py (the held-out sets and tool calls);
- `minisglang demo` (its three texts: constrained exact, unconstrained fenced);
- bench_production.py's part-4 texts, greedy and schema-constrained (names and ages by language).

    python scripts/judge_candidate.py .cache/issue33-stage26/out [--baseline DIR] [--dry-run]

About 3 minutes a model on one CPU thread. It prints each measure's headline lines, nothing more;
the scripts themselves print (and can write) the full tables.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
# (label, argv after the model path's flag, lines of the output worth printing)
MEASURES = [
    ("generators, name/age/hobbies", ["scripts/eval_generalisation.py", "--model", "{m}"], r"compound_surname|\*\*all"),
    (
        "generators, name/age",
        ["scripts/eval_generalisation.py", "--model", "{m}", "--fields", "name,age"],
        r"compound_surname|\*\*all",
    ),
    ("outsiders, first set", ["scripts/eval_stranger_names.py", "--model", "{m}"], r"^\| \*\*all\*\* \| 680"),
    (
        "outsiders, second set",
        ["scripts/eval_stranger_names.py", "--model", "{m}", "--set", "second"],
        r"^\| \*\*all\*\* \| 720",
    ),
    (
        "outsiders, third set",
        ["scripts/eval_stranger_names.py", "--model", "{m}", "--set", "third"],
        r"^\| \*\*all\*\* \| 1000",
    ),
    (
        "held-out sets and tools",
        [
            "scripts/eval_extraction.py",
            "--model",
            "{m}",
            "--n",
            "200",
            "--tools",
            "100",
            "--examples",
            "20000",
            "--seed",
            "1",
        ],
        r"^  (constrained|unconstrained|tools constrained) ",
    ),
    ("demo", ["-m", "minisglang.cli", "demo", "--model-path", "{m}"], r"^(unconstrained|constrained):"),
    ("bench_production's texts", [__file__, "--production-texts", "{m}"], r"^(English|Chinese) "),
]


def commands(model: str) -> list[tuple[str, list[str], str]]:
    """Each measure's label, command line and the pattern of the lines to keep."""
    return [(label, [PYTHON, *(a.format(m=model) for a in argv)], keep) for label, argv, keep in MEASURES]


def production_texts(model: str) -> None:
    """bench_production.py's part-4 prompts (its own generator of names and ages, 100 English and
    100 Chinese), greedy under its schema: names and ages right, by language."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_production

    from minisglang import Engine

    data = bench_production.validation_set(200, 0)
    with Engine(model_path=model) as engine:
        prompts = bench_production.chat_prompts(engine, [messages for messages, _, _ in data])
        params = {"json_schema": bench_production.SCHEMA, "temperature": 0, "max_new_tokens": 128}
        outs = engine.generate(prompts, [params] * len(prompts))
    for language, chinese in (("English", False), ("Chinese", True)):
        # bench_production's own scoring (exact name and age among the valid answers), by language
        mine = [i for i, (_, _, zh) in enumerate(data) if zh == chinese]
        s = bench_production.score([outs[i] for i in mine], [data[i] for i in mine])
        print(f"{language} names {s['name']}/{len(mine)}, ages {s['age']}/{len(mine)}")


def judge(model: str, dry_run: bool) -> None:
    print(f"## {model}", flush=True)
    for label, argv, keep in commands(model):
        if dry_run:
            print(label + ": " + " ".join(argv))
            continue
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
        # (dict.fromkeys: a script that prints its pooled row under several tables prints it once here)
        lines = list(dict.fromkeys(line for line in done.stdout.splitlines() if re.search(keep, line)))
        print(f"{label}:" + ("" if done.returncode == 0 else f" (exit {done.returncode})"), flush=True)
        for line in lines or done.stderr.splitlines()[-3:]:
            print("    " + line[:200], flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("model", help="a saved model directory")
    ap.add_argument("--baseline", default=None, help="also judge this model (e.g. the bundled one) first")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--production-texts", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.production_texts:
        production_texts(args.model)
        return
    for model in [m for m in (args.baseline, args.model) if m]:
        judge(model, args.dry_run)


if __name__ == "__main__":
    main()
