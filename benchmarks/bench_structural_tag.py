"""Structural tag compile cost: our fsm backend beside xgrammar and llguidance, 50 tools.

A structural tag of `--tools` generated tool schemas (seeded: objects of strings with
maxLength, bounded integers, enums, booleans, an optional nested object), in the Qwen
shape: trigger "<tool_call>", begin '<tool_call>{"name": "tool_i", "arguments": ', end
"}</tool_call>". For each vocabulary (the bundled 4k, the 65k) and system, the median of
`--repeats` fresh compiles of:

- compile + first mask: `compile_structural_tag(spec)` and the mask at the start (free
  text: nearly every token allowed);
- trigger + mask: accepting the tokens of "<tool_call>" and the mask there (where the
  begins branch: the first state of a tool call; our automaton builds its rows then).

Each backend is built and warmed (one small structural tag compiled) before timing, so
one-time vocabulary preparation is reported apart ("build"). Systems run one after the
other in one process on a shared machine: compare the ratios, not the absolute times.
Writes benchmarks/results/structural_tag.md.

    python benchmarks/bench_structural_tag.py [--tools 50] [--seed 19] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path

import torch

import minisglang
from minisglang.backends.base import get_backend_class
from minisglang.constrained.structural_tag import parse_structural_tag
from minisglang.tokenizer import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _results import machine_line, write_results  # noqa: E402
from real_tokenizers import anthropic_65k  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "structural_tag.md"
PAD = 64  # logit columns past the vocabulary, as models pad them
SYSTEMS = ["fsm", "xgrammar", "llguidance"]
WORDS = ["city", "date", "user", "query", "limit", "unit", "zone", "title", "body", "tag", "email", "lang"]


def tool_schema(rng: random.Random) -> dict:
    """One tool's arguments: 2-5 properties of assorted kinds, some required."""
    props = {}
    for name in rng.sample(WORDS, rng.randint(2, 5)):
        kind = rng.choice(["string", "integer", "enum", "boolean", "object"])
        if kind == "string":
            props[name] = {"type": "string", "maxLength": rng.choice([16, 32, 64])}
        elif kind == "integer":
            props[name] = {"type": "integer", "minimum": 0, "maximum": rng.choice([10, 100, 10_000])}
        elif kind == "enum":
            props[name] = {"enum": [f"{name}_{i}" for i in range(rng.randint(2, 8))]}
        elif kind == "boolean":
            props[name] = {"type": "boolean"}
        else:
            props[name] = {
                "type": "object",
                "properties": {
                    "id": {"type": "integer", "minimum": 0, "maximum": 999},
                    "label": {"type": "string", "maxLength": 20},
                },
                "required": ["id"],
            }
    required = [n for n in props if rng.random() < 0.6]
    return {"type": "object", "properties": props, "required": required}


def tools_spec(n: int, seed: int) -> dict:
    rng = random.Random(seed)
    return {
        "structures": [
            {
                "begin": f'<tool_call>{{"name": "tool_{i}", "arguments": ',
                "schema": tool_schema(rng),
                "end": "}</tool_call>",
            }
            for i in range(n)
        ],
        "triggers": ["<tool_call>"],
    }


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def bench(label: str, tok: Tokenizer, spec, repeats: int) -> list[str]:
    rows, vocab_size = [], len(tok.token_bytes) + PAD
    trigger_ids = tok.encode("<tool_call>")
    warm = parse_structural_tag(
        {"structures": [{"begin": "<w>", "schema": {"type": "integer"}, "end": "</w>"}], "triggers": ["<w>"]}
    )
    for system in SYSTEMS:
        build, backend = timed(lambda: get_backend_class(system)(tok, vocab_size))
        build += timed(lambda: backend.compile_structural_tag(warm))[0]
        compile_s, first_s, after_s = [], [], []
        for _ in range(repeats):
            seconds, grammar = timed(lambda: backend.compile_structural_tag(spec))
            mask = grammar.allocate_vocab_mask(vocab_size, 1)
            first, _ = timed(lambda: grammar.fill_vocab_mask(mask, 0))
            # Accepting may build the next state's row (ours does): time it with the mask.
            after, _ = timed(lambda: ([grammar.accept_token(t) for t in trigger_ids], grammar.fill_vocab_mask(mask, 0)))
            compile_s.append(seconds)
            first_s.append(first)
            after_s.append(after)
        backend.shutdown()
        med = {
            k: statistics.median(v) * 1000 for k, v in (("compile", compile_s), ("first", first_s), ("after", after_s))
        }
        rows.append((system, build * 1000, med))
        print(f"{label}: {system} {med}", flush=True)
    ours = rows[0][2]["compile"] + rows[0][2]["first"]
    return [
        f"| {label} | {system} | {build:.0f} | {m['compile']:.1f} | {m['first']:.2f} | "
        f"{m['compile'] + m['first']:.1f} | {(m['compile'] + m['first']) / ours:.2f}x | {m['after']:.2f} |"
        for system, build, m in rows
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=50)
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    spec = parse_structural_tag(tools_spec(args.tools, args.seed))
    load_before, started = os.getloadavg()[0], time.perf_counter()
    vocabularies = [
        ("bundled 4k", Tokenizer.from_pretrained(minisglang.DEFAULT_MODEL_PATH)),
        ("anthropic 65k", anthropic_65k()),
    ]
    rows = [row for label, tok in vocabularies for row in bench(label, tok, spec, args.repeats)]
    text = "\n".join(
        [
            f"# Structural tag compile cost: {args.tools} tools",
            "",
            f"One structural tag of {args.tools} generated tool schemas (seed {args.seed}, `tools_spec` in "
            "benchmarks/bench_structural_tag.py), trigger `<tool_call>`. Median of "
            f"{args.repeats} fresh compiles per system; 'fsm' is our backend (constrained/structural_tag.py: "
            "one regex for the lazy automaton), 'xgrammar' its triggered_tags format, 'llguidance' a Lark "
            "grammar with lazy lexemes. 'build' is the backend's one-time vocabulary preparation plus one "
            "small warm-up compile. 'vs fsm' divides compile + first mask by ours. 'trigger + mask' is "
            f"accepting the tokens of `<tool_call>` and the mask there (the {args.tools} begins branch there; our "
            f"automaton builds those states' rows then). Logits are {PAD} columns wider than the vocabulary. Systems run one "
            "after the other on a shared, loaded machine: read the ratios.",
            "",
            "| vocabulary | system | build (ms) | compile (ms) | first mask (ms) | compile + first mask (ms) "
            "| vs fsm | trigger + mask (ms) |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
            machine_line(
                f"load average {load_before:.1f} before the run",
                f"xgrammar {version('xgrammar')}",
                f"llguidance {version('llguidance')}",
                f"run took {time.perf_counter() - started:.0f} s",
            ),
            "",
        ]
    )
    write_results(text, RESULTS)


if __name__ == "__main__":
    main()
