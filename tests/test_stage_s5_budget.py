"""Stage s5's per-step grammar budget: the scheduler thread is every client's, so grammar work
runs within a per-step budget (stages/s5_backends.py), charged to the request that asked."""

import re
import threading
import time

import pytest

import minisglang as sgl
from minisglang.backends.base import (
    BaseGrammarObject,
    GrammarError,
)
from minisglang.core import AbortKind, Req, SamplingParams
from minisglang.stages import s5_backends as s5
from minisglang.tokenizer import Tokenizer

Q = "<|user|>\nExtract as JSON: Li Lei is 31 years old and lives in Paris.\n<|assistant|>\n"
DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"


@pytest.fixture(scope="module")
def engine():
    eng = sgl.Engine(stage="s5")
    yield eng
    eng.shutdown()


# -- the scheduler thread is every client's: grammar work within a per-step budget ----------------
EXPENSIVE = r"(x|y)*x(x|y){9}"  # each new state's row needs many derivatives (a 2^10-state DFA)


def _run_with_bystander(engine, regex: str):
    """Submit a request constrained by `regex` and an unconstrained 4-token one; step until
    both finish. (expensive, bystander, trace)."""
    slow = engine.submit(Q, {"regex": regex, "temperature": 0, "max_new_tokens": 24})
    other = engine.submit(Q, {"temperature": 0, "max_new_tokens": 4})
    while not (slow.released and other.released):
        engine.step()
    return slow, other, engine.trace


def test_an_expensive_grammar_sits_out_while_others_decode_and_its_output_is_unchanged():
    """With a tiny per-step budget the expensive request's rows are built over many steps
    (it sits out those steps) while the bystander decodes; the output is token for token
    what an unbounded budget gives, and matches the regex."""
    sliced = sgl.Engine(stage="s5", grammar_step_seconds=1e-5)
    whole = sgl.Engine(stage="s5", grammar_step_seconds=60)
    try:
        slow, other, trace = _run_with_bystander(sliced, EXPENSIVE)
        alone, _, alone_trace = _run_with_bystander(whole, EXPENSIVE)
    finally:
        sliced.shutdown()
        whole.shutdown()
    sat_out = [e for e in trace if e["event"] == "sit_out" and e.get("rid") == slow.rid]
    assert sat_out, "the expensive request never sat out a step: its rows were not cut into slices"
    assert not any(e["event"] == "sit_out" for e in alone_trace), "a 60 s budget still cut a row"
    assert other.finished_reason["type"] == "length", other.finished_reason
    assert slow.output_ids == alone.output_ids, (slow.output_text, alone.output_text)
    assert re.fullmatch(EXPENSIVE, slow.output_text) or slow.finished_reason["type"] == "length", slow.output_text


@pytest.mark.parametrize("stage", ["s5", "s6", "s7"])
def test_a_match_complete_at_the_length_limit_says_stop_whatever_the_budget(stage):
    """A match that ends exactly at max_new_tokens finishes "stop": whether it is complete is
    known once its last state's row is made, and with a 10 us step budget that row was left
    for a next step that never came, so the same answer said "length" (a client reads that as
    a cut answer). At the limit the row is made whatever the budget."""
    regex = "(ab|cd)(ef|gh)(ij|kl)(mn|op)"
    reasons = {}
    for budget in (60.0, 1e-5):
        with sgl.Engine(stage=stage, grammar_step_seconds=budget) as eng:
            free = eng.generate("x", {"regex": regex, "max_new_tokens": 30, "temperature": 0})
            assert free["meta_info"]["finish_reason"]["type"] == "stop"
            n = free["meta_info"]["completion_tokens"]
        with sgl.Engine(stage=stage, grammar_step_seconds=budget) as eng:  # a fresh automaton: no row made
            out = eng.generate("x", {"regex": regex, "max_new_tokens": n, "temperature": 0})
        assert out["text"] == free["text"] and re.fullmatch(regex, out["text"])
        reasons[budget] = out["meta_info"]["finish_reason"]["type"]
    assert reasons == {60.0: "stop", 1e-5: "stop"}, reasons


def test_a_requests_last_token_makes_no_row_past_the_budget(monkeypatch):
    """Whether a match is over at max_new_tokens is read from the automaton's structure when
    the row is not made (`is_over`): making that row there whatever the budget (as a first fix
    of the "length" above did) let every request with max_new_tokens=1 and a costly grammar
    build a whole row on the scheduler thread, outside any slice."""
    from minisglang.constrained import work_slices
    from minisglang.constrained.lazy_token_fsm import LazyStateIndex

    unsliced, row, main = [], LazyStateIndex.row, threading.main_thread()

    def watched(self, state):
        # (on the scheduler's thread: a compile thread makes the first row, lent the CPU by the baton)
        if state not in self.rows and work_slices._local.deadline is None and threading.current_thread() is main:
            unsliced.append(state)
        return row(self, state)

    with sgl.Engine(stage="s5", grammar_step_seconds=1e-5) as eng:
        monkeypatch.setattr(LazyStateIndex, "row", watched)  # (after start-up: it prepares the vocabulary)
        for n in (1, 2, 3):
            out = eng.generate(Q, {"regex": EXPENSIVE, "max_new_tokens": n, "temperature": 0})
            assert out["meta_info"]["finish_reason"]["type"] == "length", out["meta_info"]
    assert not unsliced, f"rows made outside the step's budget: {unsliced}"


