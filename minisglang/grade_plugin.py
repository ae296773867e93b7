"""The pytest plugin of `minisglang grade`: one JSON line per test event, appended to the file
named by $MINISGLANG_GRADE_EVENTS, so that a run killed half-way still says how far it got.

Events: {"event": "start", "test", "markers", "time"} when a test starts; {"event": "finish",
"test", "markers", "passed", "reason", "path", "line", "example", "timed_out", "blank"} when it ends
(blank: the tasks, as "4_4", whose `write this` stub the failing test ran into);
{"event": "collect_error", "path", "text"} when a test file cannot be imported.

Standard library only, and no import of minisglang: the grader copies this file next to
the run and loads it by its own name, so the plugin is always the grader's own, never the
(possibly broken) copy inside the student's package.
"""
from __future__ import annotations

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


def pytest_runtest_logstart(nodeid, location):
    _emit({"event": "start", "test": nodeid, "markers": _markers_of.get(nodeid, []), "time": time.time()})


def pytest_runtest_logreport(report):
    if report.failed and report.nodeid not in _failed:
        _failed[report.nodeid] = explain(report)


def pytest_runtest_logfinish(nodeid, location):
    failure = _failed.get(nodeid)
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
