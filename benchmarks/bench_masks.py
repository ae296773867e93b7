"""Mask time per decode step: s1 (a bool row and a masked_fill_ per request) vs s2 (one
packed fill and one apply for the whole batch).

Side by side in one run, on real JSON-object masks:

* per vocabulary (anthropic's 65k byte-level BPE, Mistral NeMo's 131k tekken), with the
  logits as wide as a model would pad them (the vocabulary rounded up to the next multiple
  of 64, so padding columns exist): one JSON-object regex is compiled once by stage s2
  (token index + packed rows); the requests sit in varied states, taken by walking an
  example JSON text character by character (inside a string most of the vocabulary is
  allowed, after a key only a few tokens); at batch 1, 8 and 64 we time
  `MaskedFillStage.mask_logits` (s1) and `BatchedMaskStage.mask_logits` (s2, with the
  compiled CPU apply the engine uses, and with the readable torch apply, option
  `mask_apply="torch"`), interleaved, and s2's parts on their own (`allocate_mask` +
  `fill_mask`; the kernel apply; the torch apply). The "floor" is one bare `masked_fill_`
  over the `[B, V]` logits with a ready bool mask: what the torch apply cannot go below, and
  a pass that s1 makes too (row by row);
* on the bundled model, one engine with 64 constrained requests decoding together: the
  wall time of whole decode steps (`engine.step()`) and of the mask inside them, with s2,
  then s1 as the constraint layer: the mask's share of a decode step.

The machine is shared, so every time is the best of `--repeats` runs after one warm-up
(`--fill-repeats` for the sub-millisecond fill): what the code costs when it gets the CPU.
torch runs with `--threads` threads (default 1: on a busy 2-core machine torch's thread
pool stalls whole operations whenever one of its threads is descheduled).
Prints the tables and writes benchmarks/results/masks.md.

    python benchmarks/bench_masks.py [--batch-sizes 1,8,64] [--repeats 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

import minisglang as sgl
from minisglang.constrained.bitmask import apply_bitmask, apply_bitmask_torch, unpack_bits
from minisglang.constrained.regex_dfa import ByteDFA, compile_regex
from minisglang.constrained.token_fsm import TokenFSM
from minisglang.core import Req, SamplingParams
from minisglang.stages.base import StageContext
from minisglang.stages.s1_masked_fill import FSMState, MaskedFillStage
from minisglang.stages.s2_batched_mask import BatchedMaskStage

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from _results import machine_line, write_results  # noqa: E402  (benchmarks/_results.py: scripts run from benchmarks/)
from real_tokenizers import anthropic_65k, mistral_tekken  # noqa: E402  (the tests' loaders)

RESULTS = Path(__file__).parent / "results" / "masks.md"
# {"name": string of at most 20 characters, "age": integer, "hobbies": array of strings},
# with optional single spaces, as a JSON-schema compiler would write it.
STRING = r'"([^"\\\x00-\x1F]|\\["\\/bfnrt])*"'
JSON_REGEX = (
    r'\{[ ]?"name"[ ]?:[ ]?"([^"\\\x00-\x1F]|\\["\\/bfnrt]){0,20}"[ ]?,[ ]?"age"[ ]?:[ ]?'
    r'(-)?(0|[1-9][0-9]*)[ ]?,[ ]?"hobbies"[ ]?:[ ]?\[[ ]?(' + STRING + r"(,[ ]?" + STRING + r")*)?[ ]?\][ ]?\}"
)
EXAMPLE = '{"name": "Li Lei", "age": 31, "hobbies": ["chess", "tea"]}'
TARGET_SPEEDUP, TARGET_SHARE, TARGET_FILL_MS = 100.0, 0.05, 0.1


def best_seconds(fn, repeats: int) -> float:
    """Shortest wall time of `fn()` over `repeats` runs, after one warm-up run."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def example_states(fsm: TokenFSM) -> list[int]:
    """The FSM states after each character of EXAMPLE (a mix of permissive and strict states)."""
    dfa = ByteDFA.from_char_dfa(compile_regex(JSON_REGEX))  # same numbering as the compiled FSM
    states = [dfa.walk_bytes(0, EXAMPLE[:k].encode()) for k in range(len(EXAMPLE))]
    return [s for s in states if s in fsm.index.state_to_tokens]


