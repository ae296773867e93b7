"""Compile cost and per-token cost: our fsm backend (lazy and eager) beside the libraries.

Issue 16's MaskBench-style figures, measured side by side in one run:

1. the benchmark schema of bench_backends.py: compile + first mask per backend, median of
   `--repeats` back to back and of `--cold-repeats` each after 100 ms idle, at the bundled 4k, the 65k and the 131k (Mistral NeMo tekken) vocabularies;
2. a seeded sample of MaskBench-like schemas (`generate_schemas`, below: objects of
   strings with maxLength and formats, bounded integers, numbers, enums up to 200 values,
   arrays, anyOf, reused `$defs`) with one valid instance each: compile p50/p95/max,
   failures (timeouts, refusals), time to first mask, and per-token mask + advance
   p50/p99 while walking the instance's tokens (`fill_vocab_mask` + `accept_token`);
   each step's mask is also compared with our lazy automaton's (differences are
   grammar differences: whitespace, number spellings, what a keyword allows);
3. three stress schemas (maxLength 1000, a 599-value enum, a recursive `$defs` tree)
   compiled lazily and by the two fast libraries (the eager ones are known to take 10-25 s
   each and are not run).

The eager fsm backend compiles in its worker process with a `--eager-timeout` (its
compile service stops the worker); outlines-core has no timeout, so the sample avoids
schemas that would keep it busy for minutes. Writes benchmarks/results/compile.md.

    python benchmarks/bench_compile.py [--schemas 24] [--seed 16] [--repeats 5] [--cold-repeats 11]

Held-out real data (`--data DIR`): DIR holds JSONSchemaBench's `maskbench/data/*.json`
(github.com/guidance-ai/jsonschemabench has no license file: extract it anywhere, never
into this repository). A seeded draw of `--files` files NOT among the earlier draws
(EARLIER_DRAWS: json_schema_maskbench.py's seed-0 draw of 500) is compiled by each system
of `--systems`, the first valid instance of each file walked token by token as above, and
every invalid instance checked (a false positive: the grammar accepts it whole). Our rows
are labelled with the build that ran (compiled or pure, minisglang/constrained/
compiled_build.py): run it once as it is and once with MINISGLANG_PURE=1. Prints the table
(counts and times only) and writes it to `--out` when given.

    python benchmarks/bench_compile.py --data /work/jsonschemabench-data --files 400 --seed 36 \
        --systems "fsm lazy,xgrammar,llguidance" --out /tmp/heldout.md
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path

import jsonschema
import torch

import minisglang
from minisglang.backends.base import InvalidGrammarObject, get_backend_class
from minisglang.constrained import compiled_build
from minisglang.constrained.bitmask import unpack_bits
from minisglang.constrained.token_index import vocab_trie
from minisglang.tokenizer import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _results import machine_line, write_results  # noqa: E402
from bench_backends import SCHEMA  # noqa: E402  (the benchmark schema and its walk)
from real_tokenizers import anthropic_65k, mistral_tekken  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "compile.md"
PAD = 64  # logit columns past the vocabulary, as models pad them
COLD_IDLE_S = 0.1  # how long the process sits idle before each 'cold' compile
SYSTEMS = [
    ("fsm lazy", "fsm", {"automaton": "lazy"}),
    ("fsm eager", "fsm", {"automaton": "eager"}),
    ("xgrammar", "xgrammar", {}),
    ("llguidance", "llguidance", {}),
    ("outlines", "outlines", {}),
]


# ------------------------------------------------------------------ the schema sample
WORDS = ["alpha", "beta", "Paris", "Rome", "北京", "data", "id", "value", "status", "user", "item", "note"]
FORMATS = {
    "date": "2024-05-01",
    "email": "li.lei@example.com",
    "uuid": "123e4567-e89b-12d3-a456-426614174000",
    "date-time": "2024-05-01T12:30:00Z",
    "ipv4": "192.168.0.1",
}


def generate_schemas(seed: int, count: int) -> list[tuple[dict, object]]:
    """`count` (schema, valid instance) pairs, MaskBench-like, reproducible from `seed`.

    The mix follows what JSONSchemaBench's MaskBench schemas are made of (objects of
    typed properties, bounded strings and numbers, formats, enums, arrays, anyOf, $refs
    to shared definitions), scaled so that every backend finishes the sample in minutes.
    """
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        defs: dict = {}
        schema, instance = _object(rng, depth=0, defs=defs)
        if defs:
            schema["$defs"] = {name: s for name, (s, _) in defs.items()}
        # The walk must be a valid document. A definition that refers to itself is made twice
        # and the instance may fit the one not kept: such a draw is skipped (seed 16's sample,
        # the results' own, never has one, so it is what it was).
        if jsonschema.Draft202012Validator(schema).is_valid(instance):
            out.append((schema, instance))
    return out


def _value(rng: random.Random, depth: int, defs: dict) -> tuple[dict, object]:
    kinds = ["string", "string", "bstring", "format", "integer", "number", "boolean", "enum", "array"]
    if depth < 2:
        kinds += ["object", "anyof", "ref"]
    kind = rng.choice(kinds)
    if kind == "string":
        return {"type": "string"}, rng.choice(WORDS)
    if kind == "bstring":
        n = rng.choice([8, 20, 64, 120, 300])
        return {"type": "string", "maxLength": n}, rng.choice(WORDS)[:n]
    if kind == "format":
        name = rng.choice(sorted(FORMATS))
        return {"type": "string", "format": name}, FORMATS[name]
    if kind == "integer":
        lo = rng.choice([0, 1, -100])
        hi = lo + rng.choice([10, 150, 10_000, 2**31])
        return {"type": "integer", "minimum": lo, "maximum": hi}, rng.randint(lo, min(hi, lo + 999))
    if kind == "number":
        return {"type": "number"}, round(rng.uniform(-1000, 1000), 2)
    if kind == "boolean":
        return {"type": "boolean"}, rng.random() < 0.5
    if kind == "enum":
        values = [f"{rng.choice(WORDS)}_{i}" for i in range(rng.choice([3, 8, 40, 200]))]
        return {"enum": values}, rng.choice(values)
    if kind == "array":
        item, example = _value(rng, depth + 1, defs)
        top = rng.choice([3, 5, 10])
        return {"type": "array", "items": item, "maxItems": top}, [example] * rng.randint(0, min(top, 3))
    if kind == "object":
        return _object(rng, depth + 1, defs)
    if kind == "anyof":
        branches = [_value(rng, depth + 1, defs) for _ in range(rng.randint(2, 3))]
        return {"anyOf": [s for s, _ in branches]}, branches[0][1]
    # a $ref to a shared definition: made once, referenced from many places
    name = rng.choice(["address", "person", "tag"])
    if name not in defs:
        defs[name] = _object(rng, depth + 1, defs)
    return {"$ref": f"#/$defs/{name}"}, defs[name][1]


def _object(rng: random.Random, depth: int, defs: dict) -> tuple[dict, dict]:
    props, instance = {}, {}
    for i in range(rng.randint(2, 8 if depth == 0 else 4)):
        key = f"{rng.choice(WORDS)}_{i}"
        props[key], instance[key] = _value(rng, depth, defs)
    return ({"type": "object", "properties": props, "required": list(props), "additionalProperties": False}, instance)


STRESS = {
    "string maxLength 1000": (
        {"type": "object", "properties": {"text": {"type": "string", "maxLength": 1000}}, "required": ["text"]},
        {"text": "hello world"},
    ),
    "599-value enum": ({"enum": [f"value_{i:03d}" for i in range(599)]}, "value_598"),
    "recursive $defs tree": (
        {
            "$defs": {
                "node": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                    },
                    "required": ["name", "children"],
                }
            },
            "$ref": "#/$defs/node",
        },
        {"name": "root", "children": [{"name": "a", "children": []}]},
    ),
}


# ------------------------------------------------------------------ held-out real data
# Earlier draws of JSONSchemaBench's MaskBench files, (seed, files): a held-out draw avoids them.
EARLIER_DRAWS = [(0, 500)]  # json_schema_maskbench.py --jsonschemabench --seed 0 --files 500


def draw_real_files(data: Path, files: int, seed: int) -> list[tuple[str, dict, object, list]]:
    """(file name, schema, its first valid instance or None, its invalid instances) for a
    seeded draw of `files` MaskBench files not among EARLIER_DRAWS (each earlier draw is
    random.Random(seed).sample of the sorted names, as json_schema_maskbench draws)."""
    folder = data / "maskbench" / "data" if (data / "maskbench" / "data").is_dir() else data
    names = sorted(p.name for p in folder.glob("*.json"))
    earlier = {n for s, k in EARLIER_DRAWS for n in random.Random(s).sample(names, k)}
    pool = [n for n in names if n not in earlier]
    out = []
    for name in sorted(random.Random(seed).sample(pool, files)):
        content = json.loads((folder / name).read_bytes())
        tests = content.get("tests", [])
        valid = [t["data"] for t in tests if t.get("valid")]
        out.append(
            (name, content["schema"], valid[0] if valid else None, [t["data"] for t in tests if not t.get("valid")])
        )
    return out


def accepts_whole(grammar, ids: list[int], width: int, eos: int) -> bool:
    """Whether `grammar` (a fresh copy) takes every token of `ids` and then allows EOS."""
    try:
        for token_id in ids:
            grammar.accept_token(token_id)
    except Exception:
        return False
    mask = grammar.allocate_vocab_mask(width, 1)
    grammar.fill_vocab_mask(mask, 0)
    return bool(unpack_bits(mask[0], width)[eos])


def bench_real(label: str, tokenizer: Tokenizer, files, args, slowest: list[str]) -> list[str]:
    """One row per system of `args.systems` over the drawn `files` (see the module doc);
    each system's three slowest compiles are appended to `slowest`, one line."""
    width, eos = tokenizer.vocab_size + PAD, tokenizer.eos_token_id
    rows = []
    for system, name, options in SYSTEMS:
        if system not in args.systems:
            continue
        backend = make_backend(name, options, tokenizer, args.eager_timeout)
        compile_once(backend, {"type": "integer"})
        if args.gc_freeze:
            gc.collect()
            gc.freeze()
        compile_s, step_s, cpu_s, refused, walked, rejected, fp, invalid = [], [], [], 0, 0, 0, 0, 0
        compiled_names = []
        for file_name, schema, instance, invalids in files:
            grammar, seconds, error = compile_once(backend, schema)
            if grammar is None or isinstance(grammar, InvalidGrammarObject):
                refused += 1
                continue
            compile_s.append(seconds)
            compiled_names.append(file_name)
            if instance is not None:
                ids = tokenizer.encode(json.dumps(instance, ensure_ascii=False))
                per_token, _, _, problem = walk(grammar.copy(), ids, width, None, cpu_s)
                step_s += per_token
                walked += 1
                rejected += problem is not None
            for bad in invalids:
                invalid += 1
                fp += accepts_whole(grammar.copy(), tokenizer.encode(json.dumps(bad, ensure_ascii=False)), width, eos)
        backend.shutdown()
        who = f"{system} ({compiled_build.active.split(' ')[0]})" if name == "fsm" else system
        rows.append(
            f"| {label} | {who} | {len(compile_s)}/{len(files)} | {ms(pct(compile_s, 0.5))} "
            f"| {ms(pct(compile_s, 0.95))} | {ms(max(compile_s, default=float('nan')))} "
            f"| {us(pct(step_s, 0.5))} / {us(pct(step_s, 0.99))} | {us(pct(cpu_s, 0.5))} / {us(pct(cpu_s, 0.99))} "
            f"| {walked} ({rejected}) | {len(step_s):,} | {fp}/{invalid} |"
        )
        print(rows[-1], flush=True)
        top = sorted(zip(compile_s, compiled_names), reverse=True)[:3]
        slowest.append(f"{label}, {who}: " + ", ".join(f"{n.removesuffix('.json')} {ms(t)} ms" for t, n in top))
    return rows


