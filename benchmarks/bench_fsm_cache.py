"""What stage s3 buys: running requests keep decoding while a slow regex compiles, and a
regex compiled once is never compiled again (memory, then disk).

Part 1, step gaps. Eight unconstrained requests are decoding (stage s3, the bundled
model) when a request with a new, slow regex arrives. We record the wall time at which
each step hands the running requests their next token. The gaps "during" are those that
start between the arrival and the moment the grammar is ready (compiled, sent back, and
made into an FSM). They are compared with the same number of gaps just before the
arrival (a window with no compile, equally long in steps, so max against max is fair):
max during / max normal, and median during / median normal. Thirteen scenarios, each on
a fresh engine, interleaved run by run:

* blocking (the first release's `get_fsm` + `event.wait()` on arrival) or non-blocking
  (the grammar queue);
* the compile on a thread of the scheduler's process (`compile_in="thread"`, sharing
  Python's GIL with the scheduler) or in a worker process (`compile_in="process"`, at the
  default `compile_nice=5`; the real non-blocking case also at nice 10, the old default);
* the default engine (s5, our fsm backend): eager (`automaton="eager"`, the compile
  service's worker processes) and lazy (the default: a start row compiled in-process, so
  a real compile is ready before the next token and leaves no window to measure);
* a real compile of `SLOW_REGEX` on the bundled vocabulary (about 2 s of CPU), or a fast
  regex whose compile is preceded by a `--sleep` second sleep on the cache's thread
  (waiting without CPU: the pure scheduling effect).

The admission gap (non-blocking) is the first gap after the grammar is ready: its step
prefills the new request, and no one else decodes in it. It is reported on its own; in
blocking mode it is part of the one long gap. Also reported: how long the scheduler's
process spent making the FSM from what the compile sent back (`make_fsm`, on the cache's
thread), and where the worst gap of the window fell (counted in gaps before the grammar
was ready; 0 = the last one).

Part 2, compile times on the 65k anthropic vocabulary (byte-level BPE) for a JSON-schema
like regex, through the s3 stage's own FSMCache with a disk directory: cold (compile +
packing the state rows, both in the worker), warm memory (a dict hit), warm disk (a new
stage in a new "process" loads the index and the packed rows from disk and checks them).

    python benchmarks/bench_fsm_cache.py [--model-path DIR] [--repeats 3] [--sleep 2.0]

Prints both tables with ratios; writes benchmarks/results/fsm_cache.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from _results import machine_line, write_results  # benchmarks/_results.py (scripts run from benchmarks/)
from tqdm.auto import tqdm

import minisglang
from minisglang.constrained.fsm_arrays import fsm_from_arrays, pack_rows
from minisglang.constrained.token_fsm import compile_regex_index
from minisglang.engine import Engine
from minisglang.stages.base import StageContext
from minisglang.stages.s3_fsm_cache import FSMCacheStage
from minisglang.stages.s4_jump_forward import JumpForwardStage
from minisglang.tokenizer import Tokenizer

RESULTS = Path(__file__).parent / "results" / "fsm_cache.md"
ANTHROPIC = Path(__file__).resolve().parents[1] / ".cache" / "tokenizers" / "anthropic-0.3.11" / "tokenizer.json"
_STR = r'"([^"\\\x00-\x1F]|\\["\\/bfnrt]){0,%d}"'
# About 2 s to compile on the bundled 4k vocabulary (about 1900 states from the bounded strings).
SLOW_REGEX = r'\{"name": ' + _STR % 60 + r', "email": ' + _STR % 90 + r', "city": ' + _STR % 60 + r"\}"
FAST_REGEX = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
# A JSON-schema-like object (what a schema with these properties compiles to), for part 2.
_ANY_STR = r'"([^"\\\x00-\x1F]|\\["\\/bfnrt])*"'
JSON_REGEX = (
    r'\{[ ]?"name"[ ]?:[ ]?' + _ANY_STR + r'[ ]?,[ ]?"age"[ ]?:[ ]?(-)?(0|[1-9][0-9]*)[ ]?,[ ]?'
    r'"city"[ ]?:[ ]?"(Beijing|Shanghai|Paris|London)"[ ]?,[ ]?"email"[ ]?:[ ]?'
    + _ANY_STR
    + r'[ ]?,[ ]?"hobbies"[ ]?:[ ]?\[[ ]?('
    + _ANY_STR
    + r"([ ]?,[ ]?"
    + _ANY_STR
    + r")*)?[ ]?\][ ]?\}"
)
USER = "<|user|>\nExtract as JSON: {} is {} years old and lives in {}.\n<|assistant|>\n"
PEOPLE = [
    ("Li Lei", 31, "Paris"),
    ("Wang Fang", 35, "Shanghai"),
    ("Ken Sato", 44, "Tokyo"),
    ("Ana Lima", 28, "Rome"),
    ("Olga Ivanova", 52, "Berlin"),
    ("Bob Jones", 23, "London"),
    ("Chen Jing", 61, "Beijing"),
    ("Sara Berg", 39, "Oslo"),
]


# ------------------------------------------------------------------------- part 1
# Engine(stage="s5", automaton="eager"): our "fsm" backend's whole-DFA compile, through the compile
# service (the lazy automaton, when it is the default, compiles only a start row: nothing to stall).
S5_DEFAULT = "s5 fsm backend"
S5_LAZY = "s5 fsm backend, lazy"  # the default engine: Engine(stage="s5"), no compile service
# A niced worker on a loaded machine may take far longer than the 30 s default: this measures gaps, not limits.
LONG = 600.0
ARRIVAL_TICK = 30  # decode steps of the eight requests before the slow request arrives
# Tokens each of the eight decodes: the longest of their prompts (38 tokens with the tokenizer of
# 2026-12-01) plus these must fit the bundled model's context of 1024.
DECODE_TOKENS = 980


def decode_ticks(engine: Engine, slow_params: dict | None, total_ticks: int = 0) -> tuple[list[float], object]:
    """Eight requests decode; at tick ARRIVAL_TICK the slow request arrives (if any).

    Returns the wall times at which the eight got a new token, and the slow request. With
    no slow request, decodes `total_ticks` ticks: the control window."""
    running = [
        engine.submit(USER.format(*p), {"temperature": 0, "ignore_eos": True, "max_new_tokens": DECODE_TOKENS})
        for p in PEOPLE
    ]
    while not all(r.output_ids for r in running):
        refused = [r.finished_reason for r in running if r.finished and not r.output_ids]
        if refused:  # e.g. a prompt that no longer fits the context with DECODE_TOKENS: fail, not spin
            raise RuntimeError(f"a decoding request was refused: {refused[0]}")
        engine.step()
    probe, ticks, slow, after = running[0], [], None, 0
    while not probe.finished:
        if slow_params and slow is None and len(ticks) == ARRIVAL_TICK:
            slow = engine.submit(USER.format(*PEOPLE[0]), slow_params)  # blocking mode: waits here
        n = len(probe.output_ids)
        engine.step()
        if len(probe.output_ids) > n:
            ticks.append(time.perf_counter())
            after += bool(slow and len(slow.output_ids) >= 3)
        if (slow and after > 3) or (not slow_params and len(ticks) >= total_ticks):
            break
    for r in running:
        engine.abort(r.rid)
    while engine.scheduler.has_work():
        engine.step()
    return ticks, slow


def step_gap_run(model_path: str | None, mode: str, compile_in: str, kind: str, sleep_s: float) -> dict:
    """One scenario on a fresh engine, then its control window on the same engine.

    `compile_in`: "thread", "process" or "process nice N" (workers at niceness N), or
    S5_DEFAULT: the default engine (s5, our "fsm" backend, its compile service)."""
    if compile_in == S5_DEFAULT:
        engine = Engine(model_path=model_path, stage="s5", compile_workers=1, automaton="eager", compile_timeout=LONG)
    elif compile_in == S5_LAZY:
        engine = Engine(model_path=model_path, stage="s5", compile_workers=1, compile_timeout=LONG)
    else:
        where, *nice = compile_in.split(" nice ")
        engine = Engine(
            model_path=model_path,
            stage="s3",
            grammar_queue=mode,
            compile_in=where,
            compile_workers=1,
            compile_timeout=LONG,
            **({"compile_nice": int(nice[0])} if nice else {}),
        )
    stage = engine.stage
    # One short constrained request first: it starts the compile worker (or builds the trie
    # on this process) and compiles s2's CPU mask kernel, which would otherwise land in the
    # admission step.
    engine.generate(USER.format(*PEOPLE[1]), {"regex": r"[0-9]+", "max_new_tokens": 2})
    window = {}
    if compile_in in (S5_DEFAULT, S5_LAZY):
        hook_backend(stage.backend, window, kind, sleep_s)
    else:
        hook_cache(stage.cache, window, kind, sleep_s)
    ticks, slow = decode_ticks(engine, {"regex": SLOW_REGEX if kind == "real" else FAST_REGEX, "temperature": 0})
    if slow.finished_reason and slow.finished_reason["type"] == "abort":
        raise RuntimeError(f"the slow request aborted: {slow.finished_reason}")
    if window["ready"] > ticks[-1]:  # the eight reached the model's context before the grammar was ready
        engine.shutdown()
        return {"outlasted": len(ticks), "compile": window["ready"] - window["start"]}
    # The control: the same eight requests decoding through the same step numbers (same
    # sequence lengths, so the same cost per step), with no compile anywhere.
    control, _ = decode_ticks(engine, None, total_ticks=len(ticks))
    engine.shutdown()
    if len(control) < len(ticks):
        raise RuntimeError("the control window is shorter than the scenario: raise max_new_tokens")
    gap = lambda t, i: t[i + 1] - t[i]  # gap i starts at tick i  # noqa: E731
    during = [i for i in range(ARRIVAL_TICK - 1, len(ticks) - 1) if ticks[i] < window["ready"]]
    if not during:  # ready before the next token (the lazy automaton's start row): no gap to compare
        return {"instant": True, "compile": window["ready"] - window["start"]}
    admission = during[-1] + 1  # the first gap after the grammar is ready: it holds the prefill
    d = [gap(ticks, i) for i in during]
    c = [gap(control, i) for i in during]
    worst = max(range(len(d)), key=d.__getitem__)
    return {
        "compile": window["ready"] - window["start"],
        "gaps": len(during),
        "make": window["make"],
        "worst_before_ready": len(d) - 1 - worst,
        "normal_median": statistics.median(c),
        "normal_max": max(c),
        "during_median": statistics.median(d),
        "during_max": max(d),
        "max_ratio": max(d) / max(c),
        "median_ratio": statistics.median(d) / statistics.median(c),
        "admission": gap(ticks, admission) if mode == "nonblocking" else float("nan"),
        "admission_ratio": gap(ticks, admission) / gap(control, admission) if mode == "nonblocking" else float("nan"),
    }


def hook_cache(cache, window: dict, kind: str, sleep_s: float) -> None:
    """Time s3's compile: from its start to the FSM made (the entry's event is set right after)."""
    real_compile, real_make = cache.compile_index, cache.make_fsm

    def timed_compile(regex):
        window["start"] = time.perf_counter()
        if kind == "sleep":
            time.sleep(sleep_s)
        return real_compile(regex)

    def timed_make(regex, index):
        t0 = time.perf_counter()
        fsm = real_make(regex, index)
        window["ready"] = time.perf_counter()
        window["make"] = window["ready"] - t0
        return fsm

    cache.compile_index, cache.make_fsm = timed_compile, timed_make


def hook_backend(backend, window: dict, kind: str, sleep_s: float) -> None:
    """Time s5's compile: from its start to the matcher made (its future is done right after)."""
    real_compile = backend.compile
    if backend.service is None:  # the lazy automaton: compiled in this process, no arrays sent back

        def timed_lazy(kind_, text):
            window["start"] = time.perf_counter()
            if kind == "sleep":
                time.sleep(sleep_s)
            t0 = time.perf_counter()
            grammar = real_compile(kind_, text)
            window["ready"] = time.perf_counter()
            window["make"] = window["ready"] - t0
            return grammar

        backend.compile = timed_lazy
        return
    real_arrays = backend.service.compile_arrays

    def timed_arrays(regex):
        arrays = real_arrays(regex)
        window["arrays"] = time.perf_counter()
        return arrays

    def timed_compile(kind_, text):
        window["start"] = time.perf_counter()
        if kind == "sleep":
            time.sleep(sleep_s)
        grammar = real_compile(kind_, text)
        window["ready"] = time.perf_counter()
        window["make"] = window["ready"] - window["arrays"]
        return grammar

    backend.compile, backend.service.compile_arrays = timed_compile, timed_arrays


