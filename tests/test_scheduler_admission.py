"""Admission across clients (minisglang/scheduler.py `get_new_prefill_batch`): a waiting
request too big for the room left holds back its own client's later requests, not another
client's, and only `MAX_PASSED_BY` times; requests without a client (in-process) stay FCFS.

Oracles: the admission order itself (the trace's `admit` events, a step at a time) and the
outputs, which greedy decoding makes independent of the batch (tests/test_engine.py).
"""

import collections

import pytest
from test_engine import assert_no_leak

import minisglang as sgl
import minisglang.admission_order as admission_order
from minisglang.core import Req, SamplingParams

LONG = {"temperature": 0, "max_new_tokens": 200, "ignore_eos": True}
SMALL = {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}


@pytest.fixture(scope="module")
def engine():
    eng = sgl.Engine(stage="s0", max_total_tokens=512, max_running_requests=16)
    yield eng
    eng.shutdown()


def submit(engine, prompt: str, params: dict, client: str | None):
    req = engine.submit(prompt, params)
    req.client = client  # what the server sets (its client's address)
    return req


def admitted_step(engine, req) -> int:
    return next(e["step"] for e in engine.trace if e["event"] == "admit" and e.get("rid") == req.rid)


def run(engine, reqs) -> None:
    for _ in range(3000):
        if all(r.released for r in reqs):
            return
        engine.step()
    raise AssertionError("the requests did not finish")


def backlog(engine, client):
    """Three long requests: the first two fill most of the 512 slots, the third must wait."""
    return [submit(engine, f"Story {i}: once upon a time", LONG, client) for i in range(3)]


def test_another_clients_small_request_passes_a_request_that_does_not_fit(engine):
    long = backlog(engine, "10.0.0.1")
    engine.step()
    engine.step()
    assert long[2] in engine.scheduler.waiting_queue  # no room for its 200 tokens
    own = submit(engine, "2024-", SMALL, "10.0.0.1")  # the same client: behind its own request
    other = submit(engine, "Email: ", SMALL, "10.0.0.2")
    engine.step()
    assert other.req_pool_idx is not None and other not in engine.scheduler.waiting_queue
    assert own in engine.scheduler.waiting_queue
    assert long[2].passed_by == 1
    run(engine, [*long, own, other])
    assert admitted_step(engine, own) >= admitted_step(engine, long[2])  # FCFS within a client
    alone = sgl.Engine.generate(engine, "Email: ", SMALL)
    assert other.output_ids == alone["output_ids"]
    assert_no_leak(engine)


def test_without_clients_the_queue_stays_first_come_first_served(engine):
    long = backlog(engine, None)
    engine.step()
    engine.step()
    small = submit(engine, "Email: ", SMALL, None)
    engine.step()
    assert small in engine.scheduler.waiting_queue and long[2].passed_by == 0
    run(engine, [*long, small])
    assert admitted_step(engine, small) >= admitted_step(engine, long[2])
    assert_no_leak(engine)


def test_a_request_passed_max_times_holds_everyone_back_until_it_fits(engine, monkeypatch):
    """Other clients' first requests take their turn ahead of a client's third (fcfs too): the
    four that fit pass it in one step; passed MAX_PASSED_BY times or more, it goes first and
    holds everyone back until it fits."""
    monkeypatch.setattr(admission_order, "MAX_PASSED_BY", 2)
    monkeypatch.setattr(engine.scheduler.config, "schedule_policy", "fcfs")
    long = backlog(engine, "10.0.0.1")
    engine.step()
    engine.step()
    others = [submit(engine, f"Email {i}: ", SMALL, f"10.0.0.{2 + i}") for i in range(4)]
    engine.step()
    assert all(o not in engine.scheduler.waiting_queue for o in others)
    assert long[2].passed_by == 4
    later = [submit(engine, f"Email {i}: ", SMALL, f"10.0.1.{i}") for i in range(2)]
    engine.step()
    assert all(r in engine.scheduler.waiting_queue for r in later)  # behind it now
    run(engine, [*long, *others, *later])
    assert all(admitted_step(engine, r) >= admitted_step(engine, long[2]) for r in later)
    assert_no_leak(engine)


