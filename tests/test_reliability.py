"""Reliability (issue 13): bad input is refused at the boundary, a fault aborts only the
requests it concerns, and no way out of the engine leaks a request slot, a KV slot or a
radix lock.

Faults are injected by wrapping one of the engine's own methods (a stage hook, the model's
forward, the sampler, a request's detokenizer) so that it raises for chosen requests; the
oracle for everyone else is the same request run alone without faults (greedy decoding
does not depend on the batch: tests/test_engine.py checks that).

Tests of minisglang/core.py (SamplingParams validation) and of what engine.py and scheduler.py give back.
"""

import json
import math
import random
import re
import time
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import minisglang as sgl
import minisglang.scheduler as scheduler_module
from minisglang.core import AbortKind, Req, SamplingParams

PROMPTS = [
    "The capital of France is",
    "Email: ",
    "2024-",
    "Once upon a time, there was a little",
    "<|user|>\nWhat is the date?\n<|assistant|>\n",
]
GREEDY = {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}
NUMBER = r"[0-9]{1,4}"
RUNAWAY = r"(a|b)*a(a|b){6}"  # its DFA has 2**7 states: over the limit of 50 the engines here set


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def engine():
    eng = sgl.Engine(stage="s1", max_total_tokens=1024, max_running_requests=12, max_fsm_states=50)
    yield eng
    eng.shutdown()


@pytest.fixture(scope="module")
def alone(engine):
    """Each prompt's greedy output, run by itself with no fault anywhere."""
    return {p: engine.generate(p, GREEDY)["text"] for p in PROMPTS}


def assert_quiet_and_full(eng):
    """Nothing queued, every slot free or evictable in the tree, no lock; evicting empties it."""
    stats = eng.stats()
    assert stats.idle, stats
    assert stats.pools_full, stats
    s = eng.scheduler
    assert s.tree_cache.protected_size() == 0
    s.tree_cache.evict(s.config.max_total_tokens)
    assert s.token_to_kv_pool.available_size() == s.config.max_total_tokens


def run_all(eng, reqs):
    while not all(r.released for r in reqs):
        eng.step()


def raising_for(is_victim, original):
    """`original`, except that it raises when an argument is (or lists) a request `is_victim` picks."""

    def concerned(arg):
        items = arg if isinstance(arg, list) else [arg]
        return any(isinstance(r, Req) and is_victim(r) for r in items)

    def hook(*args, **kwargs):
        if any(concerned(a) for a in args):
            _raise()
        return original(*args, **kwargs)

    return hook


def by_prompt(prompt):
    return lambda req: req.prompt == prompt


# ---------------------------------------------------------------------- validation
BAD_PARAMS = [
    ({"max_new_tokens": True}, "max_new_tokens must be an integer, got a boolean"),
    ({"max_new_tokens": 5.5}, "max_new_tokens must be an integer, got the number 5.5"),
    ({"max_new_tokens": "4"}, "max_new_tokens must be an integer, got a string"),
    ({"max_new_tokens": 0}, "max_new_tokens must be an integer >= 1"),
    ({"top_k": 2.5}, "top_k must be an integer, got the number 2.5"),
    ({"top_k": 0}, "top_k must be -1 (off) or an integer >= 1"),
    ({"temperature": math.nan}, "temperature must be a finite number, got the number nan"),
    ({"temperature": math.inf}, "temperature must be a finite number"),
    ({"temperature": -0.5}, "temperature must be >= 0"),
    ({"temperature": None}, "temperature must be a finite number, got null"),
    ({"top_p": 0}, "top_p must be in (0, 1]"),
    ({"top_p": 10**400}, "top_p must be a finite number, got a huge integer"),
    ({"min_p": 1.5}, "min_p must be in [0, 1] (0 means off), got 1.5"),
    ({"min_p": -0.1}, "min_p must be in [0, 1]"),
    ({"min_p": "0.1"}, "min_p must be a finite number, got a string"),
    ({"stop": 123}, "stop must be a string or a list of strings, got the integer 123"),
    ({"stop": ["a", None]}, "stop[1] must be a string, got null"),
    ({"stop": [""]}, "stop[0] is empty"),
    ({"seed": 2**64}, "seed must be null or an integer in [-2**63, 2**64 - 1]"),
    ({"seed": 1.0}, "seed must be null or an integer"),
    ({"ignore_eos": "yes"}, "ignore_eos must be true or false, got a string"),
    ({"regex": 5}, "regex must be a string, got the integer 5"),
    ({"regex": "\ud800"}, "regex is not valid Unicode text"),
    ({"json_schema": ["type"]}, "json_schema must be a JSON object (a dict) or its JSON text, got a list"),
    ({"json_schema": True}, "json_schema must be a JSON object (a dict) or its JSON text, got a boolean"),
    ({"structural_tag": 3}, "structural_tag must be a JSON object (a dict) or its JSON text, got the integer 3"),
    ({"json_schema": {"x": math.nan}}, "json_schema must be a JSON object or a JSON string"),
    ({"regex": "a", "json_schema": "{}"}, "give at most one of regex / json_schema / ebnf"),
    ({"temprature": 0}, "unknown sampling parameter(s) ['temprature']"),
    ({1: 2, "b": 3}, "unknown sampling parameter(s) ['b', 1]"),
]


