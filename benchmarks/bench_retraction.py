"""What reserving a share of max_new_tokens buys: chats without max_tokens in a small pool.

A chat without `max_tokens` may write to the end of the context, so the server gives it
`max_new_tokens` = min(context, pool) - prompt. Reserving all of that for each request
(`new_token_ratio=1.0`, the Engine's default) lets one run at a time when the pool is smaller
than two contexts; reserving a share (the server's 0.7 falling to 0.098, SGLang's) lets them
run together and retracts one when the pool runs out (minisglang/retraction.py). The
answers are the same (greedy); the table says how long the burst took, how many ran at once,
how long the last request waited for its first token, and what the retractions cost.

The workload: `--requests` chat prompts (extraction requests, unconstrained: the table gives
the mean answer length) arrive at once into a pool of `--pool` KV slots (1.5 contexts of the
bundled model by default). Each number is the median of `--repeats` runs, the settings
interleaved run by run so that a busy machine slows all of them alike.

    python benchmarks/bench_retraction.py [--requests 24] [--pool 1536] [--repeats 3]

Prints the table and the ratios; writes benchmarks/results/retraction.md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from _results import machine_line, write_results  # benchmarks/_results.py (scripts run from benchmarks/)
from tqdm.auto import tqdm

from minisglang.engine import Engine

RESULTS = Path(__file__).parent / "results" / "retraction.md"
NAMES = ["Li Lei", "Ada Brook", "Omar Said", "Wang Fang", "Mira Holt", "Kenji Sato", "Zhang Wei", "Lena Vos"]
SETTINGS = {
    "reserve all (1.0)": {"new_token_ratio": 1.0},
    "serve's share (0.7 -> 0.098)": {"new_token_ratio": 0.7, "min_new_token_ratio": 0.098},
}


def chats(n: int) -> list[list[dict[str, str]]]:
    return [
        [
            {
                "role": "user",
                "content": f"Extract name and age as JSON: {NAMES[i % len(NAMES)]} is {20 + i} years old "
                f"and lives in town number {i}.",
            }
        ]
        for i in range(n)
    ]


def burst(engine: Engine, messages: list[list[dict[str, str]]]) -> dict[str, float]:
    """Submit every chat at once, with the server's `max_new_tokens` for a chat without
    max_tokens; step until all finish."""
    room = min(engine.max_context_len, engine.scheduler.config.max_total_tokens)
    reqs = []
    start = time.perf_counter()
    for chat in messages:
        prompt = engine.tokenizer.encode_chat(chat, add_generation_prompt=True)
        reqs.append(engine.submit(prompt, {"temperature": 0, "max_new_tokens": room - len(prompt.ids)}))
    steps, together = 0, []
    before = engine.stats().retractions
    while not all(r.released for r in reqs):
        engine.step()
        steps += 1
        together.append(len(engine.scheduler.running))
    wall = time.perf_counter() - start
    return {
        "wall_s": wall,
        "steps": steps,
        "mean_running": statistics.mean(together),
        "max_running": max(together),
        "last_ttft_s": max(r.first_token_time - start for r in reqs if r.first_token_time is not None),
        "retractions": engine.stats().retractions - before,
        "answer_tokens": statistics.mean(len(r.output_ids) for r in reqs),
        "outputs": hash(tuple(tuple(r.output_ids) for r in reqs)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--pool", type=int, default=1536)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    engines = {name: Engine(max_total_tokens=args.pool, **opts) for name, opts in SETTINGS.items()}
    messages = chats(args.requests)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in SETTINGS}
    for _ in tqdm(range(args.repeats), desc="repeats"):
        for name, engine in engines.items():
            engine.scheduler.tree_cache.evict(args.pool)  # each burst starts cold,
            ratio = engine.scheduler.new_token_ratio
            ratio.value = ratio.initial  # at the ratio's initial value
            runs[name].append(burst(engine, messages))
    same = len({r["outputs"] for rs in runs.values() for r in rs}) == 1
    med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0] if k != "outputs"} for name, rs in runs.items()}
    context = next(iter(engines.values())).max_context_len
    lines = [
        f"# Reserving a share of max_new_tokens: {args.requests} chats without max_tokens, a pool of "
        f"{args.pool} KV slots (context {context})",
        "",
        "Written by benchmarks/bench_retraction.py (the docstring says what is measured). Medians of "
        f"{args.repeats} runs; greedy answers {'identical' if same else 'DIFFERENT'} in every setting and run, "
        f"{next(iter(med.values()))['answer_tokens']:.0f} tokens long on average.",
        "",
        "| admission reserves | burst wall (s) | steps | running at once (mean / max) | last first token (s) | retractions |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, m in med.items():
        lines.append(
            f"| {name} | {m['wall_s']:.2f} | {m['steps']:.0f} | {m['mean_running']:.1f} / {m['max_running']:.0f} "
            f"| {m['last_ttft_s']:.2f} | {m['retractions']:.0f} |"
        )
    full, share = med["reserve all (1.0)"], med["serve's share (0.7 -> 0.098)"]
    lines += [
        "",
        f"Ratios (reserve all / share): burst wall {full['wall_s'] / share['wall_s']:.1f}x, steps "
        f"{full['steps'] / share['steps']:.1f}x, last first token {full['last_ttft_s'] / share['last_ttft_s']:.1f}x.",
        "",
        machine_line(),
    ]
    write_results("\n".join(lines) + "\n", RESULTS)
    for engine in engines.values():
        engine.shutdown()


if __name__ == "__main__":
    main()
