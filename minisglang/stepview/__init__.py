"""A step view of one constrained request: what the grammar and the mask did at each step.

    import minisglang as sgl
    engine = sgl.Engine(stage="s4")
    t = sgl.trace(engine, "Extract as JSON:", {"regex": r'\\{"age": [0-9]+\\}', "max_new_tokens": 20})
    t                       # in Jupyter: the step view; t.save("t.html") for a projector
    t.steps[3].mass         # the probability the mask kept at step 3

record.py says what is recorded (and how the scheduler's hook stays free when off),
automaton.py draws the automaton, html.py makes the page.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .record import StepRecorder, TopToken, Trace, TraceEvent, TraceStep, TraceToken

if TYPE_CHECKING:  # pragma: no cover
    from ..core import SamplingParams
    from ..engine import Engine
    from ..tokenizer import ChatPrompt

__all__ = ["StepRecorder", "TopToken", "Trace", "TraceEvent", "TraceStep", "TraceToken", "trace"]


def trace(
    engine: Engine,
    prompt: str | ChatPrompt,
    sampling_params: dict | SamplingParams | None = None,
    top_k: int = 10,
    draw: bool = True,
) -> Trace:
    """Run one request on `engine` and return its `Trace`: per decode step the grammar's
    state, the model's `top_k` tokens before and after the mask, the allowed count, the
    probability mass the mask kept and the token chosen; the jumps, re-admissions, drafts
    and the stop reason between steps. Other requests in the engine go on as usual; only
    this one is recorded. `draw=False` leaves the automaton drawing out (it needs graphviz
    only when the page is made). Bad input raises ValueError, as `Engine.generate` does."""
    from .record import Recorders

    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be an integer >= 1, got {top_k!r}")
    scheduler = engine.scheduler
    recorder = StepRecorder(scheduler, engine.tokenizer, top_k)
    req = engine.make_request(prompt, sampling_params)  # checked before anything is recorded
    recorder.watch(req.rid)
    with engine._lock:
        previous = scheduler.step_recorder
        scheduler.step_recorder = recorder if previous is None else Recorders(previous, recorder)
        start = scheduler.step_count
    try:
        engine._run_until_done([req])  # generate's loop: queued, stepped, abandoned on any exit
    finally:
        with engine._lock:
            scheduler.step_recorder = previous
    events = [e for e in scheduler.trace if e.get("rid") == req.rid and e["step"] >= start]
    stage = engine.stage
    backend = getattr(getattr(stage, "backend", None), "name", None)
    result = Trace.from_events(
        events,
        engine.tokenizer,
        prompt=req.prompt,
        params=req.sampling_params.to_dict(),
        stage=stage.tag,
        backend=backend,
        output_text=req.output_text,
    )
    if draw:
        from .automaton import draw_automaton

        result.automaton = draw_automaton(recorder.grammars.get(req.rid), result, backend)
    return result