def test_a_jump_makes_no_row_past_the_budget(monkeypatch):
    """After s4's jump the stage asked whether the match was over with `is_terminated`, which
    made the landing state's row on the scheduler thread, outside any slice (every jump of
    `[ab]Q{8}` then a costly tail did). It reads the structure (`is_over`) instead; the row is
    made by `ready`, within the budget, and the answer is the same as with a minute's budget."""
    from minisglang.constrained import work_slices
    from minisglang.constrained.lazy_token_fsm import LazyStateIndex

    unsliced, row, main = [], LazyStateIndex.row, threading.main_thread()

    def watched(self, state):
        if state not in self.rows and work_slices._local.deadline is None and threading.current_thread() is main:
            unsliced.append(state)
        return row(self, state)

    regex = "[ab]QQQQQQQQ" + EXPENSIVE
    outs = {}
    for budget in (60.0, 1e-5):
        with sgl.Engine(stage="s5", grammar_step_seconds=budget) as eng:
            monkeypatch.setattr(LazyStateIndex, "row", watched)  # (after start-up: it prepares the vocabulary)
            out = eng.generate("Write:", {"regex": regex, "max_new_tokens": 30, "temperature": 0})
            monkeypatch.undo()
            assert eng.scheduler.stage.jumps >= 1  # (the Q's were jumped, not sampled)
        outs[budget] = (out["text"], out["meta_info"]["finish_reason"]["type"])
        if budget != 60.0:
            assert not unsliced, f"rows made outside the step's budget: {unsliced}"
        unsliced.clear()
    assert outs[1e-5] == outs[60.0] and "QQQQQQQQ" in outs[60.0][0], outs


def test_a_budget_spent_before_the_rows_still_lets_the_longest_waiting_request_work():
    """s4's jump searches run before the rows each step; with a 1 us budget they spent it
    every step, no row work began, and the request waited 5.9 million steps (90 s) until
    max_grammar_seconds aborted it. The request that has waited longest now works one slice
    a step past the budget: the answer comes, the same as with a minute's budget.

    The limits are wide for a loaded machine: a call the OS preempts takes longer by the wall
    clock, and what passed a 1 us budget is paid back at 1 us a step sat out, so with two CPU
    burners beside it the request took 2,700-94,000 steps and up to 38 s (1,700 steps and 0.3 s
    quiet), and max_grammar_seconds 2 aborted it (twice in two such runs, once in a loaded
    suite). The step cap still ends the old failure, a request that never gets a row."""
    regex = "(ab|cd)(ef|gh)(ij|kl)(mn|op)"
    outs = {}
    for budget in (60.0, 1e-6):
        with sgl.Engine(stage="s5", grammar_step_seconds=budget, max_grammar_seconds=60.0) as eng:
            req = eng.submit("x", {"regex": regex, "max_new_tokens": 30, "temperature": 0})
            steps = 0
            while eng.has_work() and steps < 1_000_000:
                eng.step()
                steps += 1
            outs[budget] = (req.output_text, req.finished_reason["type"])
    assert outs[1e-6] == outs[60.0] and outs[60.0][1] == "stop", outs
    assert re.fullmatch(regex, outs[60.0][0])


class _Hungry:
    """A grammar whose row always needs more work (one slice done per `prepare`)."""

    def __init__(self):
        self.slices = 0

    def needs_work(self):
        return True

    def prepare(self, seconds):
        self.slices += 1
        return False


def test_a_jump_search_cut_steps_running_leaves_greedy_and_seeded_outputs_as_they_were(engine, monkeypatch):
    """A stranger's differential test: with a 10 us budget and a request arriving every third
    step, 2 seeded texts in 60 changed: a request waited once for its cut search, and a search
    cut the next step too was decoded. Each slice of a search keeps a unit of work, so it
    ends: the request now waits while its search is cut (up to MAX_SEARCH_WAITS steps)."""
    regex = r'\{"name": "[A-Za-z ]{1,12}", "age": [1-9][0-9]?, "city": "(Paris|Rome|Beijing)"\}'
    params = [{"regex": regex, "temperature": 0.8, "seed": s, "max_new_tokens": 60} for s in range(4)]
    params += [{"regex": regex, "temperature": 0, "max_new_tokens": 60}]
    prompts = [Q] * 4 + ["Give me a person as JSON: "]
    whole = [o["text"] for o in engine.generate(prompts, params)]
    cuts: dict[tuple[int, int], int] = {}
    parent = s5.JumpForward.find_jump

    def find_jump(self, req):  # a fake budget: each search cut three steps running, then done
        key = (req.rid, len(req.output_ids))
        cuts[key] = cuts.get(key, 0) + 1
        if cuts[key] <= 3:
            raise s5.OutOfTime("the step's grammar budget is spent")
        return parent(self, req)

    monkeypatch.setattr(s5.JumpForward, "find_jump", find_jump)
    assert [o["text"] for o in engine.generate(prompts, params)] == whole


