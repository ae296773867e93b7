"""One compile in a child process of its own, killable (issue 30, and outlines-core's index).

A compile on a thread cannot be stopped: past its timeout its request is answered with an
error, but the thread keeps computing, holding a compile thread (and a core) that every
other client's grammar then waits for. Some compiles are pure functions of picklable
arguments: the JSON Schema compiler's schema -> regex text (schema_worker.py), and
outlines-core's regex -> `Index` (the backend's own DFA and token table, built in Rust: a
48-character regex such as `[a-z]{1,300}x[a-z]{1,300}` takes 29 s there). Those run here,
one child per compile: the compile thread waits on a pipe without the GIL, the child is
killed at the timeout or when the compile's requests leave, and what the compile built
dies with the child instead of growing the server. The parent gets the result back, or
the compile's own exception.

One child per compile: it exits after answering, so its memory goes back to the system at
once (a child kept for the next compile would keep its peak). Starting one costs a fork of
the forkserver, milliseconds. The forkserver itself is started once per process, by
`start_ahead` when a backend starts: started by the first compile instead, it made that
compile wait ~0.3 s for a Python to start and import the schema compiler.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from .compile_service import ChildKilled, CompileTimeout
from .token_fsm import ConstraintError
from .work_slices import checkpoint, outside
from .worker_start import start_worker

try:
    import resource  # Unix only
except ImportError:  # pragma: no cover
    resource = None  # type: ignore[assignment]

# How often the waiting compile thread looks up from the pipe: to stop a child whose
# request left (`checkpoint` raises CompileCancelled) or that ran past its timeout.
POLL_SECONDS = 0.02
STARTUP_SECONDS = 120.0  # the most a kept child may take to start (a busy machine, a big import)
CHILD_NAME = "minisglang-compile-child"


def _limits(memory_bytes: int | None, nice: int) -> None:
    """A child's bounds, set in the child: Ctrl-C is for the server (which stops us), a lower
    priority than the scheduler's, an address-space limit (Unix)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if nice and hasattr(os, "nice"):
        os.nice(nice)
    if memory_bytes and resource is not None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))


def _run(
    call: tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], str], memory_bytes: int | None
) -> tuple[str, Any]:
    """("ok", function(*args, **kwargs)) or ("error", the exception it raised)."""
    function, args, kwargs, what = call
    try:
        return ("ok", function(*args, **kwargs))
    except MemoryError:
        return ("error", ConstraintError(f"{what} needs more memory than a compile may use ({_limit(memory_bytes)})"))
    except Exception as e:  # the compile's own refusal, sent as it is (its type and message)
        try:
            pickle.dumps(e)
        except Exception:
            e = ConstraintError(f"{type(e).__name__}: {e}")
        return ("error", e)


def _child(conn: Connection, call: tuple[Any, ...], memory_bytes: int | None, nice: int) -> None:
    """One call, answered, then exit."""
    _limits(memory_bytes, nice)
    conn.send(_run(call, memory_bytes))
    conn.close()


def _kept_child(
    conn: Connection, memory_bytes: int | None, nice: int, setup: tuple[Callable[..., Any], tuple[Any, ...]] | None
) -> None:
    """`setup` run once (what every call needs: a library's vocabulary), then calls answered
    one after another until the parent sends None or goes away. A failed setup is every
    call's answer."""
    _limits(memory_bytes, nice)
    failed = None
    if setup is not None:
        status, failed = _run((setup[0], setup[1], {}, "the compile child's setup"), memory_bytes)
        failed = failed if status == "error" else None
    try:
        conn.send(("ready", None))
        while (call := conn.recv()) is not None:
            conn.send(("error", failed) if failed is not None else _run(call, memory_bytes))
    except (EOFError, OSError):  # the parent closed its end, or exited: so do we
        return


def _limit(memory_bytes: int | None) -> str:
    return f"{(memory_bytes or 0) / 2**30:.1f} GiB, option compile_memory_bytes"


# What the forkserver imports when it starts, so that no child imports it again: the schema
# compiler, the usual child's work, and what a backend's `start_ahead` adds (xgrammar).
_PRELOAD = ["minisglang.constrained.json_schema"]