@pytest.mark.parametrize("params,message", BAD_PARAMS, ids=[str(p) for p, _ in BAD_PARAMS])
def test_bad_sampling_params_name_the_field(params, message):
    with pytest.raises(ValueError) as info:
        SamplingParams.from_dict(params)
    assert message in str(info.value)
    assert "not supported between" not in str(info.value)


def test_sampling_params_must_be_a_dict():
    for bad in ([1], "temperature=0", 3):
        with pytest.raises(ValueError, match="sampling params must be an object"):
            SamplingParams.from_dict(bad)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
FIELDS = [f for f in SamplingParams.__dataclass_fields__]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=6), JSON_VALUES, max_size=6))
@example({"temperature": 1e-40, "top_k": 1, "stop": "x", "seed": -(2**63)})
@example({"json_schema": {"type": "object", "properties": {"a": {"type": "integer"}}}})
def test_any_dict_validates_or_raises_value_error(d):
    """Never another exception; a dict that validates round-trips through to_dict()."""
    try:
        p = SamplingParams.from_dict(d)
    except ValueError:
        return
    assert SamplingParams.from_dict(p.to_dict()) == p
    assert p.to_dict() == SamplingParams.from_dict(p.to_dict()).to_dict()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(JSON_VALUES, JSON_VALUES)
@example("a\ud800", {})
@example(["a"], {})
def test_any_request_is_queued_or_refused_with_value_error(engine, prompt, params):
    """What a server hands the engine after JSON parsing: a request or a ValueError, never another exception."""
    try:
        req = engine.make_request(prompt, params)
    except ValueError:
        return
    assert req.origin_input_ids == engine.tokenizer.encode(prompt)


def test_tiny_temperature_is_greedy_not_nan(engine, alone):
    """temperature 1e-40 would divide logits into inf and softmax into nan; it samples argmax."""
    out = engine.generate(PROMPTS[0], dict(GREEDY, temperature=1e-40))
    assert out["text"] == alone[PROMPTS[0]]
    out = engine.generate(PROMPTS[0], dict(GREEDY, temperature=2e-5, seed=1))
    assert out["meta_info"]["finish_reason"]["type"] == "length"
    assert_quiet_and_full(engine)


def test_a_list_is_checked_whole_before_anything_is_queued(engine):
    before = engine.stats()
    with pytest.raises(ValueError, match=r"^item 2: top_k must be an integer, got the number 2.5$"):
        engine.generate(PROMPTS[:3], [GREEDY, GREEDY, dict(GREEDY, top_k=2.5)])
    with pytest.raises(ValueError, match=r"^item 1: prompt must be a string, got the integer 5$"):
        engine.generate(["a", 5], GREEDY)
    with pytest.raises(ValueError, match="item 0: prompt is not valid Unicode text"):
        engine.generate(["a\ud800", "b"], GREEDY)
    with pytest.raises(ValueError, match="a list of sampling_params needs a list of prompts, one each"):
        engine.generate("hi", [GREEDY])
    with pytest.raises(ValueError, match="prompt must be a string, got a tuple"):
        engine.submit(("a",), GREEDY)
    after = engine.stats()
    assert after.finished_by_reason == before.finished_by_reason  # nothing was even queued
    assert_quiet_and_full(engine)


