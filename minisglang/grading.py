"""`minisglang grade --stage STAGE [--impl DIR]`: the exercise autograder.

Every exercise test carries one pytest marker per task (`@pytest.mark.task1_3`). Grading
runs those tests in a fresh Python whose `minisglang` is imported from DIR (a student's
`minisglang checkout --student` copy) or from this package (the reference), collects each
test's outcome, and prints a table per task and a total line `N passed, M failed`.

This module is also the pytest plugin that collects the outcomes (`-p minisglang.grading`).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .checkout import PACKAGE_DIR, all_tasks, stage_number

REPO_TESTS = PACKAGE_DIR.parent / "tests"
_RESULTS_ENV = "MINISGLANG_GRADE_RESULTS"
IMPL_ENV = "MINISGLANG_IMPL"   # tests/conftest.py checks that minisglang came from there


@dataclass
class TaskResult:
    task: str
    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def run_task_tests(stage: str, impl: str | Path | None = None, tests_dir: Path = REPO_TESTS,
                   timeout: float = 1800) -> dict[str, TaskResult]:
    """Run the stage's task tests against `impl` (None = reference); results per task."""
    tasks = sorted(all_tasks(stage), key=_task_key)
    if not tasks:
        raise ValueError(f"stage {stage} has no exercise tasks")
    results_file = Path(os.environ.get("TMPDIR", "/tmp")) / f"minisglang-grade-{os.getpid()}-{stage}.json"
    env = dict(os.environ, **{_RESULTS_ENV: str(results_file)})
    if impl is not None:
        impl = Path(impl).resolve()
        if not (impl / "minisglang" / "__init__.py").exists():
            raise FileNotFoundError(f"{impl} holds no minisglang package (make it with "
                                    f"`minisglang checkout {stage} {impl} --student`)")
        env["PYTHONPATH"] = str(impl) + os.pathsep + env.get("PYTHONPATH", "")
        env[IMPL_ENV] = str(impl)
    # Only the files that test this stage's tasks: a checkout of s3 has no s4 modules for the
    # other test files to import.
    files = sorted(str(f) for f in tests_dir.glob("test_*.py")
                   if any(f"pytest.mark.{t}" in f.read_text(encoding="utf-8") for t in tasks))
    cmd = [sys.executable, "-m", "pytest", *files, "-q", "-p", "minisglang.grading",
           "-p", "no:cacheprovider", "-m", " or ".join(tasks)]
    # `python -m` puts the working directory first on sys.path: run from the copy being
    # graded, so that its `minisglang` is the one imported.
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=impl if impl is not None else tests_dir.parent)
    if not results_file.exists():
        raise RuntimeError(f"the graded test run produced no results:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    outcomes = json.loads(results_file.read_text())
    results_file.unlink()
    table = {t: TaskResult(t) for t in tasks}
    for nodeid, (markers, ok) in outcomes.items():
        for t in markers:
            if t in table:
                (table[t].passed if ok else table[t].failed).append(nodeid)
    return table


def format_table(table: dict[str, TaskResult]) -> str:
    lines = [f"{'task':10s} {'passed':>6s} {'failed':>6s}  status", "-" * 34]
    for t, r in table.items():
        total = len(r.passed) + len(r.failed)
        status = "no tests!" if total == 0 else ("ok" if not r.failed else "FAIL")
        lines.append(f"{t:10s} {len(r.passed):6d} {len(r.failed):6d}  {status}")
    npass = sum(len(r.passed) for r in table.values())
    nfail = sum(len(r.failed) for r in table.values())
    lines.append(f"{npass} passed, {nfail} failed")
    return "\n".join(lines)


def _task_key(task: str) -> tuple[int, int]:
    n, m = task[4:].split("_")
    return int(n), int(m)


# ---------------------------------------------------------------------- pytest plugin
_outcomes: dict[str, tuple[list[str], bool]] = {}


def pytest_runtest_logreport(report):  # pragma: no cover - runs inside the graded pytest
    markers = [m for m in report.keywords if m.startswith("task") and m[4:5].isdigit()]
    ok_so_far = _outcomes.get(report.nodeid, (markers, True))[1]
    if report.when == "call" or report.failed:
        _outcomes[report.nodeid] = (markers, ok_so_far and report.passed)


def pytest_sessionfinish(session):  # pragma: no cover
    path = os.environ.get(_RESULTS_ENV)
    if path:
        Path(path).write_text(json.dumps(_outcomes))


def grade(stage: str, impl: str | None = None) -> int:
    """The CLI entry: print the table; exit status 0 only when every task test passed."""
    table = run_task_tests(stage, impl)
    print(f"grading stage {stage} against {'the reference' if impl is None else impl}")
    print(format_table(table))
    return 0 if all(r.passed and not r.failed for r in table.values()) else 1


__all__ = ["run_task_tests", "format_table", "grade", "stage_number"]
