"""Mixed prefill (`Engine(mixed_prefill=True)`, SGLang #1013): a step that prefills also
decodes the running requests, each a one-token extend on top of its KV, and hook 3 runs
before the batch is chosen, so a request that jumps (s4) comes back in that same forward.

Oracles: the same engine with mixing off. A mixed forward's logits equal, row for row,
those of the plain extend and the plain decode it replaces (at tests/test_model.py's
tolerance); greedy texts are the same whatever the arrivals; every slot is free or the
radix tree's once everyone has left (tests/test_engine.py's `assert_no_leak`).
"""

import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_engine import assert_no_leak
from test_model import ATOL

import minisglang as sgl
from minisglang.model import ForwardMode

NAMES = ["Li Lei", "Anna Berg", "Ken Sato", "Maria Lopez", "Omar Khan", "Sara Novak", "Tom Jones", "Yuki Tanaka"]
CITIES = ["Paris", "Rome", "Beijing"]
PERSON = r'\{"name": "[A-Za-z ]{1,12}", "age": [1-9][0-9]?, "city": "(Paris|Rome|Beijing)"\}'
PLAIN = [
    "The capital of France is",
    "Email: ",
    "2024-",
    "Once upon a time, there was a little",
    "<|user|>\nWhat is the date?\n<|assistant|>\n",
    "def add(a, b):",
]


def chat(i: int) -> str:
    return (
        f"<|user|>\nExtract as JSON: {NAMES[i % len(NAMES)]} is {20 + 7 * i} years old and lives in "
        f"{CITIES[i % len(CITIES)]}.\n<|assistant|>\n"
    )


def params_for(stage: str, max_new_tokens: int = 60) -> dict:
    if stage == "s0":
        return {"temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": True}
    return {"regex": PERSON, "temperature": 0, "max_new_tokens": max_new_tokens}


def prompt_for(stage: str, i: int) -> str:
    return PLAIN[i % len(PLAIN)] if stage == "s0" else chat(i)


@pytest.fixture(scope="module")
def engines():
    """engines(stage, mixed, pool): one engine per combination, built on first use."""
    built = {}

    def get(stage: str, mixed: bool, pool: int = 4096):
        if (stage, mixed, pool) not in built:
            eng = built[(stage, mixed, pool)] = sgl.Engine(stage=stage, mixed_prefill=mixed, max_total_tokens=pool)
            if stage != "s0":
                eng.generate(chat(0), params_for(stage))  # compile the regex now, so arrivals are step-exact
        return built[(stage, mixed, pool)]

    yield get
    for eng in built.values():
        eng.shutdown()


def serve(eng, arrivals: list[tuple[int, str, dict]]) -> list:
    """Submit each (step, prompt, params) at that step of a run on an emptied tree; step until
    every request has left. The requests, in arrival order."""
    eng.scheduler.tree_cache.evict(10**9)
    pending = sorted(arrivals, key=lambda a: a[0])
    reqs, step = [], 0
    while pending or not all(r.released for r in reqs):
        while pending and pending[0][0] <= step:
            _, prompt, params = pending.pop(0)
            reqs.append(eng.submit(prompt, params))
        eng.step()
        step += 1
    return reqs


def closed_loop(eng, prompts: list[str], params: dict, concurrency: int) -> list:
    """Keep `concurrency` requests in flight (one submitted as one leaves), on an emptied tree."""
    eng.scheduler.tree_cache.evict(10**9)
    reqs, todo = [], list(prompts)
    while todo or not all(r.released for r in reqs):
        while todo and sum(not r.released for r in reqs) < concurrency:
            reqs.append(eng.submit(todo.pop(0), params))
        eng.step()
    return reqs


def recorded_forwards(eng, monkeypatch) -> list:
    """From now on, (batch, logits) of every forward the scheduler runs."""
    seen, run = [], eng.scheduler.run

    def recording(batch):
        logits = run(batch)
        seen.append((batch, logits.clone()))
        return logits

    monkeypatch.setattr(eng.scheduler, "run", recording)
    return seen


