"""Tests of the scheduler's fault isolation (minisglang/scheduler.py `isolate`, `isolate_batch`,
`fail_all`; overlap.py's step; engine.py `Engine.step` / `Engine.fail`).

A fault is injected at one hook point (the grammar's compile at arrival, the mask, the
grammar's advance, sampling, detokenizing, the stop check) for one request of several
decoding together. Only that request may abort, with the kind its error says (the stage's
grammar error: GRAMMAR, anything else: ENGINE); the oracle for the others is the same batch
run without the faulty request (greedy decoding does not depend on the batch:
tests/test_engine.py). Both schedulers run: s1's plain step and s7's overlapped one.
"""

import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minisglang as sgl
import minisglang.overlap as overlap_module
import minisglang.scheduler as scheduler_module
from minisglang.core import AbortKind, Req

GREEDY = {"temperature": 0, "max_new_tokens": 8}
OTHERS = [
    ("The capital of France is", {"regex": r"[A-Z][a-z]{2,8}"}),
    ("Email: ", {"ignore_eos": True}),
    ("2024-", {"regex": r"[0-9]{2}-[0-9]{2}"}),
]
VICTIM = ("Once upon a time", {"regex": r"[a-z ]{4,20}"})
HOOKS = ["compile", "mask", "advance", "sampling", "detokenize", "stop_check"]
GRAMMAR_HOOKS = ["compile", "mask", "advance"]  # where the stage's own grammar error can come from

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module", params=["s1", "s7-speculative"])
def engine(request):
    eng = sgl.Engine(stage=request.param, max_total_tokens=2048, max_running_requests=8)
    if request.param.startswith("s7"):
        assert eng.scheduler.forward_thread is not None  # the overlapped step is what runs
    yield eng
    eng.shutdown()


@pytest.fixture(scope="module")
def oracle(engine):
    """The other requests' outputs, run together without the faulty one."""
    reqs = submit(engine, OTHERS)
    run_all(engine, reqs)
    return [(r.output_text, r.finished_reason) for r in reqs]


def submit(engine, items) -> list[Req]:
    return [engine.submit(prompt, {**GREEDY, **params}) for prompt, params in items]


def run_all(engine, reqs: list[Req]) -> None:
    for _ in range(500):
        if all(r.released for r in reqs):
            return
        engine.step()
    raise AssertionError("the requests did not finish in 500 steps")


def assert_quiet_and_full(engine) -> None:
    stats = engine.stats()
    assert stats.idle and stats.pools_full, stats


class Injected:
    """Raises `error_class` from a hook called for the victim while it is live (a hook
    passes over finished requests) and has `at_token` or more output tokens; counts how
    often it did."""

    def __init__(self, error_class: type[Exception], at_token: int = 0):
        self.error_class, self.at_token, self.fired = error_class, at_token, 0

    def concerns(self, arg) -> bool:
        items = arg if isinstance(arg, list) else [arg]
        return any(
            isinstance(r, Req) and r.prompt == VICTIM[0] and not r.finished and len(r.output_ids) >= self.at_token
            for r in items
        )

    def wrap(self, original):
        def hook(*args, **kwargs):
            if any(self.concerns(a) for a in args):
                self.fired += 1
                raise self.error_class("injected fault")
            return original(*args, **kwargs)

        return hook


def inject(engine, monkeypatch, hook: str, fault: Injected) -> None:
    """Install `fault` at `hook` (detokenize is installed on the victim after it is submitted)."""
    stage, sched = engine.stage, engine.scheduler
    if hook == "compile":  # s1 compiles at arrival; s3 on hand the compile to a worker there
        monkeypatch.setattr(stage, "on_arrival", fault.wrap(stage.on_arrival))
    elif hook == "mask":  # s1 masks the logits; s5 on fill packed mask rows (during the forward in s7)
        name = "batch_vocab_mask" if hasattr(stage, "batch_vocab_mask") else "mask_logits"
        monkeypatch.setattr(stage, name, fault.wrap(getattr(stage, name)))
    elif hook == "advance":
        monkeypatch.setattr(stage, "advance", fault.wrap(stage.advance))
    elif hook == "sampling":  # both steps' own name for the sampler
        monkeypatch.setattr(scheduler_module, "sample", fault.wrap(scheduler_module.sample))
        monkeypatch.setattr(overlap_module, "sample", fault.wrap(overlap_module.sample))
    elif hook == "stop_check":
        monkeypatch.setattr(sched, "check_finished", fault.wrap(sched.check_finished))