def test_a_changed_sampling_params_object_is_checked_again(engine):
    p = SamplingParams(max_new_tokens=4)
    p.stop = 123
    with pytest.raises(ValueError, match="stop must be a string or a list of strings"):
        engine.submit("hi", p)


# ---------------------------------------------------------------------- faults
PER_REQUEST_HOOKS = ["advance", "on_arrival", "release"]


@pytest.mark.parametrize("hook", PER_REQUEST_HOOKS)
def test_a_per_request_hook_failure_aborts_only_that_request(engine, alone, monkeypatch, hook):
    victim_prompt = PROMPTS[1]
    monkeypatch.setattr(engine.stage, hook, raising_for(by_prompt(victim_prompt), getattr(engine.stage, hook)))
    reqs = [engine.submit(p, GREEDY) for p in PROMPTS[:3]]
    run_all(engine, reqs)
    monkeypatch.undo()
    for req in reqs:
        if req.prompt == victim_prompt and hook != "release":
            assert req.finished_reason["type"] == "abort"
            assert req.finished_reason["message"].startswith("internal error while ")
            assert req.finished_reason["kind"] == AbortKind.ENGINE  # the server's 500
            assert req.finished_reason["message"].endswith("RuntimeError: injected fault")
        else:  # a failing release is logged; the request keeps its reason and its text
            assert req.finished_reason == {"type": "length", "length": 8}
            assert req.output_text == alone[req.prompt]
    assert [e["rid"] for e in engine.trace if e["event"] == "error"][-1] == reqs[1].rid
    assert_quiet_and_full(engine)


def test_a_detokenizer_or_stop_check_failure_aborts_only_that_request(engine, alone, monkeypatch):
    reqs = [engine.submit(p, dict(GREEDY, stop=["@@"])) for p in PROMPTS[:3]]
    reqs[0].detokenizer.feed = lambda ids: 1 / 0
    monkeypatch.setattr(
        engine.scheduler, "check_finished", raising_for(by_prompt(PROMPTS[2]), engine.scheduler.check_finished)
    )
    run_all(engine, reqs)
    monkeypatch.undo()
    assert "ZeroDivisionError" in reqs[0].finished_reason["message"]
    assert "RuntimeError: injected fault" in reqs[2].finished_reason["message"]
    assert reqs[1].output_text == alone[PROMPTS[1]]
    assert_quiet_and_full(engine)


@pytest.mark.parametrize(
    "where,phase",
    [
        ("forward", "prefill"),
        ("forward", "decode"),
        ("sample", "prefill"),
        ("sample", "decode"),
        ("poll_grammar_queue", "prefill"),
    ],
)  # hook 2: on arrival
def test_a_batch_failure_aborts_that_batch_and_the_next_step_goes_on(engine, alone, monkeypatch, where, phase):
    """The batch holding the victim is aborted and its memory given back; requests that
    arrive afterwards are served exactly as if nothing had happened."""
    victim_prompt = PROMPTS[0]
    fired = []

    def is_victim(req):
        hit = req.prompt == victim_prompt and (phase == "prefill" or req.output_ids)
        fired.extend([req] if hit else [])
        return hit

    first = [engine.submit(p, GREEDY) for p in PROMPTS[:2]]
    if where == "forward":
        forward = engine.model.forward
        current = {}
        monkeypatch.setattr(engine.scheduler, "run", _remember_batch(engine.scheduler.run, current))
        monkeypatch.setattr(
            engine.model,
            "forward",
            lambda fb: _raise() if any(is_victim(r) for r in current["batch"].reqs) else forward(fb),
        )
    elif where == "sample":
        monkeypatch.setattr(scheduler_module, "sample", raising_for(is_victim, scheduler_module.sample))
    else:
        monkeypatch.setattr(engine.stage, where, raising_for(is_victim, getattr(engine.stage, where)))
    run_all(engine, first)
    assert fired
    for req in first:  # both were in the failing batch (prefilled together, decoded together)
        assert req.finished_reason["type"] == "abort"
        assert req.finished_reason["message"].endswith("RuntimeError: injected fault")
    assert_quiet_and_full(engine)
    later = [engine.submit(p, GREEDY) for p in PROMPTS[1:4]]
    run_all(engine, later)
    monkeypatch.undo()
    assert [r.output_text for r in later] == [alone[p] for p in PROMPTS[1:4]]
    assert_quiet_and_full(engine)


