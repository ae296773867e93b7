"""The pytest plugin of `minisglang grade`: one JSON line per test event, appended to the file
named by $MINISGLANG_GRADE_EVENTS, so that a run killed half-way still says how far it got.

Events: {"event": "start", "test", "markers", "time"} when a test starts; {"event": "finish",
"test", "markers", "passed", "reason", "path", "line", "example", "timed_out", "blank"} when it ends
(blank: the tasks, as "4_4", whose `write this` stub the failing test ran into; stacks: for a
test that timed out, where every thread was waiting, from faulthandler, in the graded files;
raised_in: the task, as "3_3", whose solution region holds the innermost graded frame of the
error's traceback, if any);
{"event": "collected", "tests": {test: markers}} once the run's tests are chosen;
{"event": "end", "status"} when pytest is done (the process may still wait for a thread);
{"event": "collect_error", "path", "text"} when a test file cannot be imported;
{"event": "os_exit", "status", "path", "line"} when code calls os._exit (where it was called); with
$MINISGLANG_GRADE_TRACE set (the reference only: `minisglang prerequisites`), {"event": "ran",
"test", "tasks"} before each finish: every task whose solution region ran a line during that
test (its setup included: a module's shared fixture counts for the first test that builds it).

Standard library only, and no import of minisglang: the grader copies this file next to
the run and loads it by its own name, so the plugin is always the grader's own, never the
(possibly broken) copy inside the student's package.
"""

from __future__ import annotations

import faulthandler
import json
import os
import re
import signal
import sys
import threading
import time
import tokenize
from pathlib import Path
from typing import NoReturn

EVENTS_ENV = "MINISGLANG_GRADE_EVENTS"
SKIP_ENV = "MINISGLANG_GRADE_SKIP"  # JSON list of test ids a restarted run leaves out
TRACE_ENV = "MINISGLANG_GRADE_TRACE"  # set: record which tasks' solution regions run

_markers_of: dict[str, list[str]] = {}
_failed: dict[str, dict] = {}
_EXAMPLE = re.compile(r"^(Falsifying example|Failing test case):", re.M)
_STUB = re.compile(r"task(\d+_\d+): write this")
_stacks: dict = {"file": None, "timeout": None}  # and "status", pytest's exit status once it has one


def _stacks_path() -> str | None:
    path = os.environ.get(EVENTS_ENV)
    return path + ".stacks" if path else None


def _emit(event: dict) -> None:
    path = os.environ.get(EVENTS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(event) + "\n")


def _task_markers(item) -> list[str]:
    return [m for m in item.keywords if m.startswith("task") and m[4:5].isdigit()]


def pytest_collection_modifyitems(config, items):
    skip_file = os.environ.get(SKIP_ENV)
    skip = set(json.loads(Path(skip_file).read_text())) if skip_file and Path(skip_file).exists() else set()
    if skip:
        config.hook.pytest_deselected(items=[i for i in items if i.nodeid in skip])
        items[:] = [i for i in items if i.nodeid not in skip]


def pytest_collection_finish(session):
    for item in session.items:
        _markers_of[item.nodeid] = _task_markers(item)
    # What this run will try: a test that never reports (the process died first) is one of these.
    _emit({"event": "collected", "tests": _markers_of})


def pytest_collectreport(report):
    if report.failed:
        _emit({"event": "collect_error", "path": report.nodeid or str(report.fspath), "text": report.longreprtext})


def pytest_sessionfinish(session, exitstatus):
    _stacks["status"] = int(exitstatus)


def pytest_unconfigure(config):
    # pytest is done; what is left is the interpreter's exit, which waits for every thread that
    # is not a daemon: the grader stops a process that has said this and still runs.
    if "status" in _stacks:
        _emit({"event": "end", "status": _stacks["status"]})


_real_exit = os._exit


def _noted_exit(status: int) -> NoReturn:
    """os._exit, after noting where it was called: the process ends at once (no traceback, no
    output), and a student's leftover `os._exit` once read only "it printed nothing"."""
    caller = sys._getframe(1)
    _emit({"event": "os_exit", "status": status, "path": caller.f_code.co_filename, "line": caller.f_lineno})
    _real_exit(status)


def pytest_configure(config):
    os._exit = _noted_exit  # (before the copy is imported: collection comes after)
    if os.environ.get(TRACE_ENV):
        _start_tracing()
    if config.pluginmanager.hasplugin("timeout"):
        config.pluginmanager.register(_Alarm(), "minisglang-grade-alarm")
    try:
        _stacks["timeout"] = float(config.getoption("timeout") or 0) or None
    except (ValueError, TypeError):  # no pytest-timeout: no limit, no dump
        _stacks["timeout"] = None


