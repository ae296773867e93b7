"""What the radix cache saves: 96 extraction requests sharing a ~300-token system prompt.

The systems answer the same 96 chat prompts (one system prompt, 96 different extraction
requests as user turns), greedy, with the same short ``max_new_tokens``:

* minisglang with the radix cache (``Engine()``): the tree learns each prompt right after
  its prefill, and a request sharing a long uncached prefix with one already in the
  prefill batch waits one step for the hit (in-batch prefix sharing);
* the same without in-batch sharing (``in_batch_prefix_threshold=0``): requests of one
  batch still compute their shared prefix once each;
* the same learning only from finished requests, as SGLang's first release did (the
  scheduler's ``cache_prefilled`` replaced by a no-op for this engine; "before" in
  chapter 00);
* minisglang without the cache (``Engine(disable_radix_cache=True)``),
* transformers' ``generate`` on the same checkpoint, all prompts in one left-padded batch.

and in two scenarios for minisglang:

* cold: the requests arrive at once into an empty cache (a burst);
* warm: one earlier request with the same system prompt has finished (untimed), as in a
  chat service whose system prompt never changes; then the burst arrives.

"Reused" is the share of prompt tokens the tree supplied (``cached_tokens`` over prompt
tokens, from each request's ``meta_info``).

"Prefill tokens" are the tokens the model computed in prefill batches, summed from the
engine's trace (``prefill`` events' ``tokens``); for transformers it is the padded batch.
Requests/s is 64 over the wall time of ``generate``. Each number is the median of
``--repeats`` runs, the systems interleaved run by run so that a busy machine slows all of
them alike. The system prompt is made of the model's own text: a few of its sampled
answers, cut to ``--system-tokens`` tokens.

    python benchmarks/bench_radix_cache.py [--model-path DIR] [--requests 96] [--repeats 3]

Prints the table and the ratios; writes benchmarks/results/radix_cache.md.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from pathlib import Path

import torch
from _results import machine_line, write_results  # benchmarks/_results.py (scripts run from benchmarks/)
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM

import minisglang
from minisglang.engine import Engine

RESULTS = Path(__file__).parent / "results" / "radix_cache.md"
NAMES = [
    "Li Lei",
    "Wang Fang",
    "Zhang Wei",
    "Liu Yang",
    "Chen Jing",
    "Alice Smith",
    "Bob Jones",
    "Maria Garcia",
    "Ken Sato",
    "Olga Ivanova",
    "Ahmed Khan",
    "Sara Berg",
]
CITIES = ["Beijing", "Shanghai", "Chengdu", "Hangzhou", "London", "Paris", "Tokyo", "Berlin"]


def make_system_prompt(engine: Engine, n_tokens: int) -> str:
    """About ``n_tokens`` tokens of the model's own sampled answers (seeded), joined by newlines."""
    tok = engine.tokenizer
    topics = [
        "Tell me about Beijing.",
        "Describe a day at the beach.",
        "What is JSON?",
        "Write a short note to a friend.",
        "Describe your favourite city.",
    ]
    text, seed = "", 0
    while len(tok.encode(text)) < n_tokens:
        prompt = tok.apply_chat_template([{"role": "user", "content": topics[seed % len(topics)]}])
        out = engine.generate(prompt, {"temperature": 0.8, "seed": seed, "max_new_tokens": 128})
        text += out["text"].strip() + "\n"
        seed += 1
    # Cut at a token boundary and decode, so the prompt is text the tokenizer produced.
    return tok.decode(tok.encode(text)[:n_tokens]).strip()


def user_turns(n: int, seed: int = 0) -> list[str]:
    """``n`` different extraction requests (seeded)."""
    rng = random.Random(seed)
    return [
        f"Request {i}: extract the name, age and city as JSON. {rng.choice(NAMES)} is "
        f"{rng.randint(18, 80)} years old and lives in {rng.choice(CITIES)}."
        for i in range(n)
    ]


def chat(engine: Engine, system: str, user: str) -> str:
    return engine.tokenizer.apply_chat_template(
        [{"role": "system", "content": system}, {"role": "user", "content": user}]
    )