@pytest.mark.parametrize(
    "where,phase", [("mask_logits", "prefill"), ("mask_logits", "decode"), ("before_decode", "decode")]
)  # hook 3: decode only
def test_a_mask_or_jump_failure_aborts_only_the_request_it_concerns(engine, alone, monkeypatch, where, phase):
    """Hooks 3 and 4 are called for the whole batch, but what fails in them is one request's
    grammar (a lazy automaton past its limit): the scheduler finds that request by calling
    the hook for each request alone, aborts it, and the rest of the batch goes on unchanged."""
    victim_prompt = PROMPTS[0]

    def is_victim(req):
        return req.prompt == victim_prompt and (phase == "prefill" or bool(req.output_ids))

    monkeypatch.setattr(engine.stage, where, raising_for(is_victim, getattr(engine.stage, where)))
    reqs = [engine.submit(p, GREEDY) for p in PROMPTS[:3]]
    run_all(engine, reqs)
    monkeypatch.undo()
    assert reqs[0].finished_reason["type"] == "abort"
    assert reqs[0].finished_reason["message"].endswith("RuntimeError: injected fault")
    assert [r.output_text for r in reqs[1:]] == [alone[p] for p in PROMPTS[1:3]]
    assert_quiet_and_full(engine)


def test_a_readmission_cut_short_leaves_no_request_behind(engine, alone, monkeypatch):
    """Hook 3 asks to re-admit a request and the move fails half-way (its memory already
    given to the tree, out of `running`, not yet waiting): it still leaves; the rest of the
    decode batch goes on."""
    reqs = [engine.submit(p, GREEDY) for p in PROMPTS[:2]]
    victim = reqs[0]
    monkeypatch.setattr(
        engine.stage,
        "before_decode",
        lambda running: (
            [SimpleNamespace(req=victim, new_output_ids=list(victim.output_ids))] if victim in running else []
        ),
    )

    def half_a_move(req, new_output_ids):
        engine.scheduler.release_memory(req)
        engine.scheduler.running.remove(req)
        _raise()

    monkeypatch.setattr(engine.scheduler, "readmit", half_a_move)
    engine.generate(PROMPTS[2], GREEDY)  # steps until its own request is done
    run_all(engine, reqs)
    monkeypatch.undo()
    assert victim.finished_reason["message"] == (
        "internal error while preparing the decode batch: RuntimeError: injected fault"
    )
    assert reqs[1].output_text == alone[PROMPTS[1]]
    assert_quiet_and_full(engine)


def _start_a_mixed_step(engine, monkeypatch):
    """Mixing on; PROMPTS[0] prefilled and decoding (it owns decode slots), PROMPTS[1] just
    submitted, so the next step is one forward: PROMPTS[1]'s prefill with PROMPTS[0] riding."""
    monkeypatch.setattr(engine.scheduler.config, "mixed_prefill", True)
    rider = engine.submit(PROMPTS[0], GREEDY)
    for _ in range(3):
        engine.step()
    assert rider.kv_len > rider.prefix_len and rider in engine.scheduler.running
    return rider, engine.submit(PROMPTS[1], GREEDY)


