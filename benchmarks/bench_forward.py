"""Tokens per second of our forward over the KV pool against transformers' ``generate``.

Both run the same checkpoint, in the same process, on the same random prompts, greedy:

* prefill: ``--prefill-batch`` prompts of ``--prompt-len`` tokens in one EXTEND batch,
  against ``generate(max_new_tokens=1)`` (one prefill forward plus one argmax).
* decode at batch B: ``--decode-steps`` DECODE steps after an untimed prefill, against
  ``generate(max_new_tokens=1 + steps)`` minus ``generate(max_new_tokens=1)``.

The two contenders take turns (ours, theirs, ours, ...) so that load from other
processes on a shared machine hits both alike; each number is the median of
``--repeats`` turns after one warm-up turn. Prints the table with ratios and writes it
to benchmarks/results/forward.md.

    python benchmarks/bench_forward.py [--model-path DIR] [--batch-sizes 1,16,64]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from _results import machine_line, write_results  # benchmarks/_results.py (scripts run from benchmarks/)
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM

import minisglang
from minisglang.memory_pool import ReqToTokenPool, TokenToKVPool
from minisglang.model import ForwardBatch, load_model

RESULTS = Path(__file__).parent / "results" / "forward.md"


def timed(fn) -> float:
    """Wall seconds of ``fn()``."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def take_turns(measure_ours, measure_theirs, repeats: int) -> tuple[float, float]:
    """Median seconds of each measurement (a function returning seconds), alternating
    the two, after one warm-up turn each."""
    measure_ours(), measure_theirs()
    ours, theirs = [], []
    for _ in range(repeats):
        ours.append(measure_ours())
        theirs.append(measure_theirs())
    return statistics.median(ours), statistics.median(theirs)


def our_prefill(model, prompts, extra_len: int = 0):
    """Prefill ``prompts`` into fresh pools (room for ``extra_len`` more tokens each);
    returns ``(req_pool, kv_pool, request slots, greedy next tokens)``."""
    cfg = model.config
    max_len = len(prompts[0]) + extra_len
    req_pool = ReqToTokenPool(len(prompts), max_len)
    kv_pool = TokenToKVPool(len(prompts) * max_len, cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, model.dtype)
    reqs = [req_pool.alloc() for _ in prompts]
    loc = kv_pool.alloc(sum(map(len, prompts)))
    fb = ForwardBatch.extend(reqs, [0] * len(prompts), prompts, loc, req_pool, kv_pool)
    return req_pool, kv_pool, reqs, model(fb).argmax(-1).tolist()


def our_decode_seconds(model, prompts, steps: int) -> float:
    """Seconds of ``steps`` greedy DECODE steps of the whole batch, after an untimed prefill."""
    req_pool, kv_pool, reqs, next_ids = our_prefill(model, prompts, extra_len=steps)
    lens = [len(p) for p in prompts]
    start = time.perf_counter()
    for _ in range(steps):
        fb = ForwardBatch.decode(reqs, lens, next_ids, kv_pool.alloc(len(reqs)), req_pool, kv_pool)
        next_ids = model(fb).argmax(-1).tolist()
        lens = [n + 1 for n in lens]
    return time.perf_counter() - start


def hf_generate(hf, prompts, new_tokens: int) -> None:
    """transformers' greedy generate of exactly ``new_tokens`` tokens per prompt."""
    input_ids = torch.tensor(prompts)
    with torch.inference_mode():
        hf.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=0,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-path", default=minisglang.DEFAULT_MODEL_PATH)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--prefill-batch", type=int, default=8)
    parser.add_argument("--decode-prompt-len", type=int, default=32)
    parser.add_argument("--decode-steps", type=int, default=32)
    parser.add_argument("--batch-sizes", default="1,16,64")
    parser.add_argument("--repeats", type=int, default=5)
    # One thread keeps both sides stable on a shared machine, where extra OpenMP
    # threads spin against other processes.
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = load_model(args.model_path)
    hf = AutoModelForCausalLM.from_pretrained(args.model_path, dtype=torch.float32).eval()
    vocab = model.config.vocab_size

    def prompts(batch, length):
        return torch.randint(0, vocab, (batch, length)).tolist()

    rows = []  # (phase, batch, tokens, ours tok/s, transformers tok/s)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    with tqdm(total=1 + len(batch_sizes), desc="bench_forward") as bar:
        p = prompts(args.prefill_batch, args.prompt_len)
        t_ours, t_hf = take_turns(
            lambda: timed(lambda: our_prefill(model, p)), lambda: timed(lambda: hf_generate(hf, p, 1)), args.repeats
        )
        tokens = args.prefill_batch * args.prompt_len
        rows.append(
            (f"prefill ({args.prompt_len} tokens/request)", args.prefill_batch, tokens, tokens / t_ours, tokens / t_hf)
        )
        bar.update()
        for batch in batch_sizes:
            p = prompts(batch, args.decode_prompt_len)
            steps = args.decode_steps
            t_ours, t_hf = take_turns(
                lambda: our_decode_seconds(model, p, steps),
                lambda: timed(lambda: hf_generate(hf, p, 1 + steps)) - timed(lambda: hf_generate(hf, p, 1)),
                args.repeats,
            )
            tokens = batch * steps
            rows.append((f"decode ({steps} steps)", batch, tokens, tokens / t_ours, tokens / max(t_hf, 1e-9)))
            bar.update()

    cfg = model.config
    params = sum(t.numel() for t in model.parameters())
    lines = [
        "# Forward throughput: minisglang vs transformers `generate`",
        "",
        f"Model: `{Path(args.model_path).name}` ({cfg.architecture}, {params / 1e6:.2f}M parameters, "
        f"{cfg.num_layers} layers, hidden {cfg.hidden_size}), fp32, greedy, random prompts. "
        f"Median of {args.repeats} alternating turns after a warm-up.",
        "",
        "| phase | batch | tokens | minisglang tok/s | transformers tok/s | minisglang / transformers |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for phase, batch, tokens, ours_tps, hf_tps in rows:
        lines.append(f"| {phase} | {batch} | {tokens} | {ours_tps:,.0f} | {hf_tps:,.0f} | {ours_tps / hf_tps:.2f}x |")
    lines += [
        "",
        machine_line(),
        "",
    ]
    table = "\n".join(lines)
    write_results(table, args.output)


if __name__ == "__main__":
    main()
