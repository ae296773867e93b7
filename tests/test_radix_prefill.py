"""The radix tree learns at prefill: a request's prompt enters the tree right after its
prefill (`Scheduler.cache_prefilled`), and requests of one prefill batch that share a long
uncached prefix wait one step for the hit (in-batch prefix sharing).

The oracle for outputs is the same engine with the radix cache off (greedy, so the texts
must be equal); the oracle for work is the token count: a shared prefix is computed once.
"""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_engine import assert_no_leak

import minisglang as sgl

SYSTEM = (
    "<|system|>\nYou extract facts from the user's text and answer in JSON only: the keys are "
    "name, age and city, in that order, with the values copied from the text exactly.\n"
)
NAMES = ["Li Lei", "Wang Fang", "Maria Lopez", "Ken Sato", "Olga", "Ahmed Khan"]
CITIES = ["Beijing", "Paris", "Tokyo", "Berlin", "成都"]
GREEDY = {"temperature": 0, "max_new_tokens": 6}


@pytest.fixture(scope="module")
def engines():
    on = sgl.Engine(stage="s0", max_total_tokens=4096)
    off = sgl.Engine(stage="s0", max_total_tokens=4096, disable_radix_cache=True)
    yield on, off
    on.shutdown()
    off.shutdown()


def prompt(i: int, rng: random.Random) -> str:
    return (
        SYSTEM + f"<|user|>\nText {i}: {rng.choice(NAMES)} is {rng.randint(18, 90)} and lives in "
        f"{rng.choice(CITIES)}.\n<|assistant|>\n"
    )


def shared_prefix_len(token_lists: list[list[int]]) -> int:
    """Leading tokens every list has in common."""
    n = 0
    while all(len(t) > n and t[n] == token_lists[0][n] for t in token_lists):
        n += 1
    return n


def prefill_tokens(engine, since: int) -> int:
    return sum(e["tokens"] for e in engine.trace[since:] if e["event"] == "prefill")


def empty_cache(engine) -> None:
    engine.scheduler.tree_cache.evict(10**9)
    assert engine.scheduler.tree_cache.total_size() == 0


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(2, 12), seed=st.integers(0, 10**6), policy=st.sampled_from(["lpm", "fcfs"]))
def test_a_cold_burst_computes_its_shared_prefix_once(engines, n, seed, policy):
    on, off = engines
    on.scheduler.config.schedule_policy = policy
    rng = random.Random(seed)
    prompts = [prompt(i, rng) for i in range(n)]
    ids = [on.tokenizer.encode(p) for p in prompts]
    shared = shared_prefix_len(ids)
    assert shared >= on.scheduler.config.in_batch_prefix_threshold  # the system prompt is long enough

    empty_cache(on)
    start = len(on.trace)
    outs = on.generate(prompts, GREEDY)
    oracle = off.generate(prompts, GREEDY)
    assert [o["text"] for o in outs] == [o["text"] for o in oracle]
    # Every request but the first found at least the shared prefix in the tree.
    assert prefill_tokens(on, start) <= sum(map(len, ids)) - (n - 1) * shared
    assert sum(o["meta_info"]["cached_tokens"] >= shared for o in outs) == n - 1
    assert_no_leak(on)


def test_after_its_prefill_a_request_owns_no_prompt_slot(engines):
    on, _ = engines
    empty_cache(on)
    s = on.scheduler
    req = on.submit(prompt(0, random.Random(1)), {"temperature": 0, "max_new_tokens": 20, "ignore_eos": True})
    on.step()  # the prefill
    n = len(req.origin_input_ids)
    assert req.kv_len == req.prefix_len == n
    assert s.tree_cache.total_size() == s.tree_cache.protected_size() == n  # in the tree, locked
    assert s.token_to_kv_pool.available_size() + n == s.config.max_total_tokens
    on.step()  # a decode step: that slot is the request's own
    assert req.kv_len == n + 1 and req.prefix_len == n
    assert s.token_to_kv_pool.available_size() + n + 1 == s.config.max_total_tokens
    slots, _ = s.tree_cache.match_prefix(req.origin_input_ids)
    assert slots.tolist() == s.req_to_token_pool.req_to_token[req.req_pool_idx, :n].tolist()
    while not req.released:
        on.step()
    assert_no_leak(on)