@pytest.mark.parametrize("client", ["10.0.0.1", None], ids=["another-client", "in-process"])
def test_arrivals_one_a_step_leave_the_running_requests_every_other_step(engine, client, monkeypatch):
    """Prefill goes first, but running requests that sat out a prefill forward decode at the
    next step: one client's one-token requests, arriving one a step, kept another request at
    its first token for as long as they came (300 steps). Its text is what it is alone."""
    # (Forwards timed as taking no time: the time another client's prefills owe is
    # test_a_prefill_beside_another_clients_decodes_owes_them_its_time's.)
    monkeypatch.setattr(engine.scheduler, "clock", lambda: 0.0)
    alone = engine.generate("Once upon a time", SMALL)["text"]
    reader = submit(engine, "Once upon a time", SMALL, None if client is None else "10.0.0.2")
    one_token = {"temperature": 0, "max_new_tokens": 1}
    since, arrivals = len(engine.trace), []
    for i in range(3 * SMALL["max_new_tokens"]):
        arrivals.append(submit(engine, f"Arrival {i}: " + "tick " * 20, one_token, client))
        engine.step()
        if reader.released:
            break
    assert reader.released and reader.output_text == alone
    events = engine.trace[since:]
    decodes = [e["step"] for e in events if e["event"] == "decode" and reader.rid in e["reqs"]]
    prefills = [e["step"] for e in events if e["event"] == "prefill"]
    assert len(decodes) == SMALL["max_new_tokens"] - 1  # every token after its prefill's
    assert all(any(d < p < e for p in prefills) for d, e in zip(decodes, decodes[1:]))  # arrivals still came in
    run(engine, arrivals)
    assert_no_leak(engine)


@pytest.mark.parametrize(
    "reader_client", ["10.0.0.2", "10.0.0.1", None], ids=["another-client", "same-client", "in-process"]
)
def test_a_prefill_beside_another_clients_decodes_stays_short(reader_client):
    """While another client's request decodes, a prefill forward computes at most
    `max_prefill_tokens_beside_others` tokens (its first request whole all the same):
    one client's back-to-back ~400-token prompts went 8 to a forward, and another client's
    8-token answer waited one such forward per token. Beside the same client's decodes too
    (on a server a client may arrive during any forward); in process (one caller) a forward
    takes up to `max_prefill_tokens`. Texts as alone."""
    eng = sgl.Engine(stage="s0", max_total_tokens=2048, max_prefill_tokens=400)
    eng.scheduler.clock = lambda: 0.0  # (no time share: a decode after each prefill, as before it)
    try:
        alone = eng.generate("Once upon a time", SMALL)["text"]
        reader = submit(eng, "Once upon a time", SMALL, reader_client)
        eng.step()  # its prefill: it decodes from now on
        one_token = {"temperature": 0, "max_new_tokens": 1}
        client = None if reader_client is None else "10.0.0.1"
        prompts = [submit(eng, f"{i} " * 3 + "tick " * 12, one_token, client) for i in range(8)]
        one = min(len(p.fill_ids) for p in prompts)
        cap = eng.scheduler.config.max_prefill_tokens_beside_others = one * 3 // 2  # one prompt a forward
        since = len(eng.trace)
        run(eng, [reader, *prompts])
        assert reader.output_text == alone and all(p.output_ids for p in prompts)
        sizes = [e["tokens"] for e in eng.trace[since:] if e["event"] == "prefill"]
        if reader_client is not None:
            assert max(sizes) <= cap and len(sizes) >= 8
        else:
            assert max(sizes) > cap and len(sizes) < 8
        assert_no_leak(eng)
    finally:
        eng.shutdown()


