"""Stage s3-fsm-cache: compile once, compile in the background, and never stall the batch.

Read with chapters/03-fsm-cache.md. Compiling a regex into a token index takes from
milliseconds to seconds. s1 and s2 did it inline, on the scheduler's thread, so every
running request stalled meanwhile. This stage rebuilds, in order, what SGLang did about it:

1. `FSMCache` (the first release): a dict `{key: CacheEntry(event, value)}`. The first
   request for a key starts ONE background compile; every later request for the same key
   gets the same entry and waits on the same event. The key is (regex, tokenizer
   fingerprint), so a cache never serves an index built for another vocabulary.
2. The blocking `get_fsm` of the first release: the scheduler calls it on arrival and
   `event.wait()`s. The thread only de-duplicates work; the scheduler still stalls.
3. The non-blocking `GrammarQueue` (SGLang v0.4): a request whose grammar is not ready
   waits in `scheduler.grammar_queue`; every step polls it and releases the requests
   whose grammar is ready while the others keep decoding. Ready ones leave in arrival
   order, but a ready one never waits behind one still compiling: SGLang's first grammar
   queue did, and one slow regex held every later request up to its timeout.
4. Where the compile runs: a `CompileService` (constrained/compile_service.py) with
   worker processes, since a compile on a thread takes the scheduler's GIL. It also
   keeps the on-disk cache (#63, constrained/fsm_disk.py) and the bounds.
5. Bounds: a compile that fails, makes more than `max_fsm_states` states, or takes
   longer than `compile_timeout` (its worker is then killed) ends its request with
   `abort` and a message; at most `max_pending_compiles` compiles wait at once; the cache
   keeps at most `max_cache_entries` FSMs and `grammar_cache_bytes` bytes (least recently
   used leave first).
"""

from __future__ import annotations

import collections
import hashlib
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..constrained.compile_service import ChildKilled, CompileService, CompileSettings, CompileTimeout
from ..constrained.fsm_arrays import fsm_from_arrays
from ..constrained.grammar import FSMState
from ..constrained.regex_dfa import shown_regex
from ..constrained.token_fsm import ConstraintError, TokenFSM
from ..core import AbortKind, Req
from .base import StageContext, register
from .s2_batched_mask import BatchedMaskOptions, BatchedMaskStage


@dataclass
class CacheEntry:
    """One key's compile: `event` is set when `value` (or `error`) is final."""

    event: threading.Event = field(default_factory=threading.Event)
    value: Any = None
    error: str | None = None
    nbytes: int = 0