def faulty_run(engine, monkeypatch, hook: str, fault: Injected, victim_at: int = 1) -> tuple[Req, list[Req]]:
    """The other requests and the victim (at position `victim_at`) with the fault at `hook`;
    returns (victim, others) once all have left.

    The sampler runs for a whole batch and a fault in it aborts that batch (a batch-level
    fault): there the victim arrives once the others have been prefilled, so that its prefill
    is a batch of its own, and the others decode on beside it."""
    inject(engine, monkeypatch, hook, fault)
    if hook == "sampling":
        others = submit(engine, OTHERS)
        engine.step()
        [victim] = submit(engine, [VICTIM])
    else:
        items = OTHERS[:victim_at] + [VICTIM] + OTHERS[victim_at:]
        reqs = submit(engine, items)
        victim = reqs.pop(victim_at)
        others = reqs
    if hook == "detokenize":  # the victim's own detokenizer, made when it was queued
        real_feed = victim.detokenizer.feed

        def feed(ids):
            if not victim.finished and len(victim.output_ids) >= fault.at_token:
                fault.fired += 1
                raise fault.error_class("injected fault")
            return real_feed(ids)

        victim.detokenizer.feed = feed
    run_all(engine, others + [victim])
    monkeypatch.undo()
    return victim, others


def check(engine, oracle, victim: Req, others: list[Req], fault: Injected, kind: AbortKind) -> None:
    assert fault.fired, "the fault was never injected"
    reason = victim.finished_reason
    assert reason["type"] == "abort" and reason["kind"] == kind, reason
    assert reason["message"].endswith("injected fault"), reason
    assert [(r.output_text, r.finished_reason) for r in others] == oracle
    assert_quiet_and_full(engine)


@pytest.mark.parametrize("hook", HOOKS)
def test_a_fault_at_a_hook_aborts_only_its_request_as_an_engine_error(engine, oracle, monkeypatch, hook):
    fault = Injected(RuntimeError, at_token=0 if hook in ("compile", "sampling") else 2)
    victim, others = faulty_run(engine, monkeypatch, hook, fault)
    check(engine, oracle, victim, others, fault, AbortKind.ENGINE)
    assert victim.finished_reason["message"].startswith("internal error while ")  # the server's 500


@pytest.mark.parametrize("hook", GRAMMAR_HOOKS)
def test_the_grammars_own_error_at_a_hook_aborts_only_its_request_as_a_grammar_error(engine, oracle, monkeypatch, hook):
    grammar_error = engine.stage.grammar_errors[0]  # e.g. an automaton past its state limit
    fault = Injected(grammar_error, at_token=0 if hook == "compile" else 1)
    victim, others = faulty_run(engine, monkeypatch, hook, fault)
    check(engine, oracle, victim, others, fault, AbortKind.GRAMMAR)
    assert victim.finished_reason["message"].startswith("the grammar failed while ")  # the client's 400


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    hook=st.sampled_from([h for h in HOOKS if h != "sampling"]),
    victim_at=st.integers(0, len(OTHERS)),
    at_token=st.integers(0, 6),
)
def test_wherever_and_whenever_a_request_fails_the_others_are_unchanged(
    engine, oracle, monkeypatch, hook, victim_at, at_token
):
    """Any per-request hook, the victim anywhere in the batch, failing at any of its tokens:
    the others' outputs are the oracle's and nothing leaks. (A victim whose output ends
    before its fault's token finishes normally.)"""
    fault = Injected(RuntimeError, at_token=0 if hook == "compile" else at_token)
    victim, others = faulty_run(engine, monkeypatch, hook, fault, victim_at)
    assert [(r.output_text, r.finished_reason) for r in others] == oracle
    if fault.fired:
        assert victim.finished_reason["kind"] == AbortKind.ENGINE, victim.finished_reason
    else:
        assert victim.finished_reason["type"] in ("stop", "length"), victim.finished_reason
    assert_quiet_and_full(engine)


