"""What one prefill batch may still take: the arithmetic of `Scheduler.get_new_prefill_batch`.

Admission walks the waiting requests in its order (admission_order.py) and asks, for each,
four questions whose answers are counts, not tree or queue work; `PrefillBudget` holds the
counts and answers them, and `take` counts a chosen request down:

- `forward_full`: would its new tokens make the forward longer than a prefill may be
  (`max_prefill_tokens`; on a server, `max_prefill_tokens_beside_others`, since another
  client's decodes, its first token, or its request arriving meanwhile waits for the whole
  forward), or the running batch wider than its rows?
  The first request of a batch always goes in whole (nothing could prefill it otherwise).
- `cut`: does chunked prefill cut it (more new tokens than the chunk has left)?
- `fits`: is there KV room for its new tokens and its reserved output, a re-admission
  counting the room re-admissions keep (s4's jump, a retraction: the room it had running),
  a client with nothing running the room retracted requests keep (`yielded`)?
- `in_reserve`: would it take the rows or room kept for a client with nothing running
  (`reserved_for_new_clients`)? Only a client with a request running is kept out of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .admission_order import newcomer, returning
from .core import Req
from .scheduler_config import SchedulerConfig


@dataclass
class PrefillBudget:
    """The room one prefill batch admits into, counted down as requests are chosen.

    `room`: KV slots for new requests (the pool's room less every running request's reserved
    output, less `kept`); `kept`: rid -> the slots a waiting re-admission keeps; `running`:
    the running requests; `forward_tokens`: what the forward computes so far (a mixed
    forward's riders, one token each, are in it from the start, as in SGLang's PrefillAdder)."""

    config: SchedulerConfig
    room: int
    kept: dict[int, int]
    running: list[Req]
    # Of `kept`, the slots of retracted requests: a retraction gave its room up (the pool ran
    # short, or a newcomer needed it), so a client with nothing running may take it. Kept from
    # it, one client's backlog of retracted long requests (a stranger's 4 x n=32 of 900 tokens)
    # held another client's 8-token request 45-60 s: every slot the pool freed was theirs.
    yielded: int = 0
    # Derived from the above at construction:
    forward_tokens: int = field(init=False)
    chunk_tokens: int = field(init=False, default=0)  # prompt tokens of this batch, riders aside
    chosen: int = field(init=False, default=0)
    busy: set[str] = field(init=False)  # clients with a request running or chosen
    # Clients whose requests wait for this forward: those running (their decodes) and those
    # chosen (their first tokens); None: in process.
    waiting_on_it: set[str | None] = field(init=False)
    reserved_rows: int = field(init=False)  # rows kept for a client with nothing running
    reserved_tokens: int = field(init=False)  # and as many rows' share of the pool

    def __post_init__(self) -> None:
        self.forward_tokens = len(self.running) if self.config.mixed_prefill else 0
        self.busy = {r.client for r in self.running if r.client is not None}
        self.waiting_on_it = {r.client for r in self.running}
        self.reserved_rows = self.config.reserved_for_new_clients or 0
        self.reserved_tokens = self.config.max_total_tokens * self.reserved_rows // self.config.max_running_requests

    def forward_full(self, req: Req, extend: int) -> bool:
        """Whether `req`, computing `extend` new tokens, is one request too many for this forward."""
        limit = self.config.max_prefill_tokens
        # Whoever waits for this forward waits for all of it: another client's decodes, another
        # client's request chosen for it (a short request prefilled with another client's three
        # ~730-token prompts waited ~0.5 s for its first token), and on a server any client that
        # arrives while it runs: one client's four ~1,000-token prompts, one 4,096-token forward
        # with nobody else in the engine, held a newcomer's 8-token answer ~0.95 s (from four
        # clients, one prompt a forward: ~0.37 s). In process (no client) nobody else arrives.
        if req.client is not None or self.waiting_on_it - {None}:
            limit = min(limit, self.config.max_prefill_tokens_beside_others)
        if self.chosen and self.forward_tokens + extend > limit:
            return True
        return len(self.running) + self.chosen >= self.config.max_running_requests

    def cut(self, extend: int) -> bool:
        """Whether chunked prefill would cut a request of `extend` new tokens here."""
        chunk = self.config.chunked_prefill_size
        return chunk is not None and self.chunk_tokens + extend > chunk

    def fits(self, req: Req, need: int, locked: int) -> bool:
        """Whether `need` slots (new tokens and reserved output) plus the `locked` prefix slots
        the budget counted as evictable fit; a re-admission may use what re-admissions keep (all
        of it: each of three retracted requests once waited for the others' room, for good), a
        client with nothing running what retracted requests keep (`yielded`)."""
        if req.rid in self.kept:
            extra = sum(self.kept.values())
        elif newcomer(req, self.busy):
            extra = self.yielded
        else:
            extra = 0
        return need + locked <= self.room + extra

    def in_reserve(self, req: Req, need: int, locked: int) -> bool:
        """Whether `req` fits only in the rows and room kept for a client with nothing running."""
        if req.client not in self.busy or returning(req):
            return False
        rows_after = self.config.max_running_requests - len(self.running) - self.chosen - 1
        return rows_after < self.reserved_rows or need + locked > self.room - self.reserved_tokens

    def take(self, req: Req, extend: int, need: int, locked: int) -> None:
        """Count `req` in: its new tokens in the forward, its slots out of the room (a
        re-admission's own kept room back first)."""
        self.chunk_tokens += extend
        self.forward_tokens += extend
        self.room -= need + locked - self.kept.pop(req.rid, 0)
        self.chosen += 1
        self.waiting_on_it.add(req.client)
        if req.client is not None:
            self.busy.add(req.client)
