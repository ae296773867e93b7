"""Overlap scheduling (s7, minisglang/overlap.py): how much of a step's CPU work hides
behind the forward, at batch 64.

Two models: the bundled one (4k vocabulary) and a random-weight model of the same shape
with anthropic's 65k byte-level BPE (tests/real_tokenizers.py), whose logits and masks
are 16x wider. On each, `--batch` constrained requests (a regex with two free-text
fields, greedy, `max_new_tokens` 40) are submitted at once and served twice by s7:
`disable_overlap_schedule=True` (the plain step) and the default overlapped step. Only
decode steps with the whole batch count.

Per step, measured with `time.perf_counter` around `model.forward` and `Engine.step`:

* plain: forward F, the rest C = step - F (the CPU work: schedule, mask, sample, process);
* overlapped, from each step's "overlap" trace event: the work done during the forward
  D (process the previous tokens, fill the masks, hook 2), the work on the critical path
  E (schedule, sample, record), the forward F' and the wait for it;
* hidden fraction, two readings: by the trace, min(D, F') / (D + E) (the CPU work that
  ran while the forward did); by the clock, (step_plain - step_overlapped) / C (the CPU
  time that left the step's wall time). They differ when the two threads slow each other
  down (two threads on few cores, and the GIL between torch operators).

    python benchmarks/bench_overlap.py [--batch 64] [--steps 40] [--repeats 3]

Prints the table; writes benchmarks/results/overlap.md and, from the last overlapped run of
the 65k model, the timeline of three typical full-batch steps (overlap-timeline.svg, chapter 08).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from _results import machine_line, write_results  # benchmarks/_results.py

import minisglang
from minisglang.drawings.timeline import overlap_timeline
from minisglang.engine import Engine
from minisglang.tokenizer import ChatPrompt

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
RESULTS = Path(__file__).parent / "results" / "overlap.md"
TIMELINE = RESULTS.parent / "overlap-timeline.svg"
REGEX = r'\{"name": "[a-z ]{1,40}", "note": "[a-z ]{1,40}"\}'


def random_model_65k(folder: Path) -> Path:
    """The bundled model's shape, random weights, anthropic's 65k tokenizer."""
    import json
    import shutil

    from real_tokenizers import ANTHROPIC_TOKENIZER_JSON, anthropic_65k
    from transformers import LlamaConfig, LlamaForCausalLM

    bundled = json.loads((Path(minisglang.DEFAULT_MODEL_PATH) / "config.json").read_text())
    vocab = anthropic_65k().vocab_size
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=bundled["hidden_size"],
        intermediate_size=bundled["intermediate_size"],
        num_hidden_layers=bundled["num_hidden_layers"],
        num_attention_heads=bundled["num_attention_heads"],
        num_key_value_heads=bundled["num_key_value_heads"],
        head_dim=bundled["head_dim"],
        max_position_embeddings=bundled["max_position_embeddings"],
        tie_word_embeddings=True,
        bos_token_id=0,
        eos_token_id=0,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    shutil.copy(ANTHROPIC_TOKENIZER_JSON, folder / "tokenizer.json")
    return folder


def serve(model_path: str, overlap: bool, batch: int, steps: int, device: str = "cpu") -> dict:
    """Serve one batch; per full-batch decode step: the step's and the forward's seconds,
    and (overlapped) the trace's parts."""
    eng = Engine(
        model_path=model_path,
        stage="s7",
        device=device,
        disable_overlap_schedule=not overlap,
        max_total_tokens=batch * 200,
        max_running_requests=batch,
    )
    try:
        forward, forward_s = eng.model.forward, []

        def timed_forward(fb, **kw):
            start = time.perf_counter()
            out = forward(fb, **kw)
            forward_s.append(time.perf_counter() - start)
            return out

        eng.model.forward = timed_forward
        params = {"regex": REGEX, "temperature": 0, "max_new_tokens": steps}
        eng.generate(ChatPrompt("", [5, 6, 7]), params)  # compile the regex, warm up
        reqs = [eng.submit(ChatPrompt("", [10 + i % 50, 20 + i % 7, 30]), params) for i in range(batch)]
        rows, full_steps = [], []
        while not all(r.released for r in reqs):
            first, calls = len(eng.scheduler.trace), len(forward_s)
            start = time.perf_counter()
            eng.step()
            step_s = time.perf_counter() - start
            events = list(eng.scheduler.trace)[first:]
            full = any(e["event"] == "decode" and len(e["reqs"]) == batch for e in events)
            if full and len(forward_s) == calls + 1:
                row = {"step": step_s, "forward": forward_s[-1]}
                lap = [e for e in events if e["event"] == "overlap"]
                if lap:
                    row["during"] = sum(lap[0]["during_forward"].values())
                    row["exposed"] = sum(lap[0]["exposed"].values())
                    row["forward_trace"] = lap[0]["forward_s"]
                    row["waited"] = lap[0]["waited_s"]
                rows.append(row)
                full_steps.extend(lap)
        return {"rows": rows, "vocab": eng.model.config.vocab_size, "trace": full_steps}
    finally:
        eng.shutdown()