def test_a_servers_forward_keeps_to_the_cap_with_nobody_else_in_the_engine():
    """A stranger's stall: one client's four ~1,000-token prompts at once, with nobody else in
    the engine, went into one 4,096-token forward (~0.9 s on a CPU), and a client arriving
    meanwhile waited for all of it: its 8-token answer ~0.95 s, against ~0.37 s when the same
    prompts came from four clients (one a forward). A server client's forward keeps to
    `max_prefill_tokens_beside_others` past its first request whoever is in the engine; in
    process (one caller) the four go in one forward."""
    for client, forwards in (("10.0.0.1", 4), (None, 1)):
        eng = sgl.Engine(stage="s0", max_total_tokens=2048, max_prefill_tokens=400)
        try:
            one_token = {"temperature": 0, "max_new_tokens": 1}
            prompts = [submit(eng, f"{i} " * 3 + "tick " * 12, one_token, client) for i in range(4)]
            eng.scheduler.config.max_prefill_tokens_beside_others = min(len(p.fill_ids) for p in prompts) * 3 // 2
            since = len(eng.trace)
            run(eng, prompts)
            assert len([e for e in eng.trace[since:] if e["event"] == "prefill"]) == forwards
            assert_no_leak(eng)
        finally:
            eng.shutdown()


@pytest.mark.parametrize("mixed", [False, True], ids=["alternating", "mixed-prefill"])
@pytest.mark.parametrize(
    "reader_client", ["10.0.0.2", "10.0.0.1", None], ids=["another-client", "same-client", "in-process"]
)
def test_a_prefill_beside_another_clients_decodes_owes_them_its_time(reader_client, mixed):
    """Time share: a prefill forward that another client's running requests waited for owes
    them as much forward time in decodes before the next prefill. A decode after each prefill
    was not enough: a client's back-to-back ~500-token prompts (under the cap, one a forward)
    took ~95% of the time, and another client's 8-token answer 1.2-1.7 s (53 ms alone). Here
    the forwards are timed by a clock of the test's own: a prefill 10, a decode 1, so the
    reader decodes 10 times between two prompts (a mixed forward's ride an eleventh). Beside
    the same client's decodes, or in process, the old rule: a decode after each prefill
    (none with mixing)."""
    eng = sgl.Engine(stage="s0", max_total_tokens=4096, mixed_prefill=mixed)
    try:
        reader_params = {"temperature": 0, "max_new_tokens": 40, "ignore_eos": True}
        alone = eng.generate("Once upon a time", reader_params)["text"]
        sched, now = eng.scheduler, [0.0]
        real_run = sched.run

        def timed_run(batch):
            now[0] += 1.0 if batch.mode.value == "decode" else 10.0
            return real_run(batch)

        sched.run, sched.clock = timed_run, lambda: now[0]
        reader = submit(eng, "Once upon a time", reader_params, reader_client)
        eng.step()  # its prefill: it decodes from now on
        one_token = {"temperature": 0, "max_new_tokens": 1}
        client = None if reader_client is None else "10.0.0.1"
        sched.config.max_prefill_tokens_beside_others = 40  # one prompt a forward beside others
        sched.config.max_prefill_tokens = 40  # and alone
        prompts = [submit(eng, f"{i} " + "tick tock " * 6, one_token, client) for i in range(3)]
        assert all(20 < len(p.fill_ids) <= 40 for p in prompts), [len(p.fill_ids) for p in prompts]
        since = len(eng.trace)
        run(eng, [reader, *prompts])
        assert reader.output_text == alone and all(p.output_ids for p in prompts)
        events = [e for e in eng.trace[since:] if e["event"] in ("prefill", "decode")]
        prefills = [i for i, e in enumerate(events) if e["event"] == "prefill"]
        # The reader's decodes from one prompt's prefill to the next (its ride in the first counted).
        between = [
            sum(e["event"] == "decode" and reader.rid in e["reqs"] for e in events[a + 1 : b])
            + (reader.rid in events[a].get("riders", []))
            for a, b in zip(prefills, prefills[1:])
        ]
        assert len(prefills) == 3
        if reader_client == "10.0.0.2":
            assert between == [10 + mixed] * 2, between
        else:
            assert between == [1, 1], between
        assert_no_leak(eng)
    finally:
        eng.shutdown()