def test_a_mixed_forward_computes_what_the_prefill_and_the_decode_it_replaces_compute(engines, monkeypatch):
    """A decodes; B arrives. Mixing off: B's prefill, then A and B decode. Mixing on: one
    extend of B's prompt with A riding along (its last token at position kv_len). The rows
    are B's prefill logits and A's decode logits; A stays a decoding request (one more KV
    slot of its own, nothing given to the tree)."""
    rows = {}
    for mixed in (False, True):
        eng = engines("s0", mixed)
        eng.scheduler.tree_cache.evict(10**9)
        seen = recorded_forwards(eng, monkeypatch)
        params = params_for("s0", 12)
        a = eng.submit(PLAIN[3], params)
        for _ in range(3):  # A's prefill and two decodes
            eng.step()
        b = eng.submit(PLAIN[1], params)
        s, first = eng.scheduler, len(eng.trace)
        kv_len, prefix_len, tree = a.kv_len, a.prefix_len, s.tree_cache.total_size()
        eng.step()
        batch, logits = seen[-1]
        assert batch.mode == ForwardMode.EXTEND
        if mixed:
            assert batch.reqs == [b, a] and batch.riders == [a] and batch.prefill_reqs == [b]
            assert (a.kv_len, a.prefix_len) == (kv_len + 1, prefix_len)  # a decode step, not a prefill
            assert s.tree_cache.total_size() == tree + len(b.origin_input_ids)  # only B's prompt was cached
            events = eng.trace[first:]
            assert [e["event"] for e in events if e["event"] in ("prefill", "decode")] == ["prefill"]
            forward = next(e for e in events if e["event"] == "prefill")
            assert forward["reqs"] == [b.rid] and forward["riders"] == [a.rid]
            assert forward["tokens"] == len(b.origin_input_ids)
            assert not any(e["event"] == "cache_prefill" and e["rid"] == a.rid for e in events)
            rows[True] = {"B": logits[0], "A": logits[1]}
        else:
            assert batch.reqs == [b] and a.kv_len == kv_len  # A sat this step out
            prefill_b = logits[0]
            eng.step()
            batch, logits = seen[-1]
            assert batch.mode == ForwardMode.DECODE and batch.reqs == [a, b]
            rows[False] = {"B": prefill_b, "A": logits[0]}
        while not (a.released and b.released):
            eng.step()
        monkeypatch.undo()
        assert_no_leak(eng)
    for who in ("A", "B"):
        torch.testing.assert_close(rows[True][who], rows[False][who], atol=ATOL, rtol=0)
    assert a.output_text and b.output_text


@pytest.mark.parametrize("stage", ["s0", "s3", "s4"])
def test_staggered_arrivals_give_the_same_texts_mixed_or_not(engines, stage):
    """Requests arrive while others decode (and, on s4, jump): the greedy texts are the same
    with mixing on and off, every constrained one matches its regex, and nothing leaks."""
    steps = [0, 0, 3, 7, 8, 15, 22, 23]
    arrivals = [
        (step, prompt_for(stage, i), params_for(stage, 60 if stage != "s0" else 10 + 5 * i))
        for i, step in enumerate(steps)
    ]
    texts, mixes = {}, {}
    for mixed in (False, True):
        eng = engines(stage, mixed)
        before = eng.scheduler.forward_counts["mixed"]
        texts[mixed] = [r.output_text for r in serve(eng, arrivals)]
        mixes[mixed] = eng.scheduler.forward_counts["mixed"] - before
        assert_no_leak(eng)
    assert texts[True] == texts[False]
    assert mixes[False] == 0 and mixes[True] >= 3
    if stage != "s0":
        assert all(re.fullmatch(PERSON, t) for t in texts[True]), texts[True]