def test_a_jump_search_cut_every_step_is_decoded_after_max_search_waits(engine, monkeypatch):
    """The wait for a cut search is bounded: a search that never ends within the budget is left
    to decoding after MAX_SEARCH_WAITS steps in a row, and the request finishes."""
    regex = r'\{"name": "[A-Za-z ]{1,12}", "age": [1-9][0-9]?\}'

    def find_jump(self, req):
        raise s5.OutOfTime("the step's grammar budget is spent")

    monkeypatch.setattr(s5.JumpForward, "find_jump", find_jump)
    # Only the search is cut: rows a loaded machine cuts too (load 8) add sit-outs of their own,
    # and the bound below counts the search's waits alone.
    monkeypatch.setattr(engine.stage.work, "step_seconds", 60.0)
    req = engine.submit(Q, {"regex": regex, "temperature": 0.8, "seed": 1, "max_new_tokens": 40})
    steps = 0
    while engine.has_work() and steps < 40 * (s5.MAX_SEARCH_WAITS + 2):
        engine.step()
        steps += 1
    assert req.finished_reason is not None and req.finished_reason["type"] in ("stop", "length"), req.finished_reason


def test_the_rescue_goes_to_a_request_still_in_the_batch():
    """A stranger's differential test (120 requests, grammar_step_seconds=1e-5,
    max_running_requests=7) never ended: 7 running requests sat out 700,000 steps. The
    longest-starved request, the only one the budget rescues, had jumped: a jump re-admits
    it to prefill, and the full batch kept it out, so it asked no more and held every rescue.
    The rescue now goes to the longest waiting of the requests still asking."""
    from minisglang.constrained.work_slices import Baton

    work = s5.GrammarWork(step_seconds=1e-9, max_seconds=60.0, baton=Baton())
    reqs = [Req("x", [1], SamplingParams()) for _ in range(3)]
    for i, req in enumerate(reqs):
        req.rid, req.grammar = 1000 + i, _Hungry()

    def step(asking):
        work.begin_step()
        work.left = 0.0  # the jump searches spent the budget
        return [work.ready(r) for r in asking]

    step(reqs)  # all three starve, the first longest
    step(reqs[1:])  # the first left the batch (re-admitted to prefill)
    for _ in range(3):
        step(reqs[1:])
    assert reqs[1].grammar.slices + reqs[2].grammar.slices >= 3, "no request in the batch was rescued"


class _Searching:
    """A grammar whose jump search keeps one unit of work (a derivative stored) per call."""

    def __init__(self):
        self.units = 0

    def jump_forward(self, tokenizer):
        from minisglang.constrained.work_slices import checkpoint

        self.units += 1
        checkpoint(kept=True)
        return None


def test_no_jump_search_begins_past_the_steps_budget():
    """A stranger's stall hunt: one request of 128 choices under a 2,000-structure tag made
    every step 2-4 s for every client. Each choice's jump search ran in a slice, and a slice
    keeps one unit of work before it may stop (a derivative of the tag: ~15 ms), so 128 units
    a step whatever the budget. Past the budget no search begins now (as no row work does):
    the others decode, and a greedy or seeded one waits for its search."""
    from minisglang.constrained.work_slices import Baton

    work = s5.GrammarWork(step_seconds=0.004, max_seconds=60.0, baton=Baton())
    jumper = s5.BudgetedJumpForward(Tokenizer.from_pretrained(sgl.DEFAULT_MODEL_PATH), work)
    choices = [Req("x", [1], SamplingParams(temperature=1.0)) for _ in range(8)]
    for i, req in enumerate(choices):
        req.rid, req.grammar = 2000 + i, _Searching()
    work.begin_step()
    work.left = 0.0  # (an earlier search spent the budget)
    assert jumper.before_decode(choices) == []
    assert sum(req.grammar.units for req in choices) == 0, "searches began past the budget"
    work.begin_step()  # a fresh budget: the searches run
    jumper.before_decode(choices)
    assert all(req.grammar.units == 1 for req in choices)


def test_a_grammar_that_needs_more_work_than_max_grammar_seconds_is_aborted_naming_it():
    engine = sgl.Engine(stage="s5", grammar_step_seconds=1e-5, max_grammar_seconds=1e-4)
    try:
        slow, other, _ = _run_with_bystander(engine, EXPENSIVE)
    finally:
        engine.shutdown()
    reason = slow.finished_reason
    assert reason["type"] == "abort" and "max_grammar_seconds" in reason["message"], reason
    assert reason["kind"] == AbortKind.GRAMMAR, "a grammar past its limit is the client's error (400), not ours"
    assert other.finished_reason["type"] == "length", other.finished_reason


