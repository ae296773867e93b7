"""Optimistic admission and retraction (minisglang/retraction.py, the scheduler's
`retract_for_room`): below `new_token_ratio` 1 more requests run at once, a decode step that
finds the KV pool full sends one back to wait, and nothing of any answer changes.

Oracles: the same requests in a pool roomy enough that nothing waits (greedy outputs do not
depend on the batch, tests/test_engine.py), `re.fullmatch` for constrained outputs, and the
pools (`assert_no_leak`)."""

import re

import pytest
from test_engine import assert_no_leak

import minisglang as sgl
from minisglang.core import Req, SamplingParams
from minisglang.retraction import (
    CLIP_MAX_NEW_TOKENS,
    DECAY_STEPS,
    RETRACT_DECODE_STEPS,
    NewTokenRatio,
    decode_cushion,
    retraction_victim,
)
from minisglang.scheduler_config import SchedulerConfig

LONG = {"temperature": 0, "max_new_tokens": 150, "ignore_eos": True}
PROMPTS = [f"Story {i}: once upon a time" for i in range(4)]


def req(limit: int, written: int, prompt: int = 1) -> Req:
    """A request of `prompt` tokens with `written` of its `limit` new tokens written."""
    r = Req("", [5] * prompt, SamplingParams(max_new_tokens=limit))
    r.output_ids = [7] * written
    return r


def test_the_ratio_reserves_a_share_but_always_the_next_token():
    ratio = NewTokenRatio(0.3, 0.1)
    assert [ratio.reserve(n) for n in (0, 1, 2, 10, 100)] == [0, 1, 1, 3, 30]
    assert ratio.reserve(30_000) == ratio.reserve(CLIP_MAX_NEW_TOKENS) == 1229  # a long limit counts as 4,096
    assert [NewTokenRatio(1.0, 1.0).reserve(n) for n in (0, 1, 7, 333)] == [0, 1, 7, 333]  # all of it


