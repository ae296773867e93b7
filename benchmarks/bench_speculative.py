"""Speculative decoding under a grammar (stage s7) against one token per forward (s6).

The workload is bench_extraction_service.py's (seeded): extraction requests, half English,
half Chinese, a shared ~300-token instruction, a document of 50-400 tokens, a greedy answer
constrained by the Person schema, Poisson arrivals at `--rate`. Each system serves the
same trace one after another, through the same serving loop:

* s6, jump_forward=False: one token per decode forward (the oracle of s7's outputs);
* s6 with s4's jump-forward (re-tokenize, re-admit, prefill the forced text);
* s7 without drafts (`speculative_algorithm=None`);
* s7 NGRAM (prompt lookup) with k = 2, 4, 8 draft tokens;
* s7 FORCED (the grammar's forced text only), k = 4;
* s7 FORCED+NGRAM (forced text, then lookup), k = 4.

Per system: requests/s, CPU seconds of this process, decode forwards (s6) and verify
forwards (s7) with their ratio to s6's decode forwards, prefill forwards and tokens (a jump
re-admits: those grow), draft tokens kept per verify forward, and whether every output
text equals s6's (greedy: it must).

    python benchmarks/bench_speculative.py [--requests 64] [--rate R] [--quick]

Prints the table; writes benchmarks/results/speculative.md.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

import minisglang
from minisglang.engine import Engine, default_torch_threads
from minisglang.tokenizer import Tokenizer

from _results import machine_line, model_checksum, write_results  # benchmarks/_results.py
from bench_extraction_service import SCHEMA, serve_minisglang, valid, workload

RESULTS = Path(__file__).parent / "results" / "speculative.md"
ORACLE = "s6, one token per forward"


def systems(k_values: list[int]) -> dict[str, dict]:
    """name -> Engine keyword arguments."""
    out = {ORACLE: {"stage": "s6", "jump_forward": False},
           "s6 + jump-forward (s4's)": {"stage": "s6", "jump_forward": True},
           "s7, no drafts": {"stage": "s7", "speculative_algorithm": None}}
    for k in k_values:
        out[f"s7 NGRAM, k={k}"] = {"stage": "s7", "speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": k}
    out["s7 FORCED, k=4"] = {"stage": "s7", "speculative_algorithm": "FORCED", "speculative_num_draft_tokens": 4}
    out["s7 FORCED+NGRAM, k=4"] = {"stage": "s7", "speculative_algorithm": "FORCED+NGRAM",
                                   "speculative_num_draft_tokens": 4}
    return out


def serve(engine: Engine, prompts: list[str], arrivals: list[float], params: dict) -> dict:
    """bench_extraction_service's serving loop, plus the verify forwards and kept drafts."""
    s = engine.scheduler
    verifies = s.forward_counts.get("verify", 0)
    first = len(s.trace)
    made = []
    make = engine.make_request
    engine.make_request = lambda *a: made.append(make(*a)) or made[-1]   # to read each request's counts
    try:
        result = serve_minisglang(engine, prompts, arrivals, params)
    finally:
        del engine.make_request
    result["kept"] = sum(r.spec_accepted_tokens for r in made)
    result["verifies_per_request"] = sum(r.spec_verify_ct or 0 for r in made)
    result["verify_forwards"] = s.forward_counts.get("verify", 0) - verifies
    events = list(s.trace)[first:]
    result["jumps"] = sum(e["event"] == "jump" for e in events)
    result["drafted"] = sum(sum(e["drafts"]) for e in events if e["event"] == "verify")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-path", default=minisglang.DEFAULT_MODEL_PATH)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--rate", type=float, default=32.0, help="Poisson arrival rate, requests/s")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=default_torch_threads(), help="torch threads")
    ap.add_argument("--k", type=int, nargs="+", default=[2, 4, 8], help="NGRAM's draft counts")
    ap.add_argument("--quick", action="store_true", help="16 requests (a smoke run)")
    ap.add_argument("--output", type=Path, default=RESULTS)
    args = ap.parse_args()
    if args.quick:
        args.requests = min(args.requests, 16)

    tok = Tokenizer.from_pretrained(args.model_path)
    prompts, arrivals, _ = workload(tok, args.requests, args.rate, args.seed)
    params = {"json_schema": json.dumps(SCHEMA, ensure_ascii=False), "temperature": 0,
              "max_new_tokens": args.max_new_tokens}
    results, loads = {}, {}
    began = time.perf_counter()
    for name, options in systems(args.k).items():
        engine = Engine(args.model_path, torch_threads=args.threads, **options)
        engine.generate(tok.apply_chat_template([{"role": "user", "content": "Hi"}]), params)   # compile (untimed)
        loads[name] = os.getloadavg()[0]
        print(f"serving {args.requests} requests: {name} ...", flush=True)
        results[name] = r = serve(engine, prompts, arrivals, params)
        engine.shutdown()
        print(f"  {args.requests / r['wall']:.2f} requests/s, {r['decode_forwards']} decode + "
              f"{r['verify_forwards']} verify forwards", flush=True)
    minutes = (time.perf_counter() - began) / 60

    n = args.requests
    base = results[ORACLE]
    base_steps = base["decode_forwards"]
    rows = ["| system | requests/s | CPU s | decode forwards | verify forwards | (decode + verify) / s6's decode "
            "| prefill forwards | prefill tokens | drafts fed | drafts kept | kept per request-verify "
            "| valid | same text as s6 |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        steps = r["decode_forwards"] + r["verify_forwards"]
        per_verify = f"{r['kept'] / r['verifies_per_request']:.2f}" if r["verifies_per_request"] else "-"
        same = sum(a == b for a, b in zip(r["texts"], base["texts"]))
        rows.append(f"| {name} | {n / r['wall']:.2f} | {r['cpu']:.1f} | {r['decode_forwards']} | {r['verify_forwards']} "
                    f"| {steps / base_steps:.2f} | {r['prefill_forwards']} | {r['prefill_tokens']} | {r['drafted']} "
                    f"| {r['kept']} | {per_verify} | {sum(map(valid, r['texts']))}/{n} | {same}/{n} |")
    speedups = {name: (n / r["wall"]) / (n / base["wall"]) for name, r in results.items()}
    best = max((name for name in results if name.startswith("s7")), key=speedups.get)
    text = "\n".join([
        "# Speculative decoding under a grammar (stage s7) vs one token per forward (s6)",
        "",
        f"bench_extraction_service.py's workload: {n} greedy extraction requests (schema-constrained, our fsm "
        f"backend), Poisson arrivals at {args.rate:g}/s, max_new_tokens {args.max_new_tokens}; every system serves "
        f"the same trace through the same loop, one after another. Model checksum "
        f"{model_checksum(args.model_path)}.",
        "",
        *rows,
        "",
        "A step in which no request has a draft is a plain decode forward; a verify forward feeds each "
        "request its last token and its drafts. Drafts fed: draft tokens in verify forwards; kept: those the "
        "grammar allowed and the model agreed with (each verify also yields one token of the model's own); "
        "kept per request-verify: kept / (requests x verify forwards they took part in).",
        "",
        f"Fastest s7 system here: {best}, {speedups[best]:.2f}x s6's requests/s; its forwards (decode + verify) "
        f"are {(results[best]['decode_forwards'] + results[best]['verify_forwards']) / base_steps:.2f}x s6's "
        f"decode forwards. Load average before each run: "
        + ", ".join(f"{name} {load:.1f}" for name, load in loads.items()) + ".",
        "",
        machine_line(f"{minutes:.1f} min"),
    ])
    write_results(text + "\n", args.output)


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