def _serve_staggered(engine, prompts):
    """Each prompt submitted two steps after the one before (so mixed steps happen); until all leave."""
    reqs = []
    for p in prompts:
        reqs.append(engine.submit(p, GREEDY))
        engine.step()
        engine.step()
    run_all(engine, reqs)
    return reqs


@pytest.mark.parametrize("where", ["forward", "sample"])
def test_a_failing_mixed_forward_gives_back_the_memory_of_every_request_in_it(engine, alone, monkeypatch, where):
    """With mixed_prefill one forward holds a new request and a running one (a decode rider):
    when it fails, both are aborted, the rider's own decode slots are freed and its prompt
    unlocked as for a failing decode; what arrives next is served as if nothing happened."""
    rider, newcomer = _start_a_mixed_step(engine, monkeypatch)
    current = {}
    monkeypatch.setattr(engine.scheduler, "run", _remember_batch(engine.scheduler.run, current))

    def mixed():
        return current["batch"].decode_riders > 0

    with pytest.MonkeyPatch.context() as fault:  # for this one step
        if where == "forward":
            forward = engine.model.forward
            fault.setattr(engine.model, "forward", lambda fb: _raise() if mixed() else forward(fb))
        else:
            sample = scheduler_module.sample
            fault.setattr(scheduler_module, "sample", lambda *a: _raise() if mixed() else sample(*a))
        engine.step()
    assert current["batch"].prefill_reqs == [newcomer] and current["batch"].riders == [rider]
    for req in (rider, newcomer):
        assert req.released and req.finished_reason["message"] == (
            "internal error while running its extend batch (forward, mask or sample): RuntimeError: injected fault"
        )
    assert_quiet_and_full(engine)
    mixes = engine.scheduler.forward_counts["mixed"]
    later = _serve_staggered(engine, PROMPTS[1:4])  # mixing still on, no fault
    assert engine.scheduler.forward_counts["mixed"] > mixes
    assert [r.output_text for r in later] == [alone[p] for p in PROMPTS[1:4]]
    monkeypatch.undo()
    assert_quiet_and_full(engine)


def test_a_jump_failure_in_a_mixed_step_aborts_only_its_request(engine, alone, monkeypatch):
    """With mixed_prefill hook 3 runs before the prefill batch is chosen, still one request
    at a time: the request whose hook fails is aborted, the new request is prefilled and
    the others decode as if nothing had happened."""
    rider, newcomer = _start_a_mixed_step(engine, monkeypatch)
    bystander = engine.submit(PROMPTS[2], GREEDY)
    engine.step()  # the bystander's prefill, the rider riding
    monkeypatch.setattr(engine.stage, "before_decode", raising_for(lambda r: r is rider, engine.stage.before_decode))
    newcomer2 = engine.submit(PROMPTS[3], GREEDY)
    run_all(engine, [rider, newcomer, bystander, newcomer2])
    monkeypatch.undo()
    assert rider.finished_reason["message"] == (
        "internal error while preparing the decode batch: RuntimeError: injected fault"
    )
    assert [r.output_text for r in (newcomer, bystander, newcomer2)] == [alone[p] for p in PROMPTS[1:4]]
    assert_quiet_and_full(engine)


def _remember_batch(run, current):
    def remembering(batch):
        current["batch"] = batch
        return run(batch)

    return remembering


def _raise():
    raise RuntimeError("injected fault")


# ---------------------------------------------------------------------- every way out
def test_a_stream_closed_early_aborts_and_releases_its_request(engine, alone):
    stream = engine.generate(PROMPTS[3], dict(GREEDY, max_new_tokens=40), stream=True)
    first = next(stream)
    assert first["meta_info"]["finish_reason"] is None
    stream.close()
    assert_quiet_and_full(engine)
    reason = engine.stats().finished_by_reason
    stream = engine.generate(PROMPTS[3], dict(GREEDY, max_new_tokens=40), stream=True)
    next(stream)
    del stream  # dropped without close(): the generator's finaliser aborts
    assert_quiet_and_full(engine)
    assert engine.stats().finished_by_reason["abort"] == reason.get("abort", 0) + 1
    never_started = engine.generate(PROMPTS[3], GREEDY, stream=True)
    assert engine.stats().idle  # queued only when iteration starts
    assert "".join(c["text"] for c in never_started) == alone[PROMPTS[3]]
    assert_quiet_and_full(engine)