class TestTimedOut(BaseException):
    """A test ran past its time limit. Not an Exception: hypothesis takes an Exception (and
    pytest's own Failed, which pytest-timeout raises) for a failing example and replays it to
    shrink it, and an infinite loop replayed after the one alarm never ends. This passes
    through hypothesis, and pytest reports it as the test's failure."""

    __test__ = False  # not a test class, despite its name


class _Alarm:
    """pytest-timeout's alarm, raising TestTimedOut (its "signal" method only: the alarm
    interrupts the main thread; pytest-timeout keeps its thread method, and cancels either).
    Registered by pytest_configure where pytest-timeout runs (its hook exists only then)."""

    def pytest_timeout_set_timer(self, item, settings):
        if settings.method != "signal" or threading.current_thread() is not threading.main_thread():
            return None

        def stop(signum, frame):
            raise TestTimedOut(f"Timeout >{settings.timeout:g}s (pytest-timeout, the grader's limit)")

        def cancel():
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)

        item.cancel_timeout = cancel
        signal.signal(signal.SIGALRM, stop)
        signal.setitimer(signal.ITIMER_REAL, settings.timeout)
        return True


def pytest_runtest_logstart(nodeid, location):
    _emit({"event": "start", "test": nodeid, "markers": _markers_of.get(nodeid, []), "time": time.time()})
    # Just before pytest-timeout stops the test, faulthandler writes every thread's stack
    # (from its own thread, so a deadlocked main thread cannot stop it): where they waited.
    path, timeout = _stacks_path(), _stacks["timeout"]
    if path and timeout:
        _stacks["file"] = open(path, "w", encoding="utf-8")
        faulthandler.dump_traceback_later(max(timeout - 0.5, timeout * 0.9), file=_stacks["file"])


def pytest_runtest_logreport(report):
    if report.failed and report.nodeid not in _failed:
        _failed[report.nodeid] = explain(report)


def pytest_exception_interact(node, call, report):
    # After logreport: add whose code the error came from, for the grader's rows.
    failure = _failed.get(report.nodeid)
    if failure is not None and call.excinfo is not None:
        failure["raised_in"] = raised_in(call.excinfo.value, timed_out=bool(failure.get("timed_out")))


def raised_in(error: BaseException | None, timed_out: bool = False) -> str | None:
    """The task ("3_3") whose solution region holds the innermost frame of `error`'s
    traceback (or of the error it was raised from) that lies in a region, if one does.

    A timeout is different: the alarm stops a loop wherever it happens to be, often in a
    function the loop calls (task 1_2's endless worklist, stopped inside 1_1's walk_bytes).
    So when the stopped stack runs through the regions of several tasks, none is named."""
    found: list[str] = []
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        tb = error.__traceback__
        while tb is not None:
            for first, last, task in _regions_of_file(tb.tb_frame.f_code.co_filename):
                if first <= tb.tb_lineno <= last:
                    found.append(task[4:])
            tb = tb.tb_next
        if found:
            return None if timed_out and len(set(found)) > 1 else found[-1]
        error = error.__cause__ or error.__context__
    return None


def pytest_runtest_logfinish(nodeid, location):
    if os.environ.get(TRACE_ENV):
        _emit({"event": "ran", "test": nodeid, "tasks": sorted(_ran, key=lambda t: tuple(map(int, t[4:].split("_"))))})
        _ran.clear()
    if _stacks["file"] is not None:
        faulthandler.cancel_dump_traceback_later()
        _stacks["file"].close()
        _stacks["file"] = None
    failure = _failed.get(nodeid)
    if failure is not None and failure.get("timed_out"):
        failure["stacks"] = thread_stacks(_stacks_path())
    _emit(
        {
            "event": "finish",
            "test": nodeid,
            "markers": _markers_of.get(nodeid, []),
            "passed": failure is None,
            **(failure or {}),
        }
    )


# ---------------------------------------------------------------- which regions run (tracing)
_BEGIN = re.compile(r"^[ \t]*# BEGIN SOLUTION (task\d+_\d+)\s*$")
_END = re.compile(r"^[ \t]*# END SOLUTION\s*$")
_ran: set[str] = set()  # the tasks whose regions ran a line in the current test
_file_regions: dict[str, list[tuple[int, int, str]]] = {}
_code_regions: dict[object, list[tuple[int, int, str]]] = {}