def test_a_batch_sharing_a_long_prefix_admits_one_and_the_rest_hit(engines):
    on, _ = engines
    empty_cache(on)
    rng = random.Random(2)
    reqs = [on.submit(prompt(i, rng), GREEDY) for i in range(4)]
    start = len(on.trace)
    on.step()
    first = [e for e in on.trace[start:] if e["event"] == "admit"]
    assert len(first) == 1  # one computes the system prompt
    assert sum(e["event"] == "defer" for e in on.trace[start:]) == 3
    start = len(on.trace)
    on.step()
    hits = [e for e in on.trace[start:] if e["event"] == "prefix_hit"]
    assert len(hits) == 3  # the other three, in one batch
    while not all(r.released for r in reqs):
        on.step()
    assert_no_leak(on)


def test_without_in_batch_sharing_duplicates_are_freed_and_rows_repointed():
    """Two requests of one batch compute the same prefix: the tree keeps the first copy, the
    second's duplicate slots go back to the pool and its row reads the tree's slots."""
    eng = sgl.Engine(stage="s0", max_total_tokens=2048, in_batch_prefix_threshold=0)
    off = sgl.Engine(stage="s0", max_total_tokens=2048, disable_radix_cache=True)
    rng = random.Random(3)
    prompts = [prompt(i, rng) for i in range(3)]
    reqs = [eng.submit(p, {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}) for p in prompts]
    eng.step()
    s = eng.scheduler
    assert all(r.req_pool_idx is not None for r in reqs)  # one batch
    ids = [r.origin_input_ids for r in reqs]
    shared = shared_prefix_len(ids)
    rows = [s.req_to_token_pool.req_to_token[r.req_pool_idx, :shared].tolist() for r in reqs]
    assert rows[0] == rows[1] == rows[2]
    tree = s.tree_cache.total_size()
    assert tree == sum(map(len, ids)) - 2 * shared
    assert s.token_to_kv_pool.available_size() + tree == s.config.max_total_tokens
    while not all(r.released for r in reqs):
        eng.step()
    oracle = off.generate(prompts, {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True})
    assert [r.output_text for r in reqs] == [o["text"] for o in oracle]
    assert_no_leak(eng)
    eng.shutdown()
    off.shutdown()


@pytest.mark.parametrize("policy", ["lpm", "fcfs"])
def test_a_small_pool_evicts_around_locked_prompts_and_matches_the_oracle(policy):
    """The pool holds a few requests at a time: prompts cached at prefill stay locked while
    their requests decode, eviction takes only unlocked leaves, nothing leaks."""
    eng = sgl.Engine(stage="s0", max_total_tokens=200, max_running_requests=6, schedule_policy=policy)
    off = sgl.Engine(stage="s0", max_total_tokens=200, max_running_requests=6, disable_radix_cache=True)
    rng = random.Random(4)
    prompts = [prompt(i, rng) if i % 3 else f"Numbers {i}: 1, 2, 3," for i in range(16)]
    params = [{"temperature": 0, "max_new_tokens": rng.randint(1, 12)} for _ in prompts]
    outs = eng.generate(prompts, params)
    assert [o["text"] for o in outs] == [o["text"] for o in off.generate(prompts, params)]
    assert any(e["event"] == "evict" for e in eng.trace)
    assert_no_leak(eng)
    eng.shutdown()
    off.shutdown()