def test_an_interrupt_inside_a_step_releases_the_batch_and_propagates(engine, alone, monkeypatch):
    forward = engine.model.forward
    calls = []

    def interrupted(fb):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return forward(fb)

    monkeypatch.setattr(engine.model, "forward", interrupted)
    with pytest.raises(KeyboardInterrupt):
        engine.generate(PROMPTS[:3], GREEDY)
    monkeypatch.undo()
    assert_quiet_and_full(engine)
    assert [o["text"] for o in engine.generate(PROMPTS[:3], GREEDY)] == [alone[p] for p in PROMPTS[:3]]


def test_an_error_in_generate_leaves_nothing_queued(engine, monkeypatch):
    """Whatever escapes a step (here: the step itself) aborts the call's requests."""
    monkeypatch.setattr(engine.scheduler, "schedule", lambda: _raise())
    with pytest.raises(RuntimeError, match="injected fault"):
        engine.generate(PROMPTS[:2], GREEDY)
    monkeypatch.undo()
    assert_quiet_and_full(engine)


def test_compile_failures_abort_only_their_request(engine):
    outs = engine.generate(
        [PROMPTS[2], PROMPTS[2], PROMPTS[2], PROMPTS[1]],
        [dict(GREEDY, regex="("), dict(GREEDY, regex=RUNAWAY), dict(GREEDY, regex=NUMBER), GREEDY],
    )
    assert outs[0]["meta_info"]["finish_reason"]["type"] == "abort"
    assert outs[1]["meta_info"]["finish_reason"]["type"] == "abort"
    assert "more than 50 states" in outs[1]["meta_info"]["finish_reason"]["message"]
    assert outs[2]["meta_info"]["finish_reason"]["type"] == "stop" and re.fullmatch(NUMBER, outs[2]["text"])
    assert outs[3]["meta_info"]["finish_reason"]["type"] == "length"
    assert_quiet_and_full(engine)


def test_stats_count_what_happened():
    eng = sgl.Engine(stage="s0", max_total_tokens=512, max_running_requests=4)
    try:
        stats = eng.stats()
        assert stats.idle and stats.pools_full
        assert (stats.free_request_slots, stats.free_kv_slots) == (4, 512)
        system = "<|system|>\nAnswer in JSON only, please.\n<|user|>\n"
        outs = eng.generate([system + "a", system + "b"], [dict(GREEDY, max_new_tokens=3)] * 2)
        outs.append(eng.generate(system + "c", dict(GREEDY, max_new_tokens=3)))
        req = eng.submit(system + "d", GREEDY)
        eng.step()
        stats = eng.stats()
        assert (stats.running, stats.free_request_slots) == (1, 3)
        assert not stats.idle and not stats.pools_full  # the running request holds memory
        eng.abort(req.rid)
        eng.step()
        stats = eng.stats()
        assert stats.finished_by_reason == {"length": 3, "abort": 1}
        prompts = [len(eng.tokenizer.encode(system + x)) for x in "abcd"]
        assert stats.prompt_tokens == sum(prompts)
        assert stats.generated_tokens == 3 * 3 + len(req.output_ids)
        cached = sum(o["meta_info"]["cached_tokens"] for o in outs) + req.cached_tokens
        assert stats.cached_prompt_tokens == cached > 0  # c and d found the system prompt
        assert stats.radix_hit_rate == cached / sum(prompts)
        assert stats.idle and stats.pools_full and stats.errors == 0
    finally:
        eng.shutdown()


# ---------------------------------------------------------------------- 1,000 mixed requests
BAD_ITEMS = [{"top_k": 2.5}, {"stop": 123}, {"max_new_tokens": True}, {"temperature": math.nan}, {"tempreature": 1}]


SCHEMA = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}