# ------------------------------------------------------------------------- part 2
def compile_times(tokenizer: Tokenizer, regex: str, disk_dir: Path, stage_cls=FSMCacheStage) -> dict:
    """Cold, warm-memory and warm-disk get_fsm through the stage's FSMCache (s3, or s4 whose
    compile also builds the jump map from the same DFA)."""

    def new_stage():
        stage = stage_cls(
            StageContext(tokenizer, tokenizer.vocab_size, torch.device("cpu"), {"grammar_cache_dir": str(disk_dir)})
        )
        stage.service.warm_up()  # the workers are up and have built their tries
        return stage

    first = new_stage()
    t0 = time.perf_counter()
    fsm = first.cache.get_fsm(regex)
    cold = time.perf_counter() - t0
    assert first.cache.compile_count == 1
    t0 = time.perf_counter()
    assert first.cache.get_fsm(regex) is fsm
    warm_memory = time.perf_counter() - t0
    arrays = fsm.index.state_to_tokens.arrays
    t0 = time.perf_counter()
    pack_rows(arrays, tokenizer.vocab_size)  # what the worker did after the compile
    packing = time.perf_counter() - t0
    t0 = time.perf_counter()
    fsm_from_arrays(regex, arrays)  # what the scheduler's process does with the reply
    wrap = time.perf_counter() - t0
    first.shutdown()

    second = new_stage()  # as after a restart: an empty memory cache, the same directory
    t0 = time.perf_counter()
    again = second.cache.get_fsm(regex)
    warm_disk = time.perf_counter() - t0
    assert second.service.compile_count == 0 and second.service.disk.hits == 1
    assert again.index.state_to_tokens == fsm.index.state_to_tokens
    second.shutdown()
    size = sum(p.stat().st_size for p in disk_dir.glob("fsm-*.npz"))
    return {
        "cold": cold,
        "warm_memory": warm_memory,
        "warm_disk": warm_disk,
        "packing": packing,
        "wrap": wrap,
        "states": fsm.index.num_states,
        "bytes": size,
    }


