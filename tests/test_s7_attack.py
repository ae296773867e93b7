"""Stage s7's scheduler attacked from outside: overlap (with its next decode batch built
during the forward), chunked prefill and speculative decoding, driven step by step.

Workloads are seeded-random (hypothesis draws the seed): arrivals at chosen steps,
greedy / seeded-sampling / regex / json_schema / stop-string / EOS / ignore_eos requests,
long prompts for chunked prefill, aborts at chosen steps, small pools. Oracles: the same
workload on s7 without overlap, or on s6 with `jump_forward=False` (greedy, token for
token); `re.fullmatch` and `jsonschema` for constrained outputs; `assert_no_leak` for the
pools. The first three tests are what it found (each a minimal case, the two bugs fixed,
the one inherent delay of overlap stated as it is); the property tests after them found nothing.
"""

import itertools
import json
import random
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_engine import assert_no_leak
from test_stage_s7 import set_drafting

import minisglang as sgl

S7 = "s7-speculative"
PROMPTS = [
    "The capital of France is",
    "Email: ",
    "Once upon a time",
    "def add(a, b):",
    "<|user|>\nExtract as JSON: Li Lei is 27 years old and lives in Paris.\n<|assistant|>\n",
    "a a a a a a a a a",
    "1, 2, 3, 4, 5,",
]
REGEXES = [r"[0-9]+", r"(yes|no)", r'\{"name": "[A-Za-z ]{1,8}", "age": [1-9][0-9]?\}', r"[a-z ]{0,12}\.", r"(ab|cd)+"]
SCHEMAS = [
    {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]},
    {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
    {"type": "string", "maxLength": 5},
]
QUIET = settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


def engine(stage: str = S7, **options) -> sgl.Engine:
    """An engine whose grammars are compiled already, so every arrival is step-exact. Its
    grammar budget is a minute a step: the default 4 ms is wall-clock, and on a loaded machine
    a row that ran past it made its request sit out a step in one engine of a pair and not in
    the other (an abort then cut them at different tokens: the full suite beside a training
    run, 2026-12-05)."""
    options.setdefault("grammar_step_seconds", 60.0)
    eng = sgl.Engine(stage=stage, **options)
    for r in REGEXES:
        eng.generate("x", {"regex": r, "max_new_tokens": 1})
    for s in SCHEMAS:
        eng.generate("x", {"json_schema": s, "max_new_tokens": 1})
    eng.scheduler.tree_cache.evict(10**9)
    return eng


def random_params(rng: random.Random, sampled: bool) -> dict:
    p: dict = {"temperature": 0, "max_new_tokens": rng.choice([1, 2, 3, 5, 8, 13])}
    r = rng.random()
    if r < 0.35:
        p["regex"] = rng.choice(REGEXES)
    elif r < 0.5:
        p["json_schema"] = rng.choice(SCHEMAS)
    if rng.random() < 0.3:
        p["stop"] = rng.sample(["e", " ", "a", "\n", "th", ",", "0", '"'], rng.randint(1, 2))
    if rng.random() < 0.3:
        p["ignore_eos"] = True
    if sampled and rng.random() < 0.3:
        p.update(temperature=rng.choice([0.7, 1.3]), seed=rng.randint(0, 99))
    return p


def random_workload(seed: int, n: int = 5, long_prompts: bool = False, aborts: bool = True, sampled: bool = True):
    """(arrivals [(step, prompt, params)], aborts {arrival index: step})."""
    rng = random.Random(seed)
    arrivals = []
    for _ in range(rng.randint(1, n)):
        prompt = rng.choice(PROMPTS)
        if long_prompts and rng.random() < 0.4:
            prompt += " " + " ".join(rng.choice(["x", "cat", "dog", "9"]) for _ in range(rng.randint(20, 50)))
        arrivals.append((rng.choice([0, 0, 1, 2, 3, 5]), prompt, random_params(rng, sampled)))
    stops = {rng.randrange(len(arrivals)): rng.randint(1, 10) for _ in range(rng.randint(0, 2))} if aborts else {}
    return arrivals, stops


def drive(eng: sgl.Engine, arrivals: list, aborts: dict | None = None, max_steps: int = 300) -> list:
    """Submit each arrival at its step, abort at the given steps, step until quiet; the
    (output ids, text, finish reason) of each arrival. Nothing may leak."""
    aborts = aborts or {}
    eng.scheduler.tree_cache.evict(10**9)
    reqs: dict[int, object] = {}
    last = max([a[0] for a in arrivals] + list(aborts.values()))
    for step in itertools.count():
        for i, (at, prompt, params) in enumerate(arrivals):
            if at == step:
                reqs[i] = eng.submit(prompt, dict(params))
        for i, at in aborts.items():
            if at == step and i in reqs:
                eng.abort(reqs[i].rid)
        if step > last and not eng.has_work():
            break
        assert step < max_steps, "the engine never went quiet"
        eng.step()
    assert_no_leak(eng)
    return [(reqs[i].output_ids, reqs[i].output_text, reqs[i].finished_reason) for i in range(len(arrivals))]


