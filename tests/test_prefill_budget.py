"""The counts one prefill batch admits by (minisglang/prefill_budget.py), each question on
its own; the scheduler's use of them is tested through the engine in
tests/test_scheduler_admission.py and tests/test_retraction.py. Oracle: the arithmetic the
docstrings state, worked by hand for each case."""

from hypothesis import given
from hypothesis import strategies as st

from minisglang.core import Req, SamplingParams
from minisglang.prefill_budget import PrefillBudget
from minisglang.scheduler_config import SchedulerConfig


def req(client: str | None, written: int = 0) -> Req:
    r = Req("", [5], SamplingParams(max_new_tokens=8))
    r.client, r.output_ids = client, [7] * written
    return r


def budget(running: list[Req], room: int = 1000, kept: dict[int, int] | None = None, **config) -> PrefillBudget:
    options = {"max_total_tokens": 1600, "max_running_requests": 16, "max_prefill_tokens": 400} | config
    return PrefillBudget(SchedulerConfig(**options), room, kept or {}, running)


def test_a_servers_forward_keeps_to_the_cap_and_in_process_only_beside_a_server_client():
    """On a server every forward keeps to the cap past its first request: another client's
    decodes wait for it, and so does a client that arrives while it runs (a stranger's: one
    client's four ~1,000-token prompts in one forward with nobody else in the engine held a
    newcomer's answer ~0.95 s). In process (no client) nobody else arrives."""
    cap = {"max_prefill_tokens_beside_others": 100}
    for running, newcomer, limit in [
        ([req("a")], req("b"), 100),  # b's prefill would hold a's decodes
        ([req("a")], req("a"), 100),  # a's own: a client arriving meanwhile waits all the same
        ([], req("b"), 100),  # nobody in the engine yet: whoever arrives waits
        ([req(None)], req(None), 400),  # in process: one caller
        ([], req(None), 400),
        ([req("a")], req(None), 100),  # an in-process prefill beside a server client's decodes
        ([req(None)], req("b"), 100),  # an in-process request decodes beside a server client's prefill
    ]:
        b = budget(running, **cap)
        b.take(newcomer, 60, 60, 0)  # one request chosen: the next may be refused
        assert b.forward_full(newcomer, limit - 60) is False
        assert b.forward_full(newcomer, limit - 59) is True


def test_the_forward_limit_is_lower_once_a_server_clients_request_is_chosen():
    """Nobody decodes, but a request chosen first waits for its first token on the whole
    forward: a server client's prompts join it only up to the cap (in process, up to
    max_prefill_tokens)."""
    for first, then, limit in [
        (req("a"), req("b"), 100),
        (req("a"), req("a"), 100),
        (req("a"), req(None), 100),
        (req(None), req(None), 400),
    ]:
        b = budget([], max_prefill_tokens_beside_others=100)
        b.take(first, 20, 20, 0)
        assert b.forward_full(then, limit - 20) is False
        assert b.forward_full(then, limit - 19) is True


def test_the_first_request_always_goes_in_whole_but_not_past_the_rows():
    b = budget([req("a")], max_prefill_tokens_beside_others=10)
    assert b.forward_full(req("b"), 10_000) is False  # nothing chosen yet: it goes whole
    full = budget([req("a") for _ in range(16)])
    assert full.forward_full(req("b"), 1) is True  # no row left


def test_a_mixed_forwards_riders_count_one_token_each():
    b = budget([req("a"), req("a")], mixed_prefill=True)
    b.take(req("a"), 100, 100, 0)
    assert b.forward_tokens == 102
    assert b.forward_full(req("a"), 298) is False and b.forward_full(req("a"), 299) is True


def test_a_chunk_cuts_past_its_size():
    b = budget([], chunked_prefill_size=64)
    assert not b.cut(64) and b.cut(65)
    b.take(req(None), 40, 40, 0)
    assert not b.cut(24) and b.cut(25)
    assert not budget([]).cut(10**6)  # chunking off


def test_a_readmission_may_use_the_room_readmissions_keep():
    back = req("a", written=3)
    b = budget([], room=50, kept={back.rid: 30})
    assert b.fits(back, 80, 0) and not b.fits(back, 81, 0)
    assert b.fits(req("b"), 50, 0) and not b.fits(req("b"), 50, 1)  # a locked prefix counts
    b.take(back, 20, 60, 0)  # its kept 30 back first: 50 - 60 + 30
    assert b.room == 20 and back.rid not in b.kept


def test_a_client_with_nothing_running_may_use_the_room_retracted_requests_keep():
    """A retraction gave its room up (`yielded`, part of `kept`): a client with nothing running
    may take it; a running client's new request may not, nor may any request take what an s4
    jump's re-admission keeps."""
    running = [req("a", written=3)]
    b = budget(running, room=100, kept={1: 300, 2: 200})  # 200 of a jumped request's, 300 retracted
    b.yielded = 300
    assert b.fits(req("new"), 400, 0) and not b.fits(req("new"), 401, 0)
    assert not b.fits(req("a"), 101, 0) and b.fits(req("a"), 100, 0)
    b.yielded = 0  # (every kept slot a jump's)
    assert not b.fits(req("new"), 101, 0)


def test_the_reserve_keeps_out_only_a_client_with_a_request_running():
    # 1,600 slots over 16 rows with 1 reserved: 100 slots and 1 row kept for a newcomer
    b = budget([req("a")], room=500, reserved_for_new_clients=1)
    assert b.in_reserve(req("a"), 401, 0)  # a is running: it may not take the last 100
    assert not b.in_reserve(req("a"), 400, 0)
    assert not b.in_reserve(req("b"), 500, 0)  # b has nothing running
    assert not b.in_reserve(req("a", written=2), 500, 0)  # a's re-admission takes back its room
    b.take(req("b"), 10, 10, 0)
    assert b.in_reserve(req("b"), 391, 0)  # now b is busy too


@given(st.lists(st.tuples(st.integers(0, 300), st.integers(0, 300), st.integers(0, 40)), max_size=12))
def test_taking_counts_the_forward_and_the_room_down_exactly(takes):
    """Whatever is taken, the forward holds the sum of the new tokens and the room the start
    less every request's slots and locked prefix."""
    b = budget([], room=10_000)
    for extend, extra, locked in takes:
        b.take(req(None), extend, extend + extra, locked)
    assert b.forward_tokens == b.chunk_tokens == sum(e for e, _, _ in takes)
    assert b.room == 10_000 - sum(e + x + lk for e, x, lk in takes) and b.chosen == len(takes)