def _context() -> Any:
    # forkserver: a clean process (no threads) forks each child in milliseconds; plain fork
    # would copy torch's threads. (As compile_service.py; spawn where there is no forkserver.)
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        context.set_forkserver_preload(list(_PRELOAD))  # (read only when this starts it)
    return context


def start_ahead(*preload: str) -> None:
    """Start the forkserver that forks the children now, so that no compile waits for it; it
    imports the schema compiler (~0.35 s of CPU) and the modules `preload` names in its own
    process while the caller goes on. Does nothing where it runs already (`ensure_running`
    restarts one that died; its children then import what it lacks themselves) and where
    there is no forkserver (spawn starts each child from nothing anyway)."""
    _PRELOAD.extend(m for m in preload if m not in _PRELOAD)
    if _context().get_start_method() == "forkserver":
        import multiprocessing.forkserver  # (Unix only)

        multiprocessing.forkserver.ensure_running()  # (it imports the preloaded modules, not the main script)


def _death(what: str, process: Any, memory_bytes: int | None, started: bool) -> ConstraintError:
    """The error for a child that died before answering: ChildKilled when SIGKILL ended it.
    (It is reaped first: its exit code was read as None, before the system had it.)"""
    process.join(1)
    message = _died(what, process.exitcode, memory_bytes, started)
    return ChildKilled(message) if process.exitcode == -signal.SIGKILL else ConstraintError(message)


def _died(what: str, exitcode: int | None, memory_bytes: int | None, started: bool = False) -> str:
    """`started`: the child had started (a kept one answered its setup), so it died of the
    call; the hint about starting is for a child that may not have (it read to a server's
    client as advice about scripts, for a schema that had run the child out of memory)."""
    died = (
        f"the child process running {what} died (exit code {exitcode}; a native library that "
        f"runs out of memory aborts: the limit is {_limit(memory_bytes)})"
    )
    if started:
        return died
    return (
        f"{died}; if it died while starting, the usual cause is a script that creates an Engine at its "
        f'top level: do so under `if __name__ == "__main__":`, or pass compile_in="thread"'
    )


def call_in_child(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None = None,
    *,
    timeout: float,
    what: str,
    memory_bytes: int | None = 4 << 30,
    nice: int = 5,
) -> Any:
    """`function(*args, **kwargs)`, computed in a child process started for it (`function`,
    its arguments and its result picklable; `what` names the compile in messages:
    "compiling the json_schema").

    Raises what the function raised, CompileTimeout past `timeout` seconds,
    CompileCancelled when the compile's requests gave up (seen at the `checkpoint` of a
    compile thread), ConstraintError if the child died. The child is gone afterwards in
    every case."""
    context = _context()
    parent, child = context.Pipe(duplex=False)
    call = (function, args, kwargs or {}, what)
    process = context.Process(target=_child, args=(child, call, memory_bytes, nice), name=CHILD_NAME, daemon=True)
    start_worker(process)  # (without re-running the user's script: worker_start.py)
    child.close()
    try:
        status, reply = _answer(parent, process, timeout, what, memory_bytes)
    finally:
        _stop(process, parent)
    if status == "error":
        raise reply
    return reply


def _answer(
    conn: Connection, process: Any, timeout: float, what: str, memory_bytes: int | None, started: bool = False
) -> tuple[str, Any]:
    """The child's answer to the call it was sent, ("ok", result) or ("error", what the
    call raised); raises CompileTimeout, CompileCancelled or ConstraintError (the child
    died; `started`: it had started before the call) otherwise, and the caller stops the child."""
    stop = time.monotonic() + timeout
    try:
        with outside():  # (the compile thread only waits: its pool may serve another client)
            while not conn.poll(POLL_SECONDS):
                checkpoint()  # CompileCancelled: nobody waits for this compile any more
                if not process.is_alive() and not conn.poll(0):
                    raise _death(what, process, memory_bytes, started)
                if time.monotonic() > stop:
                    raise CompileTimeout(
                        f"{what} took longer than {timeout:g} s (option compile_timeout); it was stopped"
                    )
        answer: tuple[str, Any] = conn.recv()
    except EOFError:
        raise _death(what, process, memory_bytes, started) from None
    return answer