def test_s4_at_4_concurrent_readmits_a_jump_in_its_own_step_and_runs_fewer_forwards(engines):
    """Mixing off, each re-admission is a prefill forward of its own, one step after the
    jump, and the others do not decode in it. Mixing on, hook 3 runs before the batch is
    chosen: the request that jumped is prefilled in that very step, beside the riders."""
    prompts = [chat(i) for i in range(8)]
    params = params_for("s4")
    counts, texts, events = {}, {}, {}
    for mixed in (False, True):
        eng = engines("s4", mixed)
        s = eng.scheduler
        before, first = dict(s.forward_counts), len(s.trace)
        texts[mixed] = [r.output_text for r in closed_loop(eng, prompts, params, 4)]
        counts[mixed] = {k: s.forward_counts[k] - before[k] for k in before}
        events[mixed] = list(s.trace)[first:]
        assert_no_leak(eng)
    assert texts[True] == texts[False] and all(re.fullmatch(PERSON, t) for t in texts[True])
    total = {mixed: c["prefill"] + c["decode"] for mixed, c in counts.items()}
    assert total[True] < total[False], counts
    assert counts[True]["mixed"] > 0 and counts[False]["mixed"] == 0

    for mixed, later in ((True, 0), (False, 1)):  # mixing off: the prefill after the jump's step
        ev = events[mixed]
        prefills = {e["step"]: e for e in ev if e["event"] == "prefill"}
        finished = {(e["step"], e["rid"]) for e in ev if e["event"] == "finish"}
        jumps = [e for e in ev if e["event"] == "jump"]
        assert len(jumps) >= 8
        for j in jumps:
            if (j["step"] + later, j["rid"]) in finished:  # the jump completed the match: it left
                continue
            assert j["rid"] in prefills[j["step"] + later]["reqs"], (mixed, j)
    mixed_prefills = [e for e in events[True] if e["event"] == "prefill" and "riders" in e]
    assert all(not set(e["reqs"]) & set(e["riders"]) for e in mixed_prefills)
    assert any(e["reqs"] and e["riders"] for e in mixed_prefills)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    stage=st.sampled_from(["s0", "s4"]),
    pool=st.sampled_from([4096, 320]),
    arrivals=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 7), st.integers(1, 45)), min_size=1, max_size=7),
)
def test_random_arrivals_give_the_same_texts_and_leak_nothing(engines, stage, pool, arrivals):
    """Random arrival steps and output lengths, mixing on (also in a pool small enough that
    requests wait for room) against mixing off in a roomy pool: the same greedy texts, and
    every slot free or the tree's once all have left."""
    work = [(step, prompt_for(stage, i), params_for(stage, n)) for step, i, n in arrivals]
    oracle = [r.output_text for r in serve(engines(stage, False), work)]
    reqs = serve(engines(stage, True, pool), work)
    assert [r.output_text for r in reqs] == oracle
    assert all(r.finished_reason["type"] != "abort" for r in reqs)
    assert_no_leak(engines(stage, True, pool))


def test_mixed_prefill_must_be_a_bool():
    with pytest.raises(ValueError, match="mixed_prefill must be True or False, not 'no'"):
        sgl.Engine(stage="s0", mixed_prefill="no")


def test_the_riders_count_in_the_prefill_token_budget(monkeypatch):
    """max_prefill_tokens bounds what one forward computes, riders included: two new prompts
    that fit the budget alone wait for each other once three running requests ride along
    (the first of them is admitted whatever its size, so nobody starves)."""
    eng = sgl.Engine(stage="s0", mixed_prefill=True)
    try:
        params = {"temperature": 0, "max_new_tokens": 12, "ignore_eos": True}
        first = [eng.submit(p, params) for p in PLAIN[:3]]
        eng.step()
        assert len(eng.scheduler.running) == 3
        late = [eng.submit(p, params) for p in PLAIN[3:5]]
        tree = eng.scheduler.tree_cache
        extends = [len(r.fill_ids) - tree.match_len(r.fill_ids[:-1]) for r in late]
        eng.scheduler.config.max_prefill_tokens = sum(extends) + 2  # both fit; with 3 riders they do not
        seen = recorded_forwards(eng, monkeypatch)
        eng.step()
        batch = seen[0][0]
        assert batch.mode == ForwardMode.EXTEND and batch.decode_riders == 3
        assert len(batch.prefill_reqs) == 1, "the riders' tokens must count against max_prefill_tokens"
        while not all(r.released for r in first + late):
            eng.step()
        assert_no_leak(eng)
    finally:
        eng.shutdown()