def test_a_backlog_is_ranked_only_as_far_as_one_step_can_admit(monkeypatch):
    """Admission ranks each client's first requests, as many as the free rows (and every
    re-admission): ranking a whole backlog matched every queued request against the tree at
    every step (one client's 8,192 queued choices: 0.4 s a step, another client's 8-token
    answer 2.2 s instead of 58 ms). The other client still goes at its turn, and every
    request of the backlog is served."""
    eng = sgl.Engine(stage="s0", max_total_tokens=1024, max_running_requests=4, reserved_for_new_clients=1)
    try:
        matched: collections.Counter[int] = collections.Counter()  # step -> requests matched against the tree
        cached_len = eng.scheduler._cached_len
        monkeypatch.setattr(
            eng.scheduler, "_cached_len", lambda req: matched.update([eng.scheduler.step_count]) or cached_len(req)
        )
        backlog = [submit(eng, f"Item {i}: ", SMALL, "10.0.0.1") for i in range(48)]
        eng.step()
        other = submit(eng, "Email: ", SMALL, "10.0.0.2")
        run(eng, [*backlog, other])
        assert max(matched.values()) <= 4  # the rows of a step, of a backlog of 48
        admitted = sorted(backlog + [other], key=lambda r: admitted_step(eng, r))
        assert admitted.index(other) <= 4
        assert all(len(r.output_ids) == SMALL["max_new_tokens"] for r in backlog)
        assert_no_leak(eng)
    finally:
        eng.shutdown()


def test_clients_take_turns_at_the_rows_and_at_chunked_prefill():
    """A client's backlog that fits still waits its turn: another client's request gets the
    next free row (max_running_requests) and the next prefill after the prompt being chunked,
    not a place behind the whole backlog. One client alone keeps the policy's order."""
    eng = sgl.Engine(stage="s7", max_total_tokens=4096, max_running_requests=4, chunked_prefill_size=32)
    try:
        sp = {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True}
        backlog = [submit(eng, f"Document {i}: " + "lorem ipsum dolor " * 12, sp, "10.0.0.1") for i in range(12)]
        eng.step()
        other = submit(eng, "Email: ", sp, "10.0.0.2")
        run(eng, [*backlog, other])
        admitted = sorted(backlog + [other], key=lambda r: admitted_step(eng, r))
        assert admitted.index(other) <= 5, [r.rid for r in admitted]  # not behind the 12
        assert [r.rid for r in admitted if r is not other] == [r.rid for r in backlog]  # its own in order
        assert_no_leak(eng)
    finally:
        eng.shutdown()


@pytest.mark.parametrize("policy", ["lpm", "fcfs"])
def test_a_client_whose_requests_leave_after_their_prefill_does_not_go_first_at_every_turn(policy):
    """Turns count the requests a client has running; one whose requests ask for one token
    has none running whenever admission ranks, so each of its queued prompts stood level with
    another client's first request and, queued earlier, went first: a newcomer waited behind
    every one of them. Within a turn the client prefilled least lately goes first: the
    newcomer goes right after the prompt being chunked."""
    eng = sgl.Engine(stage="s7", max_total_tokens=4096, chunked_prefill_size=32, schedule_policy=policy)
    try:
        one = {"temperature": 0, "max_new_tokens": 1}
        hogs = [submit(eng, f"Record {i}: " + "alpha beta gamma delta " * 20, one, "10.0.0.1") for i in range(4)]
        eng.step()  # (the first hog's first chunk)
        other = submit(eng, "Email: ", SMALL, "10.0.0.2")
        run(eng, [*hogs, other])
        admitted = sorted(hogs + [other], key=lambda r: admitted_step(eng, r))
        assert admitted.index(other) == 1, [r.rid for r in admitted]
        assert [r.rid for r in admitted if r is not other] == [r.rid for r in hogs]  # its own in order
        assert other.output_ids == eng.generate("Email: ", SMALL)["output_ids"]
        assert_no_leak(eng)
    finally:
        eng.shutdown()


