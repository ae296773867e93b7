"""Bounded numbers in generation: how many outputs run to max_new_tokens on number fields.

A schema whose `number`/`integer` fields have no bounds lets a model write digits for as
long as it likes (`"score": 384597965934907183.44247...`); the JSON Schema compiler
bounds them by default (SchemaOptions.max_integer_digits=18, max_fraction_digits=20,
max_exponent_digits=3). This script generates with the bundled model for `--prompts`
seeded review-extraction prompts, constrained by SCHEMA, twice, side by side:

- unbounded: `json_schema_options={"bound_numbers": False}` (JSON's own number grammar);
- bounded: the defaults.

Both at temperature --temperature with one seed per prompt, as one batched
`Engine.generate` per setting. Counted: outputs that end by max_new_tokens
(finish_reason "length") against complete ones, outputs that parse and validate with
`jsonschema`, output tokens, and the longest numeral written.

    python benchmarks/bench_number_bounds.py [--prompts 32] [--max-new-tokens 96] [--temperature 1.0]

Writes benchmarks/results/number_bounds.md. Rerun it when the bundled model changes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import time
from pathlib import Path

import jsonschema
from _results import machine_line, write_results  # benchmarks/_results.py (scripts run from benchmarks/)

from minisglang.engine import Engine

RESULTS = Path(__file__).parent / "results" / "number_bounds.md"
SCHEMA = {
    "type": "object",
    "properties": {
        "product": {"type": "string", "maxLength": 40},
        "score": {"type": "number"},
        "reviews": {"type": "integer"},
        "price": {"type": "number"},
    },
    "required": ["product", "score", "reviews", "price"],
    "additionalProperties": False,
}
PRODUCTS = ["desk lamp", "coffee grinder", "trail shoes", "phone case", "rice cooker", "headphones", "backpack"]
SETTINGS = {"unbounded (bound_numbers off)": {"bound_numbers": False}, "bounded (default)": {}}


def prompts(engine: Engine, n: int, seed: int) -> list[str]:
    """Chat prompts asking for SCHEMA's keys from a short review summary (seeded)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        text = (
            f"The {rng.choice(PRODUCTS)} has a score of {rng.randint(1, 9)}.{rng.randint(0, 9)} "
            f"from {rng.randint(3, 4000)} reviews and costs {rng.randint(5, 300)}.{rng.randint(0, 99):02d} dollars."
        )
        ask = "Return a JSON object with the keys product, score, reviews, price for this text:\n" + text
        out.append(engine.tokenizer.apply_chat_template([{"role": "user", "content": ask}]))
    return out


def longest_numeral(text: str) -> int:
    """Digits in the longest numeral of `text` (sign, point and exponent not counted)."""
    return max((len(re.sub(r"[^0-9]", "", m)) for m in re.findall(r"-?[0-9][0-9.eE+-]*", text)), default=0)


def measure(setting: dict, n: int, max_new_tokens: int, temperature: float, seed: int) -> dict:
    engine = Engine(json_schema_options=setting)
    batch = prompts(engine, n, seed)
    params = [
        {
            "json_schema": json.dumps(SCHEMA),
            "temperature": temperature,
            "seed": seed + i,
            "max_new_tokens": max_new_tokens,
        }
        for i in range(n)
    ]
    start = time.perf_counter()
    outs = engine.generate(batch, params)
    seconds = time.perf_counter() - start
    engine.shutdown()
    cut = [o for o in outs if o["meta_info"]["finish_reason"]["type"] == "length"]
    valid = 0
    for o in outs:
        try:
            jsonschema.validate(json.loads(o["text"]), SCHEMA)
            valid += 1
        except (ValueError, jsonschema.ValidationError):
            pass
    tokens = [o["meta_info"]["completion_tokens"] for o in outs]
    return {
        "cut": len(cut),
        "complete": n - len(cut),
        "valid": valid,
        "mean_tokens": statistics.mean(tokens),
        "longest": max(longest_numeral(o["text"]) for o in outs),
        "seconds": seconds,
        "example": (cut or outs)[0]["text"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    results = {
        name: measure(setting, args.prompts, args.max_new_tokens, args.temperature, args.seed)
        for name, setting in SETTINGS.items()
    }
    n = args.prompts
    lines = [
        "# Bounded numbers in generation",
        "",
        f"{n} review-extraction prompts with the bundled model, constrained by a schema whose `number` and "
        "`integer` fields have no bounds (`score`, `reviews`, `price`), temperature "
        f"{args.temperature:g} with one seed per prompt, max_new_tokens={args.max_new_tokens}, one batched "
        "`Engine.generate` per setting, run one after the other in one process. Unbounded: "
        '`json_schema_options={"bound_numbers": false}` (JSON\'s own number grammar); bounded: the '
        "defaults (at most 18 integer, 20 fraction, 3 exponent digits).",
        "",
        "| setting | cut off by max_new_tokens | complete | valid JSON for the schema | mean output tokens "
        "| longest numeral (all its digits) | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['cut']}/{n} | {r['complete']}/{n} | {r['valid']}/{n} | {r['mean_tokens']:.1f} "
            f"| {r['longest']} | {r['seconds']:.1f} |"
        )
    lines += ["", "First cut-off output of each setting (or the first output when none is cut off):", ""]
    lines += [
        f"- {name}: `{r['example'][:160]}`" + ("…" if len(r["example"]) > 160 else "") for name, r in results.items()
    ]
    write_results(
        "\n".join(lines) + "\n\n" + machine_line(f"load average {load_before:.1f} before the runs") + "\n", RESULTS
    )


if __name__ == "__main__":
    main()
