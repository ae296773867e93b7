"""What one cached llguidance compile holds after many requests, and what the cache counts.

llguidance builds its lexer's DFA states lazily and keeps them in the compiled matcher that
every request's copy shares; it says nothing of their size. A stranger's soak walked a hostile
regex at random through the cache: one compile grew to llguidance's `max_lexer_states`
(~155 MiB) while the cache counted 0 bytes of it. The backend now charges a compile
`BYTES_PER_SECOND` for the time its copies spend in llguidance's calls (building states takes
time; a charge per step undercounted a second stranger's regex 90x) and compiles it afresh
once charged `SPENT_BYTES`.

For each grammar, a fresh process serves `--requests` requests through the backend's grammar
cache, each a random walk of up to `--tokens` tokens (a mask, then a random allowed token),
twice: *before* (no charge and never spent: one compile for all, the old behaviour) and
*after* (the default). It reports the process's RSS growth, what the cache counts at the end
(`stats()["cache_bytes"]`), the compiles made, and the growth per second of llguidance's calls
in the before run (what `BYTES_PER_SECOND` must cover).

    python benchmarks/bench_llguidance_growth.py [--requests 40] [--tokens 300] [--vocabularies 4k,131k]

Prints the table; writes benchmarks/results/llguidance_growth.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from _results import machine_line, write_results  # noqa: E402  (benchmarks/_results.py)

HOSTILE_20 = "[a-z ]*(" + "|".join(f"{c}[a-z ]{{{10 + j}}}" for j, c in enumerate("aeiotnsrhldcumfpgwyb")) + ")"
GRAMMARS = [  # (what, kind, text): four hostile regexes (many DFA states), two schemas
    ("hostile regex: an 'a' 18 letters from the end", "regex", "[ab]*a[ab]{18}"),
    ("hostile regex: 20 letters each 10-29 from the end (a stranger's)", "regex", HOSTILE_20),
    ("hostile regex: an 'x' 10 characters from the end", "regex", r"(\w|\s)*x[a-z0-9 ]{10}"),
    (
        "hostile pattern in a schema",
        "json_schema",
        '{"type": "object", "properties": {"a": {"type": "string", "pattern": "^[a-z]*q[a-z]{9}$"}}}',
    ),
    (
        "friendly schema: a name and an age",
        "json_schema",
        '{"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}',
    ),
]


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS"))


def tokenizer_for(vocabulary: str):
    from minisglang.tokenizer import Tokenizer

    if vocabulary == "4k":
        return Tokenizer.from_pretrained(str(HERE.parent / "minisglang/assets/tiny-json-llama"))
    sys.path.insert(0, str(HERE.parent / "tests"))
    from real_tokenizers import anthropic_65k, mistral_tekken

    return {"65k": anthropic_65k, "131k": mistral_tekken}[vocabulary]()


def one_run(mode: str, index: int, vocabulary: str, requests: int, tokens: int) -> dict:
    """Serve `requests` random walks over grammar `index`; what the process and cache hold."""
    import torch

    from minisglang.backends import llguidance_backend
    from minisglang.backends.base import GrammarError, InvalidGrammarObject, get_backend_class

    if mode == "before":  # one compile for all, counted as nothing
        llguidance_backend.SPENT_BYTES, llguidance_backend.BYTES_PER_SECOND = 1 << 62, 0
    tokenizer = tokenizer_for(vocabulary)
    width = len(tokenizer.token_bytes)
    backend = get_backend_class("llguidance")(tokenizer, width, compile_in="thread")
    _, kind, text = GRAMMARS[index]
    shifts = torch.arange(32, dtype=torch.int32)
    mask = llguidance_backend.LLGuidanceGrammar.allocate_vocab_mask(width, 1)
    rng = random.Random(index)
    call_seconds = [0.0]  # in llguidance's calls, every compile's (what the charge reads)
    real_call = llguidance_backend.LLGuidanceGrammar._call

    def timed_call(self, work):
        started = time.perf_counter()
        try:
            return real_call(self, work)
        finally:
            call_seconds[0] += time.perf_counter() - started

    llguidance_backend.LLGuidanceGrammar._call = timed_call
    gc.collect()
    start, started, steps, failed = rss_mib(), time.perf_counter(), 0, 0
    for request in range(requests):
        if request == 1:  # the first one built the engine-wide tables (at 131k ~190 MiB, once)
            gc.collect()
            base, first_steps, first_seconds = rss_mib(), steps, call_seconds[0]
        value, ready = backend.get_cached_or_future_value(kind, text)
        grammar = value if ready else value.result().copy()
        if isinstance(grammar, InvalidGrammarObject):  # refused when compiled (a limit): counted as failed
            failed += 1
            continue
        try:
            for _ in range(tokens):
                grammar.fill_vocab_mask(mask, 0)
                allowed = ((mask[0].unsqueeze(1) >> shifts) & 1).flatten().nonzero().flatten().tolist()
                allowed = [t for t in allowed if t < width and t != tokenizer.eos_token_id]
                steps += 1
                if not allowed:
                    break
                grammar.accept_token(rng.choice(allowed))
                steps += 1
        except GrammarError:
            failed += 1
        del grammar
    gc.collect()  # (what the last requests' copies held is freed: the compile's own states stay)
    return {
        "first_mib": base - start,
        "rss_mib": rss_mib() - base,
        "growth_steps": steps - first_steps,
        "growth_seconds": call_seconds[0] - first_seconds,
        "cache_bytes": backend.stats()["cache_bytes"],
        "compiles": backend.compile_count,
        "steps": steps,
        "failed": failed,
        "seconds": time.perf_counter() - started,
        "call_seconds": call_seconds[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--vocabularies", default="4k,131k")
    ap.add_argument("--output", type=Path, default=HERE / "results" / "llguidance_growth.md")
    ap.add_argument("--one", nargs=3, metavar=("MODE", "INDEX", "VOCABULARY"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        mode, index, vocabulary = args.one
        print(json.dumps(one_run(mode, int(index), vocabulary, args.requests, args.tokens)))
        return

    from tqdm import tqdm

    from minisglang.backends.llguidance_backend import BYTES_PER_SECOND, SPENT_BYTES

    runs = [
        (v, i, mode) for v in args.vocabularies.split(",") for i in range(len(GRAMMARS)) for mode in ("before", "after")
    ]
    results = {}
    for vocabulary, index, mode in tqdm(runs, desc="runs (one process each)"):
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--one",
                mode,
                str(index),
                vocabulary,
                "--requests",
                str(args.requests),
                "--tokens",
                str(args.tokens),
            ],
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            raise SystemExit(f"run {mode} {index} {vocabulary} failed:\n{out.stderr[-3000:]}")
        results[vocabulary, index, mode] = json.loads(out.stdout.strip().splitlines()[-1])
    rows = []
    for vocabulary in args.vocabularies.split(","):
        for index, (what, _, _) in enumerate(GRAMMARS):
            b, a = results[vocabulary, index, "before"], results[vocabulary, index, "after"]
            rows.append(
                f"| {vocabulary} | {what} | {b['steps']:,} | {b['first_mib']:.1f} | {b['rss_mib']:.1f} / {a['rss_mib']:.1f} | "
                f"{b['cache_bytes'] / 2**20:.2f} / {a['cache_bytes'] / 2**20:.2f} | {b['compiles']} / {a['compiles']} | "
                f"{b['rss_mib'] / max(b['growth_seconds'], 1e-9):,.0f} | {b['failed']} / {a['failed']} |"
            )
    text = "\n".join(
        [
            "# One cached llguidance compile: what it holds after many requests, and what the cache counts",
            "",
            f"Each row: {args.requests} requests through the backend's grammar cache, each a random walk of up to "
            f"{args.tokens} tokens (a mask, then a random allowed token; a step is either), in a fresh process, "
            "*before* (no charge: counted as 0 bytes and never spent by it, as until stop 74; a compile whose "
            "lexer reached its limit is still compiled again, and a request on it moves to its own) and *after* (each "
            f"compile charged `BYTES_PER_SECOND` = {BYTES_PER_SECOND >> 20} MiB per second of its copies' calls "
            f"into llguidance, and compiled afresh once charged `SPENT_BYTES` = {SPENT_BYTES >> 20} MiB). RSS "
            "growth is the process's, measured after the last request (a freed compile's memory may stay with the "
            "allocator), from the end of the first request: the first one builds tables every later compile of the "
            "engine shares (*first request*, before run). *MiB/s before*: that growth per second of llguidance's "
            "calls after the first request, what `BYTES_PER_SECOND` must cover on a hostile grammar (a friendly "
            "one stops growing).",
            "*Target*: after, the cache counts at least the RSS growth on every hostile grammar.",
            "",
            "| vocabulary | grammar | steps | first request MiB | RSS growth MiB before / after | cache counts MiB before / after | compiles before / after | MiB/s before | requests failed before / after |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            machine_line(),
            "",
        ]
    )
    write_results(text, args.output)


if __name__ == "__main__":
    main()
