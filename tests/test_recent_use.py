"""recent_use.RecentUse: each client's amounts, halving every half-life."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minisglang.recent_use import RecentUse


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_amount_halves_every_half_life_and_a_stranger_counts_zero():
    clock = Clock()
    use = RecentUse(half_life=10.0, clock=clock)
    use.add("a", 8.0)
    assert use.of("a") == 8.0 and use.of("b") == 0.0
    clock.now = 10.0
    assert use.of("a") == pytest.approx(4.0)
    use.add("a", 1.0)  # (what was there, decayed, plus the new amount)
    clock.now = 30.0
    assert use.of("a") == pytest.approx(5.0 / 4)


def test_it_remembers_so_many_clients_and_forgets_the_half_that_used_least():
    """An attacker's many addresses grow the table no further; the forgotten go back to 0."""
    use = RecentUse(half_life=10.0, clock=Clock())
    use.MAX_REMEMBERED = 8
    for k in range(9):
        use.add(f"c{k}", k + 1.0)
    assert sorted(use.clients()) == [f"c{k}" for k in range(4, 9)]
    assert use.of("c0") == 0.0


@pytest.mark.parametrize("half_life", [0, -1.0, float("nan")])
def test_a_half_life_that_is_not_above_zero_is_refused_by_name(half_life):
    with pytest.raises(ValueError, match="half_life must be above 0"):
        RecentUse(half_life)


@given(
    st.lists(st.tuples(st.sampled_from("abc"), st.floats(0, 1e6), st.floats(0, 100)), max_size=20),
    st.floats(0, 100),
)
def test_the_order_of_clients_is_the_order_of_their_decayed_sums(charges, later):
    """Each client's amount is the sum of what it was charged, each part halved once per
    half-life since it was charged (checked against that sum computed directly)."""
    clock = Clock()
    use = RecentUse(half_life=5.0, clock=clock)
    for client, amount, wait in charges:
        clock.now += wait
        use.add(client, amount)
    clock.now += later
    for client in "abc":
        direct, t = 0.0, 0.0
        for c, amount, wait in charges:
            t += wait
            if c == client:
                direct += amount * 0.5 ** ((clock.now - t) / 5.0)
        assert use.of(client) == pytest.approx(direct, rel=1e-6, abs=1e-6)
