"""The greedy pick of a decode step on the CPU: torch's argmax beside sampler.greedy_ids.

Every greedy decode step ends with the argmax of each row of the [B, V] masked logits. On
one CPU thread torch's argmax reads them several times slower than numpy's vectorised
argmax, which `sampler.greedy_ids` uses for float32 logits on the CPU (same ids: the first of
equal maxima, NaN above everything; tests/test_sampler.py). Beside them, the mask applied
before the pick (`bitmask.apply_bitmask`, a row allowing 1% of the tokens) and the forward of
the bundled model's shape with that vocabulary's output layer (one token per request), for
scale: the pick is part of the step's non-forward time, which overlap scheduling cannot
hide (chapter 08).

    python benchmarks/bench_sampling.py [--repeats 30]

Prints the table; writes benchmarks/results/sampling.md.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from _results import machine_line, write_results  # benchmarks/_results.py

from minisglang.constrained.bitmask import apply_bitmask, warm_up_apply_kernel
from minisglang.sampler import greedy_ids

RESULTS = Path(__file__).parent / "results" / "sampling.md"
VOCABULARIES = {"bundled 4k": 4096, "65k": 65000, "131k": 131072}
HIDDEN = 128  # the bundled model's hidden size: its output layer is [V, 128]


def best_ms(fn, repeats: int) -> float:
    """The fastest of `repeats` calls, in ms (the least disturbed by other jobs)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--output", type=Path, default=RESULTS)
    args = ap.parse_args()
    torch.set_num_threads(1)  # the engine's setting on this machine
    warm_up_apply_kernel(torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    rows = []
    for name, vocab in VOCABULARIES.items():
        head = torch.randn(vocab, HIDDEN, generator=generator)
        for batch in args.batches:
            logits = torch.randn(batch, vocab, generator=generator)
            allowed = torch.rand(batch, vocab, generator=generator) < 0.01
            mask = torch.zeros(batch, (vocab + 31) // 32, dtype=torch.int32)
            for t in range(32):  # pack bit t of each word
                column = allowed[:, t::32].to(torch.int64) << t
                mask[:, : column.shape[1]] |= column.to(torch.int32)
            assert greedy_ids(logits) == logits.argmax(dim=-1).tolist()
            hidden = torch.randn(batch, HIDDEN, generator=generator)
            torch_ms = best_ms(lambda: logits.argmax(dim=-1).tolist(), args.repeats)
            ours_ms = best_ms(lambda: greedy_ids(logits), args.repeats)
            apply_ms = best_ms(lambda: apply_bitmask(logits.clone(), mask), args.repeats)
            apply_ms -= best_ms(lambda: logits.clone(), args.repeats)
            head_ms = best_ms(lambda: hidden @ head.T, args.repeats)
            rows.append(
                f"| {name} | {batch} | {torch_ms:.3f} | {ours_ms:.3f} | {torch_ms / ours_ms:.1f}x | "
                f"{apply_ms:.3f} | {head_ms:.3f} |"
            )
    text = "\n".join(
        [
            "# The greedy pick on the CPU: torch.argmax beside sampler.greedy_ids",
            "",
            __doc__.split("\n\n")[1].replace("\n", " "),
            "",
            "Times in ms, the fastest of the repeats, one thread.",
            "",
            "| vocabulary | batch | torch.argmax | greedy_ids (numpy) | speed-up | apply the mask | output layer |",
            "|---|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
            machine_line(f"numpy {__import__('numpy').__version__}", f"{args.repeats} repeats"),
            "",
        ]
    )
    write_results(text, args.output)


if __name__ == "__main__":
    main()