def test_jump_forward_readmission_after_prefill_caching_matches_the_oracle():
    """s4 re-admits a request after a jump: its prompt is already in the tree (locked since
    its prefill); the re-admission hits it and output, texts equal radix-off, no leak."""
    regex = r'\{"name": "[A-Za-z ]{1,12}", "age": [0-9]{1,2}, "city": "[A-Za-z]{1,10}"\}'
    params = {"temperature": 0, "max_new_tokens": 60, "regex": regex}
    rng = random.Random(5)
    prompts = [prompt(i, rng) for i in range(5)]
    eng = sgl.Engine(stage="s4", max_total_tokens=4096)
    off = sgl.Engine(stage="s4", max_total_tokens=4096, disable_radix_cache=True)
    outs = eng.generate(prompts, [params] * len(prompts))
    assert [o["text"] for o in outs] == [o["text"] for o in off.generate(prompts, [params] * len(prompts))]
    assert any(e["event"] == "jump" for e in eng.trace)
    assert_no_leak(eng)
    eng.shutdown()
    off.shutdown()


def test_in_batch_sharing_never_defers_a_readmission_wave():
    """Requests that jump in one step bring the same forced text (`", "age": `) on top of
    different cached prefixes: they share no uncached token, so even at a threshold of one
    token each re-admission prefill admits exactly the requests that jumped in the step
    before (the hand-computed admission); texts equal radix off."""
    regex = r'\{"name": "[A-Za-z ]{1,12}", "age": [0-9]{1,2}, "city": "[A-Za-z]{1,10}"\}'
    params = {"temperature": 0, "max_new_tokens": 60, "regex": regex}
    rng = random.Random(6)
    prompts = [prompt(i, rng) for i in range(6)]
    eng = sgl.Engine(stage="s4", max_total_tokens=4096, in_batch_prefix_threshold=1)
    off = sgl.Engine(stage="s4", max_total_tokens=4096, disable_radix_cache=True)
    start = len(eng.trace)
    outs = eng.generate(prompts, [params] * len(prompts))
    events = eng.trace[start:]
    jumped: dict[int, set[int]] = {}
    for e in events:
        if e["event"] == "jump":
            jumped.setdefault(e["step"], set()).add(e["rid"])
    waves = [e for e in events if e["event"] == "prefill" and e["step"] - 1 in jumped]
    assert [set(e["reqs"]) for e in waves] == [jumped[e["step"] - 1] for e in waves]
    assert len(waves) == len(jumped) and any(len(e["reqs"]) >= 2 for e in waves)
    assert any(e["event"] == "defer" for e in events)  # the rule is on: the prompts shared SYSTEM
    assert [o["text"] for o in outs] == [o["text"] for o in off.generate(prompts, [params] * len(prompts))]
    assert_no_leak(eng)
    eng.shutdown()
    off.shutdown()


def test_a_jumping_requests_tree_walks_compare_only_what_follows_its_own_node(monkeypatch):
    """s4 takes a jumping request out of the batch and re-admits it at every jump: release,
    re-admission and prefill each walked the tree from the root, and the path grows ~2 nodes
    a jump, so a long output's walks cost jumps^2 (11,000 edge comparisons for 200 tokens of
    this regex; fairness2's stranger measured a 0.34 s bystander taking 12.9 s beside 38 such
    requests). They start at the request's own node now (`start=`, `match_prefix`'s `mark`)."""
    import minisglang.radix_cache as radix_cache

    compared = [0]
    compare = radix_cache._common_prefix_len

    def counting(*args):
        compared[0] += 1
        return compare(*args)

    monkeypatch.setattr(radix_cache, "_common_prefix_len", counting)
    eng = sgl.Engine(stage="s4")
    try:
        regex = r'\[(\{"name": "[a-z]", "value": [0-9]\}, )+\]'
        eng.submit(
            "<|user|>\nList some pairs.\n<|assistant|>\n", {"regex": regex, "temperature": 0, "max_new_tokens": 200}
        )
        done = []
        while eng.has_work():
            done += eng.step()
        (req,) = done
        jumps = eng.stage.jumps
        assert jumps >= 30 and req.output_text.startswith('[{"name": "'), (jumps, req.output_text)
        assert req.radix_mark is None  # a finished request keeps no tree node (nor its tree) alive
        assert compared[0] <= 8 * jumps, (
            f"{compared[0]} edge comparisons for {jumps} jumps: the walks grow with the path"
        )
        assert_no_leak(eng)
    finally:
        eng.shutdown()
