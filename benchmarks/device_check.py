"""Issues 18's and 34's batch-throughput ratios on an accelerator, in one table (run by device_check.sh).

On a CPU these ratios are out of reach for the workloads that name them (matmuls are most
of a batch's time; see results/jump_forward.md and results/backends.md); on a GPU a forward
costs little, so what each technique saves in steps and prefill shows. Three checks:

1. jump-forward throughput: `--jf-batch` (64) extraction chats at once with
   bench_jump_forward.py's six-key JSON regex, greedy: s4 over s3 requests/s (target 1.5x);
2. minisglang against transformers + outlines-core: `--hf-batch` (32) requests of
   bench_extraction_service.py's workload (a ~300-token shared instruction, documents of
   50-400 tokens, its JSON schema), all at once, greedy: minisglang (s5, fsm backend) over
   transformers `generate` with bench_backends.py's outlines-core logits processor
   (target 3x requests/s);
3. the mask cost per decode step at batch `--jf-batch`: our fsm backend's batched fill
   (on the CPU), the copy to the device and the apply, walking a valid JSON text token by
   token, beside the time of one s3 decode forward of check 1;
4. speculative decoding under a grammar (issue 34): `--jf-batch` extraction service
   requests at once, greedy, s7 FORCED+NGRAM (k=4) against s6 one token per forward, as
   bench_speculative.py serves them: requests/s (target 1.5x), decode + verify forwards over
   s6's decode forwards (target 0.5x) and outputs identical;
5. overlap scheduling (issue 34): the share of the scheduler's CPU work that runs while
   the forward does, batch `--jf-batch`, the 65k-vocabulary random-weight model of
   bench_overlap.py (target 70%).

Times are medians of `--repeats` alternating runs, grammars compiled beforehand, the radix
tree emptied before each run; on CUDA every timing synchronises the device.
`--smoke` shrinks everything so that the script runs end to end on a CPU in seconds
(tests/test_device_check.py); its numbers mean nothing.

    bash benchmarks/device_check.sh [--device cuda] [--smoke] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
from pathlib import Path

import torch
from _results import machine_line, write_results  # benchmarks/_results.py (scripts run from benchmarks/)
from bench_backends import OutlinesCoreProcessor
from bench_extraction_service import SCHEMA, valid, workload
from bench_jump_forward import KEYS_REGEX, prompts
from bench_overlap import measure_steps, random_model_65k
from bench_speculative import ORACLE
from bench_speculative import serve as serve_speculative
from bench_speculative import systems as speculative_systems
from outlines_core import Index
from outlines_core.json_schema import build_regex_from_schema
from transformers import AutoModelForCausalLM, LogitsProcessorList

import minisglang
from minisglang.backends.base import BaseGrammarObject, get_backend_class
from minisglang.backends.outlines_backend import OutlinesBackend
from minisglang.engine import Engine
from minisglang.model import ModelConfig
from minisglang.tokenizer import Tokenizer

RESULTS = Path(__file__).parent / "results" / "device_check.md"
# A valid answer to SCHEMA, walked token by token for the mask cost.
INSTANCE = {
    "name": "Anna Novak",
    "age": 34,
    "city": "Vienna",
    "occupation": "data analyst",
    "hobbies": ["chess", "hiking", "yoga"],
}


def seconds(fn, device: torch.device) -> float:
    """Wall seconds of `fn()`, the device's queued work included."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def alternate(runs: dict[str, callable], repeats: int, device: torch.device) -> dict[str, float]:
    """Median seconds of each run, the runs taking turns `repeats` times."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            times[name].append(seconds(fn, device))
    return {name: statistics.median(t) for name, t in times.items()}


def check_jump_forward(args, device) -> tuple[dict, float]:
    """s3 and s4 on the six-key regex; (rows, seconds of one s3 decode forward)."""
    engines = {name: Engine(args.model_path, stage=name, device=args.device) for name in ("s3", "s4")}
    chats = prompts(engines["s4"], args.jf_batch)
    params = {"regex": KEYS_REGEX, "temperature": 0, "max_new_tokens": args.max_new_tokens}
    outs = {}

    def run(name):
        engine = engines[name]
        engine.scheduler.tree_cache.evict(10**9)
        outs[name] = engine.generate(chats, [params] * len(chats))

    for name in engines:
        run(name)  # compiles the regex, warms the device
    decodes_before = engines["s3"].scheduler.forward_counts["decode"]
    times = alternate({name: (lambda name=name: run(name)) for name in engines}, args.repeats, device)
    s3_decodes = (engines["s3"].scheduler.forward_counts["decode"] - decodes_before) / args.repeats
    valid_counts = {name: sum(bool(re.fullmatch(KEYS_REGEX, o["text"])) for o in outs[name]) for name in engines}
    for engine in engines.values():
        engine.shutdown()
    ratio = times["s3"] / times["s4"]
    row = (
        f"jump-forward: s4 / s3 requests/s, batch {args.jf_batch}, six-key JSON regex",
        f"{ratio:.2f}x (s3 {args.jf_batch / times['s3']:.1f}/s, s4 {args.jf_batch / times['s4']:.1f}/s; "
        f"valid {valid_counts['s3']}/{args.jf_batch}, {valid_counts['s4']}/{args.jf_batch})",
        ">= 1.5x",
        ratio >= 1.5,
    )
    return row, times["s3"] / max(s3_decodes, 1)  # an upper bound: the s3 run's wall over its decode forwards


def check_transformers(args, device) -> tuple:
    """minisglang (s5, fsm) against transformers + outlines-core, one batch of --hf-batch requests."""
    engine = Engine(args.model_path, device=args.device)
    tok = engine.tokenizer
    chats, _, _, _ = workload(tok, args.hf_batch, rate=1.0, seed=0)
    schema = json.dumps(SCHEMA, ensure_ascii=False)
    params = {"json_schema": schema, "temperature": 0, "max_new_tokens": args.hf_max_new_tokens}
    hf = AutoModelForCausalLM.from_pretrained(args.model_path, dtype=torch.float32).to(device).eval()
    index = Index(build_regex_from_schema(schema), OutlinesBackend(tok, hf.config.vocab_size).vocabulary)
    eos = tok.eos_token_id
    encoded = [tok.encode(c) for c in chats]
    width = max(map(len, encoded))
    input_ids = torch.tensor([[eos] * (width - len(e)) + e for e in encoded], device=device)  # left padding
    attention = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded], device=device)
    texts = {}

    def ours():
        engine.scheduler.tree_cache.evict(10**9)
        texts["minisglang"] = [o["text"] for o in engine.generate(chats, [params] * len(chats))]

    def theirs():
        processor = OutlinesCoreProcessor(index, eos, len(chats))
        with torch.inference_mode():
            out = hf.generate(
                input_ids,
                attention_mask=attention,
                max_new_tokens=args.hf_max_new_tokens,
                do_sample=False,
                logits_processor=LogitsProcessorList([processor]),
                pad_token_id=eos,
                eos_token_id=eos,
            )
        rows = [row[: row.index(eos)] if eos in row else row for row in out[:, width:].tolist()]
        texts["transformers"] = [tok.decode(row) for row in rows]

    ours(), theirs()  # compile, warm up
    times = alternate({"minisglang": ours, "transformers": theirs}, args.repeats, device)
    engine.shutdown()
    n = args.hf_batch
    ratio = times["transformers"] / times["minisglang"]
    return (
        f"minisglang (s5, fsm) / transformers + outlines-core requests/s, batch {n}, extraction service prompts",
        f"{ratio:.2f}x (minisglang {n / times['minisglang']:.1f}/s, transformers {n / times['transformers']:.1f}/s; "
        f"valid {sum(map(valid, texts['minisglang']))}/{n}, {sum(map(valid, texts['transformers']))}/{n})",
        ">= 3x",
        ratio >= 3,
    )


def check_mask(args, device, decode_s: float) -> tuple:
    """Mean seconds of one batched fill + copy + apply, walking INSTANCE, at batch --jf-batch."""
    tok = Tokenizer.from_pretrained(args.model_path)
    width = ModelConfig.from_pretrained(Path(args.model_path)).vocab_size  # the logits' width
    backend = get_backend_class("fsm")(tok, width)
    grammar = backend.compile("json_schema", json.dumps(SCHEMA, ensure_ascii=False))
    rows = [grammar.copy() for _ in range(args.jf_batch)]
    entries = [(g, i) for i, g in enumerate(rows)]
    logits = torch.randn(args.jf_batch, width, device=device)
    steps = []
    for token_id in tok.encode(json.dumps(INSTANCE, ensure_ascii=False)):

        def step():
            mask = BaseGrammarObject.allocate_vocab_mask(width, args.jf_batch)
            type(rows[0]).fill_vocab_mask_batched(entries, mask)
            BaseGrammarObject.apply_vocab_mask(logits, BaseGrammarObject.move_vocab_mask(mask, device))

        step()  # the first visit of a state makes its row (lazy automaton): not a steady-state step
        steps.append(statistics.median(seconds(step, device) for _ in range(args.repeats)))
        for g in rows:
            g.accept_token(token_id)
    backend.shutdown()
    per_step = statistics.fmean(steps)
    return (
        f"mask per decode step (fsm backend fill + copy + apply), batch {args.jf_batch}",
        f"{per_step * 1e3:.2f} ms ({per_step / decode_s:.0%} of an s3 decode step, {decode_s * 1e3:.1f} ms)",
        "small beside a step",
        None,
    )


def check_speculative(args, device) -> tuple:
    """s7 FORCED+NGRAM (k=4) against s6 on --jf-batch extraction service requests at once."""
    names = [ORACLE, "s7 FORCED+NGRAM, k=4"]
    options = speculative_systems([4])
    engine = Engine(args.model_path, device=args.device, **options[names[0]])
    chats, _, _, _ = workload(engine.tokenizer, args.jf_batch, rate=1.0, seed=0)
    engine.shutdown()
    params = {
        "json_schema": json.dumps(SCHEMA, ensure_ascii=False),
        "temperature": 0,
        "max_new_tokens": args.hf_max_new_tokens,
    }
    served: dict[str, list[dict]] = {name: [] for name in names}
    engines = {name: Engine(args.model_path, device=args.device, **options[name]) for name in names}
    for engine in engines.values():
        engine.generate(chats[:1], [params])  # compile the schema, warm the device
    for _ in range(args.repeats):  # alternate, as `alternate` does
        for name, engine in engines.items():
            served[name].append(serve_speculative(engine, chats, params))
    for engine in engines.values():
        engine.shutdown()
    base, spec = (served[name] for name in names)
    ratio = statistics.median(r["wall"] for r in base) / statistics.median(r["wall"] for r in spec)
    forwards = (spec[-1]["decode_forwards"] + spec[-1]["verify_forwards"]) / max(base[-1]["decode_forwards"], 1)
    same = sum(a == b for a, b in zip(base[-1]["texts"], spec[-1]["texts"]))
    n = args.jf_batch
    return (
        f"speculative: s7 FORCED+NGRAM (k=4) / s6 requests/s, batch {n}, extraction service prompts",
        f"{ratio:.2f}x requests/s; (decode + verify) / s6's decode forwards {forwards:.2f}x; "
        f"same text as s6 {same}/{n}",
        ">= 1.5x, <= 0.5x, all the same",
        ratio >= 1.5 and forwards <= 0.5 and same == n,
    )


def check_overlap(args) -> tuple:
    """The hidden share of the scheduler's CPU work at batch --jf-batch, 65k vocabulary."""
    steps = 40 if not args.smoke else 6
    with tempfile.TemporaryDirectory() as tmp:
        m = measure_steps(str(random_model_65k(Path(tmp))), args.jf_batch, steps, args.repeats, args.device)
    return (
        f"overlap: scheduler CPU work hidden behind the forward, batch {args.jf_batch}, 65k vocabulary",
        f"{m['hidden_trace']:.0%} by the trace, {m['hidden_clock']:.0%} by the clock (step "
        f"{1000 * m['step_plain']:.2f} -> {1000 * m['step_overlap']:.2f} ms, forward {1000 * m['forward_plain']:.2f} ms)",
        ">= 70% (trace)",
        m["hidden_trace"] >= 0.7,
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--model-path", default=minisglang.DEFAULT_MODEL_PATH)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: proves the script runs (CPU, seconds)")
    ap.add_argument(
        "--output",
        type=Path,
        default=None,
        help=f"also write the table here (default: {RESULTS.relative_to(RESULTS.parents[2])} unless --smoke)",
    )
    args = ap.parse_args(argv)
    if args.smoke:
        args.jf_batch, args.hf_batch, args.max_new_tokens, args.hf_max_new_tokens, args.repeats = 2, 2, 24, 24, 1
    else:
        args.jf_batch, args.hf_batch, args.max_new_tokens, args.hf_max_new_tokens = 64, 32, 160, 96
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device here (use --device cpu with --smoke)")

    start = time.perf_counter()
    jump_row, decode_s = check_jump_forward(args, device)
    rows = [
        jump_row,
        check_transformers(args, device),
        check_mask(args, device, decode_s),
        check_speculative(args, device),
        check_overlap(args),
    ]
    minutes = (time.perf_counter() - start) / 60
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    lines = [
        f"# Device check on {name}" + (" (--smoke: sizes too small to mean anything)" if args.smoke else ""),
        "",
        "| check | measured | target | verdict |",
        "|---|---|---|---|",
    ]
    for check, measured, target, ok in rows:
        verdict = "-" if ok is None else ("met" if ok else "**missed**")
        lines.append(f"| {check} | {measured} | {target} | {verdict} |")
    lines += ["", machine_line(f"device {name}", f"{minutes:.1f} min"), ""]
    output = args.output or (None if args.smoke else RESULTS)
    if output is None:
        print("\n".join(lines))
    else:
        write_results("\n".join(lines), output)


if __name__ == "__main__":
    main()
