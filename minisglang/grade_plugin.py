"""The pytest plugin of `minisglang grade`: one JSON line per test event, appended to the file
named by $MINISGLANG_GRADE_EVENTS, so that a run killed half-way still says how far it got.

Events: {"event": "start", "test", "markers", "time"} when a test starts; {"event": "finish",
"test", "markers", "passed", "reason", "path", "line", "example", "timed_out", "blank"} when it ends
(blank: the tasks, as "4_4", whose `write this` stub the failing test ran into; stacks: for a
test that timed out, where every thread was waiting, from faulthandler, in the graded files);
{"event": "collect_error", "path", "text"} when a test file cannot be imported.

Standard library only, and no import of minisglang: the grader copies this file next to
the run and loads it by its own name, so the plugin is always the grader's own, never the
(possibly broken) copy inside the student's package.
"""
from __future__ import annotations

import faulthandler
import json
import os
import re
import time
from pathlib import Path

EVENTS_ENV = "MINISGLANG_GRADE_EVENTS"
SKIP_ENV = "MINISGLANG_GRADE_SKIP"     # JSON list of test ids a restarted run leaves out

_markers_of: dict[str, list[str]] = {}
_failed: dict[str, dict] = {}
_EXAMPLE = re.compile(r"^(Falsifying example|Failing test case):", re.M)
_STUB = re.compile(r"task(\d+_\d+): write this")
_stacks = {"file": None, "timeout": None}


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


def pytest_collectreport(report):
    if report.failed:
        _emit({"event": "collect_error", "path": report.nodeid or str(report.fspath), "text": report.longreprtext})


def pytest_configure(config):
    try:
        _stacks["timeout"] = float(config.getoption("timeout") or 0) or None
    except (ValueError, TypeError):   # no pytest-timeout: no limit, no dump
        _stacks["timeout"] = None


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


def pytest_runtest_logfinish(nodeid, location):
    if _stacks["file"] is not None:
        faulthandler.cancel_dump_traceback_later()
        _stacks["file"].close()
        _stacks["file"] = None
    failure = _failed.get(nodeid)
    if failure is not None and failure.get("timed_out"):
        failure["stacks"] = thread_stacks(_stacks_path())
    _emit({"event": "finish", "test": nodeid, "markers": _markers_of.get(nodeid, []),
           "passed": failure is None, **(failure or {})})


def explain(report) -> dict:
    """The reason (first line of the error), where it was raised, and hypothesis's example."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longreprtext)
    example = None
    m = _EXAMPLE.search(text)
    if m:
        text, example = text[:m.start()], text[m.start():].strip()
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
    return {"reason": first, "path": crash.path if crash is not None else None,
            "line": crash.lineno if crash is not None else None, "example": example, "timed_out": timed_out,
            "blank": blank}


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
            out.append("  " + line[line.rindex("/minisglang/") + 1:].replace('", line ', ":"))
    # Threads with no frame in the graded files say nothing: drop their headers.
    return [ln for i, ln in enumerate(out) if ln.startswith("  ") or (i + 1 < len(out) and out[i + 1].startswith("  "))]