def test_a_flood_of_long_prompts_from_new_addresses_does_not_go_before_a_light_client():
    """Within a turn the request that leaves its client with the fewest prompt tokens
    prefilled lately goes first, its own tokens counted: by the client's recent prefill alone,
    every never-seen address (0) went before a client that had asked short questions lately,
    and a stranger's flood of 1,000-token prompts from fresh addresses held its 8-token answer
    8.7 s (56 ms alone). Its short request now goes at the next prefill."""
    eng = sgl.Engine(stage="s0", max_total_tokens=4096, max_prefill_tokens=300)
    try:
        for _ in range(3):  # the light client's recent use: a few short questions
            run(eng, [submit(eng, "Hi there", SMALL, "10.0.0.2")])
        one = {"temperature": 0, "max_new_tokens": 1}
        flood = [submit(eng, f"Report {i}: " + "lorem ipsum " * 110, one, f"10.9.0.{i}") for i in range(12)]
        assert all(len(r.fill_ids) > 200 for r in flood)  # one a forward (max_prefill_tokens 300)
        eng.step()
        light = submit(eng, "Hi again", SMALL, "10.0.0.2")
        run(eng, [*flood, light])
        later = [r for r in flood if admitted_step(eng, r) > admitted_step(eng, light)]
        assert len(later) >= 10, [admitted_step(eng, r) for r in flood]  # it went at the next prefill
        assert light.output_ids == eng.generate("Hi again", SMALL)["output_ids"]
        assert_no_leak(eng)
    finally:
        eng.shutdown()


def test_within_a_turn_clients_go_in_order_of_their_recent_prefill_then_the_policys():
    """admission_order.ranked on its own: among clients at one turn, the request that leaves
    its client with fewer prompt tokens prefilled lately (its own counted) first; equal ones in
    the policy's order; the turns and each client's own order unchanged."""
    reqs = []
    for rid, client in enumerate(["a", "b", "a", "c", "b", None]):
        req = Req(prompt="p", origin_input_ids=[1, 2, 3], sampling_params=SamplingParams(), rid=rid)
        req.client = client
        reqs.append(req)
    served = {"a": 500.0, "b": 20.0, "c": 20.0}
    order = admission_order.ranked(reqs, [], "fcfs", lambda r: 0, lambda c: served[c])
    # (In-process requests, which count no prefill, first: in practice they never meet clients.)
    assert [(r.client, r.rid) for r in order] == [(None, 5), ("b", 1), ("c", 3), ("a", 0), ("b", 4), ("a", 2)]
    # Without the measure (every client at 0): turns, then arrival.
    order = admission_order.ranked(reqs, [], "fcfs", lambda r: 0)
    assert [r.rid for r in order] == [0, 1, 3, 5, 2, 4]
    # The request's own prompt counts too: a client never seen, with a long prompt, goes after
    # a client that has been served a little, with a short one.
    fresh = Req(prompt="p", origin_input_ids=list(range(900)), sampling_params=SamplingParams(), rid=6)
    fresh.client = "d"
    order = admission_order.ranked([fresh, *reqs[:2]], [], "fcfs", lambda r: 0, lambda c: {"d": 0.0, **served}[c])
    assert [r.rid for r in order] == [1, 0, 6]