def _regions_of_file(filename: str) -> list[tuple[int, int, str]]:
    """(first, last body line, 1-based, task) of each solution region in a graded file."""
    if filename not in _file_regions:
        regions, opened = [], None
        if "/minisglang/" in filename and "/tests/" not in filename and filename.endswith(".py"):
            try:
                with tokenize.open(filename) as f:  # in the encoding its coding line names (Latin-1)
                    lines = f.read().splitlines()
            except (OSError, SyntaxError, UnicodeDecodeError):
                lines = []
            for i, line in enumerate(lines, start=1):
                m = _BEGIN.match(line)
                if m:
                    opened = (m[1], i)
                elif _END.match(line) and opened is not None:
                    regions.append((opened[1] + 1, i - 1, opened[0]))
                    opened = None
        _file_regions[filename] = regions
    return _file_regions[filename]


def _trace_calls(frame, event, arg):
    """The global tracer: called on every Python call, it traces lines only in the functions
    that hold a solution region not yet seen in this test (everything else runs untraced)."""
    code = frame.f_code
    regions = _code_regions.get(code)
    if regions is None:
        lines = [n for _, _, n in code.co_lines() if n is not None] or [code.co_firstlineno]
        regions = [r for r in _regions_of_file(code.co_filename) if r[0] <= max(lines) and r[1] >= min(lines)]
        _code_regions[code] = regions
    regions = [r for r in regions if r[2] not in _ran]
    if not regions:
        return None

    def trace_lines(frame, event, arg):
        if event == "line":
            for first, last, task in regions:
                if first <= frame.f_lineno <= last:
                    _ran.add(task)
        return trace_lines

    return trace_lines


def _start_tracing() -> None:
    """Trace this thread and every thread started from now on. Compile workers run in other
    processes, where no tracer runs: while tracing, the grammar compiler runs on threads."""
    import sys
    import threading

    sys.settrace(_trace_calls)
    threading.settrace(_trace_calls)
    try:
        from minisglang.constrained import compile_service  # the reference: tracing never grades
    except ImportError:
        return
    init = compile_service.CompileService.__init__

    def on_threads(self, *args, **kwargs):
        kwargs["compile_in"] = "thread"
        init(self, *args, **kwargs)

    compile_service.CompileService.__init__ = on_threads  # type: ignore[method-assign]


def explain(report) -> dict:
    """The reason (first line of the error), where it was raised, and hypothesis's example."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longreprtext)
    example = None
    m = _EXAMPLE.search(text)
    if m:
        text, example = text[: m.start()], text[m.start() :].strip()
    # The first line: "AssertionError: the test's message", or pytest's "assert 3 == 4".
    lines = text.strip().splitlines()
    first = lines[0] if lines else "(no message)"
    # Under a test's own message pytest prints its comparison ("assert False == True",
    # "assert {8, 50} == {8}"): it says which way the answer is wrong, so it stays.
    compared = next((line.strip() for line in lines[1:6] if line.strip().startswith("assert ")), None)
    if compared and not first.startswith("assert "):
        first = f"{first} [{compared[:160]}]"
    timed_out = "Timeout" in first and "pytest-timeout" in first
    if timed_out:
        first = f"timed out after {report.duration:.0f} s (an infinite loop?)"
    if report.when != "call":
        first = f"{first} (during {report.when})"
    # The tasks whose stub this test ran into, anywhere: in the error, or in the captured
    # output (an engine test sees a stub as an aborted request, its traceback only logged).
    seen = str(report.longreprtext) + "".join(content for _, content in getattr(report, "sections", []))
    blank = sorted(set(_STUB.findall(seen)), key=lambda t: tuple(map(int, t.split("_"))))
    return {
        "reason": first,
        "path": crash.path if crash is not None else None,
        "line": crash.lineno if crash is not None else None,
        "example": example,
        "timed_out": timed_out,
        "blank": blank,
    }


def thread_stacks(path: str | None) -> list[str]:
    """faulthandler's dump, trimmed: each thread's header and its frames in the graded
    package (minisglang/...), innermost first; the test's and the libraries' frames left out."""
    try:
        text = open(path, encoding="utf-8").read() if path else ""
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(("Thread 0x", "Current thread 0x")):
            out.append(line.removesuffix(" (most recent call first):"))
        elif "/minisglang/" in line and "/tests/" not in line:
            out.append("  " + line[line.rindex("/minisglang/") + 1 :].replace('", line ', ":"))
    # Threads with no frame in the graded files say nothing: drop their headers.
    return [ln for i, ln in enumerate(out) if ln.startswith("  ") or (i + 1 < len(out) and out[i + 1].startswith("  "))]