@pytest.mark.parametrize("backend", ["xgrammar", "llguidance"])
@pytest.mark.parametrize("where", ["mask", "token"])
def test_a_grammar_call_slower_than_max_grammar_call_seconds_aborts_its_request(backend, where, monkeypatch):
    """A library's mask or token is native code no slice can cut, and it ran on the
    scheduler thread uncharged (a stranger's ambiguous EBNF took 2-3 s a token there, every
    client waiting). Now each call is timed and charged: one past max_grammar_call_seconds
    aborts its request by name (the clock here makes that call 1 s long), the bystander goes on."""
    engine = sgl.Engine(stage="s5", grammar_backend=backend, jump_forward=False)
    grammar_class = type(engine.stage.backend._compile_safely("regex", "[a-z]+"))
    clock = [0.0]
    engine.stage.work.clock = engine.stage.work.cpu_clock = lambda: clock[0]
    if where == "mask":
        fill = grammar_class.fill_vocab_mask_batched

        def slow_fill(cls, entries, mask):
            clock[0] += 1.0  # this call "took" a second
            fill(entries, mask)

        one = grammar_class.fill_vocab_mask

        def slow_one(self, mask, i):  # (the batch's slow row, filled again alone)
            clock[0] += 1.0
            one(self, mask, i)

        monkeypatch.setattr(grammar_class, "fill_vocab_mask_batched", classmethod(slow_fill))
        monkeypatch.setattr(grammar_class, "fill_vocab_mask", slow_one)
    else:
        accept = grammar_class.accept_token

        def slow_accept(self, token_id):
            clock[0] += 1.0
            accept(self, token_id)

        monkeypatch.setattr(grammar_class, "accept_token", slow_accept)
    try:
        slow_req, other, _ = _run_with_bystander(engine, "[a-z]+")
    finally:
        engine.shutdown()
    reason = slow_req.finished_reason
    assert reason["type"] == "abort" and reason["kind"] == AbortKind.GRAMMAR, reason
    assert (
        f"one {where} of its grammar took 1.00 s" in reason["message"]
        and "max_grammar_call_seconds" in reason["message"]
    )
    assert other.finished_reason["type"] == "length", other.finished_reason


def test_a_long_call_on_a_loaded_machine_is_paid_back_not_aborted():
    """The call limit reads the scheduler thread's CPU time beside the wall clock: a call that
    waited for a busy core (wall 1 s, CPU 1 ms) is paid back by sitting out, never aborted
    (two strangers' valid requests got 400s at a load of 5 on 2 cores); one whose own work
    took as long is aborted."""
    work = s5.GrammarWork(step_seconds=0.004, max_seconds=10.0, baton=None, max_call_seconds=0.1)
    req = Req("x", [1], SamplingParams())
    assert work.charge(req, 0.01, "mask", cpu=0.01) is None  # the first call is never aborted
    assert work.charge(req, 1.0, "mask", cpu=0.001) is None
    assert work.owed[req.rid] > 1.0  # paid back: sits out for what the others waited
    reason = work.charge(req, 1.0, "token", cpu=0.9)
    assert reason is not None and "one token of its grammar took 1.00 s" in reason


def test_max_grammar_seconds_adds_up_work_not_a_busy_machines_waits():
    """A request's grammar seconds (max_grammar_seconds) add up the smaller of each call's or
    slice's wall and CPU time, as the call limit reads them: on a loaded machine a 1 us
    budget's request was aborted past 2 s where quiet its work was 0.3 s. Work that burns the
    thread's CPU still counts."""
    work = s5.GrammarWork(step_seconds=1.0, max_seconds=0.02, baton=None, max_call_seconds=0.1)
    req = Req("x", [1], SamplingParams())
    for _ in range(3):  # waited a second for a core each time, worked a millisecond
        assert work.charge(req, 1.0, "mask", cpu=0.001) is None
    with work.slice(req):
        time.sleep(0.05)  # waiting (wall), not working (CPU)
    assert work.spent[req.rid] < 0.02, work.spent
    with pytest.raises(GrammarError, match="max_grammar_seconds"):
        with work.slice(req):
            end = time.thread_time() + 0.05
            while time.thread_time() < end:  # 50 ms of this thread's own work
                pass


