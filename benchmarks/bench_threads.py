"""Torch threads on a shared machine: decode speed when another process takes a core.

torch splits each matmul over its intra-op threads, and the threads wait for each other at
the end of it. When another process (a grammar compile worker, another engineer's job)
runs on one of those cores, the thread on it gets half the core and every other thread
waits for it: the step takes as long as its slowest thread. So the engine's default
(`Engine(torch_threads=None)`, see `default_torch_threads`) leaves one core free when
there are at least two.

The workload: `--batch` requests decoding together (short prompts, `ignore_eos`, greedy,
`--new-tokens` each), so almost all the time is decode steps. For each thread count (1, 2,
and the default) and each condition (*quiet*: nothing started by us; *one core taken*: a
busy-loop process started for the run), decode steps per second over the whole
`generate`. The configurations are interleaved run by run, each the median of
`--repeats`. Other jobs on the machine load it too: the load average is recorded.

    python benchmarks/bench_threads.py [--batch 8] [--new-tokens 64] [--repeats 3] [--output FILE]

Prints the table; writes benchmarks/results/threads.md.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import statistics
import time
from pathlib import Path

import torch
from _results import machine_line, write_results  # benchmarks/_results.py (scripts run from benchmarks/)
from tqdm.auto import tqdm

from minisglang.engine import Engine, default_torch_threads

RESULTS = Path(__file__).parent / "results" / "threads.md"
PROMPTS = [
    "The capital of France is",
    "Numbers: 1, 2, 3,",
    "Once upon a time, there was a little",
    "Email: ",
    "<|user|>\nWhat is JSON?\n<|assistant|>\n",
    "2024-",
    "Dear friend,",
    "Li Lei is",
]


def busy_loop() -> None:
    """Spin forever: a process that wants a whole core."""
    while True:
        pass


@contextlib.contextmanager
def core_taken(taken: bool):
    """Run the block with a busy-loop process alive (when `taken`)."""
    if not taken:
        yield
        return
    proc = multiprocessing.get_context("spawn").Process(target=busy_loop, daemon=True)
    proc.start()
    time.sleep(0.2)  # let it get going before the timed run
    try:
        yield
    finally:
        proc.terminate()
        proc.join()


def decode_rate(engine: Engine, threads: int, batch: int, new_tokens: int) -> float:
    """Decode steps per second for one batched generate at `threads` intra-op threads."""
    # The thread count is one per process: set it again for this engine's run.
    torch.set_num_threads(threads)
    s = engine.scheduler
    s.tree_cache.evict(10**9)
    params = {"temperature": 0, "ignore_eos": True, "max_new_tokens": new_tokens}
    prompts = [PROMPTS[i % len(PROMPTS)] + f" {i}" for i in range(batch)]
    before = s.forward_counts["decode"]
    start = time.perf_counter()
    engine.generate(prompts, params)
    return (s.forward_counts["decode"] - before) / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--output", type=Path, default=RESULTS)
    args = ap.parse_args()

    default = default_torch_threads()
    counts = {"1": 1, "2": 2, f"default ({default})": default}
    engines = {name: Engine(stage="s0", torch_threads=t) for name, t in counts.items()}
    for name, engine in engines.items():  # warm-up: first-call allocations are not the subject
        decode_rate(engine, counts[name], args.batch, 4)

    conditions = {"quiet": False, "one core taken": True}
    rates: dict[tuple[str, str], list[float]] = {}
    load_before = os.getloadavg()[0]
    with tqdm(total=args.repeats * len(conditions) * len(engines), desc="bench_threads") as bar:
        for _ in range(args.repeats):
            for cond, taken in conditions.items():
                with core_taken(taken):
                    for name, engine in engines.items():
                        rates.setdefault((cond, name), []).append(
                            decode_rate(engine, counts[name], args.batch, args.new_tokens)
                        )
                        bar.update()
    for engine in engines.values():
        engine.shutdown()

    med = {key: statistics.median(r) for key, r in rates.items()}
    lines = [
        "# Torch threads on a shared machine: decode speed with a core taken",
        "",
        f"{args.batch} requests decoding together, {args.new_tokens} new tokens each (greedy, `ignore_eos`), "
        f"stage s0; decode steps per second over the whole `generate`, median of {args.repeats} interleaved "
        f"runs. *one core taken*: a busy-loop process runs during the timed run. The default is "
        f"`default_torch_threads()` = {default} on this machine ({os.cpu_count()} CPUs).",
        "",
        "| threads | " + " | ".join(f"{c} (steps/s)" for c in conditions) + " | taken / quiet |",
        "|---|" + "---:|" * (len(conditions) + 1),
    ]
    for name in counts:
        quiet, taken = med[("quiet", name)], med[("one core taken", name)]
        lines.append(f"| {name} | {quiet:.1f} | {taken:.1f} | {taken / quiet:.2f}x |")
    lines += ["", machine_line(f"load average {load_before:.1f} before the runs (other jobs count too)"), ""]
    write_results("\n".join(lines), args.output)


if __name__ == "__main__":
    main()