def test_lpm_counts_cache_hits_ranked_ahead_as_passes(engine, monkeypatch):
    """lpm (the engine's default) ranks other clients' newer requests that hit the cache ahead
    of an older request that does not fit: they pass it too, and once it has been passed
    MAX_PASSED_BY times it ranks first and holds everyone back. (Counting only the requests
    admitted from behind it, a stream of cache hits kept it waiting for as long as it lasted.)"""
    monkeypatch.setattr(admission_order, "MAX_PASSED_BY", 2)
    assert engine.scheduler.config.schedule_policy == "lpm"
    sgl.Engine.generate(engine, "Email: hello there", SMALL)  # the prefix the stream hits
    long = backlog(engine, "10.0.0.1")
    engine.step()
    engine.step()
    hits = [submit(engine, f"Email: hello there {i}", SMALL, f"10.0.1.{i}") for i in range(3)]
    engine.step()
    assert all(h not in engine.scheduler.waiting_queue for h in hits)  # ranked ahead, admitted
    assert long[2].passed_by == 3
    passed = [e for e in engine.trace if e["event"] == "passed" and e["rid"] == long[2].rid]
    # One event, naming who passed (in the order their clients' recent prefill ranked them).
    assert [sorted(e["by"]) for e in passed] == [[h.rid for h in hits]]
    later = [submit(engine, f"Email: hello there {i}", SMALL, f"10.0.2.{i}") for i in range(2)]
    engine.step()
    assert all(r in engine.scheduler.waiting_queue for r in later)  # behind it now
    assert engine.scheduler.waiting_queue[0] is long[2]
    run(engine, [*long, *hits, *later])
    assert all(admitted_step(engine, r) >= admitted_step(engine, long[2]) for r in later)
    assert_no_leak(engine)


@pytest.mark.parametrize("client", ["10.0.0.1", None], ids=["one-client", "in-process"])
def test_lpm_counts_cache_hits_of_the_same_client_or_in_process_as_passes(engine, monkeypatch, client):
    """lpm ranks a client's own newer cache hits ahead of its older request too, and every
    in-process request's (they have no client): counted only when another client's, a steady
    stream of one client's templated requests (one arrival a step, a 200-slot pool) kept its
    one request without a hit waiting 3,000 steps and more, while fcfs admitted it after one.
    Passed MAX_PASSED_BY times by them, it ranks first and holds the rest back until it fits."""
    monkeypatch.setattr(admission_order, "MAX_PASSED_BY", 2)
    assert engine.scheduler.config.schedule_policy == "lpm"
    sgl.Engine.generate(engine, "Email: hello there", SMALL)  # the prefix the stream hits
    long = backlog(engine, client)
    engine.step()
    engine.step()
    hits = [submit(engine, f"Email: hello there {i}", SMALL, client) for i in range(3)]
    engine.step()
    assert all(h not in engine.scheduler.waiting_queue for h in hits)  # ranked ahead, admitted
    assert long[2].passed_by == 3
    later = [submit(engine, f"Email: hello there {i}", SMALL, client) for i in range(2)]
    engine.step()
    assert all(r in engine.scheduler.waiting_queue for r in later)  # behind it now
    run(engine, [*long, *hits, *later])
    assert all(admitted_step(engine, r) >= admitted_step(engine, long[2]) for r in later)
    assert_no_leak(engine)


def test_a_readmission_after_a_jump_is_passed_afresh(monkeypatch):
    """s4's jump puts a running request back in the waiting queue (`Scheduler.readmit`). Its
    count of passes starts again: a count kept from its first wait made it hold everyone back
    the first time its re-admission did not fit (another client's 4-token request waited).
    (It now goes back first: see the next test.)"""
    monkeypatch.setattr(admission_order, "MAX_PASSED_BY", 1)
    eng = sgl.Engine(stage="s0", max_total_tokens=256, schedule_policy="fcfs")
    # (no time share: it counts steps, and on a loaded machine a prefill beside others once
    # owed more than one decode's seconds, so `a` was not admitted the step this test expects)
    eng.scheduler.clock = lambda: 0.0

    def sub(prompt, n, client):
        return submit(eng, prompt, {"temperature": 0, "max_new_tokens": n, "ignore_eos": True}, client)

    x = sub("Story x: once", 100, "x")
    eng.step()
    a = sub("Story a: once", 160, "a")  # no room while x runs
    s1 = sub("Email: ", 4, "s")
    eng.step()
    assert a.passed_by == 1  # s1 passed it
    run(eng, [x])
    while a.req_pool_idx is None:
        eng.step()
    y = sub("Story y: once", 70, "y")
    eng.step()
    eng.step()
    z = sub("Story z: once upon", 100, "z")  # no room while a and y run
    eng.step()
    assert z in eng.scheduler.waiting_queue
    eng.scheduler.readmit(a, list(a.output_ids))  # a jump (of no tokens)
    assert a.passed_by == 0  # reset when it was admitted
    s2 = sub("Email: x", 4, "s2")
    eng.step()  # a re-admission goes first (it was running): a fits, z then does not
    assert a in eng.scheduler.running and z in eng.scheduler.waiting_queue
    assert s2 not in eng.scheduler.waiting_queue  # it passes z
    run(eng, [x, a, s1, y, z, s2])
    assert_no_leak(eng)
    eng.shutdown()


