"""Do the extraction model's names hold on names made by a stranger? (issue 33, second opinion)

scripts/eval_generalisation.py measures name copying on the project's own held-out name
generators and phrasings; a model can learn what those generators share with the training
ones. The names, texts and instructions this script runs come from outsiders who had not read
scripts/name_generators.py, scripts/corpus/ or eval_generalisation.py's generators, one module
of scripts/stranger_sets/ each (its docstring says what it holds and what its writer was blind
to): ``--set first`` (the default) is the first outsider's 17 families of real-world naming
traditions in start/middle/end sentences; ``--set second`` is a second outsider's, written
without reading the first's lists or templates: other traditions, names in capitals or with
titles around them, in emails, chat logs, forms, CSV lines and dialogues; ``--set third`` is a
third's, blind to both: 25 families in 22 kinds of pasted text (tickets, invoices, obituaries,
快递单, 病历, 群公告...), only the person asked about given an age. This file only turns
a set into texts (the same seed gives the same texts) and scores the answers.

Measured, greedy and schema-constrained (``{"name": string, "age": integer, "hobbies": array of
strings}``, all required, no other properties; ``--fields name,age`` drops hobbies): per family,
name / age / name+age exact, hobbies exact (when asked), the distractor answered as the name,
and repeat loops (answers that hit max_new_tokens inside a string). Also pooled by the set's
template groups (the first set: where the name sits; the second: the kind of text), distractor
and age style. Each set has control families of plain common names: what its templates and
instructions cost by themselves.

Usage:
    python scripts/eval_stranger_names.py --model minisglang/assets/tiny-json-llama \
        --per-family 40 --fields name,age,hobbies --seed 7 [--set second] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval_extraction import extraction_schema, parse_object  # noqa: E402
from eval_generalisation import (  # noqa: E402  (the loop rule: max_new_tokens inside a string)
    is_loop,
    outputs_and_reasons,
    ran_on,
)
from stranger_sets import SETS, StrangerSet, load_set  # noqa: E402

MAX_NEW_TOKENS = 96
ALL_FIELDS = ["name", "age", "hobbies"]

# ---------------------------------------------------------------- texts from a set


def _en_list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _other_person(rng: random.Random, make: Callable[[random.Random], str], name: str) -> str:
    """A second name of the same family that neither is nor contains (nor is inside) ``name``:
    answering it is then never right by accident."""
    while True:
        other = make(rng)
        if other != name and name not in other and other not in name:
            return other


_SENTENCE_ENDS = (".", "!", "?", "。", "！", "？")


def example(rng: random.Random, names: StrangerSet, family: str, fields: list[str]) -> dict:
    """One text of the set ``names`` about a person named by ``family``; the reference answer
    holds ``fields``."""
    lang, make = names.families[family]
    zh = lang == "zh"
    name = make(rng)
    # The draws stay in this order (name, distractor, age, ...): a set's texts must not change
    # when the runner does, or its old results could no longer be compared.
    distractor = _other_person(rng, make, name) if rng.random() < 0.5 else None
    age = rng.randint(18, 90)
    age_words = rng.random() < 0.5
    hobbies = rng.sample(names.hobbies[lang], rng.randint(1, 2))
    group = rng.choice(list(names.templates[lang]))
    template = rng.choice(names.templates[lang][group])
    a = names.spell[lang](age) if age_words else str(age)
    h = "和".join(hobbies) if zh else _en_list(hobbies)
    if "{d}" in template:  # the second person is part of this text: it always has one
        distractor = distractor or _other_person(rng, make, name)
        text = template.format(n=name, a=a, h=h, d=distractor)
    else:
        text = template.format(n=name, a=a, h=h)
        if distractor:
            extra = rng.choice(names.distractors[lang]).format(d=distractor)
            # a text that ends on the name gets a full stop before a sentence on the same line
            if not (text.endswith(_SENTENCE_ENDS) or extra.startswith("\n")):
                text += "。" if zh else "."
            text += extra
    if zh:
        instruction = rng.choice(names.instructions[lang]).format(f="、".join(fields))
    else:
        instruction = rng.choice(names.instructions[lang]).format(f=_en_list(fields))
    answer = {"name": name, "age": age, "hobbies": hobbies}
    return {
        "family": family,
        "lang": lang,
        names.grouped_by: group,
        "distractor": distractor,
        "age_words": age_words,
        "text": text,
        "user": instruction + "\n" + text,
        "answer": {k: answer[k] for k in fields},
    }


def check_fields(fields: list[str]) -> list[str]:
    """``fields`` in the order name, age, hobbies; name and age must be among them."""
    if not {"name", "age"} <= set(fields) or not set(fields) <= set(ALL_FIELDS):
        raise ValueError(f"fields must be name,age or name,age,hobbies, got {fields}")
    return [k for k in ALL_FIELDS if k in fields]


def examples(per_family: int, seed: int, fields: list[str], set_name: str = "first") -> list[dict]:
    """``per_family`` seeded examples of every family of the set ``set_name``, in family order."""
    fields = check_fields(fields)
    names = load_set(set_name)
    rng = random.Random(seed)
    return [example(rng, names, fam, fields) for fam in names.families for _ in range(per_family)]


def schema(fields: list[str]) -> dict:
    """The answer's JSON Schema: the project's own for these keys (eval_extraction's), all required."""
    return extraction_schema(check_fields(fields))


# ---------------------------------------------------------------- scoring


def score(exs: list[dict], outputs: list[tuple[str, dict | None]], key: str = "family") -> dict:
    """Per value of ``key``: n, name, age, both, hobbies (exact), distractor answered, loops and
    answers that hit max_new_tokens anywhere (ran_on)."""
    table: dict[str, dict] = {}
    for ex, (text, reason) in zip(exs, outputs):
        group = str(ex[key]) if key != "distractor" else ("distractor" if ex["distractor"] else "alone")
        row = table.setdefault(
            group, dict.fromkeys(["n", "name", "age", "both", "hobbies", "distractor", "loops", "ran_on"], 0)
        )
        got, ref = parse_object(text) or {}, ex["answer"]
        row["n"] += 1
        row["name"] += got.get("name") == ref["name"]
        row["age"] += got.get("age") == ref["age"]
        row["both"] += got.get("name") == ref["name"] and got.get("age") == ref["age"]
        row["hobbies"] += "hobbies" in ref and got.get("hobbies") == ref["hobbies"]
        row["distractor"] += ex["distractor"] is not None and got.get("name") == ex["distractor"]
        row["loops"] += is_loop(text, reason)
        row["ran_on"] += ran_on(reason)
    return table


def markdown(table: dict, title: str, hobbies: bool) -> str:
    cols = ["n", "name", "age", "both"] + (["hobbies"] if hobbies else []) + ["distractor", "loops", "ran_on"]
    lines = [f"| {title} | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    total = dict.fromkeys(cols, 0)
    for group, row in table.items():
        lines.append(f"| {group} | " + " | ".join(str(row[c]) for c in cols) + " |")
        for c in cols:
            total[c] += row[c]
    lines.append("| **all** | " + " | ".join(str(total[c]) for c in cols) + " |")
    return "\n".join(lines)


def run(model: Path, per_family: int, seed: int, fields: list[str], set_name: str = "first") -> dict:
    from minisglang.engine import Engine

    fields = check_fields(fields)
    exs = examples(per_family, seed, fields, set_name)
    group = load_set(set_name).grouped_by
    engine = Engine(model_path=str(model))
    t0 = time.time()
    prompts = [engine.tokenizer.apply_chat_template([{"role": "user", "content": ex["user"]}]) for ex in exs]
    params = {"temperature": 0, "max_new_tokens": MAX_NEW_TOKENS, "json_schema": json.dumps(schema(fields))}
    outputs = outputs_and_reasons(engine, prompts, params)
    engine.shutdown()
    misses = [
        {"family": ex["family"], "text": ex["text"], "want": ex["answer"], "got": text}
        for ex, (text, _) in zip(exs, outputs)
        if {k: (parse_object(text) or {}).get(k) for k in ("name", "age")}
        != {k: ex["answer"][k] for k in ("name", "age")}
    ]
    return {
        "model": str(model),
        "set": set_name,
        "per_family": per_family,
        "seed": seed,
        "fields": fields,
        "tables": {k: score(exs, outputs, k) for k in ("family", group, "distractor", "age_words")},
        "misses": misses,
        "rows": [
            {k: ex[k] for k in ("family", group, "distractor", "age_words", "text", "answer")}
            | {"got": text, "loop": is_loop(text, reason)}
            for ex, (text, reason) in zip(exs, outputs)
        ],
        "seconds": round(time.time() - t0, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--per-family", type=int, default=40)
    ap.add_argument("--fields", default="name,age,hobbies")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--set", default="first", help=f"which outsider's names and texts: {' or '.join(SETS)}")
    ap.add_argument("--json", type=Path, help="also write the report (tables, misses, every answer) here")
    ap.add_argument("--results", type=Path, help="a results file to write this run's section into (under --label)")
    ap.add_argument("--label", default=None, help="heading of that section (default: the model and fields)")
    args = ap.parse_args()
    if args.set not in SETS:  # before the model loads: a typo should cost nothing
        ap.error(f"unknown --set {args.set!r}: choose one of {', '.join(SETS)}")
    report = run(args.model, args.per_family, args.seed, args.fields.split(","), args.set)
    hob = "hobbies" in report["fields"]
    named = "" if args.set == "first" else f"name set {args.set}, "  # the first set's heads read as before
    head = (
        f"`{report['model']}`: {named}fields {', '.join(report['fields'])}, {args.per_family} texts per family, "
        f"seed {args.seed}, greedy and schema-constrained, max_new_tokens {MAX_NEW_TOKENS}; {report['seconds']} s."
    )
    text = "\n\n".join([head, *(markdown(table, key, hob) for key, table in report["tables"].items())])
    if not args.results:
        print(text)
    else:  # (write_section prints it)
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
        from _results import model_checksum, write_section

        label = args.label or f"{args.model}, {','.join(report['fields'])}"
        body = f"## {label}\n\n{text}\n\nWeights sha256 {model_checksum(args.model)}.\n"
        write_section(body, args.results, f"## {label}")
    if args.json:
        args.json.write_text(json.dumps(report, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