def _stop(process: Any, conn: Connection) -> None:
    if process.is_alive():
        process.kill()
    process.join(10)
    conn.close()


class KeptChildren:
    """Child processes kept between calls, one per caller at a time: `call` is
    `call_in_child` without a process start (~13 ms through the forkserver, against the
    1-3 ms of a typical outlines-core index). A child whose call ran past its timeout, was
    cancelled or died is killed, and a new one starts at once (`ahead` of them are kept
    ready) or with the next call. A kept child keeps
    its peak memory between calls: the one-shot `call_in_child` suits a compile that
    builds many Python objects (a large schema), this one a library's native compile."""

    def __init__(
        self,
        memory_bytes: int | None = 4 << 30,
        nice: int = 5,
        ahead: int = 1,
        setup: tuple[Callable[..., Any], tuple[Any, ...]] | None = None,
    ):
        """`setup`: (function, args) each child runs once when it starts (picklable; say, a
        library's vocabulary kept in a module of the child for its calls to use)."""
        self.memory_bytes, self.nice, self.setup, self.ahead = memory_bytes, nice, setup, ahead
        self.idle: queue.SimpleQueue[tuple[Any, Connection]] = queue.SimpleQueue()
        self.closed = False
        self.lock = threading.Lock()
        self.running: set[tuple[Any, Connection]] = set()
        for _ in range(ahead):  # started now, so that the first compile does not wait for one
            self.idle.put(self._start())

    def call(self, function: Callable[..., Any], args: tuple[Any, ...], *, timeout: float, what: str) -> Any:
        """`function(*args)` in a kept child: as `call_in_child`."""
        child = self._take()
        try:
            child[1].send((function, args, {}, what))
            status, reply = _answer(child[1], child[0], timeout, what, self.memory_bytes, started=True)
        except BaseException:
            self._drop(child)
            raise
        self._give_back(child)  # (a refusal is an answer too: the child is fine)
        if status == "error":
            raise reply
        return reply

    def shutdown(self) -> None:
        """Stop every child (a call in progress gets an error)."""
        with self.lock:
            self.closed = True
            children = list(self.running)
        while not self.idle.empty():
            children.append(self.idle.get())
        for process, conn in children:
            _stop(process, conn)

    def _take(self) -> tuple[Any, Connection]:
        with self.lock:
            if self.closed:
                raise ConstraintError("the compile children were shut down")
        child = None
        while child is None:
            try:
                child = self.idle.get_nowait()
            except queue.Empty:
                child = self._start()
            if not child[0].is_alive():  # died while idle (the OOM killer, a kill by hand)
                _stop(*child)
                child = None
        with self.lock:
            self.running.add(child)
        return child

    def _start(self) -> tuple[Any, Connection]:
        """A new child, once it is ready (its setup done): a compile's timeout then counts its
        compile alone. (A child whose forkserver did not preload its library imports it
        itself: xgrammar brings torch, ~1.2 s, which a first compile timed as its own.)"""
        context = _context()
        conn, end = context.Pipe()
        process = context.Process(
            target=_kept_child, args=(end, self.memory_bytes, self.nice, self.setup), name=CHILD_NAME, daemon=True
        )
        start_worker(process)  # (without re-running the user's script: worker_start.py)
        end.close()
        try:
            with outside():  # (a compile thread only waits, as for a compile)
                started = conn.poll(STARTUP_SECONDS)
            if started:
                conn.recv()
                return process, conn
        except (EOFError, OSError):
            pass
        _stop(process, conn)
        # (whatever stopped it, no grammar was sent yet: the failure is not the grammar's)
        raise ChildKilled(_died("the compile child's start", process.exitcode, self.memory_bytes))

    def _give_back(self, child: tuple[Any, Connection]) -> None:
        with self.lock:
            self.running.discard(child)
            closed = self.closed
        if closed:
            _stop(*child)
        else:
            self.idle.put(child)

    def _drop(self, child: tuple[Any, Connection]) -> None:
        with self.lock:
            self.running.discard(child)
            replace = self.ahead and not self.closed and self.idle.empty()
        _stop(*child)
        if replace:  # (its replacement starts now, not in the next compile: a start can take a second)
            self.idle.put(self._start())