def test_a_readmission_keeps_its_place_ahead_of_new_requests():
    """A jump must not cost its request its row: client a runs on every row, b's first request
    waits; a's jump (`Scheduler.readmit`) frees a row, and the re-admission takes it back
    ahead of b's request (ranked at a's third turn, it waited until another of a's requests
    ended, 59 steps: lpm, the default, had put its long cache hit first)."""
    eng = sgl.Engine(stage="s0", max_total_tokens=2048, max_running_requests=3)
    try:
        sp = [{"temperature": 0, "max_new_tokens": 60 + 100 * i, "ignore_eos": True} for i in range(3)]
        a = [submit(eng, f"Story A{i}: once upon a time", sp[i], "a") for i in range(3)]
        eng.step()
        eng.step()
        b = submit(eng, "Email: ", {"temperature": 0, "max_new_tokens": 300, "ignore_eos": True}, "b")
        eng.step()
        assert all(r in eng.scheduler.running for r in a) and b in eng.scheduler.waiting_queue
        eng.scheduler.readmit(a[2], list(a[2].output_ids))  # a jump (of no tokens)
        eng.step()
        assert a[2] in eng.scheduler.running and b in eng.scheduler.waiting_queue
        run(eng, [*a, b])
        alone = sgl.Engine.generate(eng, "Story A2: once upon a time", sp[2])
        assert a[2].output_ids == alone["output_ids"]
        assert_no_leak(eng)
    finally:
        eng.shutdown()


def two_running_one_waiting(eng):
    """Client a's two requests running in a 600-slot pool, and client b's 300-token request
    waiting for room they leave none of."""
    sp = [{"temperature": 0, "max_new_tokens": 120 + 100 * i, "ignore_eos": True} for i in range(2)]
    a = [submit(eng, f"Story A{i}: once upon a time", sp[i], "a") for i in range(2)]
    eng.step()
    eng.step()
    big = submit(eng, "Story B: far far away", LONG | {"max_new_tokens": 300}, "b")
    eng.step()
    return a, big


def test_a_readmission_does_not_count_as_passing_anyone():
    """Another client's jumps are not passes: its re-admissions take back the room they had.
    (Counted, every jump of a running request passed the waiting request once, and jumps
    alone brought it to MAX_PASSED_BY, after which it held everyone back.)"""
    eng = sgl.Engine(stage="s0", max_total_tokens=600)
    try:
        a, big = two_running_one_waiting(eng)
        for _ in range(3):
            eng.scheduler.readmit(a[1], list(a[1].output_ids))  # a jump (of no tokens)
            eng.step()
            assert a[1] in eng.scheduler.running and big in eng.scheduler.waiting_queue
        assert big.passed_by == 0
        run(eng, [*a, big])
        assert_no_leak(eng)
    finally:
        eng.shutdown()