def run_engine(engine: Engine, prompts: list[str], warm_prompt: str | None, params: dict) -> dict:
    """One timed run on an emptied cache; ``warm_prompt`` (if any) runs to completion first, untimed."""
    tree = engine.scheduler.tree_cache
    tree.evict(10**9)
    assert tree.total_size() == 0, "the radix tree should be empty between runs"
    if warm_prompt is not None:
        engine.generate(warm_prompt, params)
    start_event = len(engine.scheduler.trace)
    start = time.perf_counter()
    outs = engine.generate(prompts, [params] * len(prompts))
    seconds = time.perf_counter() - start
    events = list(engine.scheduler.trace)[start_event:]
    return {
        "seconds": seconds,
        "texts": [o["text"] for o in outs],
        "prefill_tokens": sum(e["tokens"] for e in events if e["event"] == "prefill"),
        "prefill_batches": sum(e["event"] == "prefill" for e in events),
        "cached_tokens": sum(o["meta_info"]["cached_tokens"] for o in outs),
    }


def run_transformers(hf, engine: Engine, prompts: list[str], max_new_tokens: int) -> dict:
    """transformers' greedy ``generate`` on all prompts in one left-padded batch."""
    tok = engine.tokenizer
    eos = tok.eos_token_id
    ids = [tok.encode(p) for p in prompts]
    width = max(map(len, ids))
    input_ids = torch.tensor([[eos] * (width - len(x)) + x for x in ids])
    mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
    start = time.perf_counter()
    with torch.inference_mode():
        out = hf.generate(
            input_ids,
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=eos,
            eos_token_id=eos,
        )
    seconds = time.perf_counter() - start
    texts = []
    for row in out[:, width:].tolist():
        row = row[: row.index(eos)] if eos in row else row
        texts.append(tok.decode(row))
    return {
        "seconds": seconds,
        "texts": texts,
        "prefill_tokens": input_ids.numel(),
        "prefill_batches": 1,
        "cached_tokens": 0,
    }


