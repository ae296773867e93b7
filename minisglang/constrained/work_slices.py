"""Grammar work in bounded slices: the scheduler thread is every client's.

A lazy automaton (lazy_token_fsm.py) builds a state's token row when generation first
reaches it. Most rows take microseconds; a hostile grammar's can take seconds (a pattern
whose DFA has 2^15 states, an intersection that must be searched). Done in one go on the
scheduler thread, that work would stall every other client's decode. Done on an ordinary
thread it is no better: CPython's GIL passes to a busy Python thread whenever the
scheduler's thread lets go of it, and a forward releases it at every torch operation, so
each operation then waits out the 5 ms switch interval (measured once, by hand: a 1-token
request went from 3 ms to 450 ms beside one busy Python thread; not yet a benchmark).

So grammar work is cut into slices, in two ways that share one call, `checkpoint()`, which
the automata call between small units of work (after each derivative stored, each state
of an intersection's search, each item the regex parser reads):

- on the scheduler thread, inside `deadline(seconds)`: past the deadline `checkpoint`
  raises `OutOfTime`. Work cut that way is restartable because what it computed is cached
  (a derivative stays in the table, a search keeps its frontier), so the next slice goes
  on from there; the request whose row is not ready sits out that step.
- on a compile thread (`Baton.run`): `checkpoint` waits until the scheduler lends the
  CPU (`Baton.lend`), once per step, for a bounded time. The thread holds the GIL only
  inside those windows, so it never competes with a forward.

Anywhere else (a notebook, a test, an offline compile) `checkpoint` does nothing.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..recent_use import RecentUse

T = TypeVar("T")


class _ThreadSlices(threading.local):
    """This thread's slice state. The defaults are class attributes, so reading one this
    thread never set finds it: `getattr(threading.local(), name, None)` raised and caught an
    AttributeError each time, ~1.5 us per `checkpoint` (two reads), a fifth of the time of
    the derivatives it sits in (a derivative's recursion calls it a dozen times)."""

    deadline: float | None = None  # `deadline`'s perf_counter stop
    kept: bool = False  # a unit of work was kept since the slice began
    baton: Baton | None = None  # `Baton.run`'s baton, on a compile thread
    job: Any = None  # the compile job this thread works for (its `cancelled`)
    pool: Any = None  # the FairCompilePool of this compile thread
    outside: bool = False  # inside `outside()`: waiting for another process


_local = _ThreadSlices()


class OutOfTime(Exception):
    """The slice given to grammar work ran out; the work is resumable (not an error)."""


def checkpoint(kept: bool = False) -> None:
    """A point where grammar work may stop: raise OutOfTime past this thread's deadline, or
    wait for the baton on a compile thread; nothing elsewhere. Cheap (~0.1 us).

    `kept`: the caller has just stored a unit of work that a later slice reuses (a
    derivative in the table, a searched state). A slice stops only after at least one
    such unit, so every slice makes progress however short it is.
    """
    stop = _local.deadline
    if stop is not None:
        if kept:
            _local.kept = True
        if _local.kept and time.perf_counter() > stop:
            raise OutOfTime
        return
    baton = _local.baton
    if baton is not None:
        if not _local.outside:
            baton.wait_for_turn()
        job = _local.job
        if job is not None and job.cancelled:
            raise CompileCancelled("the compile was cancelled")


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Within the block, `checkpoint` raises OutOfTime once `seconds` have passed and some
    work was kept."""
    outer, outer_kept = _local.deadline, _local.kept
    stop = time.perf_counter() + seconds
    _local.deadline, _local.kept = (stop if outer is None else min(stop, outer)), False
    try:
        yield
    finally:
        _local.deadline, _local.kept = outer, outer_kept or _local.kept


@contextlib.contextmanager
def unsliced() -> Iterator[None]:
    """Within the block no deadline applies: for bounded work whose result is kept only
    when it is whole (a small automaton built on the side), which a cut would lose."""
    outer = _local.deadline
    _local.deadline = None
    try:
        yield
    finally:
        _local.deadline = outer


@contextlib.contextmanager
def outside() -> Iterator[None]:
    """Within the block this compile thread only waits for another process (a child doing
    the compile, constrained/child_process.py) and takes no CPU: it leaves the scheduler's
    lend windows (`checkpoint` only looks for a cancel), and its pool may start another
    thread meanwhile. So a child's minutes hold neither the scheduler's windows (a lend
    waits for the compile threads that run) nor the thread another client's compile needs
    (two clients' runaway compiles held both threads, and a third client's waited 30 s)."""
    baton, pool = _local.baton, _local.pool
    if baton is None or _local.outside:
        yield
        return
    baton.step_out()
    if pool is not None:
        try:
            pool.step_out()  # (may wait for one of its MAX_CHILDREN, and be cancelled meanwhile)
        except BaseException:
            baton.step_in()
            raise
    _local.outside = True
    try:
        yield
    finally:
        _local.outside = False
        if pool is not None:
            pool.step_in()
        baton.step_in()


class Baton:
    """Lends the CPU to compile threads in windows the scheduler chooses.

    The scheduler's thread calls `hold()` at the start of each step and `lend(seconds)` at
    most once per step: compile threads run only inside a lend window (at most `seconds`,
    less when they all finish), stop at their next `checkpoint` when it ends, and wait for
    the next one. Between windows they hold no GIL, so the forward runs as if they did not
    exist. When the scheduler has not stepped for IDLE seconds (an idle engine, a compile
    whose request left), the threads run freely: a hold only lasts while steps come.
    """

    IDLE = 0.5  # seconds without a step after which compile threads run freely

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._until = 0.0  # end of the current lend window (perf_counter)
        self._held_at = float("-inf")  # the last `hold` (perf_counter)
        self._running = 0  # compile threads inside `run` now

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Call fn(*args) on this (compile) thread as work that yields to the scheduler."""
        _local.baton = self
        with self._cond:
            self._running += 1
        try:
            self.wait_for_turn()
            return fn(*args)
        finally:
            _local.baton = None
            with self._cond:
                self._running -= 1
                self._cond.notify_all()

    def _may_run(self, now: float) -> bool:
        return now <= self._until or now - self._held_at > self.IDLE

    def wait_for_turn(self) -> None:
        """Block while the scheduler holds the CPU (compile threads only)."""
        if self._may_run(time.perf_counter()):
            return
        with self._cond:
            while not self._may_run(now := time.perf_counter()):
                self._cond.wait(max(self._held_at + self.IDLE - now, 0.001))

    def hold(self) -> None:
        """The scheduler takes the CPU for a step: compile threads stop at their next checkpoint."""
        self._held_at = time.perf_counter()  # (one float store: no lock needed)

    def lend(self, seconds: float) -> None:
        """Let compile threads run for up to `seconds` (none if none is running), then take
        the CPU back."""
        with self._cond:
            if not self._running:
                return
            stop = time.perf_counter() + seconds
            self._until = stop
            self._cond.notify_all()
            while self._running and (left := stop - time.perf_counter()) > 0:
                self._cond.wait(left)
            self._until = 0.0
            self._held_at = time.perf_counter()

    def step_out(self) -> None:
        """This compile thread waits for another process now (`outside`): not one a lend waits for."""
        with self._cond:
            self._running -= 1
            self._cond.notify_all()

    def step_in(self) -> None:
        with self._cond:
            self._running += 1

    @property
    def running(self) -> int:
        """Compile threads working (or waiting for a window) now."""
        return self._running


def current_future() -> Future[Any] | None:
    """The Future of the compile job this thread runs (FairCompilePool), else None."""
    job = _local.job
    return None if job is None else job.future


class CompileCancelled(Exception):
    """The compile was cancelled (its requests timed out or left): stopped at a checkpoint."""


@dataclass(eq=False)
class CompileJob:
    """One compile of the pool: who asked, its Future, and what it cost so far."""

    client: str
    future: Future[Any]  # what `call` returns: the pool runs any compile
    call: Callable[[], Any]
    submitted: float = field(default_factory=time.perf_counter)
    started: float | None = None  # when a thread took it (perf_counter)
    cancelled: bool = False

    def queued_seconds(self) -> float:
        """How long it waited for a thread (so far, if it still waits)."""
        return (self.started if self.started is not None else time.perf_counter()) - self.submitted


class FairCompilePool:
    """Compile threads that serve clients in turn, every compile yielding to the scheduler.

    A first-come-first-served pool let one client's two slow compiles hold both threads
    while another client's trivial one waited 22 s. Here each client has its own queue,
    and no client runs more than `per_client` jobs at once (a job with no client, from the
    Engine's own API, takes any free thread: there is no one to be fair to). A free thread
    takes the next job of the client that used the compile threads least lately: each
    client's compile seconds (a job's, from its start to its end) are summed, each halving
    every `half_life` seconds (`recent_use.RecentUse`), and clients whose sums are equal (none has compiled yet)
    take turns. Plain turns were not enough: six addresses, each keeping 8 schemas of a
    quarter of a second compiling, were each ahead of a newcomer in the turn, and its
    trivial regex waited about 6/2 of those compiles (1-2 s); now a newcomer's compile
    waits at most for a thread to come free. (`half_life=0`: plain turns.) Jobs run under
    the `baton` (`Baton.run`), so they take CPU only when the scheduler lends it; a job
    can be cancelled (`cancel`), which stops it at its next checkpoint and frees what it
    built.
    """

    # Jobs in a child process (`outside`) at once: each is a child computing. A job past it
    # waits for one of them to end, on its thread but in no slot of `workers`: a thread is
    # added for the next job (so the threads are at most `workers` plus the jobs outside,
    # which the server's max_pending_compiles bounds). Before, the threads were capped at
    # `workers + MAX_CHILDREN`: six hog addresses' jobs held them all, 4-5 of them waiting for
    # children, and a newcomer's trivial regex waited up to 0.6 s for a thread.
    MAX_CHILDREN = 4

    def __init__(self, workers: int, baton: Baton, name: str = "compile", half_life: float = 10.0):
        self.workers, self.baton, self.name = workers, baton, name
        self.half_life = half_life  # seconds in which a client's compile seconds halve; 0: plain turns
        # Each client's compile seconds lately (recent_use.py; None: plain turns).
        self.usage = RecentUse(half_life) if half_life > 0 else None
        self.per_client = max(1, workers - 1)  # one thread is always left for another client
        self._outside = 0  # running jobs that wait for a child process now (or for a turn at one)
        self._children = 0  # ... of which in a child (at most MAX_CHILDREN)
        self._cond = threading.Condition()
        self._queues: dict[str, collections.deque[CompileJob]] = {}  # client -> its waiting jobs, in turn order
        self._running: dict[str, int] = collections.Counter()
        self._threads: list[threading.Thread] = []
        self._active: set[CompileJob] = set()  # jobs running now
        self._closed = False

    def submit(self, client: str | None, fn: Callable[..., T], *args: Any) -> tuple[Future[T], CompileJob]:
        """Queue fn(*args) for `client` (None: one anonymous client); (its Future, the job)."""
        future: Future[T] = Future()
        job = CompileJob(client or "", future, lambda: fn(*args))
        with self._cond:
            if self._closed:
                raise RuntimeError("the compile pool is shut down")
            self._queues.setdefault(job.client, collections.deque()).append(job)
            self._add_thread()
            self._cond.notify()
        return future, job

    def held_by_own(self, job: CompileJob) -> bool:
        """Whether `job` waits while its own client runs as many compiles as a client may
        (its turn comes when one of them ends, whatever other clients do)."""
        with self._cond:
            return bool(job.client) and job.started is None and self._running[job.client] >= self.per_client

    def _add_thread(self) -> None:
        """Threads (the lock held) for the queued jobs that no idle thread can take, up to
        `workers`, plus one for each running job that waits for a child."""
        limit = self.workers + self._outside
        queued = sum(map(len, self._queues.values()))
        while len(self._threads) < limit and len(self._threads) - len(self._active) < queued:
            thread = threading.Thread(target=self._work, name=f"{self.name}_{len(self._threads)}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def step_out(self) -> None:
        """A running job waits for a child process now (`outside`): another thread may take
        the next client's job meanwhile. Returns when fewer than MAX_CHILDREN jobs are in a
        child (this one then counts as one); CompileCancelled if the job is cancelled first."""
        job = _local.job
        with self._cond:
            self._outside += 1
            self._add_thread()
            self._cond.notify_all()
            while self._children >= self.MAX_CHILDREN:
                if job is not None and job.cancelled:
                    self._outside -= 1
                    raise CompileCancelled("the compile was cancelled")
                self._cond.wait()
            self._children += 1

    def step_in(self) -> None:
        with self._cond:
            self._outside -= 1
            self._children -= 1
            self._cond.notify_all()

    def cancel(self, job: CompileJob) -> None:
        """Stop `job`: dropped if it has not started, else stopped at its next checkpoint."""
        with self._cond:
            job.cancelled = True
            queue = self._queues.get(job.client)
            if queue is not None and job in queue:
                queue.remove(job)
                job.future.cancel()
                if not queue:
                    del self._queues[job.client]
            self._cond.notify_all()  # (a job waiting for a child sees it)

    def _next(self) -> CompileJob | None:
        """The next job, the lock held: of the clients with a job waiting and fewer than
        `per_client` running, the one that used the least compile seconds lately, the first
        in turn order among equals. (Strict even when no other client waits: a thread kept
        free is there for the next client at once, and compiles of ours share one GIL, so a
        second thread for the same client would not finish its work sooner.)"""
        if len(self._active) - self._outside >= self.workers:
            return None  # (every CPU slot is taken: an extra thread only serves jobs beside children)
        ready = [c for c, q in self._queues.items() if q and (self._running[c] < self.per_client or not c)]
        if not ready:
            return None
        if (usage := self.usage) is not None:
            now = usage.clock()
            client = min(ready, key=lambda c: usage.of(c, now))  # (min keeps the first of equals)
        else:
            client = ready[0]
        job = self._queues[client].popleft()
        rest = self._queues.pop(client)
        if rest:
            self._queues[client] = rest  # to the end of the turn order
        return job

    def _work(self) -> None:
        while True:
            with self._cond:
                while (job := None if self._closed else self._next()) is None:
                    if self._closed:
                        return
                    self._cond.wait()
                self._running[job.client] += 1
                self._active.add(job)
            if job.future.set_running_or_notify_cancel():
                job.started = time.perf_counter()
                _local.job, _local.pool = job, self
                try:
                    job.future.set_result(self.baton.run(job.call))
                except BaseException as e:  # a compile's failure is its Future's result
                    job.future.set_exception(e)
                finally:
                    _local.job = _local.pool = None
            with self._cond:
                self._running[job.client] -= 1
                if not self._running[job.client]:
                    del self._running[job.client]  # (no entry kept for every client ever seen)
                self._active.discard(job)
                if job.started is not None and job.client and self.usage is not None:
                    self.usage.add(job.client, time.perf_counter() - job.started)
                self._cond.notify_all()

    def shutdown(self) -> None:
        with self._cond:
            self._closed = True
            for queue in self._queues.values():
                for job in queue:
                    job.cancelled = True
                    job.future.cancel()
            self._queues.clear()
            for job in self._active:
                job.cancelled = True
            self._cond.notify_all()
