"""What a failure inside a scheduler step does (`SchedulerFaults`, a part of `Scheduler`).

An exception in a stage hook, the forward, the sampler or the detokenizer aborts only the
requests it concerns, with the error as their abort message, and gives back what was
allocated for them; the next step goes on. One place decides what a failure does:
- `isolate(reqs, doing)`: work on one request (arrival, hooks 3-5, detokenize, stop check,
  release) or on a list whose members cannot be told apart (hook 2's poll); a failure
  aborts just those requests (`abort_for_error`: GRAMMAR when it is the stage's grammar
  error, ENGINE otherwise). Hooks 3 and 4 are called for each request alone when the
  batch's call fails, so one grammar never takes its batch down.
- `isolate_batch(batch)`: the forward and the sampler, shared by the batch: a failure
  aborts the batch and gives back its memory; an interrupt is raised again afterwards.
- `fail_all(error)`: what escapes a step anyway (a bug in scheduling itself) is an engine
  fault: every request in the engine is aborted (ENGINE) and leaves (`Engine.step` calls it).

Tested in tests/test_scheduler_faults.py (a fault at each hook, against runs without it) and
tests/test_reliability.py. `SchedulerFaults` is one part of `Scheduler` (its base class):
its methods read the scheduler's queues, pools and stage, declared below for the type checker.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from .core import AbortKind, Req
from .memory_pool import ReqToTokenPool, TokenToKVPool
from .stages.base import Stage

if TYPE_CHECKING:
    from .scheduler import ScheduledBatch, SchedulerTotals

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class Fault:
    """What `isolate` or `isolate_batch` caught in its block (None: nothing)."""

    error: BaseException | None = None


class SchedulerFaults:
    """Fault isolation, the part of `Scheduler` that decides what a failure does."""

    # The scheduler's, read here (scheduler.py sets them).
    stage: Stage
    totals: SchedulerTotals
    step_count: int
    req_to_token_pool: ReqToTokenPool
    token_to_kv_pool: TokenToKVPool

    def requests(self) -> list[Req]:
        raise NotImplementedError

    def live_requests(self) -> list[Req]:
        raise NotImplementedError

    def release_request(self, req: Req) -> None:
        raise NotImplementedError

    def record_event(self, kind: str, req: Req | None, **info: Any) -> None:
        raise NotImplementedError

    @contextlib.contextmanager
    def isolate(self, reqs: list[Req], doing: str, hook: int | None = None) -> Iterator[Fault]:
        """Work concerning `reqs` alone: an Exception raised in the block aborts just them
        (`abort_for_error`, naming `doing`) and the step goes on after the block; the
        `Fault` it yields then holds the error. An interrupt (Ctrl-C) is not caught."""
        fault = Fault()
        try:
            yield fault
        except Exception as e:
            fault.error = e
            self.abort_for_error(reqs, doing, e, hook)

    def try_for(self, req: Req, doing: str, work: Callable[[Req], T], failed: T, hook: int | None = None) -> T:
        """`work(req)`, or `failed` once `req` alone is aborted for what it raised (`isolate`)."""
        with self.isolate([req], doing, hook):
            return work(req)
        return failed

    @contextlib.contextmanager
    def isolate_batch(self, batch: ScheduledBatch) -> Iterator[Fault]:
        """The forward and sampling of `batch`: an exception in the block aborts the whole
        batch and gives back its memory (`abort_batch`), and the `Fault` it yields holds
        it; an interrupt (Ctrl-C) is raised again once the batch is given back."""
        fault = Fault()
        try:
            yield fault
        except BaseException as e:
            fault.error = e
            self.abort_batch(batch, e)
            if not isinstance(e, Exception):
                raise  # the caller still sees the interrupt

    def fail_all(self, error: BaseException) -> None:
        """The engine-wide fault: `error` escaped a step (a bug outside any one request or
        batch), so no request's state can be trusted to go on. Every request in the engine
        is aborted (ENGINE) and leaves now, its memory given back: those in the queues and any
        the error caught between two of them."""
        reqs = self.live_requests()
        if not reqs:  # nobody to tell (a second call, after the first gave everyone back)
            return
        self.abort_for_error(reqs, "running a scheduler step", error, kind=AbortKind.ENGINE)
        for req in reqs:
            self.release_request(req)

    def abort_for_error(
        self, reqs: list[Req], where: str, error: BaseException, hook: int | None = None, kind: AbortKind | None = None
    ) -> None:
        """Abort `reqs` with `error` as their message (a request already finished keeps its
        reason); log the traceback once, for the operator, when the engine failed. `hook`:
        the stage hook that raised, named in the log only (the client's message says what
        was being done, not our names for it). `kind`: by default GRAMMAR for the stage's
        grammar errors, ENGINE for anything else."""
        # The kind tells a client's 500 (the engine failed) from a 400 (its grammar failed).
        if kind is None:
            kind = AbortKind.GRAMMAR if isinstance(error, self.stage.grammar_errors) else AbortKind.ENGINE
        logged = where if hook is None else f"{where} (hook {hook})"
        if kind is AbortKind.ENGINE:
            self.totals.errors += 1
            logger.error(
                "step %d: error while %s (aborting %d request(s))", self.step_count, logged, len(reqs), exc_info=error
            )
            message = f"internal error while {where}: {type(error).__name__}: {error}"
        else:  # the request's own grammar: one line (a client sending such grammars must not fill the log)
            logger.warning(
                "step %d: the grammar of %d request(s) failed while %s: %s", self.step_count, len(reqs), logged, error
            )
            message = f"the grammar failed while {where}: {error}"
        for req in reqs:
            req.finish("abort", kind, message=message)
            self.record_event("error", req, where=logged, error=repr(error))

    def abort_batch(self, batch: ScheduledBatch, error: BaseException) -> None:
        """The forward, mask or sampler failed: abort the batch and give back its memory.

        Their KV may be half-written, so none of it goes into the radix tree: each request's
        own slots are freed, its locked prefix (computed earlier, intact) is only unlocked.
        """
        reqs = batch.reqs + ([batch.chunk] if batch.chunk is not None else [])
        self.abort_for_error(reqs, f"running its {batch.mode.value} batch (forward, mask or sample)", error)
        for req in reqs:
            if req.req_pool_idx is not None and req.kv_len > req.prefix_len:
                own = self.req_to_token_pool.req_to_token[req.req_pool_idx, req.prefix_len : req.kv_len]
                self.token_to_kv_pool.free(own)
                req.kv_len = req.prefix_len
            self.release_request(req)

    @contextlib.contextmanager
    def _free_on_error(self, slots: torch.Tensor):
        """Give `slots` back if the block raises: no request owns them yet."""
        try:
            yield
        except BaseException:
            self.token_to_kv_pool.free(slots)
            raise
