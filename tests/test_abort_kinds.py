"""Every abort says whose fault it was (core.py `AbortKind`), and the server answers each
kind with its own status from one table (server/errors.py `ABORT_ANSWERS`).

The first half triggers each `req.finish("abort", ...)` call site of the engine with a real
input and checks the kind it gave; the second half checks the HTTP answer for each kind."""

import re

import pytest
from fastapi.testclient import TestClient
from test_engine import assert_no_leak
from test_server_faults import gated_compiles

import minisglang as sgl
from minisglang.backends.base import GrammarError
from minisglang.constrained.token_fsm import ConstraintError
from minisglang.core import AbortKind, Req, SamplingParams
from minisglang.server import ABORT_ANSWERS, create_app

GREEDY = {"max_new_tokens": 4, "temperature": 0}


def run(engine, reqs: list[Req]) -> None:
    while not all(r.released for r in reqs):
        engine.step()


def submit_and_run(engine, prompt: str, params: dict) -> dict:
    req = engine.submit(prompt, {**GREEDY, **params})
    run(engine, [req])
    return req.finished_reason


def raise_in_advance(engine, monkeypatch, error: Exception) -> None:
    def advance(req, token_id):
        raise error

    monkeypatch.setattr(engine.stage, "advance", advance)


@pytest.fixture(scope="module")
def s1():
    # A pool smaller than the context, so that one request can need more KV than it has.
    with sgl.Engine(stage="s1", max_total_tokens=600) as engine:
        yield engine


@pytest.fixture(scope="module")
def s3():
    with sgl.Engine(stage="s3", compile_in="thread", max_pending_compiles=1) as engine:
        yield engine


@pytest.fixture(scope="module")
def s5():
    with sgl.Engine(stage="s5") as engine:
        yield engine


# ---------------------------------------------------------------------- the kinds, by call site
# (what triggers it, the engine it needs, how to run it, the kind, a piece of the message)
def queued(prompt_ids, max_new_tokens):
    """A request added to the scheduler as it is (Engine.submit would refuse it first)."""

    def go(engine, monkeypatch):
        req = Req("x", prompt_ids, SamplingParams(max_new_tokens=max_new_tokens))
        engine.scheduler.add_request(req)
        run(engine, [req])
        return req.finished_reason

    return go


def generated(prompt, params):
    return lambda engine, monkeypatch: submit_and_run(engine, prompt, params)


def hook_raises(error):
    def go(engine, monkeypatch):
        raise_in_advance(engine, monkeypatch, error)
        return submit_and_run(engine, "Hello", {})

    return go


def aborted_by_client(engine, monkeypatch):
    req = engine.submit("Hello", GREEDY)
    assert engine.abort(req.rid)
    run(engine, [req])
    return req.finished_reason


def stream_left(engine, monkeypatch):
    added = []
    add = engine.scheduler.add_request
    monkeypatch.setattr(engine.scheduler, "add_request", lambda req: (added.append(req), add(req)))
    chunks = engine.generate("Hello", {"max_new_tokens": 20, "ignore_eos": True}, stream=True)
    next(chunks)
    chunks.close()  # the caller stops reading: its request is aborted
    return added[0].finished_reason


def matcher_refuses_its_own_mask(engine, monkeypatch):
    """The grammar's accept refuses the token its own mask allowed (xgrammar 0.2.9 does, after
    `"{2}` before a class of 3-byte characters): the library's fault, not the request's."""
    from minisglang.backends.base import GrammarError

    # (40 digits: a request of 3 could end while a loaded machine's budget kept its next row
    # from being ready between two steps, and this loop then waited for ever)
    req = engine.submit("Hi", {**GREEDY, "regex": "[0-9]{40}", "max_new_tokens": 60})
    while req.grammar is None or not engine.stage.work.ready(req):
        assert not req.released, "the request ended before its grammar's row was ready"
        engine.step()

    def refuse(token_id):
        raise GrammarError(f"token {token_id} is not allowed by the grammar here")

    monkeypatch.setattr(req.grammar, "accept_token", refuse)
    run(engine, [req])
    return req.finished_reason


