"""Start the grader's test processes from a "zygote" that has already imported pytest's
heavy dependencies, instead of a fresh interpreter each time.

Every graded run is `python -m pytest ...` in a process of its own (a copy may loop, crash,
call os._exit or leave threads and processes behind: the grader kills what it must). On a
slow 2-core machine a fresh interpreter spent ~4 s importing torch (2.4 s) and hypothesis
(1.4 s) before the first test, the same modules each time; a class of 30 copies over 7
stages starts hundreds of such processes. The zygote imports them once; each run is a fork
of it that then does what the interpreter's start would have done with the run's argv,
environment and working directory (sys.path from them, stdin, stdout and stderr from and into
the run's files, a session of its own) and runs pytest as `-m pytest` does, or a text as
`-c` does (the autograder's own tests start their mutant runners so, tests/mutants.py).

It imports nothing of minisglang (it is started as a script, `exec` of this file): a fork
must import the graded copy's package, not find the reference's in sys.modules. Where fork
is missing (not POSIX) or the zygote cannot start, `launch` falls back to subprocess.Popen.
`ZygoteRun` answers what the grader asks of a Popen: pid, poll, wait, returncode.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# What every graded run imports before its first test (the tests import torch; pytest's
# hypothesis plugin imports hypothesis); importing them here is what the forks skip.
PRELOAD = ("torch", "hypothesis", "pytest")


def serve() -> None:
    """The zygote's loop (run as a script: it must not import minisglang). Reads one JSON
    request a line on stdin ({"argv", "env", "cwd", "out", "err", "stdin"}), forks a run for
    each and writes {"pid"} when it starts and {"pid", "status"} (Popen's returncode) when it
    ends."""
    for name in PRELOAD:
        __import__(name)
    base_path = list(sys.path[1:])  # the interpreter's own entries (sys.path[0] is this script's folder)
    pending = b""
    while True:
        ready, _, _ = select.select([0], [], [], 0.05)
        if ready:
            data = os.read(0, 65536)
            if not data:
                return  # the grader is gone: so is the zygote (its runs go on, as orphans would)
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                _write({"pid": _fork_run(json.loads(line), base_path)})
        while True:  # report every run that has ended
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            _write({"pid": pid, "status": os.waitstatus_to_exitcode(status)})


def _write(message: dict[str, Any]) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())


def _fork_run(request: dict[str, Any], base_path: list[str]) -> int:
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid:
        # Reported once the run leads its session: the grader may kill the group at once.
        os.close(ready_w)
        os.read(ready_r, 1)
        os.close(ready_r)
        return pid
    # The run: a session of its own (the grader kills its whole group), the streams a fresh
    # `python -m pytest` would have had, and then pytest as its `-m` runs it.
    try:
        os.close(ready_r)
        os.setsid()
        os.write(ready_w, b"s")
        os.close(ready_w)
        streams = ((1, request["out"], os.O_WRONLY | os.O_APPEND), (2, request["err"], os.O_WRONLY | os.O_APPEND))
        for fd, path, flags in (*streams, (0, request["stdin"], os.O_RDONLY)):
            opened = os.open(path, flags)
            os.dup2(opened, fd)
            os.close(opened)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115  (fd 0, the run's stdin, for the run's life)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        argv = list(request["argv"])
        text = argv[0] == "-c"  # `python -c TEXT`, else `python -m pytest ...`
        # `python -c` puts "" (the working directory) first on sys.path, `-m` the directory itself.
        first = "" if text else request["cwd"]
        sys.path[:] = _run_path(first, request["cwd"], request["env"].get("PYTHONPATH", ""), base_path)
        sys.argv = argv[:1] if text else argv
        if text:  # run as `python -c` runs its text (SystemExit carries the status)
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
            code = 0
        else:
            import pytest

            code = pytest.console_main()
    except SystemExit:
        raise
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    # A normal exit: atexit handlers run and threads that are not daemons are waited for, as
    # at the end of any interpreter (the grader notices a run that never ends).
    raise SystemExit(code)


def _run_path(first: str, cwd: str, pythonpath: str, base_path: list[str]) -> list[str]:
    """sys.path as `python -m` (`first`: the working directory) or `python -c` (`first`: "")
    starts it in `cwd` with PYTHONPATH `pythonpath`: `first`, PYTHONPATH's entries (an empty
    one is the working directory, a relative one relative to it), then the interpreter's own,
    each once."""
    entries = [first, *(os.path.join(cwd, p) if p else cwd for p in pythonpath.split(os.pathsep)), *base_path]
    return list(dict.fromkeys(os.path.normpath(p) if p else p for p in entries))


class Zygote:
    """The grader's zygote process and the runs it started (pid -> returncode, once ended)."""

    def __init__(self) -> None:
        source = Path(__file__).read_text(encoding="utf-8")
        code = f"{source}\nserve()\n"
        # Without PYTHONPATH: its sys.path is the interpreter's own, each run adds its own entries.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.ended: dict[int, int] = {}
        self.buffer = b""
        atexit.register(self.close)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """End the zygote (its runs still running go on, as orphans would) and wait for it, so
        its CPU and its runs' count in this process's own (what `time make test` reports)."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()  # (its loop ends at the end of its stdin)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def start(self, argv: list[str], env: dict[str, str], cwd: Path, out: str, err: str, stdin: str) -> ZygoteRun:
        assert self.proc.stdin is not None
        request = {"argv": argv, "env": env, "cwd": str(cwd), "out": out, "err": err, "stdin": stdin}
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        while True:
            for message in self._read(block=True):
                if "status" not in message:
                    return ZygoteRun(self, message["pid"])

    def _read(self, block: bool) -> list[dict[str, Any]]:
        """The messages the zygote has written (waiting for one when `block`); endings are
        recorded in `ended` as they are read."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        messages: list[dict[str, Any]] = []
        while True:
            ready, _, _ = select.select([fd], [], [], None if block and not messages else 0)
            if not ready:
                break
            data = os.read(fd, 65536)
            if not data:
                raise RuntimeError("the grader's zygote process ended")
            self.buffer += data
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                message = json.loads(line)
                if "status" in message:
                    self.ended[message["pid"]] = message["status"]
                messages.append(message)
            if messages:
                block = False
        return messages

    def returncode(self, pid: int) -> int | None:
        try:
            self._read(block=False)
        except RuntimeError:  # the zygote died (killed?): its runs' statuses are lost with it
            if pid not in self.ended and not _alive(pid):
                self.ended[pid] = -9  # read as killed: the grader reports the run as stopped
        return self.ended.get(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class ZygoteRun:
    """A run forked by the zygote, read as the grader reads a Popen."""

    def __init__(self, zygote: Zygote, pid: int):
        self.zygote = zygote
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.returncode(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The run's returncode once it ended; past `timeout` seconds, TimeoutExpired (as Popen's)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(["pytest"], timeout or 0.0)
            time.sleep(0.02)
        assert self.returncode is not None
        return self.returncode


_ZYGOTE: Zygote | None = None
_ZYGOTE_FAILED = False  # it could not start, or died: every later run is a fresh process


def launch(
    cmd: list[str], env: dict[str, str], cwd: Path, out: str, err: str | None = None, stdin: str = os.devnull
) -> subprocess.Popen[bytes] | ZygoteRun:
    """`cmd` (`python -m pytest ...`, or `python -c TEXT`) with `env` in `cwd`, stdout appended
    to the file `out` and stderr to `err` (None: `out` too), stdin read from the file `stdin`,
    in a session of its own: forked by the zygote where it can, else a fresh process."""
    global _ZYGOTE, _ZYGOTE_FAILED
    runs_here = cmd[:3] == [sys.executable, "-m", "pytest"] or (len(cmd) == 3 and cmd[:2] == [sys.executable, "-c"])
    if runs_here and hasattr(os, "fork") and not _ZYGOTE_FAILED:
        try:
            if _ZYGOTE is None or not _ZYGOTE.alive():
                _ZYGOTE = Zygote()
            argv = cmd[1:] if cmd[1] == "-c" else ["pytest", *cmd[3:]]
            return _ZYGOTE.start(argv, env, cwd, out, err or out, stdin)
        except (OSError, RuntimeError, ValueError):
            _ZYGOTE, _ZYGOTE_FAILED = None, True
    with open(out, "ab") as stream, open(err or out, "ab") as errors, open(stdin, "rb") as given:
        return subprocess.Popen(
            cmd, env=env, cwd=cwd, stdin=given, stdout=stream, stderr=errors, start_new_session=True
        )