class FSMCache:
    """Compiled FSMs by (regex, tokenizer fingerprint), compiled once in background threads.

    `compile_index(regex)` does the work (raises ConstraintError) and `make_fsm(regex,
    result)` makes it ready to mask; `sizeof(fsm)` is what `max_bytes` counts.
    """

    def __init__(
        self,
        compile_index: Callable[[str], Any],
        make_fsm: Callable[[str, Any], Any],
        fingerprint: str,
        max_entries: int = 64,
        threads: int = 2,
        max_bytes: int | None = None,
        sizeof: Callable[[Any], int] = lambda fsm: 0,
    ):
        self.compile_index, self.make_fsm, self.sizeof = compile_index, make_fsm, sizeof
        self.fingerprint = fingerprint
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self.entries: collections.OrderedDict[str, CacheEntry] = collections.OrderedDict()
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="fsm-compile")
        self.compile_count = 0  # compiles started (not memory hits)

    def key(self, regex: str) -> str:
        return hashlib.sha256(json.dumps([regex, self.fingerprint]).encode()).hexdigest()

    def init_fsm_in_background(self, regex: str) -> CacheEntry:
        """The entry for `regex`, starting its compile if nobody has yet."""
        # BEGIN SOLUTION task3_1
        key = self.key(regex)
        with self.lock:  # check-and-insert must be one step, or two threads compile twice
            entry = self.entries.get(key)
            if entry is not None:
                self.entries.move_to_end(key)
                return entry
            entry = CacheEntry()
            self.entries[key] = entry
            self._evict_lru()
        self.pool.submit(self._compile, key, regex, entry)
        return entry
        # END SOLUTION

    def get_fsm(self, regex: str, timeout: float | None = None) -> TokenFSM:
        """The first release's blocking lookup: wait for the compile, then return it."""
        # BEGIN SOLUTION task3_2
        entry = self.init_fsm_in_background(regex)
        if not entry.event.wait(timeout):
            raise ConstraintError(f"compiling regex {shown_regex(regex)} took longer than {timeout} s")
        if entry.error is not None:
            raise ConstraintError(entry.error)
        return entry.value
        # END SOLUTION

    def in_flight(self) -> int:
        """How many compiles have started and not finished."""
        with self.lock:
            return sum(not e.event.is_set() for e in self.entries.values())

    def __contains__(self, regex: str) -> bool:
        return self.key(regex) in self.entries

    def _compile(self, key: str, regex: str, entry: CacheEntry) -> None:
        try:
            with self.lock:
                self.compile_count += 1
            entry.value = self.make_fsm(regex, self.compile_index(regex))
            entry.nbytes = self.sizeof(entry.value)
            with self.lock:
                self._evict_lru()  # now that its size is known (before anyone is told it is done)
        except (CompileTimeout, ChildKilled) as e:
            entry.error = str(e)
            # A timeout may be the machine's load, a worker the OOM killer took says nothing
            # of the regex: never cached.
            with self.lock:
                if self.entries.get(key) is entry:
                    del self.entries[key]
        except ConstraintError as e:
            entry.error = str(e)
        except Exception as e:  # a bug in a compile must still release its waiters
            entry.error = f"compiling regex {shown_regex(regex)} failed: {type(e).__name__}: {e}"
        finally:
            entry.event.set()

    def _evict_lru(self) -> None:
        """Drop least recently used finished entries beyond `max_entries` or `max_bytes`
        (lock held). A compile still running is never dropped: requests wait on it."""
        total = sum(e.nbytes for e in self.entries.values())
        for key in list(self.entries):
            over_bytes = self.max_bytes is not None and total > self.max_bytes
            if len(self.entries) <= self.max_entries and not over_bytes:
                return
            if self.entries[key].event.is_set():
                total -= self.entries.pop(key).nbytes

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


@dataclass
class Waiting:
    """A request in the grammar queue: what it waits on, and since when."""

    handle: Any
    since: float


class GrammarQueue:
    """Hook 2 as a part: requests waiting for their compile, released when it is done.

    `is_done(handle)` says whether a compile finished; `take(req, handle)` gives the
    request its grammar (or aborts it with the compile's error). Stage s5 uses it too,
    with futures for handles.
    """

    def __init__(
        self, timeout: float, is_done: Callable[[Any], bool], take: Callable[[Req, Any], None], max_pending: int
    ):
        self.timeout, self.is_done, self.take, self.max_pending = timeout, is_done, take, max_pending
        self.pending: dict[int, Waiting] = {}  # rid -> what it waits on

    def full(self) -> bool:
        """True when `max_pending` distinct compiles are already waited on."""
        return len({id(w.handle) for w in self.pending.values()}) >= self.max_pending

    def refuse(self, req: Req) -> None:
        req.finish(
            "abort",
            AbortKind.BUSY,
            message=f"too many grammars are compiling at once ({self.max_pending}, "
            f"option max_pending_compiles); retry later",
        )

    def wait_for(self, req: Req, handle: Any) -> None:
        self.pending[req.rid] = Waiting(handle, time.monotonic())

    def poll_grammar_queue(self, queue: list[Req]) -> list[Req]:
        """The requests that may go on, in arrival order: unconstrained ones, and grammar
        requests whose compile finished (or failed, or timed out). One still compiling
        stays, without holding up those behind it."""
        # BEGIN SOLUTION task3_3
        ready = []
        for req in queue:
            waiting = self.pending.get(req.rid)
            if waiting is None:  # unconstrained (or compiled at arrival): never waits
                ready.append(req)
                continue
            if self.is_done(waiting.handle):
                self.take(req, waiting.handle)
            elif time.monotonic() - waiting.since > self.timeout:
                req.finish(
                    "abort",
                    AbortKind.GRAMMAR,
                    message=f"compiling the {req.sampling_params.constraint()[0]} took longer than {self.timeout} s",
                )
            else:
                continue  # still compiling: the ones behind it go on
            del self.pending[req.rid]
            ready.append(req)
        return ready
        # END SOLUTION

    def forget(self, req: Req) -> None:
        self.pending.pop(req.rid, None)