def test_a_token_the_matcher_refused_is_not_in_the_aborted_answer(s5, monkeypatch):
    """The answer of a request aborted because its matcher refused a token its own mask allowed
    holds only what the grammar accepted (a stranger's differential fuzzing found the refused
    `{"` at the end of such an answer from xgrammar, text the regex does not allow)."""
    req = s5.submit("Hi", {**GREEDY, "regex": "[0-9]{40}", "max_new_tokens": 60})
    while req.grammar is None or not s5.stage.work.ready(req) or not req.output_ids:
        assert not req.released, "the request ended before its grammar's row was ready"
        s5.step()
    kept = list(req.output_ids)

    def refuse(token_id):
        raise GrammarError(f"token {token_id} is not allowed by the grammar here")

    monkeypatch.setattr(req.grammar, "accept_token", refuse)
    run(s5, [req])
    assert req.finished_reason["kind"] == AbortKind.ENGINE
    assert req.output_ids == kept and re.fullmatch("[0-9]+", req.output_text), (kept, req.output_ids, req.output_text)
    assert_no_leak(s5)  # (its KV slots came back, the dropped token's with them)


def compile_queue_full(engine, monkeypatch):
    # max_pending_compiles=1: a second distinct grammar arriving before the first is polled is refused.
    first = engine.submit("Hi", {**GREEDY, "regex": "[0-9]{3}"})
    second = engine.submit("Hi", {**GREEDY, "regex": "[a-z]{3}"})
    run(engine, [first, second])
    return second.finished_reason


CALL_SITES = [
    ("scheduler: an empty prompt", "s1", queued([], 4), AbortKind.CLIENT, "the prompt is empty"),
    (
        "scheduler: prompt + max_new_tokens past the context",
        "s1",
        queued([1] * 10, 1020),
        AbortKind.CLIENT,
        "exceeds the model's context",
    ),
    ("scheduler: more KV slots than the pool has", "s1", queued([1] * 10, 700), AbortKind.CLIENT, "KV slots"),
    ("scheduler: aborted by the client", "s1", aborted_by_client, AbortKind.CANCELLED, "aborted by the client"),
    ("engine: the caller stopped reading its stream", "s1", stream_left, AbortKind.CANCELLED, "stopped waiting"),
    (
        "scheduler: a hook raised an engine error",
        "s1",
        hook_raises(RuntimeError("injected fault")),
        AbortKind.ENGINE,
        "internal error while",
    ),
    (
        "scheduler: a hook raised the grammar's own error",
        "s1",
        hook_raises(ConstraintError("too many states")),
        AbortKind.GRAMMAR,
        "the grammar failed while",
    ),
    (
        "stage base: a constraint kind the stage lacks",
        "s1",
        generated("Hi", {"json_schema": "{}"}),
        AbortKind.CLIENT,
        "does not support 'json_schema'",
    ),
    (
        "stage base: think_end before s5",
        "s1",
        generated("Hi", {"regex": "a", "think_end": "x"}),
        AbortKind.CLIENT,
        "cannot honour think_end",
    ),
    ("s1: a regex that does not compile", "s1", generated("Hi", {"regex": "(a"}), AbortKind.GRAMMAR, ""),
    (
        "s3: a regex that does not compile (background compile)",
        "s3",
        generated("Hi", {"regex": "(a"}),
        AbortKind.GRAMMAR,
        "",
    ),
    ("s3: the compile queue is full", "s3", compile_queue_full, AbortKind.BUSY, "too many grammars are compiling"),
    (
        "s5: think_end of several tokens",
        "s5",
        generated("Hi", {"regex": "a", "think_end": "</think> and more"}),
        AbortKind.CLIENT,
        "must be one token",
    ),
    (
        "s5: the matcher refuses a token its own mask allowed",
        "s5",
        matcher_refuses_its_own_mask,
        AbortKind.ENGINE,
        "its grammar is not at fault",
    ),
    (
        "s5: the backend refuses the grammar",
        "s5",
        generated("Hi", {"regex": "(a"}),
        AbortKind.GRAMMAR,
        "regex rejected by",
    ),
]


@pytest.mark.parametrize(
    "engine_name, trigger, kind, needle", [pytest.param(*site[1:], id=site[0]) for site in CALL_SITES]
)
def test_each_abort_call_site_gives_its_kind(request, monkeypatch, engine_name, trigger, kind, needle):
    engine = request.getfixturevalue(engine_name)
    counted = engine.scheduler.totals.grammar_errors
    reason = trigger(engine, monkeypatch)
    assert reason["type"] == "abort" and reason["kind"] == kind and needle in reason["message"], reason
    # /metrics' grammar_errors counts every grammar abort, s5's own (past a time limit) too
    assert engine.scheduler.totals.grammar_errors - counted == (kind is AbortKind.GRAMMAR)
    assert "internal" not in reason  # the kind replaced it
    monkeypatch.undo()
    assert submit_and_run(engine, "Hello", {})["type"] in ("length", "stop")  # the engine serves on