def test_a_clients_slow_requests_pay_back_together_as_one_request():
    """Each request paid back its own slow calls: a client's n requests (n choices of an
    ambiguous EBNF on xgrammar, n=64) kept n shares of the scheduler, and every other
    client's tokens took 0.22 s each instead of 8 ms, for the ten minutes the choices ran.
    A request's payback is now multiplied by its client's requests paying back."""
    work = s5.GrammarWork(step_seconds=0.004, max_seconds=100.0, baton=None, max_call_seconds=0.1)

    def req(client):
        r = Req("x", [1], SamplingParams())
        r.client, r.grammar = client, object()  # (`ready` reads no more of it while it owes)
        return r

    one = s5.SIT_OUT * (0.05 - 0.004)  # what a call of 50 ms is paid back with, alone
    mine, stranger, offline = [req("10.0.0.1") for _ in range(8)], req("10.0.0.2"), [req(None) for _ in range(3)]
    for r in [*mine, stranger, *offline]:
        assert work.charge(r, 0.05, "mask") is None
    assert [work.owed[r.rid] for r in mine] == pytest.approx([k * one for k in range(1, 9)])
    assert work.owed[stranger.rid] == pytest.approx(one)  # another client's, as before
    assert [work.owed[r.rid] for r in offline] == pytest.approx([one] * 3)  # (no client: the Engine's)
    while work.owed[mine[0].rid] > 0:  # paid back, it no longer counts
        assert not work.ready(mine[0])
    assert work.charge(mine[1], 0.05, "mask") is None
    assert work.owed[mine[1].rid] == pytest.approx(2 * one + 7 * one)
    for r in mine[2:]:  # nor do the requests that left
        work.forget(r)
    assert work.charge(mine[1], 0.05, "mask") is None
    assert work.owed[mine[1].rid] == pytest.approx(9 * one + one)
    assert work.slow_of == {"10.0.0.1": 1, "10.0.0.2": 1}


def test_a_clients_calls_in_one_step_count_together_while_another_client_waits():
    """64 choices of an ambiguous EBNF on llguidance, each mask 4 ms (under a step's budget
    alone), made every step 0.3 s for everyone, and none of them paid anything back. While
    another client has a request in the engine, a client's calls in a step now count
    together: past the step's budget, each call is paid back whole (times the client's slow
    requests); once the other client's request has left, as before."""

    def req(client):
        r = Req("x", [1], SamplingParams())
        r.client, r.grammar = client, object()
        return r

    work = s5.GrammarWork(step_seconds=0.004, max_seconds=100.0, baton=None, max_call_seconds=0.1)
    mine, stranger = [req("10.0.0.1") for _ in range(8)], req("10.0.0.2")
    for r in [*mine, stranger]:
        work.arrived(r)
    for r in [*mine, stranger]:
        assert work.charge(r, 0.003, "mask") is None
    expected = [0.0, s5.SIT_OUT * 0.002] + [s5.SIT_OUT * 0.003 * k for k in range(2, 8)]
    assert [work.owed.get(r.rid, 0.0) for r in mine] == pytest.approx(expected)
    assert stranger.rid not in work.owed  # its own 3 ms: within the budget
    work.forget(stranger)  # alone in the engine: a client's calls are each its own again
    work.client_took.clear()  # (a new step)
    before = dict(work.owed)
    for r in mine:
        assert work.charge(r, 0.003, "mask") is None
    assert work.owed == before
    for r in mine:
        work.forget(r)
    assert not work.present and not work.client_of


def test_a_clients_cheap_masks_sit_out_steps_beside_another_client(monkeypatch):
    """The engine's side of the rule above: 8 requests of one client whose masks take 4 ms a
    row (a fake clock) sit out steps while another client's request decodes; alone, none does."""
    engine = sgl.Engine(stage="s5", grammar_backend="xgrammar", jump_forward=False, grammar_step_seconds=0.01)
    grammar_class = type(engine.stage.backend._compile_safely("regex", "[a-z]+"))
    clock = [0.0]
    engine.stage.work.clock = engine.stage.work.cpu_clock = lambda: clock[0]
    make_masks_slow(monkeypatch, grammar_class, clock, 0.004, per_row=True)

    def submit(client: str, params: dict):
        req = engine.make_request(Q, params)
        req.client = client  # (as the server's loop does before it adds the request)
        engine.add_request(req)
        return req

    def sat_out(with_other: bool) -> int:
        mine = [submit("10.0.0.1", {"regex": "[a-z]+", "temperature": 0, "max_new_tokens": 4}) for _ in range(8)]
        reqs = mine + ([submit("10.0.0.2", {"temperature": 0, "max_new_tokens": 4})] if with_other else [])
        start = len(engine.trace)
        while not all(r.released for r in reqs):
            engine.step()
        assert all(r.finished_reason["type"] != "abort" for r in reqs)
        rids = {r.rid for r in mine}
        return sum(1 for e in list(engine.trace)[start:] if e["event"] == "sit_out" and e.get("rid") in rids)

    try:
        assert sat_out(with_other=False) == 0
        assert sat_out(with_other=True) > 8
        assert not engine.stage.work.present  # every request left: no client counted
    finally:
        engine.shutdown()


def _assert_it_sits_out_beside_a_bystander(engine) -> None:
    """A constrained request beside an unconstrained bystander (then `engine` is shut down): its
    slow calls are paid back by sitting out steps, at least 4 per charged call, while the
    bystander decodes. (A slow batched fill's rows are timed from the next step on: one mask
    fewer is charged.)"""
    try:
        slow, other, trace = _run_with_bystander(engine, "[0-9]( [0-9]){7,}")
    finally:
        engine.shutdown()
    sat_out = [e["step"] for e in trace if e["event"] == "sit_out" and e.get("rid") == slow.rid]
    assert len(sat_out) >= 4 * min(len(slow.output_ids) - 2, 3), (len(sat_out), len(slow.output_ids))
    assert other.finished_reason["type"] == "length" and slow.finished_reason["type"] != "abort"


