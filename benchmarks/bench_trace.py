"""The step view (minisglang.trace): page size, time to open it, and what recording costs.

A random-weight model of the bundled shape with anthropic's 65k byte-level BPE (the same
model benchmarks/bench_overlap.py builds), stage s6 with the lazy "fsm" backend, one
greedy JSON-Schema request (a free-text string, so it runs its full 200 tokens) traced
with top-10 per step. Measured:

* the page's size in bytes (target <= 1 MB) and the time headless chromium takes to open
  it from disk until its script has drawn step 0 (target < 2 s);
* the decode time of the same request with recording off (`engine.generate`) and on
  (`minisglang.trace(..., draw=False)`: the drawing is made after the request), medians
  of `--repeats` runs each, alternated; slowdown = on / off - 1 (target <= 10%);
* the recorder's own time: the seconds spent inside its hooks (timed around each call)
  plus building the Trace from the events, per step, and as a share of a step with
  recording off. On a machine shared with other jobs the wall-clock slowdown above
  moves by more than the recorder costs; this share is the steadier reading.

And a runaway, step by step (`--part runaway`, chapter 06 section 5c): the bundled model,
free whitespace (`json_whitespace="[ \\n\\t]*"`), the schema with keys it never saw and the
32 prompts of bench_production.py's whitespace part at temperature 0.7; the answer with
the longest whitespace run is traced again, and its steps are split into the whitespace
run and the rest, with the mass the mask kept in each.

    python benchmarks/bench_trace.py [--part cost|runaway|all] [--tokens 200] [--repeats 5]

Prints the tables; writes their sections of benchmarks/results/trace.md.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _results import machine_line, write_section  # benchmarks/_results.py
from bench_overlap import random_model_65k
from bench_production import FREE_WHITESPACE, TEMPERATURE, UNSEEN_KEYS, chat_prompts, md_table, validation_set

import minisglang
from minisglang.engine import Engine
from minisglang.stepview.html import mass_plot

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
RESULTS = Path(__file__).parent / "results" / "trace.md"
PLOT = RESULTS.parent / "trace-runaway-mass.svg"  # the runaway's mass kept, for chapter 06
SCHEMA = {"type": "object", "properties": {"note": {"type": "string", "maxLength": 2000}}, "required": ["note"]}


def open_seconds(page: Path) -> float | None:
    """Seconds from asking headless chromium for the page to its script showing step 0."""
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        return None
    from selenium import webdriver
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1920,1080"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(shutil.which("chromedriver")))
    try:
        driver.get("about:blank")
        start = time.perf_counter()
        driver.get(page.as_uri())
        WebDriverWait(driver, 30).until(
            lambda d: d.execute_script(
                "var s = document.querySelector('.stepno'); return s && s.textContent.startsWith('step 0');"
            )
        )
        return time.perf_counter() - start
    finally:
        driver.quit()


class HookTimer:
    """Wraps StepRecorder's hooks and Trace.from_events, summing the seconds spent in them."""

    def __init__(self):
        from minisglang.stepview.record import StepRecorder, Trace

        self.seconds = 0.0
        for name in ("before_mask", "after_mask", "token", "jump"):
            setattr(StepRecorder, name, self.timed(getattr(StepRecorder, name)))
        Trace.from_events = classmethod(self.timed(Trace.from_events.__func__))

    def timed(self, f):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        return wrapper


COST, RUNAWAY = "## The cost of a step view", "## A runaway, step by step"


def percent(p: float) -> str:
    """A probability as a percentage a reader can compare: 99.9%, 0.00071%."""
    return f"{100 * p:.1f}%" if p >= 0.001 else f"{100 * p:.2g}%"