# ---------------------------------------------------------------------------- failures found


def test_overlap_admits_a_step_later_behind_a_grammar_finish_and_only_an_abort_can_see_it():
    """Found by this file: with overlap, a request that its grammar (or a stop string)
    finished is known finished only during the next forward, so it holds its running slot one
    step longer and a waiting request is admitted a step later (SGLang's overlap scheduler
    does the same; overlap.py says so). Outputs do not change, but an abort at a fixed step
    then finds fewer tokens: here A's regex completes at once, B waits for A's slot
    (max_running_requests=1) and is aborted at step 5. So: without the abort, the same
    outputs; with it, B's overlapped output is a prefix of the plain one, and A's is equal."""
    arrivals = [
        (0, "Hello", {"regex": "(yes|no)", "temperature": 0, "max_new_tokens": 5}),
        (0, "Once upon a time", {"temperature": 0, "max_new_tokens": 10}),
    ]
    outs: dict[tuple[bool, bool], list] = {}
    for disable in (True, False):
        # A wide grammar budget: the step at which B is admitted must not depend on the load.
        # (With s5's 4 ms budget, a call of A's grammar that waited for a busy core made A sit
        # out steps, and B was admitted later without overlap: one run in three failed at a
        # load of 4 on 2 cores; grammar_step_seconds=1e-7 fails every run.)
        eng = engine(max_running_requests=1, disable_overlap_schedule=disable, grammar_step_seconds=60.0)
        for aborted in (False, True):
            outs[disable, aborted] = drive(eng, arrivals, {1: 5} if aborted else {})
        eng.shutdown()
    assert outs[False, False] == outs[True, False]
    (a_plain, b_plain), (a_over, b_over) = outs[True, True], outs[False, True]
    assert a_over == a_plain
    assert b_over[2]["type"] == b_plain[2]["type"] == "abort"
    assert b_plain[0][: len(b_over[0])] == b_over[0] and len(b_over[0]) < len(b_plain[0])


def test_a_stream_closed_early_leaves_no_kv_slot_behind():
    """Found by this file: the next decode batch built during the last forward keeps
    its KV slots when the stream's request is abandoned (`Engine._abandon` releases it
    without a step), so the idle engine holds a slot that nobody owns (`pools_full` is
    False) until some later step drops the batch.
    Now OverlapScheduler._finish drops the early batch when one of its requests leaves."""
    eng = engine()
    stream = eng.generate("Once upon a time", {"temperature": 0, "max_new_tokens": 30, "ignore_eos": True}, stream=True)
    chunks = list(itertools.islice(stream, 5))
    stream.close()
    assert chunks and not eng.has_work()
    assert eng.stats().pools_full
    assert_no_leak(eng)
    eng.shutdown()


@pytest.mark.parametrize("stage", [S7, "s6-function-calling"])
def test_a_prefix_hit_locked_at_admission_does_not_run_the_pool_dry(stage):
    """Found by this file (in scheduler.py, so every stage): B's prompt starts with C's
    (finished, evictable in the tree). Admission checks B's need against a budget that
    counts that cached prefix as evictable, and only then locks it (`inc_lock_ref`): the
    pool is over-committed, and the next decode finds no slot ("out of KV slots: need 2,
    have 0"), aborting A and B with an internal error.
    `get_new_prefill_batch` compared `need > budget` before subtracting what locking the
    matched prefix takes out of the evictable part; now the check is made with the lock taken."""
    eng = engine(stage, max_total_tokens=160, max_running_requests=3, mixed_prefill=True)
    chat = PROMPTS[4]
    long_tail = " x dog 9 9 x 9 9 dog dog x 9 dog x x dog cat dog cat 9 cat 9 x dog cat dog x cat dog x dog x x"
    long_tail += " cat cat x dog x 9 9 x x cat x x x 9 x 9 dog 9 9"
    # ignore_eos: each request takes exactly the tokens the pool's arithmetic was sized for,
    # whatever the bundled model would answer
    greedy = {"temperature": 0, "ignore_eos": True}
    arrivals = [
        (0, "The capital of France is", {**greedy, "max_new_tokens": 8}),  # A
        (1, chat + long_tail, {**greedy, "max_new_tokens": 2}),  # B
        (0, chat, {**greedy, "max_new_tokens": 5}),  # C
    ]
    out = drive(eng, arrivals)
    assert [r[2]["type"] for r in out] == ["length", "length", "length"], [r[2] for r in out]
    eng.shutdown()


