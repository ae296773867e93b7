"""The scheduler's options (`SchedulerConfig`): what the pools hold, how admission orders
and packs requests, what it reserves for them. Every field is checked at construction and a
bad value refused by name, before a model loads."""

from __future__ import annotations

import typing
from dataclasses import dataclass, fields

from .core import check_declared_type


@dataclass
class SchedulerConfig:
    max_total_tokens: int = 16384  # KV slots in the pool
    max_running_requests: int = 128  # rows of the request-to-token table
    max_prefill_tokens: int = 4096  # new tokens computed in one prefill batch
    # New tokens one prefill batch computes at most beside other clients (its first request
    # goes in whole all the same): their decodes, their first tokens and their requests that
    # arrive meanwhile wait for the whole forward, and one client's back-to-back ~400-token
    # prompts, 8 to a 3,300-token forward (~180 ms here), held another client's 8-token answer
    # to 1.5 s (0.28 s at 512). So a server's forwards always keep to it; requests of no
    # client (in process) are one caller: among them it never applies. (The running requests'
    # share of the time is Scheduler.owe_decode_time's.)
    max_prefill_tokens_beside_others: int = 512
    schedule_policy: str = "lpm"  # "lpm" (longest prefix match first) or "fcfs"
    disable_radix_cache: bool = False
    # A waiting request that shares at least this many not-yet-cached tokens with a request
    # already chosen for this prefill batch waits one step, then hits the tree instead of
    # computing them again (SGLang's in-batch prefix caching; 0 turns it off).
    in_batch_prefix_threshold: int = 32
    # A prefill step also decodes the running requests, in the same forward (SGLang's
    # mixed chunked prefill, #1013): a new request no longer stalls everyone else's decode.
    mixed_prefill: bool = False
    # Prompt tokens one prefill forward computes at most; a longer prompt is prefilled a
    # chunk per step (SGLang's chunked prefill; None: off, a prompt goes in one forward).
    chunked_prefill_size: int | None = None
    # Rows (and as many rows' share of the KV pool) that a server client with requests running
    # may not take: they are kept for a client with none running. One client's 300 streams
    # took all 128 rows, and another client's one-token request waited 5.9 s for a row to
    # free (a stranger's test). In-process requests (no client) take every row. 0: off;
    # None: a sixteenth of max_running_requests (8 of 128).
    reserved_for_new_clients: int | None = None
    # The share of each request's remaining max_new_tokens that admission reserves (SGLang's
    # new_token_ratio; retraction.py). 1.0: all of it, and nothing is ever retracted. Below 1,
    # more requests run at once, and a decode step that finds the pool full retracts one.
    new_token_ratio: float = 1.0
    # Each decode step lowers the ratio toward this, over 600 steps; a retraction sets it back
    # to new_token_ratio (None: the ratio stays at new_token_ratio).
    min_new_token_ratio: float | None = None
    trace_limit: int = 100_000  # events kept for notebooks (oldest dropped)

    def __post_init__(self) -> None:
        """Each field of its declared type, a number above 0 (the threshold: 0 or above), a
        known policy: ValueError naming the field now, not an error in every request's step
        (`schedule_policy="fifo"`, `max_prefill_tokens="4k"`), nor a truthy string taken
        for True (`disable_radix_cache="no"` turned the radix cache off)."""
        hints = typing.get_type_hints(SchedulerConfig)
        for f in fields(self):
            positive = f.name not in ("in_batch_prefix_threshold", "reserved_for_new_clients")
            check_declared_type(f.name, getattr(self, f.name), hints[f.name], positive=positive)
        if self.reserved_for_new_clients is None:
            self.reserved_for_new_clients = self.max_running_requests // 16
        for name in ("in_batch_prefix_threshold", "reserved_for_new_clients"):
            if (value := getattr(self, name)) < 0:
                raise ValueError(f"{name} must be 0 (off) or above, not {value}")
        if self.reserved_for_new_clients >= self.max_running_requests:
            raise ValueError(
                f"reserved_for_new_clients ({self.reserved_for_new_clients}) must be below max_running_requests "
                f"({self.max_running_requests}): a client must be able to run a request"
            )
        if self.new_token_ratio > 1:
            raise ValueError(f"new_token_ratio must be above 0 and at most 1, not {self.new_token_ratio}")
        if self.min_new_token_ratio is None:
            self.min_new_token_ratio = self.new_token_ratio
        if self.min_new_token_ratio > self.new_token_ratio:
            raise ValueError(
                f"min_new_token_ratio ({self.min_new_token_ratio}) must not be above new_token_ratio "
                f"({self.new_token_ratio})"
            )
        if self.schedule_policy not in ("lpm", "fcfs"):
            raise ValueError(f"schedule_policy must be 'lpm' or 'fcfs', not {self.schedule_policy!r}")