def typical_steps(events: list[dict], n: int) -> list[dict]:
    """The `n` consecutive overlap events closest, part by part, to the median step: the
    window whose parts (the forward and each named piece of work) are nearest their medians
    over the run. (A window picked by its total time alone can hide one 10 ms outlier behind
    short parts elsewhere, and the picture then disagrees with the table.)"""

    def parts(e: dict) -> dict[str, float]:
        named = {f"during:{k}": v for k, v in e["during_forward"].items()}
        named.update({f"exposed:{k}": v for k, v in e["exposed"].items()})
        return {"forward": e["forward_s"], **named}

    keys = sorted({k for e in events for k in parts(e)})
    medians = {k: statistics.median(parts(e).get(k, 0.0) for e in events) for k in keys}
    off = [sum(abs(parts(e).get(k, 0.0) - m) for k, m in medians.items()) for e in events]
    start = min(range(len(events) - n + 1), key=lambda i: sum(off[i : i + n]))
    return events[start : start + n]


def median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def measure_steps(model_path: str, batch: int, steps: int, repeats: int, device: str = "cpu") -> dict:
    """Medians (seconds) of the plain and the overlapped full-batch steps of one model, the
    two hidden fractions, and the last overlapped run's full-batch trace events."""
    plain, over = [], []
    for _ in range(repeats):  # alternate, so a busy moment of the machine hits both
        plain += serve(model_path, False, batch, steps, device)["rows"]
        got = serve(model_path, True, batch, steps, device)
        over += got["rows"]
    m = {
        "vocab": got["vocab"],
        "steps": (len(plain), len(over)),
        "step_plain": median(plain, "step"),
        "forward_plain": median(plain, "forward"),
        "step_overlap": median(over, "step"),
        "forward_overlap": median(over, "forward_trace"),
        "during": median(over, "during"),
        "exposed": median(over, "exposed"),
        "waited": median(over, "waited"),
        "trace": got["trace"],
    }
    m["cpu_plain"] = m["step_plain"] - m["forward_plain"]
    m["hidden_trace"] = min(m["during"], m["forward_overlap"]) / (m["during"] + m["exposed"])
    m["hidden_clock"] = (m["step_plain"] - m["step_overlap"]) / m["cpu_plain"] if m["cpu_plain"] > 0 else float("nan")
    return m


def measure(name: str, model_path: str, batch: int, steps: int, repeats: int) -> tuple[list[str], list[dict]]:
    """The table's row for one model, and the last overlapped run's full-batch trace events."""
    m = measure_steps(model_path, batch, steps, repeats)
    ms = lambda key: f"{1000 * m[key]:.2f}"  # noqa: E731
    return [
        f"| {name} | {m['vocab']} | {m['steps'][0]} / {m['steps'][1]} | {ms('step_plain')} | {ms('forward_plain')} | "
        f"{ms('cpu_plain')} | {ms('step_overlap')} | {ms('forward_overlap')} | {ms('during')} | {ms('exposed')} | "
        f"{ms('waited')} | {m['hidden_trace']:.0%} | {m['hidden_clock']:.0%} |"
    ], m["trace"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=40, help="max_new_tokens of each request")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    start = time.perf_counter()
    lines = [
        "# Overlap scheduling: the CPU work hidden behind the forward (s7)",
        "",
        f"benchmarks/bench_overlap.py: {args.batch} requests at once, regex `{REGEX}`, greedy, "
        f"max_new_tokens {args.steps}; medians over the decode steps with the whole batch, "
        f"{args.repeats} runs of each mode, alternated. Times in ms per step.",
        "",
        "| model | vocab | steps (plain / overlap) | plain step | plain forward | plain CPU work | "
        "overlap step | overlap forward | work during forward | work exposed | waited for forward | "
        "hidden (trace) | hidden (clock) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += measure("bundled tiny-json-llama", minisglang.DEFAULT_MODEL_PATH, args.batch, args.steps, args.repeats)[0]
    with tempfile.TemporaryDirectory() as tmp:
        path = random_model_65k(Path(tmp))
        row, trace = measure("random weights, same shape", str(path), args.batch, args.steps, args.repeats)
        lines += row
    title = f"s7 overlap, batch {args.batch}, 65k vocabulary: 3 typical full-batch decode steps of a real run"
    overlap_timeline(typical_steps(trace, 3), steps=3, title=title).save(TIMELINE)
    lines += [
        "",
        "hidden (trace) = min(work during forward, overlap forward) / (work during forward + work "
        "exposed); hidden (clock) = (plain step - overlap step) / plain CPU work.",
        "",
        f"![three typical full-batch steps of the 65k overlapped run]({TIMELINE.name}) (the timeline: "
        "forward thread above, scheduler thread below; green ran during the forward, orange did not, "
        "grey is the scheduler waiting for the logits)",
        "",
        machine_line(f"{time.perf_counter() - start:.0f} s in all"),
    ]
    write_results("\n".join(lines) + "\n", RESULTS)


if __name__ == "__main__":
    main()