def make_masks_slow(monkeypatch, grammar_class, clock: list[float], seconds: float, per_row: bool = False) -> None:
    """Every mask `grammar_class` fills (batched or one row) advances the fake `clock` the
    stage's grammar budget reads by `seconds` (a batched fill: `seconds` a row with `per_row`):
    a slow native mask, without the wait."""
    fill, one = grammar_class.fill_vocab_mask_batched, grammar_class.fill_vocab_mask

    def slow_fill(cls, entries, mask):
        clock[0] += seconds * (len(entries) if per_row else 1)
        fill(entries, mask)

    def slow_one(self, mask, i):
        clock[0] += seconds
        one(self, mask, i)

    monkeypatch.setattr(grammar_class, "fill_vocab_mask_batched", classmethod(slow_fill))
    monkeypatch.setattr(grammar_class, "fill_vocab_mask", slow_one)


@pytest.mark.parametrize("where", ["mask", "token"])
def test_a_grammar_whose_calls_take_more_than_a_steps_budget_sits_out_steps(where, monkeypatch):
    """Below the per-call limit, a call that took more than the step's budget is paid back
    by sitting out steps (a step's budget each), so the bystander decodes meanwhile (an
    ambiguous EBNF on xgrammar: 40 of a bystander's tokens took 2.8 s, now 0.5 s)."""
    engine = sgl.Engine(stage="s5", grammar_backend="xgrammar", jump_forward=False, grammar_step_seconds=0.01)
    grammar_class = type(engine.stage.backend._compile_safely("regex", "[a-z]+"))
    clock = [0.0]
    engine.stage.work.clock = engine.stage.work.cpu_clock = lambda: clock[0]
    if where == "token":
        accept = grammar_class.accept_token

        def slow_accept(self, token_id):
            clock[0] += 0.05  # five steps' budget (under max_grammar_call_seconds)
            accept(self, token_id)

        monkeypatch.setattr(grammar_class, "accept_token", slow_accept)
    else:  # a 50 ms mask, under max_grammar_call_seconds (a student found it uncharged)
        make_masks_slow(monkeypatch, grammar_class, clock, 0.05)
    _assert_it_sits_out_beside_a_bystander(engine)


def test_a_library_that_caches_its_masks_is_charged_for_them(monkeypatch):
    """llguidance keeps the mask it computed for a state: filled again at once after a slow
    batched fill, each row read its cache (30 rows of an ambiguous EBNF: 0.2 s batched, 0.4 ms
    again), nobody was charged and nobody sat out. A class whose batched fill was slow has its
    rows filled one by one, timed, from the next step on. (A fake clock: a mask costs 50 ms
    the first time its state is filled, nothing after.)"""
    engine = sgl.Engine(stage="s5", grammar_backend="llguidance", jump_forward=False, grammar_step_seconds=0.01)
    grammar_class = type(engine.stage.backend._compile_safely("regex", "[a-z]+"))
    clock = [0.0]
    engine.stage.work.clock = engine.stage.work.cpu_clock = lambda: clock[0]
    filled: set[tuple[int, int]] = set()  # (grammar, tokens it has taken) whose mask is computed
    fill, one, accept = grammar_class.fill_vocab_mask_batched, grammar_class.fill_vocab_mask, grammar_class.accept_token
    taken: dict[int, int] = {}

    def cost(g) -> None:
        state = (id(g), taken.get(id(g), 0))
        if state not in filled:
            filled.add(state)
            clock[0] += 0.05

    def slow_fill(cls, entries, mask):
        for g, _ in entries:
            cost(g)
        fill(entries, mask)

    def slow_one(self, mask, i):
        cost(self)
        one(self, mask, i)

    def counted_accept(self, token_id):
        taken[id(self)] = taken.get(id(self), 0) + 1
        accept(self, token_id)

    monkeypatch.setattr(grammar_class, "fill_vocab_mask_batched", classmethod(slow_fill))
    monkeypatch.setattr(grammar_class, "fill_vocab_mask", slow_one)
    monkeypatch.setattr(grammar_class, "accept_token", counted_accept)
    _assert_it_sits_out_beside_a_bystander(engine)


@pytest.mark.parametrize(
    "name, value",
    [
        ("grammar_step_seconds", 0),
        ("max_grammar_seconds", -1),
        ("grammar_step_seconds", "1"),
        ("max_grammar_seconds", True),
        ("schema_cpu_seconds", 0),
        ("schema_cpu_seconds", "0.1"),
        ("max_grammar_call_seconds", 0),
    ],
)
def test_grammar_budget_options_must_be_positive_seconds(name, value):
    with pytest.raises(ValueError, match=f"{name} must be a positive number of seconds"):
        sgl.Engine(stage="s5", **{name: value})