def main_real(args) -> None:
    files = draw_real_files(args.data, args.files, args.seed)
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    vocabularies = [
        ("bundled 4k", lambda: Tokenizer.from_pretrained(minisglang.DEFAULT_MODEL_PATH)),
        ("anthropic 65k", anthropic_65k),
        ("mistral tekken 131k", mistral_tekken),
    ]
    slowest: list[str] = []
    rows = [
        row
        for label, make in vocabularies
        if label.split()[-1] in args.vocabularies
        for row in bench_real(label, make(), files, args, slowest)
    ]
    text = "\n".join(
        [
            f"Held-out draw: {len(files)} JSONSchemaBench MaskBench files, seed {args.seed}, none of {EARLIER_DRAWS} "
            f"(seed, files); {sum(f[2] is not None for f in files)} have a valid instance.",
            "",
            "| vocabulary | system | compiled | compile p50 (ms) | p95 (ms) | max (ms) | per token p50 / p99 (us) "
            "| per token CPU p50 / p99 (us) | instances walked (rejected) | steps | false positives |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
            "Slowest compiles (file, wall time):",
            "",
            *[f"- {line}" for line in slowest],
            "",
            machine_line(
                f"load average {load_before:.1f} before the run",
                f"xgrammar {version('xgrammar')}",
                f"llguidance {version('llguidance')}",
                f"run took {time.perf_counter() - started:.0f} s",
            ),
            "",
        ]
    )
    print(text)
    if args.out:
        args.out.write_text(text)