def median_run(runs: list[dict]) -> dict:
    """Median seconds over repeated runs; token counts and texts from the first (they repeat exactly)."""
    return {**runs[0], "seconds": statistics.median(r["seconds"] for r in runs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-path", default=minisglang.DEFAULT_MODEL_PATH)
    parser.add_argument("--requests", type=int, default=96)
    parser.add_argument("--system-tokens", type=int, default=300)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()

    # Room for every request at once, so neither engine ever waits for memory.
    pool = 2 * args.requests * (args.system_tokens + 64 + args.max_new_tokens)
    engines = {
        "radix on": Engine(args.model_path, stage="s0", max_total_tokens=pool),
        "radix on, no in-batch sharing": Engine(
            args.model_path, stage="s0", max_total_tokens=pool, in_batch_prefix_threshold=0
        ),
        "radix on, learns at finish only": Engine(
            args.model_path, stage="s0", max_total_tokens=pool, in_batch_prefix_threshold=0
        ),
        "radix off": Engine(args.model_path, stage="s0", max_total_tokens=pool, disable_radix_cache=True),
    }
    # SGLang's first release: the tree learns a request's tokens only when it finishes.
    engines["radix on, learns at finish only"].scheduler.cache_prefilled = lambda req: None
    hf = AutoModelForCausalLM.from_pretrained(args.model_path, dtype=torch.float32).eval()
    any_engine = engines["radix on"]
    tok = any_engine.tokenizer

    system = make_system_prompt(any_engine, args.system_tokens)
    prompts = [chat(any_engine, system, u) for u in user_turns(args.requests)]
    warm_prompt = chat(any_engine, system, "Hello! What can you do?")
    shared = len(
        tok.encode(tok.apply_chat_template([{"role": "system", "content": system}], add_generation_prompt=False))
    )
    prompt_tokens = sum(len(tok.encode(p)) for p in prompts)
    params = {"temperature": 0, "max_new_tokens": args.max_new_tokens}

    load_before = os.getloadavg()[0]  # a busy machine slows every system; the ratios still hold
    runs: dict[tuple[str, str], list[dict]] = {}
    warm_systems = ("radix on", "radix off")  # the variants differ only when requests arrive together
    with tqdm(total=args.repeats * (len(engines) + len(warm_systems) + 1), desc="bench_radix_cache") as bar:
        for _ in range(args.repeats):
            for scenario, warm in (("cold", None), ("warm", warm_prompt)):
                for name, engine in engines.items():
                    if scenario == "warm" and name not in warm_systems:
                        continue
                    runs.setdefault((scenario, name), []).append(run_engine(engine, prompts, warm, params))
                    bar.update()
            runs.setdefault(("-", "transformers"), []).append(
                run_transformers(hf, any_engine, prompts, args.max_new_tokens)
            )
            bar.update()
    results = {key: median_run(r) for key, r in runs.items()}
    for engine in engines.values():
        engine.shutdown()

    reference = results[("cold", "radix off")]["texts"]
    hf_result = results[("-", "transformers")]
    rows = []
    for (scenario, name), r in results.items():
        off = results.get((scenario, "radix off"), results[("cold", "radix off")])
        rows.append(
            {
                "scenario": scenario,
                "system": name,
                "prefill": r["prefill_tokens"],
                "batches": r["prefill_batches"],
                "cached": r["cached_tokens"],
                "reused": r["cached_tokens"] / prompt_tokens,
                "rps": args.requests / r["seconds"],
                "tokens_vs_off": r["prefill_tokens"] / off["prefill_tokens"],
                "rps_vs_off": off["seconds"] / r["seconds"],
                "rps_vs_hf": hf_result["seconds"] / r["seconds"],
                "same_text": sum(a == b for a, b in zip(r["texts"], reference)),
            }
        )

    cfg = any_engine.model.config
    params_count = sum(t.numel() for t in any_engine.model.parameters())
    lines = [
        "# Radix cache: shared system prompt, radix on vs off vs transformers `generate`",
        "",
        f"{args.requests} chat requests; the system prompt ({shared} tokens with its chat markers) is "
        f"shared, the user turns differ; {prompt_tokens} prompt tokens in all; greedy, "
        f"max_new_tokens={args.max_new_tokens}. Model: `{Path(args.model_path).name}` ({cfg.architecture}, "
        f"{params_count / 1e6:.2f}M parameters), fp32, stage s0. Median of {args.repeats} runs, interleaved.",
        "",
        "*cold*: all requests arrive at once into an empty cache. *warm*: one earlier request with the "
        "same system prompt finished first (untimed). *radix on* learns each prompt right after its "
        "prefill and defers a request that shares a long uncached prefix with one already in the "
        "prefill batch; *no in-batch sharing* turns the deferral off; *learns at finish only* is SGLang's "
        "first release (and minisglang's before). *reused*: share of the prompt tokens the tree "
        "supplied. transformers runs all prompts as one left-padded batch, with no cache between "
        "calls; its prefill tokens count the padding.",
        "",
        "| scenario | system | prefill tokens | prefill batches | cached tokens | reused | requests/s "
        "| prefill tokens vs radix off | speed vs radix off | speed vs transformers | same text as radix off |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['scenario']} | {r['system']} | {r['prefill']:,} | {r['batches']} | {r['cached']:,} "
            f"| {r['reused']:.0%} "
            f"| {r['rps']:.1f} | {r['tokens_vs_off']:.2f}x | {r['rps_vs_off']:.2f}x "
            f"| {r['rps_vs_hf']:.2f}x | {r['same_text']}/{args.requests} |"
        )
    lines += [
        "",
        machine_line(f"load average {load_before:.1f} before the runs"),
        "",
    ]
    table = "\n".join(lines)
    write_results(table, args.output)
    cold_on, cold_first = results[("cold", "radix on")], results[("cold", "radix on, learns at finish only")]
    print(
        f"cold burst: the tree supplied {cold_on['cached_tokens'] / prompt_tokens:.0%} of the prompt tokens "
        f"(learning at finish only: {cold_first['cached_tokens'] / prompt_tokens:.0%}); "
        f"{cold_first['seconds'] / cold_on['seconds']:.2f}x the requests/s"
    )
    warm_on, warm_off = results[("warm", "radix on")], results[("warm", "radix off")]
    print(
        f"warm cache: radix on computes {warm_off['prefill_tokens'] / warm_on['prefill_tokens']:.1f}x fewer "
        f"prefill tokens and serves {warm_off['seconds'] / warm_on['seconds']:.2f}x the requests/s of radix off, "
        f"{hf_result['seconds'] / warm_on['seconds']:.2f}x those of transformers generate"
    )


if __name__ == "__main__":
    main()