def test_schema_cpu_seconds_reaches_the_fsm_backend():
    """The engine's option is the backend's budget for a schema compiled in this process."""
    engine = sgl.Engine(stage="s5", schema_cpu_seconds=0.25)
    try:
        assert engine.stage.backend.options["schema_cpu_seconds"] == 0.25
    finally:
        engine.shutdown()


def test_a_lazy_grammar_that_grew_past_the_cache_bytes_is_evicted_when_its_request_leaves():
    """Its size at compile time (a start row) is small; 64 tokens at temperature 2 grow its
    automaton to megabytes. Leaving, the request trims the cache to grammar_cache_bytes."""
    engine = sgl.Engine(stage="s5", grammar_cache_bytes=2_000_000)
    regex = r"([\s\S]*[aeiou][\s\S]{8}){6}"
    try:
        backend = engine.stage.backend
        grammar = backend.get_cached_or_future_value("regex", regex)[0]
        grammar = grammar if not hasattr(grammar, "result") else grammar.result(60).copy()
        assert grammar.nbytes() < 2_000_000 and backend.is_cached("regex", regex)
        out = engine.generate(Q, {"regex": regex, "temperature": 2.0, "seed": 1, "max_new_tokens": 64})
        assert re.fullmatch(regex, out["text"]) or out["meta_info"]["finish_reason"]["type"] == "length"
        assert grammar.nbytes() > 2_000_000, "the automaton did not grow: the test tests nothing"
        assert not backend.is_cached("regex", regex), "a grammar past grammar_cache_bytes stayed cached"
    finally:
        engine.shutdown()


def test_a_request_that_leaves_while_its_grammar_compiles_stops_the_compile():
    """A client gone while its grammar compiled left the compile running (a stranger's outlines
    child computed at 98% CPU until compile_timeout): the request's release cancels a compile
    that no other request waits for, and the child computing it is stopped."""
    engine = sgl.Engine(stage="s5", grammar_backend="outlines", compile_timeout=120)
    try:
        backend = engine.stage.backend
        req = engine.submit("Hello", {"regex": "[a-z]{1,300}x[a-z]{1,300}", "max_new_tokens": 4})
        deadline = time.monotonic() + 60
        while not backend.children.running and time.monotonic() < deadline:  # its child computes
            engine.step()
        assert backend.children.running, "the compile reached its child"
        assert engine.abort(req.rid)
        while backend.children.running and time.monotonic() < deadline:
            engine.step()
            time.sleep(0.01)
        assert not backend.children.running, "the compile of the request that left was stopped"
        assert req.finished_reason["type"] == "abort"
        assert not backend.is_cached("regex", "[a-z]{1,300}x[a-z]{1,300}")
    finally:
        engine.shutdown()


@pytest.mark.parametrize("backend", ["fsm", "xgrammar", "llguidance"])
def test_a_match_that_ends_at_the_length_limit_stops_whatever_is_left_of_the_budget(backend, monkeypatch):
    """Hook 5 read whether the match had ended only within the step's grammar budget; at
    the length limit the request then finished by "length" instead of "stop" when the
    budget was spent, so one request's finish reason changed with the load (and s7, whose
    mask chains spend the budget, said "length" where s6 said "stop": found by helper
    spec_attack). A row made already (a library has none to make, a lazy state visited
    before) is read whatever is left of the budget."""
    prompt = "<|user|>\nExtract as JSON: Li Lei is 27 years old and lives in Paris.\n<|assistant|>\n"
    params = {"regex": r"(abc|abd|abe)+x", "max_new_tokens": 4, "temperature": 0}
    with sgl.Engine(stage="s5", grammar_backend=backend, jump_forward=False) as engine:
        roomy = engine.generate(prompt, params)
        assert len(roomy["output_ids"]) == 4 and re.fullmatch(params["regex"], roomy["text"]), roomy
        assert roomy["meta_info"]["finish_reason"] == {"type": "stop", "matched": None}
        engine.stage.work.step_seconds = 1e-7  # every step's budget spent at once
        # Each call past the budget still owes a sit-out (what made `ready` say no), but a few
        # steps' worth: at SIT_OUT times its ~100 us, a 1e-7 s budget paid a call back in some
        # 2,000 empty steps (15,000 steps, 13-100 s, for this test's four tokens).
        monkeypatch.setattr(s5, "SIT_OUT", 0.05)
        starved = engine.generate(prompt, params)
    assert starved["output_ids"] == roomy["output_ids"]
    assert starved["meta_info"]["finish_reason"] == roomy["meta_info"]["finish_reason"]


def cut_each_search_once(monkeypatch) -> None:
    """A fake budget: each jump search (a request at one output length) is cut the first
    time it is asked, and done the next step."""
    searched: set[tuple[int, int]] = set()
    parent = s5.JumpForward.find_jump

    def find_jump(self, req):
        if (req.rid, len(req.output_ids)) not in searched:
            searched.add((req.rid, len(req.output_ids)))
            raise s5.OutOfTime("the step's grammar budget is spent")
        return parent(self, req)

    monkeypatch.setattr(s5.JumpForward, "find_jump", find_jump)


