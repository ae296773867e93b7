"""Speculative decoding under a grammar (stage s7) against one token per forward (s6), and
s4's jump-forward against the forced text drafted, on the same requests.

Two workloads (seeded), each served by every system one after another, greedy, all
requests submitted at once: the batches then do not depend on the machine's speed (with
arrivals over time, which requests share a forward depends on how fast the machine runs;
this one is shared with other jobs). The counts still move a little between runs: a step's
grammar work is bounded in seconds (`grammar_step_seconds`), so on a loaded machine a mask
chain or a forced-text search may be cut short and left to the next step:

* extraction service: bench_extraction_service.py's requests, half English, half Chinese, a
  shared ~300-token instruction, a document of 50-400 tokens, the answer constrained by the
  Person schema (our fsm backend);
* free text: the bundled model's copy requests (scripts/make_corpus.py's `copy_example`,
  held-out names: "Repeat exactly: ..." or "What is the person's name?"), no grammar: the
  answer is text the prompt holds, prompt lookup's best case.

Systems:

* s6, jump_forward=False: one token per decode forward (the oracle of s7's outputs);
* s6 with s4's jump-forward (re-tokenize, re-admit, prefill the forced text);
* s7 without drafts (`speculative_algorithm=None`);
* s7 NGRAM (prompt lookup) with k = 2, 4, 8 draft tokens;
* s7 FORCED (the grammar's forced text only), k = 4, and the same with the last forced
  piece drafted (the forced text's last token, which the model writes merged with what
  follows; s7 leaves it out and drafts the token across the seam instead: the stage's seam
  check is switched off here);
* s7 FORCED+NGRAM (forced text, then lookup), k = 4.

Per system: requests/s, CPU seconds of this process, decode forwards (s6) and verify
forwards (s7) with their ratio to s6's decode forwards, prefill forwards and tokens (a jump
re-admits: those grow), draft tokens fed and kept and their ratio (the acceptance rate),
and whether every output text equals s6's (greedy: it must). Then, side by side on the
extraction requests, what skipping the forced text costs each way: s4's jumps and their
re-admission prefills, against the forced drafts' verify forwards.

    python benchmarks/bench_speculative.py [--requests 64] [--repeats 3] [--quick]

Prints the tables; writes benchmarks/results/speculative.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import torch
from _results import machine_line, model_checksum, write_results  # benchmarks/_results.py
from bench_extraction_service import SCHEMA, valid, workload

import minisglang
from minisglang.engine import Engine, default_torch_threads
from minisglang.model.forward_batch import ForwardMode
from minisglang.tokenizer import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import make_corpus  # noqa: E402  (the bundled model's training tasks)

RESULTS = Path(__file__).parent / "results" / "speculative.md"
ORACLE = "s6, one token per forward"
JUMP = "s6 + jump-forward (s4's)"
FORCED = "s7 FORCED, k=4"
SEAM = "s7 FORCED, k=4, last forced piece drafted"


def systems(k_values: list[int]) -> dict[str, dict]:
    """name -> Engine keyword arguments (`draft_seam`: the bench's own switch, not an option)."""
    out = {
        ORACLE: {"stage": "s6", "jump_forward": False},
        JUMP: {"stage": "s6", "jump_forward": True},
        "s7, no drafts": {"stage": "s7", "speculative_algorithm": None},
    }
    for k in k_values:
        out[f"s7 NGRAM, k={k}"] = {"stage": "s7", "speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": k}
    out[FORCED] = {"stage": "s7", "speculative_algorithm": "FORCED", "speculative_num_draft_tokens": 4}
    out[SEAM] = {**out[FORCED], "draft_seam": True}
    out["s7 FORCED+NGRAM, k=4"] = {
        "stage": "s7",
        "speculative_algorithm": "FORCED+NGRAM",
        "speculative_num_draft_tokens": 4,
    }
    return out


def free_text_workload(tok: Tokenizer, n: int, seed: int) -> list[str]:
    """`n` copy requests in the model's chat format (seeded)."""
    rng = random.Random(seed)
    return [
        tok.apply_chat_template([{"role": "user", "content": make_corpus.copy_example(rng, held_out=True)["user"]}])
        for _ in range(n)
    ]


def serve(engine: Engine, prompts: list[str], params: dict) -> dict:
    """Submit every request, step until all are done; count forwards, prefills, drafts and
    s4's re-admissions."""
    s = engine.scheduler
    s.tree_cache.evict(10**9)  # no prefix left over from the warm-up or the other workload
    forwards, first = dict(s.forward_counts), len(s.trace)
    readmitted = {"forwards": 0, "tokens": 0}
    admit = s.get_new_prefill_batch

    def admit_and_count() -> list:
        """The scheduler's admission, counting re-admissions (a request that has output: s4's jump)."""
        chosen = admit()
        again = [r for r in chosen if r.output_ids]
        readmitted["forwards"] += bool(again)
        readmitted["tokens"] += sum(len(r.fill_ids) - r.prefix_len for r in again)
        return chosen

    s.get_new_prefill_batch = admit_and_count
    model, timed = s.model, []  # (kind, requests, tokens fed, seconds) of every forward
    forward = model.forward

    def timed_forward(fb, return_all_logits: bool = False):
        """The model's forward, timed as a prompt's (a prefill: an extend that does not ask
        for every position's logits) or a decode's (a decode, or a verify)."""
        began = time.perf_counter()
        try:
            return forward(fb, return_all_logits=return_all_logits)
        finally:
            kind = "prefill" if fb.mode == ForwardMode.EXTEND and not return_all_logits else "decode"
            timed.append((kind, fb.batch_size, fb.input_ids.numel(), time.perf_counter() - began))

    model.forward = timed_forward
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        reqs = [engine.make_request(prompt, params) for prompt in prompts]
        for req in reqs:
            s.add_request(req)
        while s.has_work():
            engine.step()
    finally:
        del s.get_new_prefill_batch
        del model.forward
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    events = list(s.trace)[first:]
    counts = {kind: s.forward_counts.get(kind, 0) - forwards.get(kind, 0) for kind in ("decode", "verify", "prefill")}
    return {
        "texts": [r.output_text for r in reqs],
        "wall": wall,
        "cpu": cpu,
        "prefill_seconds": sum(t for kind, _, _, t in timed if kind == "prefill"),
        "decode_forward_samples": [(b, n, t) for kind, b, n, t in timed if kind == "decode"],
        "decode_seconds": sum(t for kind, _, _, t in timed if kind == "decode"),
        "decode_forwards": counts["decode"],
        "verify_forwards": counts["verify"],
        "prefill_forwards": counts["prefill"],
        "prefill_tokens": sum(e["tokens"] for e in events if e["event"] == "prefill"),
        "output_tokens": sum(len(r.output_ids) for r in reqs),
        "readmit_forwards": readmitted["forwards"],
        "readmit_tokens": readmitted["tokens"],
        "kept": sum(r.spec_accepted_tokens for r in reqs),
        "drafted": sum(r.spec_draft_tokens for r in reqs),
        # (from the trace: spec_verify_ct counts a request's plain decodes too, as SGLang does)
        "verifies_per_request": sum(len(e["reqs"]) for e in events if e["event"] == "verify"),
        "jumps": sum(e["event"] == "jump" for e in events),
    }


def table(results: dict[str, dict], n: int, validity: bool) -> list[str]:
    base = results[ORACLE]
    rows = [
        "| system | requests/s | CPU s | prefill forwards' s | decode + verify forwards' s "
        "| decode forwards | verify forwards | (decode + verify) / s6's decode "
        "| prefill forwards | prefill tokens | drafts fed | drafts kept | kept / fed | kept per request-verify "
        "| output tokens per request-forward | valid | same text as s6 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        steps = r["decode_forwards"] + r["verify_forwards"]
        rate = f"{r['kept'] / r['drafted']:.2f}" if r["drafted"] else "-"
        per_verify = f"{r['kept'] / r['verifies_per_request']:.2f}" if r["verifies_per_request"] else "-"
        same = sum(a == b for a, b in zip(r["texts"], base["texts"]))
        ok = f"{sum(map(valid, r['texts']))}/{n}" if validity else "-"
        rows.append(
            f"| {name} | {n / r['wall']:.2f} | {r['cpu']:.1f} | {r['prefill_seconds']:.2f} | {r['decode_seconds']:.2f} "
            f"| {r['decode_forwards']} "
            f"| {r['verify_forwards']} | {steps / base['decode_forwards']:.2f} | {r['prefill_forwards']} | {r['prefill_tokens']} "
            f"| {r['drafted']} | {r['kept']} | {rate} | {per_verify} "
            f"| {r['output_tokens'] / (r['output_tokens'] - r['kept']):.2f} | {ok} | {same}/{n} |"
        )
    return rows


def fastest(results: dict[str, dict], n: int) -> str:
    base = results[ORACLE]
    speedups = {name: base["wall"] / r["wall"] for name, r in results.items()}
    best = max((name for name in results if name.startswith("s7")), key=speedups.__getitem__)
    steps = (results[best]["decode_forwards"] + results[best]["verify_forwards"]) / base["decode_forwards"]
    # Amdahl: drafts shorten only the decoding; the prompts' forwards and the rest stay.
    rest = base["wall"] - base["decode_seconds"]
    return (
        f"Fastest s7 system here: {best}, {speedups[best]:.2f}x s6's requests/s; its forwards (decode + "
        f"verify) are {steps:.2f}x s6's decode forwards. Drafts shorten only the decoding: s6 spent "
        f"{base['decode_seconds']:.2f} s of its {base['wall']:.2f} s in decode forwards and "
        f"{base['prefill_seconds']:.2f} s in prefill forwards, so decoding for free would give at most "
        f"{base['wall'] / rest:.2f}x s6's requests/s here, and decoding in half the time "
        f"{base['wall'] / (rest + base['decode_seconds'] / 2):.2f}x."
    )


def forward_cost(results: dict[str, dict]) -> str:
    """A line: the decode phase's forwards fitted as seconds = a + b x requests + c x tokens
    fed (least squares over every system's decode and verify forwards), and what that
    leaves speculative decoding on this machine."""
    samples = [x for r in results.values() for x in r["decode_forward_samples"]]
    design = torch.tensor([[1.0, b, n] for b, n, _ in samples], dtype=torch.float64)
    secs = torch.tensor([[t] for _, _, t in samples], dtype=torch.float64)
    a, per_request, per_token = (1000 * torch.linalg.lstsq(design, secs).solution).flatten().tolist()
    base = results[ORACLE]["decode_forward_samples"]
    batch = round(sum(b for b, _, _ in base) / len(base))  # s6's requests per decode forward
    decode, verify = a + (per_request + per_token) * batch, a + (per_request + 5 * per_token) * batch
    return (
        f"The decode phase's forwards on this machine, fitted over the {len(samples)} decode and verify forwards "
        f"above: {a:.1f} ms + {per_request:.3f} ms per request (reading its KV) + {per_token:.3f} ms per token fed "
        f"(the weights' arithmetic), so a decode of {batch} requests (s6's mean) costs ~{decode:.0f} ms and a "
        f"verify of {batch} requests with 4 drafts each ~{verify:.0f} ms ({verify / decode:.1f}x): on a CPU every token fed is arithmetic, "
        f"kept or not, and a verify pays for its rejected drafts. On a GPU a forward of 64 tokens or 320 costs "
        f"about the same (it waits on reading the weights and the KV), and the forwards column is what times it "
        f"(benchmarks/device_check.sh)."
    )


def jump_table(results: dict[str, dict]) -> list[str]:
    """s4's jump against the forced drafts: what each spends to skip the forced text."""
    base = results[ORACLE]
    rows = [
        "| system | jumps | re-admission prefill forwards | re-admission prefill tokens | verify forwards "
        "| forced drafts fed | kept | kept / fed | decode + verify forwards | requests/s | same text as s6 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    n = len(base["texts"])
    for name in (ORACLE, JUMP, SEAM, FORCED):
        r = results[name]
        rate = f"{r['kept'] / r['drafted']:.2f}" if r["drafted"] else "-"
        same = sum(a == b for a, b in zip(r["texts"], base["texts"]))
        rows.append(
            f"| {name} | {r['jumps']} | {r['readmit_forwards']} "
            f"| {r['readmit_tokens']} | {r['verify_forwards']} | {r['drafted']} "
            f"| {r['kept']} | {rate} | {r['decode_forwards'] + r['verify_forwards']} | {n / r['wall']:.2f} "
            f"| {same}/{n} |"
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-path", default=minisglang.DEFAULT_MODEL_PATH)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=default_torch_threads(), help="torch threads")
    ap.add_argument("--k", type=int, nargs="+", default=[2, 4, 8], help="NGRAM's draft counts")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each system, alternated (the median is reported)")
    ap.add_argument("--quick", action="store_true", help="16 requests, one run (a smoke run)")
    ap.add_argument("--output", type=Path, default=RESULTS)
    args = ap.parse_args()
    if args.quick:
        args.requests, args.repeats = min(args.requests, 16), 1
    # (a student's copy runs this bench through PYTHONPATH: say whose engine is measured)
    print(f"measuring the minisglang at {Path(minisglang.__file__).parent}", flush=True)

    tok = Tokenizer.from_pretrained(args.model_path)
    extraction, _, _, _ = workload(tok, args.requests, 1.0, args.seed)
    greedy = {"temperature": 0, "max_new_tokens": args.max_new_tokens}
    workloads = {
        "extraction": (extraction, {**greedy, "json_schema": json.dumps(SCHEMA, ensure_ascii=False)}),
        "free text": (free_text_workload(tok, args.requests, args.seed), greedy),
    }
    results: dict[str, dict[str, dict]] = {w: {} for w in workloads}
    loads = {}
    began = time.perf_counter()
    engines = {}
    for name, options in systems(args.k).items():
        options = dict(options)
        draft_seam = options.pop("draft_seam", False)
        engine = engines[name] = Engine(args.model_path, torch_threads=args.threads, **options)
        if draft_seam:  # the stage's seam check says "never merges": the last forced piece is drafted
            engine.stage.jump.could_merge_further = lambda *a: False
        engine.generate(tok.apply_chat_template([{"role": "user", "content": "Hi"}]), workloads["extraction"][1])
    # Every system serves each workload `repeats` times, the systems alternating, and the run
    # with the median wall time is reported: this machine's other jobs come and go.
    runs: dict[str, dict[str, list[dict]]] = {w: {name: [] for name in engines} for w in workloads}
    for rep in range(args.repeats):
        for name, engine in engines.items():
            loads.setdefault(name, os.getloadavg()[0])
            for workload_name, (prompts, params) in workloads.items():
                print(f"serving {args.requests} {workload_name} requests: {name} (run {rep + 1}) ...", flush=True)
                runs[workload_name][name].append(r := serve(engine, prompts, params))
                print(
                    f"  {args.requests / r['wall']:.2f} requests/s, {r['decode_forwards']} decode + "
                    f"{r['verify_forwards']} verify forwards",
                    flush=True,
                )
    for workload_name, by_system in runs.items():
        for name, rs in by_system.items():
            results[workload_name][name] = sorted(rs, key=lambda r: r["wall"])[len(rs) // 2]
    for engine in engines.values():
        engine.shutdown()
    minutes = (time.perf_counter() - began) / 60

    n = args.requests
    text = "\n".join(
        [
            "# Speculative decoding under a grammar (stage s7) vs one token per forward (s6)",
            "",
            f"{n} greedy requests per workload, all submitted at once (so the batches do not depend on the machine's "
            f"speed; the counts move by a few drafts between runs, as a step's grammar work is bounded in seconds), "
            f"max_new_tokens {args.max_new_tokens}; every system serves the same requests {args.repeats} times, the "
            f"systems taking turns, and each row is its run with the median wall time. Requests/s and seconds are "
            f"this shared machine's, at the load averages below: read them as rough. "
            f"Model checksum {model_checksum(args.model_path)}.",
            "",
            "## Extraction service (schema-constrained)",
            "",
            "bench_extraction_service.py's requests, the Person schema, our fsm backend.",
            "",
            *table(results["extraction"], n, validity=True),
            "",
            fastest(results["extraction"], n),
            "",
            forward_cost(results["extraction"]),
            "",
            "## Free text (no grammar)",
            "",
            "The bundled model's copy requests (make_corpus.copy_example, held-out names): no grammar, so FORCED "
            "drafts nothing and every s7 system without NGRAM decodes as s6.",
            "",
            *table(results["free text"], n, validity=False),
            "",
            fastest(results["free text"], n),
            "",
            "## Skipping the forced text: s4's jump against forced drafts (extraction requests)",
            "",
            "A jump re-tokenizes the output and re-admits the request: its forced text is prefilled in a prefill "
            "forward (re-admission prefill forwards: those that re-admitted a request; tokens: what they computed for "
            "the re-admitted requests, the radix tree supplying the rest). A forced draft is fed to the "
            'verify forward the request takes anyway. "Last forced piece drafted": the forced '
            'text\'s last token (`":`) drafted too, which the model, writing `": "` as one token, rejects (s7 '
            'drafts the token across the seam in its place, `": "`).',
            "",
            *jump_table(results["extraction"]),
            "",
            "A step in which no request has a draft is a plain decode forward; a verify forward feeds each "
            "request its last token and its drafts. Drafts fed: draft tokens in verify forwards; kept: those the "
            "grammar allowed and the model agreed with (each verify also yields one token of the model's own); "
            "kept per request-verify: kept / (requests x verify forwards they took part in); output tokens per "
            "request-forward: each forward a request takes part in gives it one token of the model's own plus the "
            "drafts it keeps, so output tokens / (output tokens - kept): the speed-up of one request, where the "
            "batch's forwards wait for its slowest request. Load average before "
            "each system: " + ", ".join(f"{name} {load:.1f}" for name, load in loads.items()) + ".",
            "",
            machine_line(f"{minutes:.1f} min"),
        ]
    )
    write_results(text + "\n", args.output)


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