@dataclass(frozen=True)
class FSMCacheOptions(BatchedMaskOptions):
    grammar_queue: str = "nonblocking"  # or "blocking" (the first release)
    compile_timeout: float = 30.0  # seconds; the worker is killed after it
    compile_in: str = "process"  # or "thread" (shares the scheduler's GIL)
    compile_workers: int = 2  # compiles at once
    compile_nice: int = 5  # the workers' niceness (Unix)
    compile_memory_bytes: int | None = 4 << 30  # per worker address space (Unix)
    max_pending_compiles: int = 64  # distinct compiles waited on at once
    max_cache_entries: int = 64  # compiled FSMs kept in memory ...
    grammar_cache_bytes: int | None = 1 << 30  # ... and at most this many bytes of them
    grammar_cache_dir: str | None = None  # a directory turns the disk cache on

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check_choice("grammar_queue", self.grammar_queue, ("blocking", "nonblocking"))
        self.check_choice("compile_in", self.compile_in, ("process", "thread"))


@register("s3-fsm-cache")
class FSMCacheStage(BatchedMaskStage):
    Options = FSMCacheOptions
    options: FSMCacheOptions
    builds_jump_map = False  # s4 asks the compile for its jump map too

    def __init__(self, ctx: StageContext):
        super().__init__(ctx)
        o = self.options
        self.mode = o.grammar_queue
        self.compile_timeout = o.compile_timeout
        self.service = CompileService(
            ctx.tokenizer,
            CompileSettings(
                ctx.vocab_size,
                o.max_fsm_states,
                o.max_regex_chars,
                self.builds_jump_map,
                o.compile_memory_bytes,
                o.compile_nice,
            ),
            workers=o.compile_workers,
            timeout=o.compile_timeout,
            compile_in=o.compile_in,
            disk_dir=o.grammar_cache_dir,
        )
        # The cache's threads do the bookkeeping; in process mode they only wait on a worker
        # (waiting releases the GIL) and wrap its arrays into an FSM.
        self.cache = FSMCache(
            self.service.compile_arrays,
            fsm_from_arrays,
            ctx.tokenizer.fingerprint,
            max_entries=o.max_cache_entries,
            threads=o.compile_workers,
            max_bytes=o.grammar_cache_bytes,
            sizeof=TokenFSM.nbytes,
        )
        self.queue = GrammarQueue(
            o.compile_timeout, lambda entry: entry.event.is_set(), self.take_compiled, o.max_pending_compiles
        )
        self.pending = self.queue.pending

    def has_grammar(self, constraint: tuple[str, str]) -> bool:
        """Whether this (kind, text) is compiled or compiling already: asking for it starts
        no compile (the server's per-client limit counts only the ones that do)."""
        return constraint[1] in self.cache

    # -- hook 1: arrival ---------------------------------------------------------------
    def on_arrival(self, req: Req) -> None:
        constraint = req.sampling_params.constraint()
        if constraint is None or self.refuse_unsupported(req):
            return
        regex = constraint[1]
        if self.mode == "blocking":
            try:  # the first release: the scheduler thread waits right here
                fsm = self.cache.get_fsm(regex, timeout=self.compile_timeout)
            except ConstraintError as e:
                req.finish("abort", AbortKind.GRAMMAR, message=str(e))
                return
            req.grammar = FSMState(fsm, fsm.index.initial_state)
        elif not self.has_grammar(constraint) and self.queue.full():
            self.queue.refuse(req)
        else:
            self.queue.wait_for(req, self.cache.init_fsm_in_background(regex))

    # -- hook 2: the grammar queue -------------------------------------------------------
    def poll_grammar_queue(self, queue: list[Req]) -> list[Req]:
        return self.queue.poll_grammar_queue(queue)

    def take_compiled(self, req: Req, entry: CacheEntry) -> None:
        """Give the request its FSM, or abort it with the compile's error."""
        if entry.error is not None:
            req.finish("abort", AbortKind.GRAMMAR, message=entry.error)
        else:
            req.grammar = FSMState(entry.value, entry.value.index.initial_state)

    def release(self, req: Req) -> None:
        self.queue.forget(req)
        super().release(req)

    def shutdown(self) -> None:
        self.cache.shutdown()
        self.service.shutdown()