def constrained_reqs(fsm: TokenFSM, states: list[int], batch: int) -> list[Req]:
    """`batch` requests in states spread evenly along `states` (cycling past its end)."""
    reqs = []
    for i in range(batch):
        req = Req(prompt="", origin_input_ids=[0], sampling_params=SamplingParams(regex=fsm.regex))
        req.grammar = FSMState(fsm, states[(2 * i + 1) * len(states) // (2 * batch) % len(states)])
        reqs.append(req)
    return reqs


def bench_vocabulary(name: str, tokenizer, batch_sizes: list[int], repeats: int, fill_repeats: int, bar) -> list[dict]:
    width = (len(tokenizer.token_bytes) // 64 + 1) * 64  # padded like a model's embedding
    ctx = StageContext(tokenizer, width, torch.device("cpu"))
    s1, s2 = MaskedFillStage(ctx), BatchedMaskStage(ctx)
    s2_torch = BatchedMaskStage(StageContext(tokenizer, width, torch.device("cpu"), {"mask_apply": "torch"}))
    start = time.perf_counter()
    fsm = s2.compile_fsm(JSON_REGEX)
    compile_s = time.perf_counter() - start
    states = example_states(fsm)
    rows = []
    for batch in batch_sizes:
        reqs = constrained_reqs(fsm, states, batch)
        logits = torch.randn(batch, width)
        allowed = [len(fsm.index.state_to_tokens[r.grammar.state]) for r in reqs]
        many = max(repeats, 20)  # the s2 parts are cheap: more runs
        t1 = best_seconds(lambda: s1.mask_logits(logits, reqs), repeats)
        t2 = best_seconds(lambda: s2.mask_logits(logits, reqs), many)
        t2_torch = best_seconds(lambda: s2_torch.mask_logits(logits, reqs), many)
        mask = s2.allocate_mask(batch)
        s2.fill_mask(mask, reqs)
        expected, fast = logits.clone(), logits.clone()
        apply_bitmask_torch(expected, mask)
        apply_bitmask(fast, mask)
        assert torch.equal(fast, expected)  # the kernel and the readable apply agree
        blocked = ~unpack_bits(mask, width)
        t_fill = best_seconds(lambda: s2.fill_mask(mask, reqs), fill_repeats)
        t_apply = best_seconds(lambda: apply_bitmask(logits, mask), many)
        t_apply_torch = best_seconds(lambda: apply_bitmask_torch(logits, mask), many)
        t_floor = best_seconds(lambda: logits.masked_fill_(blocked, float("-inf")), many)
        assert not any(r.finished for r in reqs)
        rows.append(
            {
                "vocab": name,
                "ids": len(tokenizer.token_bytes),
                "width": width,
                "batch": batch,
                "states": fsm.index.num_states,
                "compile_s": compile_s,
                "mean_allowed": statistics.mean(allowed),
                "s1": t1,
                "s2": t2,
                "s2_torch": t2_torch,
                "fill": t_fill,
                "apply": t_apply,
                "apply_torch": t_apply_torch,
                "floor": t_floor,
            }
        )
        bar.update()
    return rows


def bench_decode_share(batch: int, steps: int, bar) -> dict:
    """Decode steps of `batch` constrained requests on the bundled model: step and mask times."""
    engine = sgl.Engine(stage="s2", max_running_requests=batch)
    # Plain text of at least 600 characters: no request can finish during the measured steps,
    # and the DFA stays small (~600 states: s2 compiles it once per request).
    regex = r'\{"notes": "[A-Za-z ,.]{600,}"\}'
    user = "<|user|>\nExtract as JSON: {} lives in {}.\n<|assistant|>\n"
    names = ["Li Lei", "Wang Fang", "Zhang San", "Ada", "Zhou Jie", "Chen Jing", "Liu Yang", "Sun Li"]
    cities = ["Beijing", "Shanghai", "Chengdu", "Hangzhou", "Xi'an", "Wuhan", "Nanjing", "Paris"]
    reqs = [
        engine.submit(
            user.format(names[i % 8], cities[i // 8 % 8]),
            {"regex": regex, "temperature": 1.0, "seed": i, "max_new_tokens": 3 * steps + 8},
        )
        for i in range(batch)
    ]
    while len(engine.scheduler.running) < batch:  # prefill everyone first (untimed)
        engine.step()
    result = {"batch": batch, "vocab": engine.model.config.vocab_size}
    for name, stage_cls in [("s2-batched-mask", BatchedMaskStage), ("s1-masked-fill", MaskedFillStage)]:
        # Same model, scheduler and requests; only the constraint layer changes.
        stage = stage_cls(engine.stage.ctx)
        engine.stage = engine.scheduler.stage = stage
        mask_times = []
        real_mask = stage.mask_logits

        def timed_mask(logits, reqs_, real=real_mask, out=mask_times):
            start = time.perf_counter()
            real(logits, reqs_)
            out.append(time.perf_counter() - start)

        stage.mask_logits = timed_mask
        step_times = []
        for _ in range(steps + 1):  # the first step warms up
            assert len(engine.scheduler.running) == batch and not any(r.finished for r in reqs)
            start = time.perf_counter()
            engine.step()
            step_times.append(time.perf_counter() - start)
        result[name] = (min(step_times[1:]), min(mask_times[1:]))
        bar.update()
    engine.shutdown()
    return result


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-sizes", default="1,8,64")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--fill-repeats", type=int, default=300)
    parser.add_argument("--decode-batch", type=int, default=64)
    parser.add_argument("--decode-steps", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]

    vocabularies = {"anthropic 65k (byte-level BPE)": anthropic_65k, "tekken 131k (Mistral NeMo)": mistral_tekken}
    rows = []
    with tqdm(total=len(vocabularies) * len(batch_sizes) + 3, desc="bench_masks") as bar:
        for name, load in vocabularies.items():
            rows += bench_vocabulary(name, load(), batch_sizes, args.repeats, args.fill_repeats, bar)
        decode = bench_decode_share(args.decode_batch, args.decode_steps, bar)

    big = max(batch_sizes)
    lines = [
        "# Mask time: s1 (a bool row + masked_fill_ per request) vs s2 (one packed fill + one apply)",
        "",
        "Regex: a JSON object {name: string of at most 20 characters, age: integer, hobbies: array "
        "of strings} with optional spaces:",
        "",
        f"    {JSON_REGEX}",
        "",
        f"Requests sit in states taken along `{EXAMPLE}`, character by character (cycled). "
        f"Best of {args.repeats} runs for s1 and of {max(args.repeats, 20)} for s2 "
        f"(fill: {args.fill_repeats} runs), after a warm-up. 'mask' is the stage's whole `mask_logits`; "
        "s2 applies with the compiled CPU kernel (the engine's default), 's2, torch apply' with the "
        'readable `apply_bitmask_torch` (`mask_apply="torch"`).',
        "",
        "| vocabulary | logits width | batch | mean allowed tokens/row | s1 mask (ms) | s2 mask (ms) "
        "| s1 / s2 | s2, torch apply (ms) | s1 / s2, torch apply |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['vocab']} | {r['width']} | {r['batch']} | {r['mean_allowed']:,.0f} "
            f"| {r['s1'] * 1e3:.2f} | {r['s2'] * 1e3:.3f} | **{r['s1'] / r['s2']:.0f}x** "
            f"| {r['s2_torch'] * 1e3:.3f} | {r['s1'] / r['s2_torch']:.0f}x |"
        )
    lines += [
        "",
        "s2's parts alone: `fill_mask` into an allocated mask; the kernel apply (`apply_bitmask`); the "
        "readable apply (`apply_bitmask_torch`: unpack, then one `masked_fill_`). 'floor' is one bare "
        "`masked_fill_` over the `[B, V]` logits with a ready bool mask: the least the readable apply "
        "must do, and a pass s1 makes too (row by row). The kernel goes below it by skipping the "
        "all-ones words, so it never touches most logits of a permissive row.",
        "",
        "| vocabulary | batch | s2 fill (ms) | kernel apply (ms) | torch apply (ms) | floor (ms) "
        "| torch apply / kernel apply |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['vocab']} | {r['batch']} | {r['fill'] * 1e3:.3f} | {r['apply'] * 1e3:.3f} "
            f"| {r['apply_torch'] * 1e3:.3f} | {r['floor'] * 1e3:.3f} "
            f"| {r['apply_torch'] / r['apply']:.1f}x |"
        )
    step2, mask2 = decode["s2-batched-mask"]
    step1, mask1 = decode["s1-masked-fill"]
    lines += [
        "",
        f"One decode step of the bundled model (vocabulary {decode['vocab']}) with {decode['batch']} constrained "
        f"requests in one batch (`engine.step()`: forward, mask, sample, advance), best of "
        f"{args.decode_steps} steps per stage (stage s2 compiles every request's regex on its own, so "
        "the batch holds 64 FSM objects; the fill stacks their rows in one copy all the same):",
        "",
        "| stage | decode step (ms) | mask inside it (ms) | mask share of the step |",
        "|---|---:|---:|---:|",
        f"| s1-masked-fill | {step1 * 1e3:.1f} | {mask1 * 1e3:.2f} | {mask1 / step1:.1%} |",
        f"| s2-batched-mask | {step2 * 1e3:.1f} | {mask2 * 1e3:.2f} | {mask2 / step2:.1%} |",
        "",
        "Targets:",
        "",
        "| target | measured | |",
        "|---|---|---|",
    ]
    for r in rows:
        if r["batch"] == big:
            speedup = r["s1"] / r["s2"]
            lines.append(
                f"| s2 >= {TARGET_SPEEDUP:.0f}x faster than s1 at batch {big}, {r['vocab']} "
                f"| {speedup:.0f}x | {verdict(speedup >= TARGET_SPEEDUP)} |"
            )
    for r in rows:
        if r["batch"] == big:
            lines.append(
                f"| a {big}-row fill <= {TARGET_FILL_MS} ms, {r['vocab']} | {r['fill'] * 1e3:.3f} ms "
                f"| {verdict(r['fill'] * 1e3 <= TARGET_FILL_MS)} |"
            )
    lines += [
        f"| s2 mask <= {TARGET_SHARE:.0%} of a decode step at batch {decode['batch']} (bundled model) "
        f"| {mask2 / step2:.1%} | {verdict(mask2 / step2 <= TARGET_SHARE)} |",
        "",
        "Compile of the regex by stage s2 (token index + packed rows), once per vocabulary: "
        + "; ".join(f"{r['vocab']} {r['compile_s']:.1f} s ({r['states']} states)" for r in rows if r["batch"] == big)
        + ".",
        "",
        machine_line(),
        "",
    ]
    table = "\n".join(lines)
    write_results(table, args.output)


if __name__ == "__main__":
    main()