def test_a_readmission_keeps_its_room_from_a_request_passed_max_times():
    """A jump gives back its request's room only to the request itself: a waiting request
    passed MAX_PASSED_BY times (it holds everyone back) neither takes that room nor holds
    the re-admission back. (It took it: the jumped request waited 119 steps, until another
    request ended.)"""
    eng = sgl.Engine(stage="s0", max_total_tokens=600)
    try:
        a, big = two_running_one_waiting(eng)
        big.passed_by = admission_order.MAX_PASSED_BY
        eng.scheduler.readmit(a[1], list(a[1].output_ids))  # a jump (of no tokens)
        eng.step()
        assert a[1] in eng.scheduler.running and big in eng.scheduler.waiting_queue
        small = submit(eng, "Email: ", SMALL, "c")
        eng.step()
        assert small in eng.scheduler.waiting_queue  # big still holds everyone else back
        run(eng, [*a, big, small])
        assert admitted_step(eng, small) >= admitted_step(eng, big)
        alone = sgl.Engine.generate(
            eng, "Story A1: once upon a time", {"temperature": 0, "max_new_tokens": 220, "ignore_eos": True}
        )
        assert a[1].output_ids == alone["output_ids"]
        assert_no_leak(eng)
    finally:
        eng.shutdown()


def test_retracted_requests_of_several_clients_share_the_room_they_keep():
    """A retraction (retraction.py) sends running requests back to wait, each a client's
    re-admission that keeps the room it had (`kept`). Each checked only its own kept room,
    against a budget the others' had emptied: three retracted requests waited for each other
    with nothing running, for good (a soak of the server: 262 s, until a client gave up, and
    every other client's requests waited behind them). They share that room now."""
    prompts = [f"Story {i}: once upon a time" for i in range(4)]
    params = {"temperature": 0, "max_new_tokens": 60, "ignore_eos": True}
    roomy = sgl.Engine(stage="s0", max_total_tokens=4096)
    want = [out["output_ids"] for out in roomy.generate(prompts, params)]
    roomy.shutdown()
    eng = sgl.Engine(stage="s0", max_total_tokens=80, new_token_ratio=0.7, min_new_token_ratio=0.098)
    try:
        eng.scheduler.new_token_ratio.value = 0.098  # decayed: 600 decode steps without a retraction
        reqs = [submit(eng, prompt, params, f"10.0.0.{i}") for i, prompt in enumerate(prompts)]
        run(eng, reqs)
        assert eng.stats().retractions >= 3
        assert [r.output_ids for r in reqs] == want
        assert_no_leak(eng)
    finally:
        eng.shutdown()


def test_a_client_with_requests_running_leaves_rows_for_a_client_with_none():
    """A stranger's test: one client's 300 streams took all 128 rows, and another client's
    one-token request waited 5.9 s for one to free (45 ms on an idle server). A client with a
    request running may not take the last `reserved_for_new_clients` rows (a sixteenth by
    default): a newcomer is admitted at the next step. In-process requests take every row."""
    engine = sgl.Engine(stage="s0", max_total_tokens=4096, max_running_requests=16)
    try:
        assert engine.scheduler.config.reserved_for_new_clients == 1
        params = {"temperature": 0, "max_new_tokens": 40, "ignore_eos": True}
        hog = [submit(engine, f"Line {i}: ", params, "10.0.0.1") for i in range(20)]
        engine.step()
        assert len(engine.scheduler.running) == 15, len(engine.scheduler.running)
        newcomer = submit(engine, "Email: ", SMALL, "10.0.0.2")
        engine.step()
        assert newcomer in engine.scheduler.running and len(engine.scheduler.running) == 16
        second = submit(engine, "Phone: ", SMALL, "10.0.0.2")  # its client now has one running
        engine.step()
        assert second in engine.scheduler.waiting_queue
        run(engine, [*hog, newcomer, second])
        assert newcomer.output_ids == sgl.Engine.generate(engine, "Email: ", SMALL)["output_ids"]
        assert_no_leak(engine)
        mine = [submit(engine, f"Line {i}: ", params, None) for i in range(20)]
        engine.step()
        assert len(engine.scheduler.running) == 16  # no clients: no rows kept back
        run(engine, mine)
    finally:
        engine.shutdown()
    with pytest.raises(ValueError, match=r"reserved_for_new_clients \(16\) must be below max_running_requests"):
        sgl.Engine(stage="s0", max_running_requests=16, reserved_for_new_clients=16)
    with pytest.raises(ValueError, match="reserved_for_new_clients must be 0 .off. or above, not -1"):
        sgl.Engine(stage="s0", reserved_for_new_clients=-1)