def random_params(rng, supports=frozenset({"regex"})):
    params = {
        "temperature": rng.choice([0, 0.8, 1e-40]),
        "max_new_tokens": rng.randint(1, 6),
        "seed": rng.randrange(2**32),
    }
    if rng.random() < 0.15:
        params["stop"] = rng.choice([" ", ",", "\n", ["@", "."]])
    kind = rng.random()
    if kind < 0.03:
        params["regex"] = NUMBER
    elif kind < 0.04:
        params["regex"] = "("  # invalid: the compile fails at once
    elif kind < 0.05:
        params["regex"] = RUNAWAY  # over the state limit
    elif kind < 0.08 and "json_schema" in supports:
        params["json_schema"] = rng.choice([SCHEMA, '{"type": "object", "properties": 5}'])  # good, bad
    return params


@pytest.mark.parametrize("stage,count", [("s1", 1000), ("s5", 500)])  # s5: compiles in workers, jumps
def test_no_leak_after_1000_mixed_requests(monkeypatch, stage, count):
    """Step API, lists with bad items, streams dropped early, client aborts, failing
    compiles, and faults in a per-request hook (#A) and in the forward (#F); afterwards the
    pools are full, no radix node is locked and no queue holds anything."""
    rng = random.Random(13)
    eng = sgl.Engine(stage=stage, max_total_tokens=600, max_running_requests=10, max_fsm_states=50)
    supports = eng.stage.supports
    monkeypatch.setattr(eng.stage, "advance", raising_for(lambda r: "#A" in r.prompt, eng.stage.advance))
    current, forward = {}, eng.model.forward
    monkeypatch.setattr(eng.scheduler, "run", _remember_batch(eng.scheduler.run, current))
    monkeypatch.setattr(
        eng.model,
        "forward",
        lambda fb: _raise() if any("#F" in r.prompt for r in current["batch"].reqs) else forward(fb),
    )
    bases = ["<|user|>\nWhat is the date?\n<|assistant|>\n", "The email of Wang Fang is", "Numbers: 1, 2, 3,"]

    def new_prompt():
        fault = rng.choices(["", " #A", " #F"], [0.94, 0.03, 0.03])[0]
        return rng.choice(bases) + " " * rng.randint(0, 2) + str(rng.randint(0, 10 ** rng.randint(0, 9))) + fault

    seen, refused, created = [], 0, 0
    while created < count:
        action = rng.random()
        if action < 0.5:  # the step API
            created += 1
            if rng.random() < 0.05:
                with pytest.raises(ValueError):
                    eng.submit(new_prompt(), rng.choice(BAD_ITEMS))
                refused += 1
            else:
                seen.append(eng.submit(new_prompt(), random_params(rng, supports)))
            for _ in range(rng.randint(0, 2)):
                eng.step()
        elif action < 0.65:  # a list, sometimes with a bad item
            n = rng.randint(1, 3)
            created += n
            params = [random_params(rng, supports) for _ in range(n)]
            if rng.random() < 0.3:
                params[rng.randrange(n)] = rng.choice(BAD_ITEMS)
                queued = eng.stats()
                with pytest.raises(ValueError, match=r"^item \d: "):
                    eng.generate([new_prompt() for _ in range(n)], params)
                after = eng.stats()
                assert (after.grammar_queue, after.waiting_queue, after.running) == (
                    queued.grammar_queue,
                    queued.waiting_queue,
                    queued.running,
                )
                refused += n
            else:
                for out in eng.generate([new_prompt() for _ in range(n)], params):
                    assert out["meta_info"]["finish_reason"] is not None
        elif action < 0.8:  # a stream, often dropped early
            created += 1
            stream = eng.generate(new_prompt(), random_params(rng, supports), stream=True)
            for i, _chunk in enumerate(stream):
                if i == rng.randint(0, 3):
                    break
            stream.close()
        elif action < 0.9 and seen:  # the client aborts
            eng.abort(rng.choice(seen).rid)
        else:
            for _ in range(rng.randint(1, 4)):
                eng.step()
    while eng.scheduler.has_work():
        eng.step()

    assert all(r.released for r in seen)
    assert_quiet_and_full(eng)
    stats = eng.stats()
    assert sum(stats.finished_by_reason.values()) == created - refused
    assert stats.errors > 0 and stats.finished_by_reason["abort"] > 0
    for req in seen:
        reason = req.finished_reason
        if "#A" in req.prompt and req.output_ids and reason["type"] == "abort":
            assert reason["message"] in (
                "aborted by the client",
                "internal error while processing its new token "
                "(advance, detokenize, stop check): RuntimeError: injected fault",
            )
        if req.sampling_params.regex == NUMBER and reason["type"] == "stop":
            assert re.fullmatch(NUMBER, req.output_text)
        if req.sampling_params.json_schema == json.dumps(SCHEMA) and reason["type"] == "stop":
            assert isinstance(json.loads(req.output_text)["age"], int)
    events = {e["event"] for e in eng.trace}
    assert {"evict", "error", "prefix_hit"} <= events
    eng.shutdown()