def runaway(n: int = 32, seed: int = 2024 + 3) -> None:
    """Trace the longest whitespace run of bench_production.py's free-whitespace runs."""
    begin = time.perf_counter()
    engine = Engine(jump_forward=False, json_whitespace=FREE_WHITESPACE)
    try:
        prompts = chat_prompts(engine, [m for m, _, _ in validation_set(n, seed)])
        params = [
            {"json_schema": UNSEEN_KEYS, "temperature": TEMPERATURE, "seed": i, "max_new_tokens": 128} for i in range(n)
        ]
        outs = engine.generate(prompts, params)
        longest = lambda text: max((len(r) for r in re.findall(r"[ \n\t]+", text)), default=0)  # noqa: E731
        pick = max(range(n), key=lambda i: longest(outs[i]["text"]))
        trace = minisglang.trace(engine, prompts[pick], params[pick])
    finally:
        engine.shutdown()
    assert trace.output_text == outs[pick]["text"]
    # The longest run's characters, and the steps whose token falls inside it (no jumps here:
    # step i's token ends the text at len(steps[i].text)).
    run = max(re.finditer(r"[ \n\t]+", trace.output_text), key=lambda m: len(m[0]))
    inside = [s for s in trace.steps if run.start() <= len(s.text) - len(s.token_text) and len(s.text) <= run.end()]
    before = [s for s in trace.steps if len(s.text) <= run.start()]
    after = [s for s in trace.steps if s not in inside and s not in before]

    def row(label, steps):
        masses = [s.mass for s in steps]
        return [
            label,
            len(steps),
            f"{statistics.mean(masses):.3f}" if masses else "-",
            f"{statistics.median(masses):.4f}" if masses else "-",
            sum(m < 0.01 for m in masses),
            f"{statistics.mean(s.allowed for s in steps):.0f}" if steps else "-",
        ]

    first = inside[0] if inside else None
    lines = [
        RUNAWAY,
        "",
        f"The answer with the longest whitespace run (prompt {pick} of {n}, seed {pick}, temperature "
        f"{TEMPERATURE}, free whitespace `{FREE_WHITESPACE}`, the schema with unseen keys): "
        f"{len(trace.steps)} steps, finish `{(trace.stop_reason or {}).get('type')}`, a run of "
        f"{len(run[0])} whitespace characters after `{trace.output_text[max(run.start() - 30, 0) : run.start()]!r}`. "
        "Its steps, split at the run:",
        "",
    ]
    lines += md_table(
        ["steps", "count", "mean mass kept", "median mass kept", "steps keeping < 1%", "mean allowed tokens"],
        [row("before the run", before), row("inside the run", inside), row("after the run", after)],
    )
    if first is not None:
        top = ", ".join(f"`{t.text!r}` {percent(t.prob)}{'' if t.allowed else ' (masked)'}" for t in first.top[:3])
        lines += [
            "",
            f"The run's first step (step {first.index}): "
            f"the model's top tokens before the mask were {top}; the mask kept {percent(first.mass)} of the "
            f"probability ({first.allowed} tokens allowed), and {first.token_text!r} was drawn from what was "
            "left.",
        ]
    lines += [
        "",
        f"![mass kept per step]({PLOT.name}) (the plot: mass kept at each step of this answer, "
        f"0 at the bottom, 1 at the top; the run is steps {inside[0].index if inside else '-'} to "
        f"{inside[-1].index if inside else '-'})",
    ]
    lines += ["", machine_line(f"{time.perf_counter() - begin:.0f} s in all")]
    PLOT.write_text(mass_plot(trace, f"mass kept per step: the runaway of prompt {pick}"), encoding="utf-8")
    write_section("\n".join(lines) + "\n", RESULTS, RUNAWAY)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=["cost", "runaway", "all"], default="all")
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    if args.part in ("runaway", "all"):
        runaway()
    if args.part in ("cost", "all"):
        cost(args)


def cost(args) -> None:
    begin = time.perf_counter()
    params = {"json_schema": SCHEMA, "temperature": 0, "max_new_tokens": args.tokens}
    with tempfile.TemporaryDirectory() as tmp:
        engine = Engine(model_path=str(random_model_65k(Path(tmp))), stage="s6", max_total_tokens=4096)
        try:
            engine.generate("Note:", params)  # compile, warm up
            off, on = [], []
            for _ in range(args.repeats):  # alternate, so a busy moment of the machine hits both
                start = time.perf_counter()
                engine.generate("Note:", params)
                off.append(time.perf_counter() - start)
                start = time.perf_counter()
                minisglang.trace(engine, "Note:", params, top_k=10, draw=False)
                on.append(time.perf_counter() - start)
            timer = HookTimer()
            minisglang.trace(engine, "Note:", params, top_k=10, draw=False)
            hooks = timer.seconds
            trace = minisglang.trace(engine, "Note:", params, top_k=10)
            vocab = engine.model.config.vocab_size
        finally:
            engine.shutdown()
        page = trace.save(Path(tmp) / "trace.html")
        size = page.stat().st_size
        opened = open_seconds(page)
    t_off, t_on = statistics.median(off), statistics.median(on)
    lines = [
        COST,
        "",
        f"benchmarks/bench_trace.py: a random-weight model of the bundled shape with a {vocab}-column vocabulary "
        f"(anthropic's 65k BPE), stage s6 (lazy fsm backend), one greedy JSON-Schema request of "
        f"{len(trace.steps)} decode steps, top-10 per step; times are medians of {args.repeats} runs, "
        "alternated.",
        "",
        "| measure | value | target |",
        "|---|---|---|",
        f"| page size | {size / 1e6:.3f} MB ({size:,} bytes) | <= 1 MB |",
        f"| automaton drawn | {trace.automaton.kind} | |",
        "| time to open in headless chromium | "
        + ("chromium not installed" if opened is None else f"{opened:.2f} s")
        + " | < 2 s |",
        f"| decode, recording off | {t_off * 1000:.0f} ms ({t_off / len(trace.steps) * 1000:.2f} ms/step) | |",
        f"| decode, recording on | {t_on * 1000:.0f} ms ({t_on / len(trace.steps) * 1000:.2f} ms/step) | |",
        f"| slowdown (wall clock) | {100 * (t_on / t_off - 1):+.1f}% | <= 10% |",
        f"| recorder's own time | {hooks / len(trace.steps) * 1000:.2f} ms/step, "
        f"{100 * hooks / t_off:.1f}% of a step with recording off | <= 10% |",
        "",
        machine_line(f"{time.perf_counter() - begin:.0f} s in all"),
    ]
    write_section("\n".join(lines) + "\n", RESULTS, COST)


if __name__ == "__main__":
    main()