GAP_TARGET = 1.2  # issue target: while a grammar compiles, max and median step gaps <= 1.2x the control's


def gap_target_met(m: dict) -> bool:
    """Whether a run's gap ratios meet GAP_TARGET: both the max and the median ratio."""
    return m["max_ratio"] <= GAP_TARGET and m["median_ratio"] <= GAP_TARGET


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-path", default=None, help="checkpoint directory (default: the bundled model)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sleep", type=float, default=2.0, help="seconds of the sleep-wrapped compile")
    args = ap.parse_args()
    torch.set_num_threads(1)

    scenarios = [
        (k, c, m) for k in ("real", "sleep") for c in ("thread", "process") for m in ("blocking", "nonblocking")
    ]
    scenarios.insert(4, ("real", "process nice 10", "nonblocking"))
    scenarios.insert(5, ("real", S5_DEFAULT, "nonblocking"))
    scenarios.insert(6, ("real", S5_LAZY, "nonblocking"))
    scenarios.append(("sleep", S5_DEFAULT, "nonblocking"))
    scenarios.append(("sleep", S5_LAZY, "nonblocking"))
    runs = {sc: [] for sc in scenarios}
    load_before = os.getloadavg()
    with tqdm(total=len(scenarios) * args.repeats, desc="step gaps") as bar:
        for _ in range(args.repeats):
            for kind, compile_in, mode in scenarios:  # interleaved, so a busy machine slows all alike
                runs[kind, compile_in, mode].append(step_gap_run(args.model_path, mode, compile_in, kind, args.sleep))
                bar.update()
    load_after = os.getloadavg()
    # Runs whose compile outlasted the decode (possible at nice 10 on a busy machine) measure
    # nothing; the table says how many there were.
    done = {sc: [r for r in rs if "outlasted" not in r and "instant" not in r] for sc, rs in runs.items()}
    med = {sc: {k: statistics.median(r[k] for r in rs) for k in rs[0]} if rs else None for sc, rs in done.items()}

    tok65k = Tokenizer.from_pretrained(ANTHROPIC)
    t0 = time.perf_counter()
    compile_regex_index(r"[0-9]", tok65k, 10_000)
    trie_s = time.perf_counter() - t0
    parts = []
    for _ in tqdm(range(args.repeats), desc="65k compiles"):
        with tempfile.TemporaryDirectory() as d:
            parts.append(compile_times(tok65k, JSON_REGEX, Path(d)))
    ct = {k: statistics.median(p[k] for p in parts) for k in parts[0]}
    parts4 = []
    for _ in tqdm(range(args.repeats), desc="65k compiles, s4"):
        with tempfile.TemporaryDirectory() as d:
            parts4.append(compile_times(tok65k, JSON_REGEX, Path(d), JumpForwardStage))
    ct4 = {k: statistics.median(p[k] for p in parts4) for k in parts4[0]}
    load_end = os.getloadavg()
    loads = lambda la: " / ".join(f"{x:.1f}" for x in la)  # noqa: E731

    model_path = args.model_path or minisglang.DEFAULT_MODEL_PATH
    vocab = Tokenizer.from_pretrained(model_path).vocab_size
    lines = [
        "# FSM cache: step gaps during a slow compile, and compile times cold / warm",
        "",
        "## 1. Decode-step gaps of 8 running requests while one regex compiles (stage s3, and the default engine)",
        "",
        f"Model: {Path(model_path).name} (vocabulary {vocab}); "
        f"median of {args.repeats} interleaved runs per row. 'Real' compiles this regex on that vocabulary:",
        "",
        f"    {SLOW_REGEX}",
        "",
        f"'Sleep' compiles `{FAST_REGEX}` after a {args.sleep:.1f} s `time.sleep` (waiting, no CPU).",
        "",
        "Gaps *during* start between the arrival and the moment the grammar is ready (compiled, sent back, made "
        "into an FSM). *Normal* gaps are the control: the same eight requests decoding through the same step "
        "numbers (same lengths, same cost per step) on the same engine right afterwards, with no compile; as many "
        "gaps as during, so max against max is fair. Ratios are taken within each run, then the median of the "
        f"runs. Load average of the machine (1 / 5 / 15 min): {loads(load_before)} before part 1, "
        f"{loads(load_after)} after. The compile workers run at nice 5 (`compile_nice`).",
        "",
        "*FSM made (ms)*: the scheduler's process turning what the compile sent back into an FSM (`make_fsm`). "
        "*Worst gap at*: where the window's longest gap fell, in gaps before the grammar was ready (0 = the last "
        "one), each run.",
        "",
        "| compile | compile in | grammar queue | window (s) | gaps in window | normal median / max (ms) | "
        "during median / max (ms) | max during / max normal | median during / median normal | admission gap (ms) | "
        "FSM made (ms) | worst gap at | target: non-blocking, both ratios <= 1.2 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, compile_in, mode in scenarios:
        m, rs = med[kind, compile_in, mode], runs[kind, compile_in, mode]
        if m is None and all("instant" in r for r in rs):
            lines.append(
                f"| {kind} | {compile_in} | {mode} | {statistics.median(r['compile'] for r in rs):.3f} | "
                f"0: ready before the next token, in all {len(rs)} runs |" + " |" * 8
            )
            continue
        if m is None:
            lines.append(
                f"| {kind} | {compile_in} | {mode} | > {min(r['compile'] for r in rs):.1f} | "
                f"all {len(rs)} runs: the compile outlasted the {rs[0]['outlasted']}-step decode |" + " |" * 8
            )
            continue
        target = "-" if mode == "blocking" else ("met" if gap_target_met(m) else "**missed**")
        admission = "(in the gap)" if mode == "blocking" else f"{m['admission'] * 1e3:.0f}"
        lines.append(
            f"| {kind} | {compile_in} | {mode} | {m['compile']:.2f} | {m['gaps']:.0f} | "
            f"{m['normal_median'] * 1e3:.1f} / {m['normal_max'] * 1e3:.1f} | "
            f"{m['during_median'] * 1e3:.1f} / {m['during_max'] * 1e3:.1f} | **{m['max_ratio']:.2f}x** | "
            f"**{m['median_ratio']:.2f}x** | {admission} | {m['make'] * 1e3:.2f} | "
            f"{', '.join(str(r.get('worst_before_ready', 'outlasted')) for r in rs)} | {target} |"
        )
    for kind in ("real", "sleep"):
        b, t, pr = (
            med[kind, c, m] for c, m in (("process", "blocking"), ("thread", "nonblocking"), ("process", "nonblocking"))
        )
        lines += [
            "",
            f"- {kind}: the longest gap while the grammar compiles is {b['during_max'] * 1e3:.0f} ms blocking, "
            f"{t['during_max'] * 1e3:.0f} ms non-blocking on a thread, {pr['during_max'] * 1e3:.0f} ms non-blocking "
            f"in a process (control: {pr['normal_max'] * 1e3:.0f} ms). Each run, non-blocking in a process, "
            "max / median ratio: "
            + ", ".join(
                f"{r['max_ratio']:.2f}x / {r['median_ratio']:.2f}x" for r in done[kind, "process", "nonblocking"]
            )
            + ".",
        ]
        for name, what in ((S5_DEFAULT, "eager: the compile service"), (S5_LAZY, "lazy, the default")):
            d5 = med[kind, name, "nonblocking"]
            if d5 is not None:
                lines += [
                    f"- {kind}, stage s5 with the fsm backend ({what}): longest gap {d5['during_max'] * 1e3:.0f} ms "
                    f"(control {d5['normal_max'] * 1e3:.0f} ms): max during / max normal **{d5['max_ratio']:.2f}x**, "
                    f"median during / median normal **{d5['median_ratio']:.2f}x** "
                    f"({'met' if gap_target_met(d5) else 'missed'}: target both <= {GAP_TARGET}x). "
                    "Each run, max / median: "
                    + ", ".join(
                        f"{r['max_ratio']:.2f}x / {r['median_ratio']:.2f}x" for r in done[kind, name, "nonblocking"]
                    )
                    + "."
                ]
    lines += [
        "",
        "## 2. Compile times on the 65k anthropic vocabulary",
        "",
        "A JSON-schema-like regex (name, age, city enum, email, hobbies array), through `FSMCacheStage.cache.get_fsm` (compile in a worker process) "
        f"with a disk directory; median of {args.repeats} runs, each with a fresh directory:",
        "",
        f"    {JSON_REGEX}",
        "",
        "| vocabulary | reachable states | cold: compile + pack in the worker (s) | warm memory (ms) | warm disk: "
        "load + check (s) | packing the rows alone, in the worker (ms) | FSM made on the scheduler's process (ms) | "
        "cold / warm disk | disk file (MB) |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| anthropic 65k ({tok65k.vocab_size} ids) | {ct['states']:.0f} | {ct['cold']:.2f} | "
        f"{ct['warm_memory'] * 1e3:.3f} | {ct['warm_disk']:.3f} | {ct['packing'] * 1e3:.1f} | {ct['wrap'] * 1e3:.2f} | "
        f"**{ct['cold'] / ct['warm_disk']:.1f}x** | {ct['bytes'] / 1e6:.1f} |",
        "",
        f"Stage s4 (the same compile plus the jump map, from the same DFA): cold {ct4['cold']:.2f} s, "
        f"warm disk {ct4['warm_disk']:.3f} s, disk file {ct4['bytes'] / 1e6:.1f} MB; cold s4 / cold s3 = "
        f"**{ct4['cold'] / ct['cold']:.2f}x** (target: no slower, up to noise).",
        "",
        f"Load average after part 2 (1 / 5 / 15 min): {loads(load_end)}.",
        "",
        f"One-time vocabulary trie for the 65k tokenizer (not in the rows): {trie_s:.2f} s.",
        "",
        machine_line(),
        "",
    ]
    text = "\n".join(lines)
    write_results(text, RESULTS)


if __name__ == "__main__":
    main()