def test_a_cut_jump_search_leaves_a_seeded_requests_output_as_it_was(engine, monkeypatch):
    """A stranger's test: a seeded request at temperature 0.8 gave other text when sent again
    on a loaded machine (2 in 80). The budget had cut its jump-forward search, so it sampled
    the forced text a jump skips, and each sampled token moved its seeded generator's later
    draws. A seeded request now sits out the step its search is cut (while it is cut) and
    jumps the next: the same text, cut or not; unseeded sampling requests never wait."""
    regex = r'\{"name": "[A-Za-z ]{1,12}", "age": [1-9][0-9]?, "city": "(Paris|Rome|Beijing)"\}'
    params = [{"regex": regex, "temperature": 0.8, "seed": s, "max_new_tokens": 60} for s in range(8)]
    whole = [o["text"] for o in engine.generate([Q] * 8, params)]
    cut_each_search_once(monkeypatch)
    events = len(engine.trace)
    cut = [o["text"] for o in engine.generate([Q] * 8, params)]
    assert cut == whole
    assert any(e["event"] == "sit_out" for e in list(engine.trace)[events:])  # they waited
    assert all(re.fullmatch(regex, t) for t in cut)


def test_a_cut_jump_search_leaves_a_greedy_requests_output_as_it_was(engine, monkeypatch):
    """A stranger's differential test: a greedy request gave other text with a 10 us grammar
    budget than with 60 s, in a batch (1 in 60): its jump search was cut, so it decoded the
    forced text in other tokens than the jump's, and the model, fed other tokens, went on
    otherwise. A greedy request now sits out the step its search is cut, as a seeded one."""
    regex = r'\{"name": "[A-Za-z ]{1,12}", "age": [1-9][0-9]?, "city": "(Paris|Rome|Beijing)"\}'
    prompts = [Q, "Give me a person as JSON: ", "Here is the object: Alice 42"]
    params = [{"regex": regex, "temperature": 0, "max_new_tokens": 60} for _ in prompts]
    whole = [o["text"] for o in engine.generate(prompts, params)]
    cut_each_search_once(monkeypatch)
    cut = [o["text"] for o in engine.generate(prompts, params)]
    assert cut == whole


def test_our_fsm_backend_jumps_where_s4_does(engine):
    """A stranger's differential test: s5 with our fsm backend wrote `red a` where s4 wrote
    `red an`. The backend's grammar did not list what it allows after an output
    (`allowed_after`), so s4's seam rule went by the vocabulary alone and gave back the whole
    jump. Through the interface our automaton answers as s4's does: the same jumps, the same text."""
    prompt = "Give me a person as JSON: items true true null items give JSON name"
    regexes = [r"(red|green|blue)( and (red|green|blue))*", r'\{"name": "[a-z]+", "age": [0-9]{1,2}\}']
    params = [{"regex": rx, "temperature": 0, "max_new_tokens": n} for rx in regexes for n in (5, 12, 40)]
    s4 = sgl.Engine(stage="s4")
    try:
        want = [(o["text"], o["output_ids"]) for o in s4.generate([prompt] * len(params), params)]
    finally:
        s4.shutdown()
    got = [(o["text"], o["output_ids"]) for o in engine.generate([prompt] * len(params), params)]
    assert got == want
    assert want[0][0] == "red an"


class _SlowSearch(BaseGrammarObject):
    """A grammar whose jump search is one uncuttable call of ~0.15 s of CPU."""

    def __init__(self):
        self.searches, self.slow = 0, False

    def jump_forward(self, tokenizer):
        self.searches += 1
        end = time.thread_time() + 0.15
        while time.thread_time() < end:
            pass
        return None

    def search_was_slow(self):
        self.slow = True


def test_a_jump_search_longer_than_a_call_may_take_is_its_grammars_last():
    """A library's search is one native call no slice can cut (xgrammar's over a short grammar
    forcing megabytes held every client 7-20 s: a stranger's stall hunt). Whatever the bounds
    on forced text say, a search past max_grammar_call_seconds tells its grammar, which then
    searches no more in any copy (XGrammarGrammar shares the flag)."""
    from minisglang.constrained.work_slices import Baton

    work = s5.GrammarWork(step_seconds=1.0, max_seconds=60.0, baton=Baton(), max_call_seconds=0.1)
    jumper = s5.BudgetedJumpForward(Tokenizer.from_pretrained(sgl.DEFAULT_MODEL_PATH), work)
    req = Req("x", [1], SamplingParams(temperature=1.0))
    req.grammar = _SlowSearch()
    work.begin_step()
    assert jumper.find_jump(req) is None
    assert req.grammar.slow, "a search of 0.15 s past a 0.1 s call limit was not reported"
    fast = Req("y", [1], SamplingParams(temperature=1.0))
    fast.grammar = _Searching()
    work.begin_step()
    jumper.find_jump(fast)  # (a quick search reports nothing: _Searching has no search_was_slow)
