"""The order in which the scheduler tries its waiting requests (chapter 00, section 4).

Admission (`Scheduler.get_new_prefill_batch`) walks the waiting queue in this order and
admits requests while they fit. The order is the schedule policy's (lpm: longest cached
prefix first; fcfs: arrival), with the server's clients taking turns, s4 re-admissions
first, and a request passed over too often ahead of everyone. Plain functions of the
queue: the scheduler owns the state, this module only ranks it.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator

from .core import Req

# How many requests of other clients may be admitted past a waiting request too big for the
# room left (`get_new_prefill_batch`); after that it holds everyone back until it fits, as
# FCFS does, so a stream of small requests cannot starve it.
MAX_PASSED_BY = 32
# Seconds in which a client's prefilled prompt tokens count half (the scheduler's
# `RecentUse`, by which `ranked` orders the clients of one turn), as the compile pool's
# compile seconds do.
PREFILL_HALF_LIFE_SECONDS = 10.0


def returning(req: Req) -> bool:
    """A server client's re-admission: a request with output back in the waiting queue
    after s4's jump or a retraction, which admission lets take back the place and room it had
    while running."""
    return req.client is not None and bool(req.output_ids)


def newcomer(req: Req, busy: set[str]) -> bool:
    """A server client's new request (no output yet) while that client has nothing in `busy`
    (running, or chosen for this batch): the client admission makes room for first."""
    return req.client is not None and req.client not in busy and not req.output_ids


def candidates(waiting: list[Req], most: int) -> list[Req]:
    """The requests of `waiting` (in its order) that admission may take this step, when it
    can admit `most` at most: each client's first `most` new requests (the in-process ones
    as one client), and every request with output (an s4 jump's or a retraction's
    re-admission) or passed MAX_PASSED_BY times. Ranking and readying the rest would be
    work thrown away: one client's 8,192 queued choices (64 connections, n=128) cost every
    step 0.4 s of prefix matching, and another client's 8-token answer took 2.2 s (58 ms
    alone). They become candidates as the requests ahead of them are admitted."""
    taken: collections.Counter[str | None] = collections.Counter()
    out = []
    for req in waiting:
        if req.output_ids or req.passed_by >= MAX_PASSED_BY:
            out.append(req)
        elif taken[req.client] < most:
            taken[req.client] += 1
            out.append(req)
    return out


def ranked(
    waiting: list[Req],
    running: list[Req],
    policy: str,
    cached_len: Callable[[Req], int],
    prefilled: Callable[[str], float] = lambda client: 0.0,
) -> list[Req]:
    """The waiting queue in the order admission tries it. Each client's requests in the
    policy's order (lpm: longest cached prefix first, `cached_len`, ties by arrival; fcfs:
    arrival), and clients take turns: a client's k-th request in that order ranks with every
    other client's k-th, counting the requests it already has running, so one client's
    backlog (of rows, of long prompts prefilled a chunk a step) waits behind another client's
    first request. Within a turn, the request that leaves its client with the fewest prompt
    tokens prefilled lately goes first: the client's (`prefilled`, recent_use.py) plus the
    request's own (all it has, less its cached prefix under lpm). A request passed MAX_PASSED_BY
    times goes first of all, then a client's s4 re-admissions. Without clients (every
    in-process request) this is the policy's order, a request passed MAX_PASSED_BY times
    aside. (The scheduler ranks only the `candidates`.)"""
    cached: dict[int, int] = {}
    if policy == "lpm":
        # Rank by cached prefix length (a read-only walk: a backlog of a hundred requests
        # is ranked at every step, and only the few admitted need their slots).
        cached = {req.rid: cached_len(req) for req in waiting}
        by_policy = sorted(waiting, key=lambda r: -cached[r.rid])  # stable: ties stay FCFS
    elif policy == "fcfs":
        by_policy = list(waiting)  # (no walk of the tree: a request's cost is its whole prompt)
    else:
        raise ValueError(f"unknown schedule policy {policy!r}")
    # An s4 re-admission (a request with output) was running until its jump: it keeps its
    # place ahead of every new request (turn -1), and counts as running for its client's
    # turns. Ranked at its client's third turn, another client's first request took its row,
    # and the jump stalled it until another of its client's requests ended (59 steps; 1
    # before). A request passed MAX_PASSED_BY times still goes first: a stream of jumps
    # would otherwise keep a prompt to be cut (it must be first) waiting for as long as it lasted.
    back = [r for r in by_policy if returning(r)]
    turns = collections.Counter(r.client for r in running + back)
    turn = {r.rid: -1 for r in back}
    for req in by_policy:
        if req.rid not in turn:
            turn[req.rid] = turns[req.client]
            turns[req.client] += 1
    # Turns alone let a client whose requests leave right after their prefill (one token each)
    # go first at every turn: it had nothing running whenever admission ranked, and each of its
    # queued requests had arrived before another client's. A newcomer waited behind all of them
    # (15 chunk forwards of 128 tokens before its first token, behind three queued prompts).
    # The request's own tokens count too: by the client's alone, a flood of 1,000-token prompts
    # from addresses never seen (each 0) went before a client that had asked a few short
    # questions lately, and its 8-token answer took 8.7 s (56 ms alone).
    used: dict[str | None, float] = {c: prefilled(c) for c in {r.client for r in by_policy} if c is not None}

    def after(r: Req) -> float:
        return used.get(r.client, 0.0) + len(r.fill_ids) - cached.get(r.rid, 0)

    return sorted(by_policy, key=lambda r: (r.passed_by < MAX_PASSED_BY, turn[r.rid], after(r)))


def passes_ranked_ahead(chosen: list[Req], order: list[Req], waiting: list[Req]) -> Iterator[tuple[Req, list[int]]]:
    """The admission order may rank a newer request ahead of an older one (lpm's cache
    hits, another client's turn): each client's longest-waiting request that was not
    admitted (the in-process requests' too, as one client), with the rids of the requests
    that passed it: entered the queue after it and admitted this step from a rank ahead of
    it (admission's loop counts another client's admitted from behind it). Its own client's
    count too: lpm ranks them ahead by their cache hits alone, and a steady stream of one
    client's templated requests (or in-process ones) kept its one request without a hit
    waiting for as long as the stream lasted. `waiting` is the queue before the admitted
    leave it."""
    admitted = {req.rid for req in chosen}
    heads: dict[str | None, Req] = {}
    for req in waiting:  # each client's first, the longest waiting
        if req.rid not in admitted:
            heads.setdefault(req.client, req)
    if not heads:
        return
    rank = {req.rid: i for i, req in enumerate(order)}  # (a head past the candidates ranks last)
    # The waiting queue is in the order requests entered it (a re-admission enters again).
    entered = {req.rid: i for i, req in enumerate(waiting)}
    for head in heads.values():
        ahead, since = rank.get(head.rid, len(order)), entered[head.rid]
        # An s4 re-admission was running until its jump: it takes back its place, it passes
        # nobody (counted, every jump of another client's request was a pass: a waiting
        # request was passed MAX_PASSED_BY times by jumps alone, and held everyone back).
        by = [r.rid for r in chosen if not r.output_ids and entered[r.rid] > since and rank[r.rid] < ahead]
        if by:  # one event a head (a thousand clients' heads passed by 32 made 32,000 events)
            yield head, by