def test_a_seeded_speculative_request_does_not_depend_on_what_else_arrives():
    """Found by this file (second round): with drafts (NGRAM) and `mixed_prefill`, a
    seeded request's tokens change when another request arrives while it decodes. Alone, it
    verifies drafts every step (rejection sampling: one uniform draw per draft, then a
    multinomial); when B's prefill comes, A rides that forward as a plain decode with no
    drafts, so its generator is read a different number of times and every later token
    differs. (Without mixed_prefill A sits that step out and nothing changes: 60 random
    batches agreed; FORCED without mixed_prefill too.) The output is still distributed as
    s6's, but a seed no longer fixes it, which the default stage promises
    (test_engine.py's seeded sampling does not depend on the batch).
    Cause: `SpeculativeScheduler.schedule` drafts only for DECODE batches; the riders of a
    mixed EXTEND batch draft nothing. Then a seeded sampling request did not ride while
    drafting was on: it sat that step out (and a stream of arrivals starved it); now it rides
    and its token is the winner of the race a verify would run (`race_riders`,
    `speculative.seeded_scores`). (A seed fixes tokens only up to float
    batch non-invariance, in every stage: a decode row's logits differ by ~5e-6 between a
    batch of 3 and 1, which flipped one seeded token in ~150 random batches; here most
    seeds differ, from the first draw on, so it is the draws, not the floats.)"""
    eng = engine(speculative_algorithm="NGRAM", mixed_prefill=True)
    a = (0, "1, 2, 3, 4, 5,", {"temperature": 1.0, "seed": 1, "max_new_tokens": 12, "ignore_eos": True})
    alone = drive(eng, [a])[0]
    with_b = drive(eng, [a, (3, "Hello", {"temperature": 0, "max_new_tokens": 2})])[0]
    assert with_b == alone
    eng.shutdown()


def test_a_seeded_speculative_request_does_not_depend_on_its_drafts():
    """Found by a stranger (third round, 2026-12-04): beside requests with an expensive
    regex, 2 of 8 seeded requests under FORCED+NGRAM wrote another text than alone (5 of 8
    with a smaller grammar budget). The step's grammar budget is shared, and when it ran out
    a request's mask chain or forced-text search was cut short: it was offered fewer
    drafts, rejection sampling drew once per draft, and every later token read the
    generator elsewhere. Now a seeded sampling request's tokens after the first are the
    winners of an exponential race whose noise is fixed by (seed, position)
    (`speculative.seeded_scores`): the drafts decide only how many of them one forward
    yields. So any draft source, any k, any budget gives the same text."""
    eng = engine(speculative_algorithm="FORCED+NGRAM")
    prompts = ["Li Lei is 31 and lives in Paris. JSON:", "1, 2, 3, 4, 5,", "Name: Ada Lovelace, age 36."] * 2
    params = [
        {"temperature": 1.0, "seed": 7 + i, "max_new_tokens": 24, **({"json_schema": SCHEMAS[0]} if i % 3 == 0 else {})}
        for i in range(len(prompts))
    ]
    texts = {}
    for label, algorithm, k, budget in [
        ("FORCED+NGRAM k=4", "FORCED+NGRAM", 4, None),
        ("NGRAM k=2", "NGRAM", 2, None),
        ("FORCED k=1", "FORCED", 1, None),
        ("FORCED+NGRAM k=8, a starved budget", "FORCED+NGRAM", 8, 1e-5),
    ]:
        set_drafting(eng, algorithm, k)
        work = eng.stage.work
        saved, work.step_seconds = work.step_seconds, budget or work.step_seconds
        try:
            texts[label] = [o["text"] for o in eng.generate(prompts, params)]
        finally:
            work.step_seconds = saved
    first = texts.pop("FORCED+NGRAM k=4")
    assert len(set(first)) > 1
    assert all(other == first for other in texts.values()), texts
    eng.shutdown()


# ---------------------------------------------------------------------------- properties (pass)


@pytest.fixture(scope="module")
def pair():
    """s7 with overlap and without, a roomy pool (admission is never short: see the first test)."""
    engines = [engine(max_total_tokens=2048, mixed_prefill=True, disable_overlap_schedule=d) for d in (False, True)]
    yield engines
    for e in engines:
        e.shutdown()


@QUIET
@given(seed=st.integers(0, 10**6), chunk=st.sampled_from([None, 3, 7]))
def test_overlap_equals_the_plain_step_on_random_workloads(pair, seed, chunk):
    """Random arrivals, aborts, seeded sampling, grammars, stop strings, long prompts cut in
    chunks: overlap (with early-built batches) gives what the plain step gives, token for
    token and finish reason; nothing leaks."""
    arrivals, aborts = random_workload(seed, n=6, long_prompts=True)
    outs = []
    for eng in pair:
        eng.scheduler.config.chunked_prefill_size = chunk
        outs.append(drive(eng, arrivals, aborts))
    assert outs[0] == outs[1]


