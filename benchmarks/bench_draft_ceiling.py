"""How many tokens per verify forward prompt lookup can give, replayed on the greedy answers.

s7's NGRAM drafts (prompt lookup) are kept only where the model agrees, so on a workload
its ceiling is set by the answers themselves: a draft copies text that follows an earlier
occurrence of the output's tail, and the model keeps it only if its answer copies that
text too. This script decodes each workload once with s6 (greedy: s7's outputs are the
same, token for token), then replays `speculative.ngram_drafts` over every answer exactly
as s7 drafts it (prompt + output so far, k tokens, greedy acceptance: the matching
prefix plus the model's own token), and reports the tokens each verify forward yields.
Beside it, for the extraction answers, how many of their string values occur in the
prompt at all: where the model does not copy, no draft source that copies can help.

Workloads: bench_speculative.py's (the extraction service's requests under the Person
schema; the bundled model's copy requests, no grammar).

    python benchmarks/bench_draft_ceiling.py [--requests 32]

Prints the table; writes benchmarks/results/draft_ceiling.md.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from _results import machine_line, model_checksum, write_results  # benchmarks/_results.py
from bench_extraction_service import SCHEMA, workload
from bench_speculative import free_text_workload

import minisglang
from minisglang.engine import Engine
from minisglang.speculative import ngram_drafts
from minisglang.tokenizer import Tokenizer

RESULTS = Path(__file__).parent / "results" / "draft_ceiling.md"


def tokens_per_verify(prompts_ids: list[list[int]], answers: list[list[int]], k: int) -> float:
    """Output tokens per verify forward if every step drafts `k` tokens by prompt lookup and
    keeps the prefix the answer agrees with, plus the model's own next token."""
    steps = tokens = 0
    for prompt, answer in zip(prompts_ids, answers):
        i = 0
        while i < len(answer):
            drafts = ngram_drafts(prompt + answer[:i], k)
            kept = 0
            while kept < len(drafts) and i + kept < len(answer) and drafts[kept] == answer[i + kept]:
                kept += 1
            i += kept + 1
            steps += 1
            tokens += kept + 1
    return tokens / max(steps, 1)


def copied_values(prompts: list[str], texts: list[str]) -> tuple[int, int, int]:
    """(string values found in their prompt, string values, answers that parse as JSON)."""
    found = total = parsed = 0
    for prompt, text in zip(prompts, texts):
        try:
            obj = json.loads(text)
        except ValueError:
            continue
        parsed += 1
        values = [v for v in (obj.values() if isinstance(obj, dict) else []) if isinstance(v, str) and v]
        total += len(values)
        found += sum(v in prompt for v in values)
    return found, total, parsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--k", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--output", type=Path, default=RESULTS)
    args = ap.parse_args()
    torch.set_num_threads(1)
    began = time.perf_counter()

    tok = Tokenizer.from_pretrained(minisglang.DEFAULT_MODEL_PATH)
    extraction, _, _, _ = workload(tok, args.requests, 1.0, args.seed)
    greedy = {"temperature": 0, "max_new_tokens": args.max_new_tokens}
    workloads = {
        "extraction (Person schema)": (extraction, {**greedy, "json_schema": json.dumps(SCHEMA)}),
        "free text (copy requests)": (free_text_workload(tok, args.requests, args.seed), greedy),
    }
    engine = Engine(stage="s6-function-calling", torch_threads=1)
    rows = []
    for name, (prompts, params) in workloads.items():
        print(f"decoding {len(prompts)} {name} requests with s6 ...", flush=True)
        outs = engine.generate(prompts, params)
        answers = [o["output_ids"] for o in outs]
        prompt_ids = [tok.encode(p) for p in prompts]
        per_k = [f"{tokens_per_verify(prompt_ids, answers, k):.2f}" for k in args.k]
        found, total, parsed = copied_values(prompts, [o["text"] for o in outs]) if "schema" in name else (0, 0, 0)
        copied = f"{found}/{total} (of {parsed} parsed answers)" if total else "-"
        mean = sum(map(len, answers)) / len(answers)
        rows.append(f"| {name} | {len(prompts)} | {mean:.1f} | {' | '.join(per_k)} | {copied} |")
    engine.shutdown()

    head = " | ".join(f"tokens per verify, k={k}" for k in args.k)
    text = "\n".join(
        [
            "# Prompt lookup's ceiling on each workload (the greedy answers replayed)",
            "",
            __doc__.split("\n\n")[1].replace("\n", " "),
            "",
            f"| workload | requests | answer tokens (mean) | {head} | string values found in the prompt |",
            "|---|---:|---:|" + "---:|" * len(args.k) + "---|",
            *rows,
            "",
            machine_line(
                f"model {model_checksum(minisglang.DEFAULT_MODEL_PATH)}",
                f"run took {(time.perf_counter() - began) / 60:.1f} min",
            ),
            "",
        ]
    )
    write_results(text, args.output)


if __name__ == "__main__":
    main()