def test_the_ratio_decays_to_its_minimum_and_a_retraction_sets_it_from_the_batch():
    ratio = NewTokenRatio(0.7, 0.1)
    for _ in range(DECAY_STEPS // 2):
        ratio.decay()
    assert ratio.value == pytest.approx(0.4)
    for _ in range(DECAY_STEPS):
        ratio.decay()
    assert ratio.value == 0.1  # and no lower

    # What the requests left have used of their limits, 20 steps each added (SGLang's estimate).
    ratio.after_retraction([req(400, 100), req(600, 80)])
    assert ratio.value == pytest.approx((100 + 80 + 2 * RETRACT_DECODE_STEPS) / 1000)
    ratio.after_retraction([req(100, 90)])
    assert ratio.value == 0.7  # no more than the initial share
    ratio.after_retraction([req(4000, 0)])
    assert ratio.value == 0.1  # no less than the minimum


def test_a_retraction_leaves_room_for_a_few_steps_each():
    """Retracting until one more step fits retracted again a few steps later (a stream stalled
    5 s of 13); the requests left get RETRACT_DECODE_STEPS steps each, within their limits."""
    assert decode_cushion([req(100, 10), req(100, 95), req(100, 100)]) == RETRACT_DECODE_STEPS + 5 + 1


def test_a_full_reservation_never_moves_the_ratio():
    """At 1 admission reserves everything whatever the value; a minimum below it made the value
    (/metrics' minisglang_new_token_ratio) fall to it all the same."""
    ratio = NewTokenRatio(1.0, 0.5)
    for _ in range(DECAY_STEPS):
        ratio.decay()
    assert ratio.value == 1.0 and ratio.reserve(100) == 100


def test_the_victim_has_the_least_output_then_the_longest_prompt():
    running = [req(50, 9, prompt=3), req(50, 2, prompt=4), req(50, 2, prompt=8), req(50, 30, prompt=20)]
    assert retraction_victim(running) is running[2]


@pytest.mark.parametrize(
    "options, error",
    [
        ({"new_token_ratio": 0}, "new_token_ratio must be above 0"),
        ({"new_token_ratio": 1.5}, "new_token_ratio must be above 0 and at most 1"),
        ({"new_token_ratio": 0.5, "min_new_token_ratio": 0.6}, "min_new_token_ratio (0.6) must not be above"),
        ({"new_token_ratio": "0.7"}, "new_token_ratio must be a finite number"),
    ],
)
def test_bad_ratios_are_refused_by_name(options, error):
    with pytest.raises(ValueError, match=re.escape(error)):
        SchedulerConfig(**options)


def test_the_engine_reserves_everything_unless_told():
    """(`minisglang serve` reserves SGLang's share: tests/test_cli.py.)"""
    assert SchedulerConfig().new_token_ratio == 1.0 and SchedulerConfig().min_new_token_ratio == 1.0


def run_all(eng, params: dict) -> tuple[list[Req], int]:
    """Submit PROMPTS, step until every one is released; the most that ran at once."""
    reqs = [eng.submit(p, params) for p in PROMPTS]
    peak = 0
    for _ in range(3000):
        if all(r.released for r in reqs):
            return reqs, peak
        eng.step()
        peak = max(peak, len(eng.scheduler.running))
    raise AssertionError("the requests did not finish")


@pytest.fixture(scope="module")
def roomy_outputs():
    eng = sgl.Engine(stage="s0", max_total_tokens=4096)
    reqs, peak = run_all(eng, LONG)
    eng.shutdown()
    assert peak == len(PROMPTS)
    return [r.output_ids for r in reqs]


def test_a_full_reservation_runs_them_one_at_a_time_and_never_retracts(roomy_outputs):
    eng = sgl.Engine(stage="s0", max_total_tokens=200)  # 150 new tokens each: one fits
    reqs, peak = run_all(eng, LONG)
    assert peak == 1 and eng.stats().retractions == 0
    assert [r.output_ids for r in reqs] == roomy_outputs
    assert_no_leak(eng)
    eng.shutdown()


@pytest.mark.parametrize("stage, options", [("s0", {}), ("s7", {"speculative_algorithm": "NGRAM"})])
def test_a_share_runs_them_together_retracts_and_changes_no_answer(roomy_outputs, stage, options):
    eng = sgl.Engine(stage=stage, max_total_tokens=200, new_token_ratio=0.3, **options)
    reqs, peak = run_all(eng, LONG)
    stats = eng.stats()
    assert peak >= 3 and stats.retractions >= 1
    assert any(e["event"] == "retract" for e in eng.trace)
    assert stats.new_token_ratio == 0.3  # (its initial value and minimum: set between them by each retraction)
    assert [r.output_ids for r in reqs] == roomy_outputs  # not a token lost or changed
    assert [r.finished_reason["type"] for r in reqs] == ["length"] * len(PROMPTS)
    assert_no_leak(eng)
    eng.shutdown()


def test_a_retracted_request_keeps_its_grammar_state_under_overlap():
    """s7 with its overlap on: a retracted request's last token may not be processed yet (its
    grammar not advanced over it); it is processed while the request waits, before its
    re-admission asks its grammar for the next row, and the answer obeys the regex."""
    params = {"temperature": 0, "max_new_tokens": 120, "regex": "(ab|cd|[a-z]{3} )+"}
    roomy = sgl.Engine(stage="s7", max_total_tokens=4096)
    want = [r.output_ids for r in run_all(roomy, params)[0]]
    roomy.shutdown()
    eng = sgl.Engine(stage="s7", max_total_tokens=180, new_token_ratio=0.3)
    assert eng.scheduler.forward_thread is not None  # the overlap is on
    reqs, _ = run_all(eng, params)
    assert eng.stats().retractions >= 1
    assert [r.output_ids for r in reqs] == want
    for r in reqs:
        assert r.finished_reason["type"] == "length" or re.fullmatch(params["regex"], r.output_text)
    assert_no_leak(eng)
    eng.shutdown()


def test_a_seeded_speculative_request_keeps_its_text_across_a_retraction():
    """s7 with drafts: a seeded sampling request's tokens after its first are the winners of
    the race at their position (`seeded_scores`), drafts or none. Re-admitted after a
    retraction, its prefill's token was drawn from its generator instead, and its text was
    not the roomy pool's (one of four, in a pool of 80)."""
    prompts = ["2024-", "Email: ", "The capital of France is", "Once upon a time, there was a little"]
    params = [{"temperature": 0.9, "seed": 11 + i, "max_new_tokens": 40, "ignore_eos": True} for i in range(4)]
    outputs = []
    for options in ({"max_total_tokens": 4096}, {"max_total_tokens": 80, "new_token_ratio": 0.05}):
        eng = sgl.Engine(stage="s7", speculative_algorithm="NGRAM", **options)
        outputs.append([o["text"] for o in eng.generate(prompts, params)])
        retractions = eng.stats().retractions
        assert_no_leak(eng)
        eng.shutdown()
    assert retractions >= 1
    assert outputs[1] == outputs[0]


def test_a_chunk_finds_room_when_the_riders_outgrew_their_reservation():
    """Chunked prefill with mixed_prefill: admission counted the long prompt's every token, but
    the running request, reserved 30% of its 30 tokens, decoded in each chunk's forward and
    took the room: a later chunk found no slot ("out of KV slots"), and the error aborted the
    prompt and its rider. The chunk now retracts a running request first."""
    prompt = "Once upon a time, there was a little girl who lived in a village near the forest. " * 3
    params = {"temperature": 0, "max_new_tokens": 30, "ignore_eos": True}
    outputs = []
    for options in ({"max_total_tokens": 4096}, {"max_total_tokens": 160, "new_token_ratio": 0.3}):
        eng = sgl.Engine(stage="s7", chunked_prefill_size=8, mixed_prefill=True, **options)
        reqs = [eng.submit("2024-", params)]
        eng.step(), eng.step()
        reqs.append(eng.submit(prompt, {**params, "max_new_tokens": 10}))
        while eng.scheduler.has_work():
            eng.step()
        outputs.append([(r.output_ids, r.finished_reason["type"]) for r in reqs])
        retractions = eng.stats().retractions
        assert_no_leak(eng)
        eng.shutdown()
    assert outputs[1] == outputs[0]  # (both "length": none aborted)
    assert retractions >= 1


def test_the_ratio_decays_under_overlap():
    """s7's overlap builds each decode batch during the forward before it (overlap.py), and the
    step then skips `schedule()`, where the ratio decays: it stayed at its initial value
    (0.698 after 199 decode steps, 0.500 without overlap). Each decode step decays it once."""
    eng = sgl.Engine(stage="s7", max_total_tokens=4096, new_token_ratio=0.7, min_new_token_ratio=0.1)
    assert eng.scheduler.forward_thread is not None  # the overlap is on
    eng.generate(["2024-", "Email: "], {"temperature": 0, "max_new_tokens": 60, "ignore_eos": True})
    decodes = eng.scheduler.forward_counts["decode"]
    assert decodes >= 55
    assert eng.stats().new_token_ratio == pytest.approx(0.7 - 0.6 * decodes / DECAY_STEPS, abs=1.5 * 0.6 / DECAY_STEPS)
    eng.shutdown()


def test_the_ratio_stays_while_nothing_runs():
    """The ratio decays by a decode step that needed no retraction; a step with nothing to
    decode (a request waiting for its grammar's compile: 118 steps of 5 ms for one xgrammar
    schema) lowered it all the same, 0.7 to 0.58 before its first token."""
    eng = sgl.Engine(stage="s0", max_total_tokens=4096, new_token_ratio=0.7, min_new_token_ratio=0.1)
    for _ in range(50):
        eng.step()
    assert eng.stats().new_token_ratio == 0.7
    eng.shutdown()


def test_the_last_running_request_makes_way_for_a_chunked_prompt_that_holds_kv():
    """Chunked prefill: a prompt's last chunk waits while its grammar is not ready (s5's step
    budget; here `ready` says no 60 times), and the one running request decodes meanwhile, past
    the share admission reserved for it, into the room counted for the prompt. The scheduler
    never retracted the last running request, so its decode found no slot ("out of KV
    slots": aborted). It is retracted now, and both answers are the roomy pool's."""
    prompt = "Once upon a time, there was a little girl who lived in a village near the forest. " * 3
    outputs = []
    for options in ({"max_total_tokens": 4096}, {"max_total_tokens": 170, "new_token_ratio": 0.05}):
        eng = sgl.Engine(stage="s7", chunked_prefill_size=8, disable_overlap_schedule=True, **options)
        stage, ready = eng.scheduler.stage, eng.scheduler.stage.ready
        refused = []

        def not_yet(req, ready=ready, refused=refused, eng=eng):
            if eng.scheduler.chunked_req is req and len(refused) < 60:
                refused.append(req)
                return False
            return ready(req)

        stage.ready = not_yet
        reqs = [eng.submit("2024-", {"temperature": 0, "max_new_tokens": 100, "ignore_eos": True})]
        eng.step(), eng.step()
        reqs.append(eng.submit(prompt, {"temperature": 0, "max_new_tokens": 10, "regex": "[a-z ]+"}))
        while eng.scheduler.has_work():
            eng.step()
        outputs.append([(r.output_ids, r.finished_reason["type"]) for r in reqs])
        assert len(refused) == 60
        assert_no_leak(eng)
        eng.shutdown()
    assert outputs[1] == outputs[0]


SHORT = {"temperature": 0, "max_new_tokens": 8}  # the newcomer's request


def hogs_then_newcomer(eng: sgl.Engine, hogs: list[tuple[str, dict]], steps: int, before=None) -> tuple[list, int]:
    """Client 10.0.0.1 submits `hogs` (prompt, params), the engine steps `steps` times, then
    `before()` runs and client 10.0.0.2 asks SHORT: (the hogs' requests, the steps until the
    newcomer's answer, which must equal its text alone)."""
    alone = eng.generate("The capital of France is", SHORT)["text"]
    hog = [eng.submit(prompt, params) for prompt, params in hogs]
    for r in hog:
        r.client = "10.0.0.1"
    for _ in range(steps):
        eng.step()
    if before is not None:
        before()
    newcomer = eng.submit("The capital of France is", SHORT)
    newcomer.client = "10.0.0.2"
    taken = 0
    while not newcomer.released and taken < 200:
        eng.step()
        taken += 1
    assert newcomer.output_text == alone
    return hog, taken


def test_a_client_with_nothing_running_is_not_held_behind_another_clients_retracted_backlog():
    """One client's 4 x n=32 requests of 900 tokens, retracted again and again, held another
    client's 8-token request 45-60 s on a server (a stranger's stall hunt): the room each
    retracted request had kept was kept from the newcomer too, so every slot the pool freed
    went to the backlog. A retraction gives its room up: the newcomer fits, and goes first."""
    eng = sgl.Engine(stage="s0", max_total_tokens=4096, new_token_ratio=0.15, min_new_token_ratio=0.02)
    try:
        s = eng.scheduler

        def send_most_back() -> None:  # as a full pool would (with their output)
            for r in list(s.running)[4:]:
                s.retract(r)
            assert sum(bool(r.output_ids) for r in s.waiting_queue) > 40

        params = {"temperature": 1.0, "ignore_eos": True, "max_new_tokens": 400}
        hogs = [("Write a long story:", {**params, "seed": i}) for i in range(64)]
        hog, taken = hogs_then_newcomer(eng, hogs, 60, send_most_back)
        assert taken <= 2 * SHORT["max_new_tokens"], taken
        for r in hog:
            eng.abort(r.rid)
        while eng.scheduler.has_work():
            eng.step()
        assert_no_leak(eng)
    finally:
        eng.shutdown()


def test_a_client_with_nothing_running_gets_its_room_back_from_the_busiest_client():
    """Below ratio 1 the running requests outgrow what admission reserved for them and take
    the room kept for clients with nothing running: another client's 8-token request waited
    167 steps for one client's batch of long requests to end. Now requests of the client
    with the most running are retracted for it: it is served within a few steps, with its
    text alone, only that client's requests go back to wait, and they all finish."""
    eng = sgl.Engine(stage="s0", max_total_tokens=512, new_token_ratio=0.7, min_new_token_ratio=0.098)
    try:
        since: list[int] = []
        hogs = [(f"Story {i}: once upon a time", {**LONG, "max_new_tokens": 60}) for i in range(16)]
        # (30 steps: the ratio falls, more of them run, the pool fills)
        hog, taken = hogs_then_newcomer(eng, hogs, 30, lambda: since.append(len(eng.trace)))
        assert taken <= 2 * SHORT["max_new_tokens"]
        retracted = {e["rid"] for e in eng.trace[since[0] :] if e["event"] == "retract"}
        assert retracted and retracted <= {r.rid for r in hog}
        while not all(r.released for r in hog):
            eng.step()
        assert all(len(r.output_ids) == 60 for r in hog)
        assert_no_leak(eng)
    finally:
        eng.shutdown()