def test_a_compile_timeout_is_the_grammar_and_one_that_waited_behind_others_is_busy():
    """One compile thread: the first slow grammar had it all along and ran out of time (the
    grammar's fault), the second waited behind it for more than half the timeout (the
    server's: BUSY, with a Retry-After)."""
    with sgl.Engine(stage="s5", compile_timeout=0.5, compile_workers=1) as engine:
        gate = gated_compiles(engine)
        try:
            first = engine.submit("Hi", {**GREEDY, "regex": "slow1[0-9]"})
            second = engine.submit("Hi", {**GREEDY, "regex": "slow2[0-9]"})
            run(engine, [first, second])
        finally:
            gate.set()
    assert first.finished_reason["kind"] == AbortKind.GRAMMAR, first.finished_reason
    assert "took longer than 0.5 s" in first.finished_reason["message"]
    assert second.finished_reason["kind"] == AbortKind.BUSY, second.finished_reason
    assert second.finished_reason["retry_after"] >= 1 and "too busy" in second.finished_reason["message"]
    assert "behind other clients' compiles" in second.finished_reason["message"]  # (no client: not its own)


def test_finish_refuses_an_abort_without_a_kind_and_a_stop_with_one():
    req = Req("x", [1], SamplingParams())
    with pytest.raises(ValueError, match="an abort needs its AbortKind"):
        req.finish("abort", message="no kind")
    with pytest.raises(ValueError, match="only an abort has one"):
        req.finish("stop", AbortKind.CLIENT, matched=None)
    with pytest.raises(ValueError, match="not a valid AbortKind"):
        req.finish("abort", "someone's", message="a kind that does not exist")
    assert req.finished_reason is None
    req.finish("abort", AbortKind.GRAMMAR, message="m")
    req.finish("abort", AbortKind.ENGINE, message="later")  # the first reason stays
    assert req.finished_reason == {"type": "abort", "kind": AbortKind.GRAMMAR, "message": "m"}


# ---------------------------------------------------------------------- the server's answer per kind
@pytest.fixture(scope="module")
def kind_server():
    """A server whose stage aborts a request whose prompt names a kind ("abort:busy") with it."""
    engine = sgl.Engine(stage="s5")
    arrive = engine.stage.on_arrival

    def on_arrival(req):
        if req.prompt.startswith("abort:"):
            kind = AbortKind(req.prompt.removeprefix("abort:"))
            retry = {"retry_after": 7} if kind is AbortKind.BUSY else {}
            req.finish("abort", kind, message=f"injected {kind.value} abort", **retry)
            return
        arrive(req)

    engine.stage.on_arrival = on_arrival
    with TestClient(create_app(engine)) as client:
        yield client


EXPECTED = {  # kind: (status, param, code, Retry-After)
    AbortKind.CLIENT: (400, None, None, None),
    AbortKind.GRAMMAR: (400, "regex", None, None),
    AbortKind.BUSY: (503, None, "server_busy", "7"),
    AbortKind.ENGINE: (500, None, None, None),
    AbortKind.CANCELLED: (400, None, None, None),
}


def test_the_table_has_every_kind():
    assert set(ABORT_ANSWERS) == set(AbortKind) == set(EXPECTED)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("kind", list(AbortKind), ids=lambda k: k.value)
def test_the_server_answers_each_kind_with_its_status(kind_server, kind, stream):
    status, param, code, retry_after = EXPECTED[kind]
    r = kind_server.post(
        "/v1/completions", json={"prompt": f"abort:{kind.value}", "max_tokens": 4, "regex": "[0-9]+", "stream": stream}
    )
    assert r.status_code == status, r.text  # an abort before the first chunk is an error, not a stream
    err = r.json()["error"]
    assert err["param"] == param and err["code"] == code, err
    message = f"injected {kind.value} abort"
    assert err["message"] == (f"{param}: {message}" if param else message)
    assert r.headers.get("retry-after") == retry_after
    # The native endpoint names its own field for the grammar (the key it came from).
    r = kind_server.post(
        "/generate", json={"text": f"abort:{kind.value}", "sampling_params": {"max_new_tokens": 4, "regex": "[0-9]+"}}
    )
    assert r.status_code == status and r.json()["error"]["param"] == (param and "sampling_params.regex"), r.text


def test_an_unconstrained_request_has_no_grammar_field_to_name(kind_server):
    r = kind_server.post("/v1/completions", json={"prompt": "abort:grammar", "max_tokens": 4})
    assert r.status_code == 400 and r.json()["error"]["param"] is None, r.text
