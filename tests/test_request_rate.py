"""RequestRate, each client's token bucket (minisglang/server/request_rate.py), on a test clock;
its use by the server is tests/test_server_attack.py's."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_recent_use import Clock  # (a clock the test moves by hand)

from minisglang.server.request_rate import RequestRate, retry_after


def test_a_burst_then_one_request_per_token_as_they_come_back():
    clock = Clock()
    rate = RequestRate(per_second=4.0, burst=3, clock=clock)
    assert [rate.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert rate.take("a") == pytest.approx(0.25)  # a token comes back every 1/4 s
    assert rate.take("b") == 0.0  # another client's bucket is its own
    clock.now = 0.1
    assert rate.wait("a") == pytest.approx(0.15)
    assert rate.take("a") == pytest.approx(0.15)  # a refusal takes nothing
    clock.now = 0.25
    assert rate.take("a") == 0.0
    assert rate.take("a") > 0
    clock.now = 100.0  # a quiet spell fills the bucket, never past `burst`
    assert rate.tokens("a") == 3.0
    assert [rate.take("a") == 0.0 for _ in range(4)] == [True, True, True, False]


def test_bad_settings_are_refused_by_name():
    with pytest.raises(ValueError, match="per_second must be above 0 and burst at least 1"):
        RequestRate(per_second=0.0, burst=3)
    with pytest.raises(ValueError, match="burst at least 1"):
        RequestRate(per_second=1.0, burst=0)


def test_many_addresses_keep_the_emptiest_buckets_and_no_more_than_the_bound(monkeypatch):
    """An attacker's many addresses grow the buckets no further than MAX_REMEMBERED: full
    buckets go first (they are as a client never seen), then all but the emptiest half."""
    monkeypatch.setattr(RequestRate, "MAX_REMEMBERED", 8)
    clock = Clock()
    rate = RequestRate(per_second=1.0, burst=2, clock=clock)
    rate.take("busy")
    rate.take("busy")  # empty
    for i in range(30):
        rate.take(f"addr{i}")  # one token left each
        assert len(rate._buckets) <= 8
    assert rate.tokens("busy") == 0.0  # the emptiest stays remembered
    assert rate.take("busy") > 0


def test_retry_after_is_whole_seconds_and_at_least_one():
    assert [retry_after(s) for s in (0.001, 0.5, 1.0, 1.01, 7.2)] == [1, 1, 1, 2, 8]


@given(
    per_second=st.floats(0.5, 50.0),
    burst=st.integers(1, 20),
    steps=st.lists(st.tuples(st.floats(0.0, 2.0), st.sampled_from("ab")), max_size=200),
)
def test_no_client_starts_more_than_its_burst_plus_its_rate_over_any_span(per_second, burst, steps):
    """The bucket's promise, against the requests counted directly: in any span of time a
    client starts at most burst + per_second x span requests, and a refused client is told
    a wait after which its next request is taken."""
    clock = Clock()
    rate = RequestRate(per_second, burst, clock=clock)
    started: dict[str, list[float]] = {"a": [], "b": []}
    for gap, client in steps:
        clock.now += gap
        told = rate.wait(client)
        wait = rate.take(client)
        assert told == wait  # the connection's check (wait) and the request's (take) agree
        if wait == 0.0:
            started[client].append(clock.now)
        else:
            clock.now += wait
            assert rate.wait(client) == 0.0 and rate.take(client) == 0.0
            started[client].append(clock.now)
    for times in started.values():
        for i, begin in enumerate(times):
            for j in range(i, len(times)):
                assert j - i + 1 <= burst + per_second * (times[j] - begin) + 1e-6