def test_trimming_the_grammar_cache_gives_freed_memory_back(bundled_model_path, monkeypatch):
    """An eviction by `trim` returns the C heap's free pages (malloc_trim): the server's RSS
    stayed at its peak after hostile grammars were evicted (issue 30). Nothing evicted: only
    every GIVE_BACK_EVERY seconds."""
    import minisglang.backends.base as base
    from minisglang.backends.fsm_backend import FSMBackend
    from minisglang.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(bundled_model_path)
    backend = FSMBackend(tok, tok.vocab_size, max_bytes=1 << 40)
    calls = []
    monkeypatch.setattr(base, "give_back_free_memory", lambda: calls.append(1))
    try:
        for regex in ("a[0-9]{3}", "b[a-z]+"):
            future, ready = backend.get_cached_or_future_value("regex", regex)
            assert ready or future.result(60)
        backend._given_back = time.monotonic()
        backend.trim()
        assert calls == [] and len(backend.cache) == 2
        backend.max_bytes, backend._trimmed = 1, float("-inf")
        backend.trim()
        assert calls == [1] and len(backend.cache) == 1
        # Nothing evicted, but GIVE_BACK_EVERY seconds since the last: what a big refused
        # request freed goes back too.
        backend.max_bytes, backend._trimmed, backend._given_back = 1 << 40, float("-inf"), float("-inf")
        backend.trim()
        assert calls == [1, 1] and len(backend.cache) == 1
    finally:
        backend.shutdown()


def test_trim_evicts_one_grammar_over_the_byte_bound_per_call(bundled_model_path):
    """Freeing a big lazy grammar holds the GIL for its whole run of deallocations, so
    evictions for bytes are spread, one per call (trim runs once a second); the bound on the
    number of entries is kept at once. Least recently used first."""
    from minisglang.backends.fsm_backend import FSMBackend
    from minisglang.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(bundled_model_path)
    backend = FSMBackend(tok, tok.vocab_size, max_bytes=1 << 40)
    regexes = ["a[0-9]{3}", "b[a-z]+", "c(d|e)*", "[0-9]{2}x"]
    try:
        for regex in regexes:
            future, ready = backend.get_cached_or_future_value("regex", regex)
            assert ready or future.result(60)
        backend.max_bytes = 1
        for left in (3, 2, 1, 0):
            backend._trimmed = float("-inf")
            backend.trim()
            assert [text for _, text in backend.cache] == regexes[len(regexes) - left :], backend.cache.keys()
        backend.max_bytes, backend.max_entries = 1 << 40, 2
        for regex in regexes:
            future, ready = backend.get_cached_or_future_value("regex", regex)
            assert ready or future.result(60)
        assert len(backend.cache) == 2, "the entry bound is kept at once"
    finally:
        backend.shutdown()


def test_giving_free_memory_back_is_harmless_where_there_is_no_glibc():
    from minisglang.backends.base import give_back_free_memory

    give_back_free_memory()  # (glibc: malloc_trim; elsewhere nothing)
    give_back_free_memory()
