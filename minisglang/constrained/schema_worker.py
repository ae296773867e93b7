"""A large JSON Schema turned into regex text in a process of its own (issue 30).

The schema compiler (the json_schema package) is pure Python: four 3.9 MB schemas compiled
on compile threads (a JSON parse, then 3 s of compiling each), back when it had no
checkpoints, made every step of the scheduler wait for the GIL at each torch operation: a
bystander's p99 went 2.6-20x its baseline. Schema -> regex text is a pure function, so a
large schema is compiled in a child process: the compile thread only waits on a pipe
(without the GIL), and what the compile built (a 3.9 MB schema is ~10^5 dicts) dies with
the child instead of growing the server. The parent gets the regex text back, or the
compiler's own exception, and reads the text as it would have read the compiler's result.
The fsm backend sends a schema here when its text is over 256 KiB, or when its compile in
the server ran past its CPU budget (json_schema/budget.py; the compiler now checkpoints at
every subschema, so until then its thread yields to the scheduler).

One child per schema: it exits after answering, so its memory goes back to the system at
once (a child kept for the next schema would keep its peak). Starting one costs a fork of
the forkserver, milliseconds beside the compile of a schema this large. The forkserver
itself is started once per process, by `start_ahead` when a backend starts: started by the
first large schema instead, it made that compile wait ~0.3 s for a Python to start and
import the compiler (a 67 KB MaskBench schema: ~350 ms the first time, ~50 ms after).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import time
from multiprocessing.connection import Connection
from typing import Any

from .compile_service import CompileTimeout
from .json_schema import build_regex_from_schema
from .token_fsm import ConstraintError
from .work_slices import checkpoint
from .worker_start import start_worker

try:
    import resource  # Unix only
except ImportError:  # pragma: no cover
    resource = None  # type: ignore[assignment]

# How often the waiting compile thread looks up from the pipe: to stop a child whose
# request left (`checkpoint` raises CompileCancelled) or that ran past its timeout.
POLL_SECONDS = 0.02


def _child(conn: Connection, schema: str, options: dict[str, Any], memory_bytes: int | None, nice: int) -> None:
    """Compile one schema and send ("ok", regex) or ("error", exception)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the server, which stops us
    if nice and hasattr(os, "nice"):
        os.nice(nice)
    if memory_bytes and resource is not None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    reply: tuple[str, Any]
    try:
        reply = ("ok", build_regex_from_schema(schema, **options))
    except MemoryError:
        reply = (
            "error",
            ConstraintError(
                f"compiling the schema needs more memory than a compile worker may use "
                f"({(memory_bytes or 0) / 2**30:.1f} GiB, option compile_memory_bytes)"
            ),
        )
    except Exception as e:  # the compiler's refusal, sent as it is (its type and message)
        try:
            pickle.dumps(e)
        except Exception:
            e = ConstraintError(f"{type(e).__name__}: {e}")
        reply = ("error", e)
    conn.send(reply)
    conn.close()


def _context() -> Any:
    # forkserver: a clean process (no threads) forks each child in milliseconds; plain fork
    # would copy torch's threads. (As compile_service.py; spawn where there is no forkserver.)
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        context.set_forkserver_preload([__name__])  # (if this starts the forkserver: the compiler imported once)
    return context


def start_ahead() -> None:
    """Start the forkserver that forks the schema children now, so that no compile waits
    for it; it imports the compiler in its own process (~0.35 s of CPU) while the caller
    goes on. Does nothing where it runs already (`ensure_running` restarts one that died)
    and where there is no forkserver (spawn starts each child from nothing anyway)."""
    if _context().get_start_method() == "forkserver":
        import multiprocessing.forkserver  # (Unix only)

        multiprocessing.forkserver.ensure_running()  # (it imports the preloaded modules, not the main script)


def _died(exitcode: int | None) -> str:
    return (
        f"the schema compile worker died (exit code {exitcode}); if it died while starting, the usual cause "
        f'is a script that creates an Engine at its top level: do so under `if __name__ == "__main__":`, '
        f'or pass compile_in="thread"'
    )


def schema_regex_in_process(
    schema: str, options: dict[str, Any], timeout: float, memory_bytes: int | None = 4 << 30, nice: int = 5
) -> str:
    """`build_regex_from_schema(schema, **options)`, computed in a child process.

    Raises what the compiler raised (InvalidSchemaError, a size limit ...), CompileTimeout
    past `timeout` seconds, CompileCancelled when the compile's requests gave up (seen at
    the `checkpoint` of a compile thread), ConstraintError if the child died. The child is
    killed in every case but the first."""
    context = _context()
    parent, child = context.Pipe(duplex=False)
    process = context.Process(
        target=_child, args=(child, schema, options, memory_bytes, nice), name="minisglang-schema", daemon=True
    )
    start_worker(process)  # (without re-running the user's script: worker_start.py)
    child.close()
    stop = time.monotonic() + timeout
    try:
        while not parent.poll(POLL_SECONDS):
            checkpoint()  # CompileCancelled: nobody waits for this schema any more
            if not process.is_alive() and not parent.poll(0):
                raise ConstraintError(_died(process.exitcode))
            if time.monotonic() > stop:
                raise CompileTimeout(
                    f"compiling the json_schema took longer than {timeout:g} s (option compile_timeout); it was stopped"
                )
        status, reply = parent.recv()
    except EOFError:
        raise ConstraintError(_died(process.exitcode)) from None
    finally:
        if process.is_alive():
            process.kill()
        process.join(10)
        parent.close()
    if status == "error":
        raise reply
    return str(reply)