@pytest.fixture(scope="module")
def speculative():
    """s6 without jump-forward (the oracle) and s7 with each draft source, chunked prefill on."""
    s6 = engine("s6-function-calling", jump_forward=False, mixed_prefill=True)
    s7s = [
        engine(speculative_algorithm=a, speculative_num_draft_tokens=k, chunked_prefill_size=c, mixed_prefill=True)
        for a, k, c in [("NGRAM", 3, 5), ("FORCED", 4, None), ("FORCED+NGRAM", 2, 9)]
    ]
    yield s6, s7s
    for e in [s6, *s7s]:
        e.shutdown()


@QUIET
@given(seed=st.integers(0, 10**6))
def test_speculative_greedy_equals_s6_for_every_draft_source(speculative, seed):
    """Greedy random workloads (grammars, stop strings, EOS, ignore_eos, length limits,
    long prompts): every draft source gives s6's tokens, text and finish reason."""
    s6, s7s = speculative
    arrivals, _ = random_workload(seed, n=5, long_prompts=True, aborts=False, sampled=False)
    want = drive(s6, arrivals)
    for eng in s7s:
        assert drive(eng, arrivals) == want, eng.stage.options.speculative_algorithm


def assert_matches_grammar(params: dict, text: str, reason: dict) -> None:
    """A request its grammar ended (no stop string, no length limit) spells a whole match."""
    if reason["type"] != "stop" or isinstance(reason.get("matched"), str):
        return
    if "regex" in params:
        assert re.fullmatch(params["regex"], text), (params["regex"], text)
    if "json_schema" in params:
        jsonschema.validate(json.loads(text), params["json_schema"])


@QUIET
@given(seed=st.integers(0, 10**6))
def test_constrained_outputs_match_their_grammar_sampled_and_speculative(speculative, pair, seed):
    """Sampled (seeded, temperature up to 1.3), speculative and overlapped: every output
    that its grammar ended is a full match (`re.fullmatch`, `jsonschema`); nothing aborts
    but the client's aborts."""
    s6, s7s = speculative
    arrivals, aborts = random_workload(seed, n=5)
    for i, (_, _, p) in enumerate(arrivals):
        if "regex" not in p and "json_schema" not in p:
            p["regex"] = REGEXES[i % len(REGEXES)]
        p.pop("stop", None)
        p.update(temperature=1.3, seed=i)
    for eng in [*s7s, pair[0]]:
        for (_, _, p), (_, text, reason) in zip(arrivals, drive(eng, arrivals, aborts)):
            assert reason["type"] != "abort" or reason["kind"] == "cancelled", reason
            assert_matches_grammar(p, text, reason)


BAD = [
    {"regex": "(unclosed"},
    {"regex": "a{5,2}"},
    {"regex": "xxx(?=y)"},
    {"json_schema": {"type": "nope"}},
    {"json_schema": "{not json"},
    {"json_schema": {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}},
    {"json_schema": {"type": "string", "pattern": "(("}},
]


@pytest.mark.parametrize("bad", BAD, ids=[json.dumps(b)[:30] for b in BAD])
def test_a_bad_grammar_fails_alone(speculative, pair, bad):
    """A request whose grammar cannot compile is aborted with a message that names the
    problem; requests before and after it (mid-decode) give what they give alone."""
    good = {"regex": "[0-9]+", "temperature": 0, "max_new_tokens": 6}
    for eng in [pair[0], speculative[1][2]]:
        alone = eng.generate("Email: ", good)["output_ids"]
        arrivals = [(0, "Email: ", good), (0, "Hello", {**bad, "max_new_tokens": 5}), (1, "Email: ", good)]
        out = drive(eng, arrivals)
        assert out[0][0] == alone and out[2][0] == alone
        reason = out[1][2]
        assert reason["type"] == "abort" and reason["kind"] == "grammar", reason
        assert "rejected" in reason["message"], reason


@pytest.mark.parametrize("params", [{"temperature": -1}, {"max_new_tokens": 0}, {"top_p": 2}, {"stop": 5}])
def test_bad_params_are_refused_before_anything_is_queued(pair, params):
    """Bad sampling params raise ValueError at submit; the engine goes on serving."""
    eng = pair[0]
    with pytest.raises(ValueError):
        eng.submit("Hello", params)
    assert not eng.has_work()
    assert eng.generate("Email: ", {"temperature": 0, "max_new_tokens": 3})["meta_info"]["finish_reason"]
    assert_no_leak(eng)