def test_an_error_escaping_a_step_aborts_every_request_and_the_engine_serves_on(engine, oracle, monkeypatch):
    """The engine-wide fault path: what escapes the step (here the scheduling itself) aborts
    every request in the engine as the engine's error and gives back their memory; the
    caller sees the exception, and the next requests are served as before."""
    reqs = submit(engine, OTHERS + [VICTIM])
    engine.step()  # admitted, some decoding: every queue holds something or has held it
    monkeypatch.setattr(engine.scheduler, "schedule", _raise)
    with pytest.raises(RuntimeError, match="injected fault"):
        engine.step()
    monkeypatch.undo()
    for req in reqs:
        assert req.released
        reason = req.finished_reason
        assert reason["type"] == "abort" and reason["kind"] == AbortKind.ENGINE, reason
        assert "internal error while running a scheduler step: RuntimeError: injected fault" in reason["message"]
    assert_quiet_and_full(engine)
    again = submit(engine, OTHERS)
    run_all(engine, again)
    assert [(r.output_text, r.finished_reason) for r in again] == oracle


def test_an_escaping_error_gives_back_a_request_it_caught_between_two_queues(engine, oracle, monkeypatch):
    """An error that escapes a step after admission took requests off the waiting queue and
    before they reached the running batch leaves them in no queue: the sweep of the queues
    missed them (a row of the request pool stayed taken, a review's find). The engine-wide
    fault gives back every request the engine has (`Scheduler.live_requests`)."""
    reqs = submit(engine, OTHERS + [VICTIM])
    monkeypatch.setattr(engine.scheduler, "prefill_end", _raise)
    with pytest.raises(RuntimeError, match="injected fault"):
        for _ in range(20):  # (the grammar queue first: the fault comes with the first prefill)
            engine.step()
    monkeypatch.undo()
    assert all(req.released and req.finished_reason["kind"] == AbortKind.ENGINE for req in reqs)
    assert not engine.scheduler.live
    assert_quiet_and_full(engine)
    again = submit(engine, OTHERS)
    run_all(engine, again)
    assert [(r.output_text, r.finished_reason) for r in again] == oracle


def _raise(*args, **kwargs):
    raise RuntimeError("injected fault")


@pytest.mark.parametrize("engine", ["s7-speculative"], indirect=True)
def test_the_overlap_schedulers_own_mask_path_aborts_only_the_failing_request(engine, oracle, monkeypatch):
    """OverlapScheduler's default masks (hook 4 at sampling time, what a stage without s7's
    packed rows gets) go through `Scheduler.mask_each`: a grammar failing there aborts its own
    request, not the batch (s7 fills packed rows instead, so only this test walks that path)."""
    sched = engine.scheduler
    monkeypatch.setattr(sched, "fill_masks", types.MethodType(overlap_module.OverlapScheduler.fill_masks, sched))
    monkeypatch.setattr(sched, "apply_masks", types.MethodType(overlap_module.OverlapScheduler.apply_masks, sched))
    fault = Injected(RuntimeError, at_token=2)
    monkeypatch.setattr(engine.stage, "mask_logits", fault.wrap(engine.stage.mask_logits))
    reqs = submit(engine, OTHERS[:1] + [VICTIM] + OTHERS[1:])
    victim = reqs.pop(1)
    run_all(engine, reqs + [victim])
    monkeypatch.undo()
    check(engine, oracle, victim, reqs, fault, AbortKind.ENGINE)


def test_a_mask_that_ends_the_only_picking_request_is_no_step_error(monkeypatch):
    """s7's overlapped step samples the rows that pick a token. When the only row that picked
    was aborted by its mask (its grammar allowed no token: xgrammar's v2 structural tag, in a
    soak of the server), the sampler was called with no rows and raised (IndexError): the
    client's grammar counted as a step error with a traceback in the log, and the batch's
    abort would take any row that sat the step out (its grammar not ready) as a 500 too."""
    eng = sgl.Engine(stage="s7", max_total_tokens=2048)
    try:
        assert eng.scheduler.forward_thread is not None  # the overlapped step is what runs
        [victim] = submit(eng, [VICTIM])
        while not victim.output_ids:
            eng.step()
        fault = Injected(eng.stage.grammar_errors[0])  # at the victim's next mask
        inject(eng, monkeypatch, "mask", fault)
        run_all(eng, [victim])
        reason = victim.finished_reason
        assert fault.fired and reason["kind"] == AbortKind.GRAMMAR and reason["message"].endswith("injected fault")
        assert eng.stats().errors == 0
        assert_quiet_and_full(eng)
    finally:
        eng.shutdown()
