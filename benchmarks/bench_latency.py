"""Jump-forward where its claim lives: request latency with few requests in flight.

The LMSYS post on compressed FSMs claims "up to 2x lower latency" for jump-forward. A
batch of 64 equal requests is the wrong place to look on a CPU (matmuls are most of the
time and a re-admission costs what the skipped decode steps saved: see
benchmarks/results/jump_forward.md). Latency is: with one request in flight, a decode step
costs little besides the step's fixed overhead, and every forced token jump-forward
appends is a step it does not take.

The workload: benchmarks/bench_jump_forward.py's extraction chats and its fixed-key JSON
regex (six keys, fixed separators: the regex a fixed-key JSON schema compiles to), greedy.
Four systems, each its own engine on the bundled model:

* s3: no jump-forward (every forced token is a decode step);
* s4: jump-forward (forced strings appended, retokenized, the request re-admitted through
  the radix tree);
* s5 with ``jump_forward=False`` and s5 with ``jump_forward=True`` (the default): the
  grammar-backend stage, same comparison.

Two arrival patterns, each a closed loop over the step API: *1 at a time* (a request is
submitted when the previous one finished) and *4 concurrent* (four in flight; one is
submitted whenever one finishes). A request's latency is from its submit to the end of the
step that finished it. The regex is compiled before timing (one untimed request) and the
radix tree is emptied before every run; the systems are interleaved run by run and the
latencies of all `--repeats` runs are pooled, so a busy machine slows all of them alike.

    python benchmarks/bench_latency.py [--requests 24] [--repeats 3] [--output FILE]

Prints the table and the ratios; writes benchmarks/results/latency.md.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import time
from pathlib import Path

from tqdm.auto import tqdm

import minisglang
from minisglang.engine import Engine

from _results import machine_line, write_results  # benchmarks/_results.py (scripts run from benchmarks/)
from bench_jump_forward import KEYS_REGEX, prompts

RESULTS = Path(__file__).parent / "results" / "latency.md"
SYSTEMS = {"s3": ("s3", {}), "s4": ("s4", {}),
           "s5, jump_forward off": ("s5", {"jump_forward": False}), "s5, jump_forward on": ("s5", {})}
PAIRS = [("s3", "s4"), ("s5, jump_forward off", "s5, jump_forward on")]   # (without, with) jump-forward
TARGET = 2.0


def closed_loop(engine: Engine, chats: list[str], params: dict, concurrency: int) -> dict:
    """Serve `chats` keeping `concurrency` requests in flight; latencies in submit order."""
    s = engine.scheduler
    s.tree_cache.evict(10**9)
    forwards = dict(s.forward_counts)
    jumps_before = getattr(engine.stage, "jumps", 0)
    latency, texts = [0.0] * len(chats), [""] * len(chats)
    in_flight: dict[int, tuple[int, object, float]] = {}   # rid -> (index, req, submit time)
    next_chat = 0
    while next_chat < len(chats) or in_flight:
        while next_chat < len(chats) and len(in_flight) < concurrency:
            req = engine.submit(chats[next_chat], params)
            in_flight[req.rid] = (next_chat, req, time.perf_counter())
            next_chat += 1
        engine.step()
        now = time.perf_counter()
        for rid, (i, req, submitted) in list(in_flight.items()):
            if req.released:
                del in_flight[rid]
                latency[i], texts[i] = now - submitted, req.output_text
    jumps = getattr(engine.stage, "jumps", 0) - jumps_before
    return {"latency": latency, "texts": texts, "jumps": jumps,
            "decode": s.forward_counts["decode"] - forwards["decode"],
            "prefill": s.forward_counts["prefill"] - forwards["prefill"]}


def p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[98]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-path", default=None, help="checkpoint directory (default: the bundled model)")
    ap.add_argument("--requests", type=int, default=24, help="requests per run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--output", type=Path, default=RESULTS)
    args = ap.parse_args()

    engines = {name: Engine(model_path=args.model_path, stage=stage, **options)
               for name, (stage, options) in SYSTEMS.items()}
    chats = prompts(engines["s4"], args.requests)
    params = {"regex": KEYS_REGEX, "temperature": 0, "max_new_tokens": args.max_new_tokens}
    for engine in engines.values():   # compile the regex now: compile time is chapter 3's subject
        engine.generate(chats[0], params)

    modes = {"1 at a time": 1, "4 concurrent": 4}
    runs: dict[tuple[str, str], list[dict]] = {}
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    with tqdm(total=args.repeats * len(modes) * len(engines), desc="bench_latency") as bar:
        for _ in range(args.repeats):
            for mode, concurrency in modes.items():
                for name, engine in engines.items():
                    runs.setdefault((mode, name), []).append(closed_loop(engine, chats, params, concurrency))
                    bar.update()
    minutes = (time.perf_counter() - start) / 60
    for engine in engines.values():
        engine.shutdown()

    n = args.requests
    stats = {}
    for key, rs in runs.items():
        lat = [x for r in rs for x in r["latency"]]
        texts = rs[0]["texts"]
        assert all(r["texts"] == texts for r in rs), f"{key}: greedy runs gave different texts"
        stats[key] = {"mean": statistics.fmean(lat), "p50": statistics.median(lat), "p99": p99(lat),
                      "valid": sum(bool(re.fullmatch(KEYS_REGEX, t)) for t in texts),
                      "decode": rs[0]["decode"] / n, "prefill": rs[0]["prefill"] / n,
                      "jumps": rs[0]["jumps"] / n}

    lines = ["# Jump-forward latency: one request at a time and 4 concurrent", "",
             f"{n} extraction chats per run (benchmarks/bench_jump_forward.py's), greedy, constrained by its "
             f"fixed-key JSON regex; model `{Path(args.model_path or minisglang.DEFAULT_MODEL_PATH).name}`. "
             f"Latencies of {args.repeats} interleaved runs pooled ({args.repeats * n} per row). 'decode forwards', "
             "'prefill forwards' (the first admission and every re-admission after a jump) and 'jumps' are "
             "counted per request (a batched forward serves several requests).", "",
             "| arrivals | system | valid (re.fullmatch) | decode forwards | prefill forwards | jumps "
             "| mean (ms) | p50 (ms) | p99 (ms) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for (mode, name), st in stats.items():
        lines.append(f"| {mode} | {name} | {st['valid']}/{n} | {st['decode']:.1f} | {st['prefill']:.1f} "
                     f"| {st['jumps']:.1f} "
                     f"| {st['mean'] * 1e3:.0f} | {st['p50'] * 1e3:.0f} | {st['p99'] * 1e3:.0f} |")
    lines += ["", f"Latency without jump-forward over latency with it (target: >= {TARGET:.0f}x lower). "
              "'forwards' is the same ratio for model forwards (decode + prefill): what the latency ratio "
              "would be if every forward cost the same and a jump cost nothing else.", "",
              "| arrivals | pair | mean | p99 | forwards | target |", "|---|---|---:|---:|---:|---|"]
    for mode in modes:
        for without, with_jump in PAIRS:
            a, b = stats[(mode, without)], stats[(mode, with_jump)]
            mean, tail = a["mean"] / b["mean"], a["p99"] / b["p99"]
            forwards = (a["decode"] + a["prefill"]) / (b["decode"] + b["prefill"])
            verdict = "met" if min(mean, tail) >= TARGET else "**missed**"
            lines.append(f"| {mode} | {without} / {with_jump} | **{mean:.2f}x** | **{tail:.2f}x** "
                         f"| {forwards:.2f}x | {verdict} |")
    lines += ["", machine_line(f"load average {load_before:.1f} before the runs", f"{minutes:.1f} min"), ""]
    write_results("\n".join(lines), args.output)


if __name__ == "__main__":
    main()
