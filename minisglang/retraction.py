"""Optimistic admission and retraction (SGLang's `new_token_ratio` and `retract_decode`).

Admission must reserve KV for the tokens a request has yet to write, and it cannot know how
many that is: only `max_new_tokens` bounds it. Reserving all of it is safe (a running request
never runs out of KV) but a chat without `max_tokens` may write to the end of the context,
and reserving that for each one makes them run one at a time when the pool is smaller than
two contexts. Most answers end long before their limit, so SGLang reserves only a share,
`new_token_ratio`, of each request's remaining tokens, and lowers the share step by step
while that works out.

When it does not (the running requests' KV has grown to fill the pool), a decode step finds
no slot for someone's next token. The scheduler then *retracts* a running request: its KV
goes to the radix tree (unlocked, so it can be evicted to make room), the request goes back to
the front of the waiting queue with its output and its grammar's state as they are, until
the requests left have room for a few more steps each; the ratio is then set from how much of
their limits they have used. Re-admitted later, the request finds its own tokens in the tree
if they were not evicted, or computes them again, and decodes on from where it stopped: a
retraction costs time, never a token of the answer.

One running request always fits alone (the server refuses a request whose prompt and
`max_new_tokens` do not fit in the pool), so the scheduler never retracts the last one, unless
a prompt in chunked prefill holds KV beside it. A chunked prompt's next chunk may need room
too (the running requests decode in each chunk's forward with `mixed_prefill`): the scheduler
retracts for it the same way (`retract_for_chunk`).
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field

from .core import Req

# Steps over which the ratio falls from its initial value to its minimum (SGLang's
# DEFAULT_NEW_TOKEN_RATIO_DECAY_STEPS).
DECAY_STEPS = 600
# The server's minimum as a share of its initial ratio (SGLang's DEFAULT_MIN_NEW_TOKEN_RATIO_FACTOR).
MIN_RATIO_FACTOR = 0.14
# Below a ratio of 1, a request's remaining tokens count as at most this many: a chat that may
# write to the end of a 32k context is not expected to (SGLang's CLIP_MAX_NEW_TOKENS_ESTIMATION).
CLIP_MAX_NEW_TOKENS = 4096
# A retraction goes on until the requests left have room for this many more decode steps each:
# retracting only until the next step fitted retracted again a few steps later, and a stream
# stalled 5 s of 13 in a small pool (SGLang's retract_decode_steps).
RETRACT_DECODE_STEPS = 20


@dataclass
class NewTokenRatio:
    """The share of a request's remaining `max_new_tokens` that admission reserves now.

    `initial` 1.0 reserves everything: the ratio never moves and nothing is ever retracted."""

    initial: float
    minimum: float
    value: float = field(init=False)

    def __post_init__(self) -> None:
        self.value = self.initial

    def reserve(self, remaining: int) -> int:
        """KV slots to keep for a request with `remaining` tokens it may still write: at
        least one while it may write any (its next decode step must find its slot)."""
        if self.initial >= 1:
            return remaining
        return min(remaining, math.ceil(min(remaining, CLIP_MAX_NEW_TOKENS) * self.value))

    def decay(self) -> None:
        """A decode step that needed no retraction: reserve a little less from now on.
        (Not at `initial` 1, which reserves everything whatever the value: with a minimum
        below it, /metrics showed a ratio falling that admission never used.)"""
        if self.initial >= 1:
            return
        self.value = max(self.minimum, self.value - (self.initial - self.minimum) / DECAY_STEPS)

    def after_retraction(self, running: list[Req]) -> None:
        """A retraction: the reservations were too small. The share becomes what the requests
        left have used of their `max_new_tokens`, plus RETRACT_DECODE_STEPS each (SGLang's
        `retract_decode`), kept between `minimum` and `initial`: an estimate from this batch,
        where going back to `initial` kept the retracted request waiting until others ended."""
        total = sum(r.sampling_params.max_new_tokens for r in running)
        used = sum(len(r.output_ids) for r in running) + RETRACT_DECODE_STEPS * len(running)
        self.value = min(self.initial, max(self.minimum, used / total)) if total else self.initial


def decode_cushion(running: list[Req]) -> int:
    """KV slots the running requests need for RETRACT_DECODE_STEPS more decode steps each
    (no more than each may still write; at least its next token)."""
    return sum(max(1, min(RETRACT_DECODE_STEPS, r.sampling_params.max_new_tokens - len(r.output_ids))) for r in running)


def retraction_victim(running: list[Req]) -> Req:
    """The running request to retract first: the one with the fewest output tokens (the least
    work to redo if its KV is evicted), of those the longest prompt (the most room freed).
    SGLang's `retract_decode` orders its batch the same way."""
    return min(running, key=lambda r: (len(r.output_ids), -len(r.origin_input_ids)))


def victims_for_room(running: list[Req], short: int) -> list[Req]:
    """The requests to retract so that a client with nothing running gets `short` more KV
    slots: `retraction_victim`s of the client with the most running requests (while it has
    more than one), each counted for the slots of its own output only (its prompt may be
    shared); none when `short` <= 0 or when even all of them would not make the room
    (retracted in vain, a request would come back and go again at every step)."""
    busy = collections.Counter(r.client for r in running if r.client is not None)
    victims: list[Req] = []
    while short > 0:
        client, count = busy.most_common(1)[0]
        if count <= 1:
            return []
        victims.append(retraction_victim([r for r in running if r.client == client and r not in victims]))
        busy[client] -= 1
        short -= victims[-1].kv_len - victims[-1].prefix_len
    return victims
