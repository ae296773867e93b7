"""Compiling regexes off the scheduler's GIL, bounded in time, memory and size (stage s3).

The compiler is Python and numpy, so on a thread of the scheduler's process it holds the
GIL most of the time and the batch decodes only in between (chapters/03-fsm-cache.md). A
`CompileService` runs each compile in a worker process instead, with its own interpreter:

- a compile that outlives `timeout` is really stopped: its worker is killed (its memory
  returns to the system) and replaced, and the caller gets `CompileTimeout`. A thread
  could not be stopped, which is why llguidance (stage s5), which compiles on threads, is
  bounded only from the caller's side (outlines-core's indexes and xgrammar's
  grammars are built in kept children: library_children.py);
- each worker may use at most `memory_bytes` of address space (RLIMIT_AS, Unix): a
  blow-up ends as a clear error for that regex instead of taking the machine down;
- a regex longer than `max_regex_chars`, or whose DFA has more than `max_states` states,
  fails before anything big is built;
- replies come back as flat arrays (constrained/fsm_arrays.py) in a file in memory
  (/dev/shm) that the scheduler maps, and an on-disk cache (constrained/fsm_disk.py)
  answers regexes compiled before a restart.

`compile_in="thread"` compiles on the calling thread instead (the first release's way,
kept to compare); so does a service whose workers die while starting (a script without
an `if __name__ == "__main__":` guard), with a warning that says how to fix it.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import shutil
import signal
import tempfile
import threading
import warnings
import weakref
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from tqdm.auto import tqdm

from .fsm_arrays import Arrays, compile_arrays, fsm_from_arrays
from .fsm_disk import FSMDiskCache
from .regex_dfa import shown_regex
from .token_fsm import ConstraintError, TokenFSM, Vocabulary, check_regex_length
from .token_index import vocab_trie
from .worker_start import start_worker

try:
    import resource  # Unix only
except ImportError:  # pragma: no cover
    resource = None  # type: ignore[assignment]


class CompileTimeout(ConstraintError):
    """The compile took longer than its timeout and was stopped; never cached."""


class ChildKilled(ConstraintError):
    """The compile's process was killed from outside (SIGKILL: the system's OOM killer, a kill
    by hand) or could not start (the machine's load): nothing the grammar did, so, as a
    timeout, never cached (base.py, s3's FSMCache)."""


class NamedVocabulary(Vocabulary, Protocol):
    """A tokenizer's vocabulary and its fingerprint (what the disk cache files are keyed by)."""

    @property
    def fingerprint(self) -> str: ...


@dataclass(frozen=True)
class VocabularyBytes:
    """What a compile needs from a tokenizer, small enough to send to a worker process."""

    token_bytes: tuple[bytes | None, ...]
    eos_token_id: int


@dataclass(frozen=True)
class CompileSettings:
    """What every compile of one service is built for, and its bounds."""

    vocab_size: int  # the logits' width: the packed rows cover it
    max_states: int = 10_000  # DFA states (option max_fsm_states)
    max_regex_chars: int | None = 100_000  # checked before building anything
    jump_map: bool = False  # also build stage s4's jump map (from the same DFA)
    memory_bytes: int | None = 4 << 30  # per worker address space (RLIMIT_AS); None: unbounded
    nice: int = 5  # the workers' niceness (Unix)


# -- replies through files in memory ----------------------------------------------------
Layout = list[tuple[str, str, tuple[int, ...], int]]  # (name, dtype, shape, offset) per array


def arrays_to_file(arrays: Arrays, directory: str) -> tuple[str, Layout]:
    """(In a worker) write the arrays back to back into a new file in `directory`; return
    its path and layout (name, dtype, shape, offset of each array): the whole reply.

    Through a pipe, the benchmark regex's 8.4 MB of arrays cost the scheduler's process
    6-9 ms of GIL (reading 64 KB at a time, then copying while unpickling), the worst gap
    of the window. A file in memory (tmpfs) that the scheduler maps costs it about 1 ms."""
    fd, path = tempfile.mkstemp(dir=directory, suffix=".arrays")
    layout, offset = [], 0
    with os.fdopen(fd, "wb") as f:
        for name, a in arrays.items():
            a = np.ascontiguousarray(a)
            if a.nbytes:  # an empty array (a jump map with no byte edges) writes nothing
                f.write(a.data.cast("B"))
            layout.append((name, a.dtype.str, a.shape, offset))
            offset += a.nbytes
    return path, layout


def arrays_from_file(path: str, layout: Layout) -> Arrays:
    """The worker's arrays, mapped from its file (no copy), and the file's name removed (the
    mapping lives on). Copy-on-write: the arrays are writable, as `torch.from_numpy`
    wants, and nothing is ever written back."""
    mapped = np.memmap(path, dtype=np.uint8, mode="c")
    os.unlink(path)
    return {
        name: np.ndarray(shape, np.dtype(dtype), buffer=mapped, offset=offset)
        if 0 not in shape
        else np.empty(shape, np.dtype(dtype))
        for name, dtype, shape, offset in layout
    }


# -- the worker process ------------------------------------------------------------------
def compile_for(regex: str, vocab: Vocabulary, settings: CompileSettings) -> Arrays:
    return compile_arrays(
        regex,
        vocab,
        settings.max_states,
        settings.vocab_size,
        jump_map=settings.jump_map,
        max_regex_chars=settings.max_regex_chars,
    )


def _serve(conn: Connection, vocab: VocabularyBytes, settings: CompileSettings, reply_dir: str | None) -> None:
    """A worker's life: set its bounds, build the vocabulary's trie once, then answer
    one regex after another with ("ok", reply) or ("error", message)."""
    # Background work yields the CPU when cores are short (Unix only). Only a little: a
    # worker at nice 5 gets about a quarter of a core it shares with the scheduler (nice
    # 10: a tenth, and a 2 s compile took 18.8 s on a busy 2-CPU machine).
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the scheduler, which stops us
    if settings.nice and hasattr(os, "nice"):
        os.nice(settings.nice)
    if settings.memory_bytes and resource is not None:
        resource.setrlimit(resource.RLIMIT_AS, (settings.memory_bytes, settings.memory_bytes))
    # tqdm (token_index's progress bars, off here) would make a multiprocessing lock: a
    # named semaphore that a worker stopped at shutdown never unlinks, and the resource
    # tracker reports as "leaked" when the script exits. A thread lock is all we need.
    tqdm.set_lock(threading.RLock())
    vocab_trie(vocab.token_bytes)
    try:
        _answer(conn, vocab, settings, reply_dir)
    except (EOFError, OSError):  # the service is gone (closed its end, or exited): so are we
        return


def _answer(conn: Connection, vocab: VocabularyBytes, settings: CompileSettings, reply_dir: str | None) -> None:
    conn.send(("ready", os.getpid()))
    while True:
        regex = conn.recv()
        if regex is None:
            return
        arrays = None
        reply: tuple[str, Any]
        try:
            arrays = compile_for(regex, vocab, settings)
            reply = ("ok", arrays_to_file(arrays, reply_dir) if reply_dir else arrays)
        except ConstraintError as e:
            reply = ("error", str(e))
        except MemoryError:
            reply = (
                "error",
                f"compiling regex {shown_regex(regex)} needs more memory than a compile worker may "
                f"use ({(settings.memory_bytes or 0) / 2**30:.1f} GiB, option compile_memory_bytes)",
            )
        except Exception as e:  # a bug in a compile must still answer its caller
            reply = ("error", f"compiling regex {shown_regex(regex)} failed: {type(e).__name__}: {e}")
        del arrays  # give a big result back before waiting for the next regex
        conn.send(reply)


class _Worker:
    """One worker process and our end of its pipe."""

    def __init__(self, context: Any, vocab: VocabularyBytes, settings: CompileSettings, reply_dir: str | None):
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=_serve, args=(child, vocab, settings, reply_dir), name="minisglang-compile", daemon=True
        )
        start_worker(self.process)  # (without re-running the user's script: worker_start.py)
        child.close()
        self.ready = False
        self.stopping = threading.Lock()  # a timeout's replacement and shutdown may race to stop it
        self.stopped = False

    def stop(self) -> None:
        """Kill the process now (whatever it is doing) and reap it; a second call does nothing."""
        with self.stopping:
            if self.stopped:
                return
            self.stopped = True
        self.process.kill()
        self.process.join(10)
        self.conn.close()


class CompileService:
    """Compiles regexes for one vocabulary into `TokenFSM`s, in worker processes.

    `compile_fsm(regex)` blocks its caller (a cache thread, which waits without the GIL)
    until the FSM is ready; it raises ConstraintError for a regex it cannot compile and
    CompileTimeout (after killing the worker) for one that takes too long.
    """

    def __init__(
        self,
        tokenizer: NamedVocabulary,
        settings: CompileSettings,
        *,
        workers: int = 2,
        timeout: float = 30.0,
        compile_in: str = "process",
        disk_dir: str | os.PathLike[str] | None = None,
        startup_timeout: float = 120.0,
    ):
        if compile_in not in ("process", "thread"):
            raise ValueError(f"compile_in must be 'process' or 'thread', got {compile_in!r}")
        self.vocab = VocabularyBytes(tuple(tokenizer.token_bytes), tokenizer.eos_token_id)
        self.settings, self.timeout, self.startup_timeout = settings, timeout, startup_timeout
        # The fingerprint covers the byte table, not which special token ends a sequence; the
        # arrays hold the EOS id (its bit in the final states' rows): two checkpoints of one
        # tokenizer with other EOS tokens (a base model's <|end_of_text|>, its instruct
        # model's <|eot_id|>) sharing a cache directory were served each other's FSMs.
        # The state bound is a fact of the file too: a DFA built under a larger bound (another
        # engine's max_fsm_states) was served to an engine that refuses it when compiling.
        self.disk = (
            FSMDiskCache(
                Path(disk_dir),
                tokenizer.fingerprint,
                {
                    "vocab_size": settings.vocab_size,
                    "jump_map": settings.jump_map,
                    "eos": tokenizer.eos_token_id,
                    "max_states": settings.max_states,
                },
            )
            if disk_dir
            else None
        )
        self.compile_count = 0  # compiles actually run (not disk hits)
        self.disk_errors = 0  # files the disk cache could not write (the compiles were kept)
        self.lock = threading.Lock()
        self.broken = False  # the workers died while starting: compile on threads
        self.closed = False  # shut down: a worker that stops answering is ours
        self.workers: list[_Worker] = []
        self.idle: queue.Queue[_Worker] = queue.Queue()
        if compile_in == "thread":
            return
        # forkserver: one clean server process (no threads, the compiler already imported)
        # forks each worker in milliseconds. Plain fork would copy torch's threads; spawn
        # (Windows has nothing else) would import the compiler again in every worker.
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        self.context = multiprocessing.get_context(method)
        if method == "forkserver":
            self.context.set_forkserver_preload([__name__])
        # Replies go through files in memory (/dev/shm, Linux) when there is such a place; a
        # directory of our own, so that shutdown removes what nobody picked up.
        self.reply_dir = (
            tempfile.mkdtemp(prefix="minisglang-fsm-", dir="/dev/shm")
            if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK)
            else None
        )
        self.remove_reply_dir = (
            weakref.finalize(self, shutil.rmtree, self.reply_dir, True) if self.reply_dir else (lambda: None)
        )
        for _ in range(workers):  # started now: each builds its trie before the first request
            self._add_worker()

    # -- the public calls -------------------------------------------------------------------
    def compile_fsm(self, regex: str) -> TokenFSM:
        return fsm_from_arrays(regex, self.compile_arrays(regex))

    def compile_arrays(self, regex: str) -> Arrays:
        """The FSM arrays of `regex`: from the disk cache, else compiled (and then saved). A
        regex over this service's `max_regex_chars` is refused before the disk is read, as
        a compile refuses it: a file another engine wrote under a larger limit is no excuse."""
        check_regex_length(len(regex), self.settings.max_regex_chars)
        arrays = self.disk.load(regex) if self.disk is not None else None
        if arrays is None:
            with self.lock:
                self.compile_count += 1
            arrays = self._compile(regex)
            if self.disk is not None:
                try:
                    self.disk.save(regex, arrays)
                except OSError as e:  # a full or unwritable directory: the FSM is good all the same
                    self._disk_failed(e)
        return arrays

    def _disk_failed(self, error: OSError) -> None:
        """A file the disk cache could not write: said once, and the compile goes on (a full
        disk had aborted every request whose regex was not cached yet)."""
        with self.lock:
            self.disk_errors += 1
            first = self.disk_errors == 1
        if first:
            where = self.disk.directory if self.disk is not None else "?"
            warnings.warn(
                f"minisglang: the FSM disk cache cannot write to {where} ({error}); compiled FSMs are "
                "not saved there (each compile still serves its requests)",
                RuntimeWarning,
                stacklevel=3,
            )

    def warm_up(self) -> None:
        """Block until every worker has started and built its vocabulary trie."""
        for _ in range(len(self.workers)):
            worker = self.idle.get()
            try:
                if not worker.ready:
                    self._wait_ready(worker)
            finally:
                if worker in self.workers:
                    self.idle.put(worker)

    def worker_pids(self) -> list[int]:
        return [w.process.pid for w in self.workers]

    def shutdown(self) -> None:
        """Stop every worker now (a compile in progress is abandoned; its caller gets an error)."""
        self.closed = True
        with self.lock:  # taken whole, so a timeout's `_replace` cannot add a worker after us
            workers, self.workers = list(self.workers), []
        for worker in workers:
            worker.stop()
        if hasattr(self, "remove_reply_dir"):
            self.remove_reply_dir()

    # -- inside --------------------------------------------------------------------------
    def _add_worker(self) -> _Worker:
        worker = _Worker(self.context, self.vocab, self.settings, self.reply_dir)
        self.workers.append(worker)
        self.idle.put(worker)
        return worker

    def _replace(self, worker: _Worker) -> None:
        worker.stop()
        with self.lock:
            if worker in self.workers:
                self.workers.remove(worker)
                self._add_worker()

    def _on_this_thread(self, regex: str) -> Arrays:
        """The compile without a worker: only when the workers died while starting. After a
        shutdown a queued compile is refused: run on a thread of its own, a runaway regex
        would keep the process alive for minutes."""
        if self.closed and not self.broken:
            raise ConstraintError(f"the compile service was shut down before regex {shown_regex(regex)} compiled")
        return compile_for(regex, self.vocab, self.settings)

    def _compile(self, regex: str) -> Arrays:
        if self.closed or self.broken or not self.workers:
            return self._on_this_thread(regex)
        worker = self.idle.get()
        try:
            if not worker.ready and not self._wait_ready(worker):
                return self._on_this_thread(regex)
            worker.conn.send(regex)
            if not worker.conn.poll(self.timeout):
                self._replace(worker)  # the only way to stop a compile: kill its process
                # The state limit stops a DFA that grows past it while it is built (in well
                # under a second); a compile within it can still be slow: a DFA of many
                # states and the token index of each, or a limit set very high.
                raise CompileTimeout(
                    f"compiling regex {shown_regex(regex)} took longer than {self.timeout} s "
                    f"(option compile_timeout); it was stopped. The eager automaton builds "
                    f"every DFA state (up to max_fsm_states, {self.settings.max_states:,}) and "
                    f"its token row before the first token; the s5 fsm backend's lazy "
                    f"automaton builds only the states a generation reaches"
                )
            status, reply = worker.conn.recv()
        except (EOFError, OSError) as e:
            worker.process.join(1)  # (reaped: its exit code was read as None before the system had it)
            code = worker.process.exitcode
            self._replace(worker)
            died = ChildKilled if code == -signal.SIGKILL else ConstraintError
            raise died(
                f"the compile worker died compiling regex {shown_regex(regex)} (exit code {code}: {type(e).__name__})"
            ) from None
        finally:
            if worker in self.workers:
                self.idle.put(worker)
        if status == "error":
            raise ConstraintError(reply)
        return arrays_from_file(*reply) if isinstance(reply, tuple) else reply

    def _wait_ready(self, worker: _Worker) -> bool:
        """Wait for a new worker's "ready"; False (and compile on threads from now on) if it
        died while starting."""
        try:
            if worker.conn.poll(self.startup_timeout):
                worker.conn.recv()
                worker.ready = True
                return True
        except (EOFError, OSError):
            if self.closed:  # we stopped it ourselves: nothing to warn about
                return False
        # The usual cause: a script that starts an Engine at its top level. Each worker
        # re-runs the main script while it starts (forkserver and spawn do), and dies.
        self.broken = True
        warnings.warn(
            "minisglang: the regex compile workers died while starting, so regexes "
            "compile on a thread from now on (slower for the running batch). A script "
            "that creates an Engine at its top level must do so under "
            "`if __name__ == \"__main__\":` (see 'Safe importing of main module' in "
            'the multiprocessing docs), or pass compile_in="thread".',
            RuntimeWarning,
            stacklevel=2,
        )
        self.shutdown()
        return False
