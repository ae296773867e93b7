"""How fast one client may start requests: a token bucket per client (`RequestRate`).

Every request costs the event loop the same ~1 ms before a handler looks at it (accepting the
connection, reading its head, FastAPI's middleware and routing), whatever it asks for and
however soon it is refused, and the event loop is one thread that serves every client in
arrival order. One client that opened ~500 connections a second, each a prompt too long for
the context, hung up after 30 ms, kept that thread busy: another client's 8-token answer took
0.6-0.7 s instead of 53 ms (a stranger's CancelLoop), and its hang-ups made no difference,
since nothing it sent ever reached the engine. So each client may start `per_second` requests
a second, and `burst` at once after a quiet spell; above that its requests are refused (429)
where refusing is cheapest: a new connection before its head is read (http_limits.py), a
request on an open one before FastAPI sees it (`RateLimits`). Refused at the connection, the
same flood cost the other client 66 ms.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

# A client that waits the seconds it was told has its token, whatever the float rounding.
_ROUNDING = 1e-9


class RequestRate:
    """A token bucket per client: `burst` tokens when full, refilled at `per_second`; a
    request takes one. A client never seen has a full bucket."""

    # Buckets kept; past it, the full ones (no different from a client never seen) are dropped,
    # then, if an attacker's many addresses still hold more, all but the emptiest half.
    MAX_REMEMBERED = 4096

    def __init__(self, per_second: float, burst: int, clock: Callable[[], float] = time.monotonic):
        if not per_second > 0 or not burst >= 1:
            raise ValueError(f"per_second must be above 0 and burst at least 1, not {per_second!r} and {burst!r}")
        self.per_second, self.burst, self.clock = per_second, burst, clock
        self._buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, as of when)

    def tokens(self, client: str, now: float | None = None) -> float:
        """The tokens `client` has as of `now` (default: the clock's now)."""
        if client not in self._buckets:
            return float(self.burst)
        tokens, when = self._buckets[client]
        now = self.clock() if now is None else now
        return min(float(self.burst), tokens + (now - when) * self.per_second)

    def wait(self, client: str) -> float:
        """Seconds until `client` may start a request (0: now, as `take` would), taking nothing."""
        tokens = self.tokens(client)
        return 0.0 if tokens >= 1.0 - _ROUNDING else (1.0 - tokens) / self.per_second

    def take(self, client: str) -> float:
        """Start a request of `client`'s: 0 and a token taken if it has one, else the seconds
        until it will (nothing taken)."""
        now = self.clock()
        tokens = self.tokens(client, now)
        if tokens < 1.0 - _ROUNDING:
            return (1.0 - tokens) / self.per_second
        self._buckets[client] = (max(0.0, tokens - 1.0), now)
        if len(self._buckets) > self.MAX_REMEMBERED:
            self._forget(now)
        return 0.0

    def _forget(self, now: float) -> None:
        left = {c: self.tokens(c, now) for c in self._buckets}
        kept = [c for c, t in left.items() if t < self.burst]
        if len(kept) > self.MAX_REMEMBERED // 2:
            kept = sorted(kept, key=left.__getitem__)[: self.MAX_REMEMBERED // 2]
        self._buckets = {c: self._buckets[c] for c in kept}


def retry_after(seconds: float) -> int:
    """A Retry-After header's whole seconds for a wait of `seconds` (at least 1)."""
    return max(1, math.ceil(seconds))