# ------------------------------------------------------------------ measurements
def make_backend(name: str, options: dict, tokenizer: Tokenizer, eager_timeout: float):
    return get_backend_class(name)(tokenizer, tokenizer.vocab_size + PAD, compile_timeout=eager_timeout, **options)


def compile_once(backend, schema: dict):
    """(grammar or None, seconds, error message or None); compile + first mask timed separately."""
    start = time.perf_counter()
    try:
        grammar = backend.compile("json_schema", json.dumps(schema))
    except Exception as e:  # a refusal or a timeout: counted, with its reason
        return None, time.perf_counter() - start, f"{type(e).__name__}: {str(e)[:80]}"
    return grammar, time.perf_counter() - start, None


def first_mask_seconds(grammar, width: int) -> float:
    start = time.perf_counter()
    grammar.fill_vocab_mask(grammar.allocate_vocab_mask(width, 1), 0)
    return time.perf_counter() - start


def walk(grammar, ids: list[int], width: int, reference: list[torch.Tensor] | None, cpu: list[float] | None = None):
    """Per-token seconds of fill + accept along `ids`; the masks; steps differing from `reference`.
    `cpu` (when given) gets each step's CPU seconds of this thread: on a loaded machine a
    step's wall time also holds the time the scheduler gave other processes."""
    mask = grammar.allocate_vocab_mask(width, 1)
    seconds, masks, differing = [], [], 0
    for step, token_id in enumerate(ids):
        start_cpu = time.thread_time()  # (about a microsecond here: outside the wall time)
        start = time.perf_counter()
        grammar.fill_vocab_mask(mask, 0)
        try:
            grammar.accept_token(token_id)
        except Exception:
            return seconds, masks, differing, f"rejected token {step}"
        seconds.append(time.perf_counter() - start)
        if cpu is not None:
            cpu.append(time.thread_time() - start_cpu)
        masks.append(mask[0].clone())
        if reference is not None and step < len(reference) and not torch.equal(masks[-1], reference[step]):
            differing += 1
    return seconds, masks, differing, None


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def ms(x: float) -> str:
    return "-" if x != x else f"{x * 1e3:,.2f}"


