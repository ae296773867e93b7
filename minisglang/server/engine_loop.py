"""`EngineLoop`: the one thread that owns the scheduler, and the queues between it and the
HTTP handlers.

Handlers put a ready `Req` into the loop's inbox and read its chunks from their own asyncio
queue; the loop submits, steps, and publishes each request's new text. So the scheduler
stays single-threaded, exactly as in the offline `Engine`. If the loop dies, every request
in flight and in the inbox is answered with `EngineUnavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable
from typing import Any

from ..core import Req
from ..engine import Engine, stream_chunk
from ..gc_guard import GcGuard
from ..metrics import ServerMetrics
from ..protocol import RequestError
from .state import ServerOptions

logger = logging.getLogger(__name__)


class EngineUnavailable(RuntimeError):
    """The engine cannot serve: its loop died, or the server is shutting down (HTTP 503)."""


def _send(loop: asyncio.AbstractEventLoop, q: asyncio.Queue, item: Any) -> None:
    """Hand `item` to a request's queue on its event loop (from the scheduler thread)."""
    with contextlib.suppress(RuntimeError):  # that event loop is closed: nobody is listening any more
        loop.call_soon_threadsafe(q.put_nowait, item)


class EngineLoop:
    """Runs an Engine's scheduler on its own thread; thread-safe submit/abort.

    `dead` holds the exception that ended the loop, if any; `on_fatal` is called once then
    (serve() uses it to stop the process). With a `gc_guard`, the loop reclaims what its
    freezes kept once it has been idle for `options.gc_reclaim_idle_seconds`, or after
    `options.gc_reclaim_after_freezes` freezes whatever runs.
    """

    def __init__(
        self,
        engine: Engine,
        options: ServerOptions,
        metrics: ServerMetrics,
        on_fatal: Callable[[], None] | None = None,
        gc_guard: GcGuard | None = None,
    ):
        self.engine, self.options, self.metrics, self.on_fatal = engine, options, metrics, on_fatal
        self.gc_guard = gc_guard
        self.idle_since: float | None = None  # when the loop last ran out of work (None: it has some)
        self.inbox: queue.Queue = queue.Queue()
        # rid -> (req, its chunk queue, the event loop that reads it, the client's address)
        self.active: dict[int, tuple[Req, asyncio.Queue, asyncio.AbstractEventLoop, str]] = {}
        # client -> {grammar: its compile's handle} for the compiles a client asked for (scheduler thread only)
        self.compiling: dict[str, dict[Any, Any]] = {}
        self.dead: BaseException | None = None
        self.drain_deadline: float | None = None
        # Step timing, written by the scheduler thread, read by /health and /get_server_info.
        self.beat = time.monotonic()  # when the loop last came round
        self.step_started: float | None = None  # set while inside engine.step()
        self.last_step_end: float | None = None
        self._recent_steps: deque[tuple[float, float]] = deque()  # (end, seconds) of the last minute's steps
        self._steps_lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="minisglang-scheduler", daemon=True)
        self.thread.start()

    @property
    def healthy(self) -> bool:
        return self.dead is None and self.drain_deadline is None and self.thread.is_alive()

    async def generate(self, req: Req, client: str) -> AsyncGenerator[dict[str, Any], None]:
        """Chunks of one request (see engine.stream_chunk); aborts it if the consumer leaves."""
        if not self.healthy:
            raise EngineUnavailable(
                "the server is shutting down" if self.dead is None else f"the engine loop has stopped: {self.dead!r}"
            )
        out: asyncio.Queue = asyncio.Queue()
        self.inbox.put(("submit", req, out, asyncio.get_running_loop(), client))
        if self.dead is not None:  # the loop died after the check above: nobody else will answer
            self._fail_inbox()
        finished = False
        try:
            while True:
                chunk = await out.get()
                if isinstance(chunk, Exception):
                    finished = True
                    raise chunk
                yield chunk
                if chunk["final"]:
                    finished = True
                    return
        finally:
            if not finished:
                self.inbox.put(("abort", req.rid))

    def stalled_for(self) -> float:
        """Seconds since the loop last came round: a few hundredths when it is well, idle or not."""
        return time.monotonic() - self.beat

    def step_timings(self) -> dict[str, float | None]:
        """The age of the last completed step, the longest step of the last minute and how long
        the step now running has run (seconds; None for what has not happened)."""
        now = time.monotonic()
        with self._steps_lock:
            longest = max((d for end, d in self._recent_steps if end >= now - 60), default=None)
        started, last = self.step_started, self.last_step_end
        return {
            "last_step_age_seconds": None if last is None else now - last,
            "longest_step_last_minute_seconds": longest,
            "current_step_seconds": None if started is None else now - started,
        }

    def start_draining(self) -> None:
        """Refuse new requests; abort those still running after `drain_timeout` seconds."""
        if self.drain_deadline is None:
            self.drain_deadline = time.monotonic() + self.options.drain_timeout

    # ------------------------------------------------------------------ the scheduler thread
    def _run(self) -> None:
        engine = self.engine
        try:
            while not self.stopped.is_set():
                self._drain_inbox(block=not engine.has_work())
                if self.drain_deadline is not None and time.monotonic() > self.drain_deadline:
                    self._fail_all(EngineUnavailable("the server is shutting down"), abort=True)
                if engine.has_work():
                    self._timed_step()
                self._publish()
                self._reclaim_when_due()
                self.beat = time.monotonic()
        except BaseException as e:  # noqa: BLE001 - whatever ended the loop, nobody may hang on it
            # The engine-wide fault path: every client is answered, the engine's requests are
            # aborted and leave (Engine.fail), and the server stops (on_fatal).
            self.dead = e
            self._fail_all(EngineUnavailable(f"the engine loop has stopped: {e!r}"), abort=False)
            self._fail_inbox()
            try:
                self.engine.fail(e)
            except Exception:  # a scheduler too broken even for that: the process is ending anyway
                logger.exception("the engine could not abort its requests after its loop died")
            if self.on_fatal is not None:
                self.on_fatal()
            raise

    def _timed_step(self) -> None:
        self.step_started = start = time.monotonic()
        try:
            self.engine.step()  # the scheduler survives a request's error; anything else is fatal
        finally:
            self.step_started = None
        self.last_step_end = end = time.monotonic()
        with self._steps_lock:
            self._recent_steps.append((end, end - start))
            while self._recent_steps[0][0] < end - 60:
                self._recent_steps.popleft()

    def _reclaim_when_due(self) -> None:
        """Let the GcGuard give back what its freezes kept once nothing has been running,
        queued or waiting for a compile for gc_reclaim_idle_seconds (its full collection then
        delays nobody but a request that arrives during it), or, between two steps whatever
        runs, once gc_reclaim_after_freezes freezes have kept theirs."""
        now = time.monotonic()
        if self.active or self.engine.has_work() or not self.inbox.empty():
            self.idle_since = None
        elif self.idle_since is None:
            self.idle_since = now
            self._forget_finished_compiles()
        guard, options = self.gc_guard, self.options
        if guard is None or not guard.unreclaimed:
            return
        idle_long = self.idle_since is not None and 0 < options.gc_reclaim_idle_seconds <= now - self.idle_since
        if idle_long or 0 < options.gc_reclaim_after_freezes <= guard.unreclaimed:
            guard.reclaim()

    def _forget_finished_compiles(self) -> None:
        """Drop the handles of finished compiles from `compiling`: a handle holds its grammar,
        and forgotten only when the next grammar request came, the last ones stayed while
        the server sat idle (~15 MB each after big schemas, after the grammar cache had let
        them go: a stranger's soak test). Now also when the loop runs out of work."""
        for who in list(self.compiling):
            left = {g: h for g, h in self.compiling[who].items() if not self.engine.compile_done(h)}
            if left:
                self.compiling[who] = left
            else:
                del self.compiling[who]

    def _fail_all(self, error: Exception, abort: bool) -> None:
        for rid, (_req, q, loop, _) in list(self.active.items()):
            if abort:
                self.engine.abort(rid, str(error))
            _send(loop, q, error)
        self.active.clear()

    def _fail_inbox(self) -> None:
        """Answer every submission still in the inbox with the loop's death (any thread may call it)."""
        while True:
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                return
            if item[0] == "submit":
                _, _, q, loop, _ = item
                _send(loop, q, EngineUnavailable(f"the engine loop has stopped: {self.dead!r}"))

    def _drain_inbox(self, block: bool) -> None:
        try:
            item = self.inbox.get(timeout=0.05) if block else self.inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            if item[0] == "submit":
                self._submit(*item[1:])
            elif item[0] == "abort" and item[1] in self.active:
                self.engine.abort(item[1])
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                return

    def _submit(self, req: Req, q: asyncio.Queue, loop: asyncio.AbstractEventLoop, client: str) -> None:
        if self.drain_deadline is not None:
            _send(loop, q, EngineUnavailable("the server is shutting down"))
            return
        engine, grammar = self.engine, req.sampling_params.constraint()
        if grammar is not None:
            # Distinct grammars this client asked for whose compile still runs, whether or not it
            # still waits: a compile goes on after its client leaves, so counting only waiters
            # let a client that leaves and asks again queue compiles without end (others' then
            # timed out). One more request for any of them shares its compile.
            self._forget_finished_compiles()
            mine = self.compiling.get(client, {})
            # A grammar compiled (or compiling) already costs nothing more: never refused.
            if (
                grammar not in mine
                and len(mine) >= self.options.max_compiling_per_client
                and not engine.grammar_known(grammar)
            ):
                _send(
                    loop,
                    q,
                    RequestError(
                        f"too many grammars compiling for this client ({len(mine)}; the limit is "
                        f"{self.options.max_compiling_per_client}): wait for one to finish",
                        status=429,
                        code="rate_limit_exceeded",
                        retry_after=1,  # (compiles take a second or less: the openai client waits this long)
                    ),
                )
                return
        self.active[req.rid] = (req, q, loop, client)  # first, so that a failure below reaches it
        req.client = client  # compiles take turns by client (constrained/work_slices.py)
        engine.add_request(req)
        handle = engine.compile_waited_on(req.rid) if grammar is not None else None
        if handle is not None:  # (stages s3 on: a compile off the scheduler thread)
            self.compiling.setdefault(client, {})[grammar] = handle

    def _publish(self) -> None:
        for rid, (req, q, loop, _) in list(self.active.items()):
            chunk = stream_chunk(req)
            if chunk is None:
                continue
            chunk["final"] = req.released
            _send(loop, q, chunk)
            if req.released:
                del self.active[rid]
                self.metrics.finished(chunk["meta_info"])

    def shutdown(self) -> None:
        """Stop the thread; abort what is left and stop the stage's workers."""
        self.stopped.set()
        self.thread.join(timeout=5)
        self._fail_all(EngineUnavailable("the server is shutting down"), abort=False)
        if self.dead is None and not self.thread.is_alive():
            self.engine.shutdown()
        else:  # the scheduler is broken or stuck: do not step it again, only stop the compile workers
            self.engine.stop_workers()
