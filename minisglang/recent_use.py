"""What each client used lately: the measure by which the least-served client goes first.

Two places serve clients that are otherwise equal by it: the compile pool's threads
(constrained/work_slices.py, compile seconds) and admission's ranking within a turn
(admission_order.py, prompt tokens prefilled). In both, plain turns were not enough: a
client whose jobs or requests end as soon as they start has nothing running whenever the
next one is chosen, so each of its queued ones stood level with a newcomer and, having
arrived first, went first.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class RecentUse:
    """A sum per client in which every amount halves every `half_life` (in `clock`'s units,
    seconds by default): a client that used much long ago counts as one that used a little
    lately, and one that never used anything counts 0."""

    # Clients remembered; past it, the half that used least is forgotten (they go back to 0:
    # the order among them barely changes), so an attacker's many addresses grow it no further.
    MAX_REMEMBERED = 4096

    def __init__(self, half_life: float, clock: Callable[[], float] = time.perf_counter):
        if not half_life > 0:
            raise ValueError(f"half_life must be above 0, not {half_life!r}")
        self.half_life = half_life
        self.clock = clock
        self._used: dict[str, tuple[float, float]] = {}  # client -> (amount, as of when)

    def of(self, client: str, now: float | None = None) -> float:
        """`client`'s amount as of `now` (default: the clock's now)."""
        if client not in self._used:
            return 0.0
        amount, when = self._used[client]
        return amount * 0.5 ** (((self.clock() if now is None else now) - when) / self.half_life)

    def add(self, client: str, amount: float) -> None:
        """Charge `client` `amount` now."""
        now = self.clock()
        self._used[client] = (self.of(client, now) + amount, now)
        if len(self._used) > self.MAX_REMEMBERED:
            kept = sorted(self._used, key=lambda c: self.of(c, now))[len(self._used) // 2 :]
            self._used = {c: self._used[c] for c in kept}

    def clients(self) -> list[str]:
        """The clients remembered."""
        return list(self._used)