def us(x: float) -> str:
    return "-" if x != x else f"{x * 1e6:,.0f}"


def bench_vocabulary(
    label: str, tokenizer: Tokenizer, sample, args, skip: tuple[str, ...] = ()
) -> tuple[list[str], list[str], list[str]]:
    width = tokenizer.vocab_size + PAD
    start = time.perf_counter()
    vocab_trie(tokenizer.token_bytes)  # the fsm backends' one-time vocabulary preparation
    trie_s = time.perf_counter() - start
    benchmark_rows, sample_rows, stress_rows = [], [], []
    reference_masks: dict[int, list[torch.Tensor]] = {}
    for system, name, options in SYSTEMS:
        if system in skip:
            continue
        start = time.perf_counter()
        backend = make_backend(name, options, tokenizer, args.eager_timeout)
        build_s = time.perf_counter() - start + (trie_s if name == "fsm" else 0.0)
        compile_once(backend, {"type": "integer"})  # warm-up: worker processes, imports, kernels
        if args.gc_freeze:
            # What is alive now (libraries, vocabularies) is never garbage: Python's full
            # collections, which a server's allocations still trigger, stop rescanning it.
            gc.collect()
            gc.freeze()
        # 1. the benchmark schema
        compiles, firsts = [], []
        for _ in range(args.repeats):
            grammar, seconds, error = compile_once(backend, SCHEMA)
            if grammar is None:
                break
            compiles.append(seconds)
            firsts.append(first_mask_seconds(grammar, width))
        total = [c + f for c, f in zip(compiles, firsts)]
        # The same compile after the process sat idle (a server between sporadic requests):
        # the CPU's caches and branch predictors no longer hold the compiler's code and data.
        cold = []
        for _ in range(args.cold_repeats if compiles else 0):
            time.sleep(COLD_IDLE_S)
            grammar, seconds, _ = compile_once(backend, SCHEMA)
            cold.append(seconds + first_mask_seconds(grammar, width))
        benchmark_rows.append(
            f"| {label} | {system} | {ms(build_s)} | {ms(statistics.median(compiles)) if compiles else error} "
            f"| {ms(statistics.median(firsts)) if firsts else '-'} "
            f"| {ms(statistics.median(total)) if total else '-'} "
            f"| {ms(statistics.median(cold)) if cold else '-'} |"
        )
        # 2. the sample
        compile_s, first_s, step_s, cpu_s, cached_s, failures, differing, steps = [], [], [], [], [], [], 0, 0
        for i, (schema, instance) in enumerate(sample):
            if name == "fsm" and options["automaton"] == "eager" and i >= args.eager_schemas:
                break
            grammar, seconds, error = compile_once(backend, schema)
            if grammar is None or isinstance(grammar, InvalidGrammarObject):
                failures.append(error or grammar.message[:80])
                continue
            compile_s.append(seconds)
            first_s.append(seconds + first_mask_seconds(grammar, width))
            ids = tokenizer.encode(json.dumps(instance, ensure_ascii=False))
            seconds_per_token, masks, diff, problem = walk(grammar.copy(), ids, width, reference_masks.get(i), cpu_s)
            if problem:
                failures.append(problem)
            if system == "fsm lazy":
                reference_masks[i] = masks
            step_s += seconds_per_token
            cached_s += walk(grammar.copy(), ids, width, None)[0]  # again: every row exists now
            differing += diff
            steps += len(masks)
        tried = min(len(sample), args.eager_schemas) if system == "fsm eager" else len(sample)
        reasons = sorted({f[:60] for f in failures})[:2]
        sample_rows.append(
            f"| {label} | {system} | {len(compile_s)}/{tried} | {ms(pct(compile_s, 0.5))} | {ms(pct(compile_s, 0.95))} "
            f"| {ms(max(compile_s, default=float('nan')))} | {ms(pct(first_s, 0.5))} | {us(pct(step_s, 0.5))} "
            f"| {us(pct(step_s, 0.99))} | {us(pct(cpu_s, 0.5))} / {us(pct(cpu_s, 0.99))} "
            f"| {us(pct(cached_s, 0.5))} / {us(pct(cached_s, 0.99))} | {differing}/{steps} "
            f"| {', '.join(reasons) or '-'} |"
        )
        # 3. stress schemas: the lazy automaton and the two fast libraries only
        if system in ("fsm lazy", "xgrammar", "llguidance"):
            for stress, (schema, instance) in STRESS.items():
                grammar, seconds, error = compile_once(backend, schema)
                if grammar is None:
                    stress_rows.append(f"| {label} | {stress} | {system} | {error} | - | - |")
                    continue
                first = first_mask_seconds(grammar, width)
                ids = tokenizer.encode(json.dumps(instance, ensure_ascii=False))
                per_token, _, _, problem = walk(grammar.copy(), ids, width, None)
                stress_rows.append(
                    f"| {label} | {stress} | {system} | {ms(seconds)} | {ms(seconds + first)} "
                    f"| {us(pct(per_token, 0.5))} / {us(pct(per_token, 0.99))}{' ' + problem if problem else ''} |"
                )
        backend.shutdown()
        print(f"{label}: {system} done", flush=True)
    return benchmark_rows, sample_rows, stress_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schemas", type=int, default=24)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--cold-repeats", type=int, default=11, help="compiles of the benchmark schema each after the process sat idle"
    )
    parser.add_argument("--eager-timeout", type=float, default=10.0)
    parser.add_argument("--eager-schemas", type=int, default=6, help="how many of the sample the eager fsm compiles")
    parser.add_argument(
        "--gc-freeze",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="gc.freeze() after each system's setup, as a long-running server does after start-up",
    )
    parser.add_argument("--data", type=Path, help="a local copy of JSONSchemaBench's maskbench/data (see the doc)")
    parser.add_argument("--files", type=int, default=400, help="with --data: how many files to draw")
    parser.add_argument("--systems", default="fsm lazy,xgrammar,llguidance", help="with --data: which systems")
    parser.add_argument("--vocabularies", default="4k,65k,131k", help="with --data: which vocabularies")
    parser.add_argument("--out", type=Path, help="with --data: also write the table here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.data:
        args.systems = args.systems.split(",")
        main_real(args)
        return
    sample = generate_schemas(args.seed, args.schemas)
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    # At 131k the eager fsm and outlines-core take minutes per schema: only the fast systems run.
    vocabularies = [
        ("bundled 4k", Tokenizer.from_pretrained(minisglang.DEFAULT_MODEL_PATH), ()),
        ("anthropic 65k", anthropic_65k(), ()),
        ("mistral tekken 131k", mistral_tekken(), ("fsm eager", "outlines")),
    ]
    tables = [bench_vocabulary(label, tok, sample, args, skip) for label, tok, skip in vocabularies]
    sizes = [len(json.dumps(s)) for s, _ in sample]
    text = "\n".join(
        [
            "# Compile cost and per-token cost: the lazy automaton beside the libraries",
            "",
            "All times in one run, systems one after the other on the same inputs. 'fsm lazy' is our s5 "
            "fsm backend with `automaton=\"lazy\"` (constrained/lazy_token_fsm.py, the default), 'fsm eager' "
            "the s1-s4 path (whole DFA and token index, compiled in a worker process with a "
            f"{args.eager_timeout:g} s timeout). Logits are {PAD} columns wider than the vocabulary. "
            + (
                "Each system's setup (libraries, vocabulary) is followed by `gc.collect(); gc.freeze()`, as a "
                "long-running server does after start-up: without it Python's full collections rescan every "
                "imported library (~400k objects here, 100-200 ms per pass on this machine) and land at random "
                "in a compile or a token (`--no-gc-freeze` measures that)."
                if args.gc_freeze
                else "Run with `--no-gc-freeze`: Python's full collections (100-200 ms here) land at random in the "
                "measurements."
            ),
            "",
            "## The benchmark schema of bench_backends.py",
            "",
            f"Median of {args.repeats} compiles back to back; 'cold' is the median of {args.cold_repeats} more, each "
            f"after the process sat idle {COLD_IDLE_S * 1e3:.0f} ms (a server between sporadic requests: the CPU's "
            "caches and branch predictors no longer hold the compiler's code and data). 'build' is the one-time vocabulary preparation (the libraries' "
            "tokenizer info; our vocabulary trie and the lazy backend's `prepare_vocabulary`: repetition counts "
            "of the common bodies, the compiled loops loaded). Target (issue 16): our compile + first mask <= xgrammar's.",
            "",
            "| vocabulary | system | build (ms) | compile (ms) | first mask (ms) | compile + first mask (ms) "
            "| compile + first mask, cold (ms) |",
            "|---|---|---:|---:|---:|---:|---:|",
            *[row for rows, _, _ in tables for row in rows],
            "",
            f"## A seeded sample of MaskBench-like schemas ({len(sample)} schemas, seed {args.seed}, "
            f"{min(sizes):,}-{max(sizes):,} characters of JSON)",
            "",
            f"`generate_schemas` in this script; the eager fsm compiles the first {args.eager_schemas} only "
            "(each takes seconds). 'per token' is `fill_vocab_mask` + `accept_token` along the tokens of a "
            "valid instance (json.dumps layout), a fresh grammar per schema, so most steps reach a state "
            "for the first time (the lazy automaton builds its row then; rows of sub-expressions such as a "
            "string's inside are shared with the grammars compiled before, as a server would); 'rows "
            "cached' walks the same tokens again. 'per token CPU' is the same steps in CPU time of the "
            "measuring thread (time.thread_time): on a loaded machine a step's wall time also holds the "
            "slices the scheduler gave other processes, which a step of a millisecond often waits for. "
            "'masks differing' counts steps whose mask is not bit for "
            "bit the lazy automaton's (for 'fsm eager' it must be 0; the libraries' grammars differ, see "
            "results/mask_oracle.md). At 131k the eager fsm and outlines-core are not run (minutes per "
            "schema). Targets (issue 16): compile p95 <= 50 ms with no timeouts; per-token p50 <= 50 us and "
            "p99 <= 1 ms at 65k.",
            "",
            "| vocabulary | system | compiled | compile p50 (ms) | p95 (ms) | max (ms) | first mask p50 (ms) "
            "| per token p50 (us) | p99 (us) | per token CPU p50 / p99 (us) | rows cached p50 / p99 (us) "
            "| masks differing | failures |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
            *[row for _, rows, _ in tables for row in rows],
            "",
            "## Stress schemas (eager DFAs take 10-25 s on each: not run)",
            "",
            "One walk of the instance's tokens on a fresh grammar (first visits).",
            "",
            "| vocabulary | schema | system | compile (ms) | compile + first mask (ms) | per token p50 / p99 (us) |",
            "|---|---|---|---:|---:|---:|",
            *[row for _, _, rows in tables for row in rows],
            "",
            machine_line(
                f"load average {load_before:.1f} before the run",
                f"xgrammar {version('xgrammar')}",
                f"llguidance {version('llguidance')}",
                f"outlines_core {version('outlines_core')}",
                f"run took {time.perf_counter() - started:.0f} s",
            ),
            "",
        ]
    )
    write_results(text, RESULTS)


if __name__ == "__main__":
    main()
