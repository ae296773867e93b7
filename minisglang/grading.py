"""`minisglang grade --stage STAGE [--impl DIR ...]`: the exercise autograder, which explains.

Every exercise test carries one pytest marker per task (`@pytest.mark.task1_3`). Grading
runs those tests in a fresh Python whose `minisglang` is imported from DIR (a student's
`minisglang checkout --student` copy) or from this package (the reference), and reports,
per task, the tests that passed and, for each one that failed, why: the assertion message
or the first line of the error, where it was raised, and hypothesis's failing example.

What can go wrong in a student's copy, and what the grader says:
- a syntax error: the file and line (checked before any test runs; the tests that import
  the file cannot even be collected);
- an import error: the file and line of the failing import, for every task whose tests
  live in the test file that could not be imported;
- an infinite loop: pytest-timeout stops the test after `timeout` seconds ("timed out");
  a loop that pytest-timeout cannot interrupt (inside hypothesis's replay, or in C code)
  is stopped by a watchdog here, which kills the run and starts it again without the
  tests already done. The test is named either way.

The graded pytest reports each test's outcome through grade_plugin.py (one JSON line per
event), so that a run killed half-way still says how far it got.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tokenize
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import grade_plugin
from .checkout import PACKAGE_DIR, all_tasks, copy_stage, find_solution_regions, is_stub, stage_number, task_key

REPO_TESTS = PACKAGE_DIR.parent / "tests"
PLUGIN_NAME = "minisglang_grade_plugin"  # grade_plugin.py, copied under this name for the run
IMPL_ENV = "MINISGLANG_IMPL"  # tests/conftest.py checks that minisglang came from there
DEFAULT_TEST_TIMEOUT = 60.0
MAX_CRASHES = 20  # runs of a copy that may end during a test, each started again after that test
EXIT_GRACE = 30.0  # seconds a test process may take to exit after its tests (then it is stopped)
EXERCISES_DIR = PACKAGE_DIR.parent / "exercises"
PREREQUISITES_FILE = EXERCISES_DIR / "prerequisites.json"  # written by `minisglang prerequisites --write`


@dataclass
class Failure:
    """One failing test and why."""

    test: str  # pytest node id, e.g. tests/test_exercises_s1.py::test_x
    reason: str  # first line of the error, e.g. "AssertionError: ..."
    where: str | None = None  # "minisglang/x.py:12" when it was raised in the graded package
    example: str | None = None  # hypothesis's failing example, when there is one
    timed_out: bool = False
    blank: list[str] = field(default_factory=list)  # tasks ("4_4") whose stub the test ran into
    stacks: list[str] = field(default_factory=list)  # a timed-out test: where its threads waited
    raised_in: str | None = None  # the task ("3_3") whose region the error came from, if one
    marked: list[str] = field(default_factory=list)  # the test's own tasks, when moved to raised_in's row


# A reason longer than this is cut: a student's `raise ValueError("long " * 400_000)` once
# printed 6 MB on the instructor's terminal (an instructor's test).
MAX_REASON = 2000


def shortened(reason: str) -> str:
    """`reason`, cut to MAX_REASON characters with a note of how much was left out."""
    if len(reason) <= MAX_REASON:
        return reason
    return f"{reason[:MAX_REASON]} ... ({len(reason) - MAX_REASON:,} more characters)"


@dataclass
class FileError:
    """A student's file that does not compile or import: the tests never ran."""

    path: str
    line: int | None
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}" if self.line else f"{self.path}: {self.message}"


@dataclass
class TaskResult:
    task: str
    passed: list[str] = field(default_factory=list)
    failed: list[Failure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.passed) and not self.failed


@dataclass
class GradeReport:
    """Everything one grading run found; `to_json()` is the `--json` file."""

    stage: str
    impl: str | None  # None: the reference
    tasks: dict[str, TaskResult]
    file_errors: list[FileError] = field(default_factory=list)
    output: str = ""  # pytest's own output, every run of it (for --verbose)
    blank: list[str] = field(default_factory=list)  # tasks ("task4_4") still a stub in the copy
    ran: dict[str, list[str]] = field(default_factory=dict)  # trace=True: test -> tasks whose regions it ran
    notes: list[str] = field(default_factory=list)  # what the copy's tests left running

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.tasks.values())

    def to_json(self) -> dict:
        prerequisites = load_prerequisites()
        return {
            "stage": self.stage,
            "impl": self.impl,
            "ok": self.ok,
            "passed": sum(len(r.passed) for r in self.tasks.values()),
            "failed": sum(len(r.failed) for r in self.tasks.values()),
            "file_errors": [asdict(e) for e in self.file_errors],
            "notes": self.notes + _stub_passes(self),
            "tasks": {
                t: {
                    "ok": r.ok,
                    "status": task_status(t, self, prerequisites),
                    "blank": t in self.blank,
                    "needs": task_needs(t, self, prerequisites),
                    "passed": r.passed,
                    "failed": [asdict(f) for f in r.failed],
                }
                for t, r in self.tasks.items()
            },
        }


# ---------------------------------------------------------------------- running the tests
def select_tasks(stage: str, only: list[str] | None = None) -> list[str]:
    """The stage's tasks in order, or the ones `only` names ("5_3" or "task5_3"); a name
    that is not one of the stage's tasks is an error listing the stage's tasks."""
    tasks = sorted(all_tasks(stage), key=task_key)
    if not tasks:
        raise ValueError(f"stage {stage} has no exercise tasks")
    if not only:
        return tasks
    wanted = [t if t.startswith("task") else f"task{t}" for t in only]
    unknown = [t for t in wanted if t not in tasks]
    if unknown:
        raise ValueError(
            f"stage {stage} has no task {', '.join(u[4:] for u in unknown)}; "
            f"its tasks are {', '.join(t[4:] for t in tasks)}"
        )
    return [t for t in tasks if t in wanted]


def run_task_tests(
    stage: str,
    impl: str | Path | None = None,
    tests_dir: Path = REPO_TESTS,
    test_timeout: float = DEFAULT_TEST_TIMEOUT,
    total_timeout: float = 1800,
    only: list[str] | None = None,
    trace: bool = False,
    collect_timeout: float | None = None,
) -> GradeReport:
    """Run the stage's task tests (or those of the tasks `only` names) against `impl`
    (None = reference) and explain the failures. `trace` (the reference only): also record
    in `report.ran`, per test, every task whose solution region it ran. `collect_timeout`:
    seconds a copy's run may take to collect its tests (default: 120, or the per-test grace if
    longer; the reference's, no limit)."""
    tasks = select_tasks(stage, only)
    package = PACKAGE_DIR
    # The source is what is graded (and traced): never the reference's compiled build.
    env = dict(os.environ, MINISGLANG_PURE="1")
    if impl is not None:
        impl = Path(impl).resolve()
        package = (impl / "minisglang").resolve()  # a link to the student's package elsewhere: graded there
        if not (package / "__init__.py").exists():
            raise FileNotFoundError(
                f"{impl} holds no minisglang package (make it with `minisglang checkout {stage} {impl} --student`)"
            )
        if package == PACKAGE_DIR.resolve():
            raise ValueError(f"{impl / 'minisglang'} is a link to the reference package ({PACKAGE_DIR}), not a copy")
        held = copy_stage(package)
        if held is not None and held < stage_number(stage):
            # (its tests would fail to import a later stage's module: "an error in your code")
            raise ValueError(
                f"{impl} is a checkout of stage s{held}, not {stage}: grade it with --stage s{held}, or bring "
                f"it to {stage} with `minisglang checkout {stage} NEW_DIR --student --from ...`"
            )
    report = GradeReport(
        stage,
        None if impl is None else str(impl),
        {t: TaskResult(t) for t in tasks},
        file_errors=syntax_errors(package),
        blank=blank_tasks(package),
    )
    files = _test_files(tests_dir, tasks)
    cmd = _pytest_cmd(files, tasks, test_timeout)
    cwd = tests_dir.parent
    where_from = tests_dir.parent if impl is None else impl  # what the paths in pytest's output are relative to
    deadline = time.monotonic() + total_timeout
    if impl is None and collect_timeout is None:
        collect_timeout = float("inf")  # the reference never loops while imported: never stop its collection
    done: dict[str, tuple[list[str], Failure | None]] = {}
    chosen: dict[str, list[str]] = {}  # every test a run set out to run -> its tasks
    outputs = []
    crashes = 0  # runs that ended during a test
    with tempfile.TemporaryDirectory(prefix="minisglang-grade-") as tmp:
        if impl is not None:
            # The copy's package, and only it, first on sys.path (`python -m` puts the working
            # directory there): a folder holding a copy of it. Not the copy's own folder, where
            # a student's scratch random.py beside the package replaced the standard library's
            # (pytest could not start: every task read "no tests!", with no reason). And its
            # source only: a .pyc shipped in its __pycache__ ("unchecked-hash": Python never
            # compares it with the source) once passed a task whose source was the stub.
            cwd = Path(tmp) / "graded-copy"
            cwd.mkdir()
            shutil.copytree(package, cwd / "minisglang", symlinks=True, ignore=_compiled)
            env["PYTHONPATH"] = str(cwd) + os.pathsep + env.get("PYTHONPATH", "")
            env[IMPL_ENV] = str(cwd)
        events_path, skip_path = _with_plugin(env, Path(tmp)), Path(tmp) / "skip.json"
        env[grade_plugin.SKIP_ENV] = str(skip_path)
        if trace:
            env[grade_plugin.TRACE_ENV] = "1"
        while True:
            skip_path.write_text(json.dumps(sorted(done)))
            events_path.write_text("")
            stuck, output, returncode, left = _run_until_stuck(
                cmd, env, cwd, events_path, test_timeout, deadline, collect_timeout
            )
            report.notes += [n for n in left if n not in report.notes]
            events = _read_events(events_path)
            if impl is not None:  # paths through the link are the copy's own
                output = output.replace(str(cwd), str(impl))
                events = json.loads(json.dumps(events).replace(json.dumps(str(cwd))[1:-1], json.dumps(str(impl))[1:-1]))
            outputs.append(output)
            for e in events:
                if e["event"] == "collected":
                    chosen.update(e["tests"])
            if stuck is None and returncode == 5 and done:
                break  # every test left was skipped (done before a kill): nothing more to run
            if impl is None and stuck is None and returncode not in (0, 1) and not events:
                # pytest itself failed (a bad option, a broken plugin): nothing to explain. (A
                # copy's run that ends so is the copy's doing: `_unrun_tasks` below says how.)
                raise RuntimeError(f"the graded test run failed (exit status {returncode}):\n{output[-3000:]}")
            _collect(
                events,
                done,
                report,
                files,
                package,
                where_from,
                tests_dir.parent,
                lambda: reference_tests(tasks, tests_dir),
            )
            if stuck is None:
                # A test that started and never finished: the process ended during it (a
                # KeyboardInterrupt, an os._exit, a crash in the code it ran). That test fails,
                # saying so, and the tests after it run in a new process: a KeyboardInterrupt in
                # 1_1's code once left 1_3-1_5, whose code was right, 0 ("did not run").
                running = _running_test(_read_events(events_path))
                if running is None or crashes >= MAX_CRASHES or time.monotonic() >= deadline:
                    break
                crashes += 1
                done[running[0]] = (running[1], _ended_during(running[0], returncode, output, package, where_from))
                continue
            nodeid, markers, why = stuck
            stacks = grade_plugin.thread_stacks(str(events_path) + ".stacks")
            done[nodeid] = (markers, Failure(nodeid, why, timed_out=True, stacks=stacks))
            if time.monotonic() >= deadline or nodeid == "<collection>":
                break  # (a run that could not collect its tests would not the next time either)
    # A test that never reported: the process ended before it (os._exit, a KeyboardInterrupt,
    # a crash); an instructor's test once read "ok" for a task after 2 of its 7 tests.
    ended = f"exit status {returncode}" if stuck is None else "stopped by the grader"
    for nodeid, markers in chosen.items():
        if nodeid not in done:
            why = (
                f"did not run: the test process ended before it ({ended}; an os._exit, "
                "a KeyboardInterrupt or a crash in an earlier test?)"
            )
            done[nodeid] = (markers, Failure(nodeid, why))
    for nodeid, (markers, failure) in done.items():
        for t in markers:
            if t in report.tasks:
                (report.tasks[t].passed.append(nodeid) if failure is None else report.tasks[t].failed.append(failure))
    if impl is not None and (stuck is not None or returncode not in (0, 1, 5)):
        _unrun_tasks(report, tasks, tests_dir, "\n".join(outputs), ended, stuck, package, where_from)
    attribute_failures(report)
    report.output = "\n".join(outputs)
    return report


def _compiled(folder: str, names: list[str]) -> list[str]:
    """The compiled code in `folder` (a copytree ignore): Python would run it instead of the source."""
    return [n for n in names if n == "__pycache__" or n.endswith((".pyc", ".pyo", ".so", ".pyd"))]


def _ended_during(test: str, returncode: int, output: str, package: Path, where_from: Path) -> Failure:
    """The failure of `test`, during which the test process ended (`returncode`; `output`,
    pytest's, may name the line)."""
    tail = output[-20_000:]
    if "KeyboardInterrupt" in tail:
        what = "a KeyboardInterrupt"
    elif returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else -returncode
        what = f"killed by {name}: a crash?"
    else:
        what = f"exit status {returncode}: an os._exit?"
    err = _import_error(tail, package, where_from) if tail.strip() else None
    where = f"{err.path}:{err.line}" if err is not None and err.line else None
    return Failure(
        test, f"the test process ended during this test ({what}); the tests after it ran in a new one", where
    )


def _with_plugin(env: dict[str, str], tmp: Path) -> Path:
    """Put the grading plugin where `env`'s pytest imports it (a copy in `tmp`, on its
    PYTHONPATH) and point its events at a file in `tmp`: that file's path."""
    shutil.copy(grade_plugin.__file__, tmp / f"{PLUGIN_NAME}.py")
    env["PYTHONPATH"] = env.get("PYTHONPATH", "") + os.pathsep + str(tmp)
    events_path = tmp / "events.jsonl"
    env[grade_plugin.EVENTS_ENV] = str(events_path)
    return events_path


def _test_files(tests_dir: Path, tasks: list[str]) -> dict[Path, list[str]]:
    """The test files that test `tasks`, each with the ones it tests. Only those: a checkout
    of s3 has no s4 modules for the other test files to import."""
    files = {
        f: [t for t in tasks if re.search(rf"pytest\.mark\.{t}\b", f.read_text(encoding="utf-8"))]
        for f in sorted(tests_dir.glob("test_*.py"))
    }
    return {f: ts for f, ts in files.items() if ts}


def _pytest_cmd(files: dict[Path, list[str]], tasks: list[str], test_timeout: float) -> list[str]:
    # --tb=native: Python's own tracebacks. The report reads only the error's last line and the
    # stubs it names; pytest's long form (source and locals of every frame) took half the time
    # of grading a blank copy, 288 failures.
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *map(str, files),
        "-q",
        "-p",
        PLUGIN_NAME,
        "-p",
        "no:cacheprovider",
        "-m",
        " or ".join(tasks),
        "--continue-on-collection-errors",
        "-o",
        "addopts=--strict-markers",
        "--tb=native",
    ]
    if importlib.util.find_spec("pytest_timeout") is not None:  # a plugin pytest loads itself
        cmd += [f"--timeout={test_timeout:g}"]
    return cmd


_REFERENCE_TESTS: dict[tuple[str, ...], dict[str, list[str]]] = {}


def reference_tests(tasks: list[str], tests_dir: Path = REPO_TESTS) -> dict[str, list[str]]:
    """Test id -> its tasks (of `tasks`), as pytest collects them against the reference (run
    from `tests_dir`'s parent, as grading the reference does): the real tests of a copy whose
    test files could not be imported, so that each of its tasks scores 0 of its real count
    (an instructor's class: a syntax error read 0/1 per task beside the others' 0/3 and 0/7).
    {} where the reference's collection fails too. Collected once per process and tests."""
    key = (str(tests_dir), *tasks)
    if key not in _REFERENCE_TESTS:
        files = _test_files(tests_dir, tasks)
        collected: dict[str, list[str]] = {}
        with tempfile.TemporaryDirectory(prefix="minisglang-collect-") as tmp:
            env = dict(os.environ, MINISGLANG_PURE="1")
            env.pop(IMPL_ENV, None)
            env.pop(grade_plugin.SKIP_ENV, None)
            events_path = _with_plugin(env, Path(tmp))
            try:
                subprocess.run(
                    [*_pytest_cmd(files, tasks, DEFAULT_TEST_TIMEOUT), "--collect-only"],
                    env=env,
                    cwd=tests_dir.parent,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=600,
                )
            except subprocess.TimeoutExpired:
                pass
            for e in _read_events(events_path):
                if e["event"] == "collected":
                    collected.update(e["tests"])
        tests = {test: [m for m in markers if m in tasks] for test, markers in collected.items()}
        _REFERENCE_TESTS[key] = {test: markers for test, markers in tests.items() if markers}
    return _REFERENCE_TESTS[key]


def attribute_failures(report: GradeReport) -> None:
    """Move a failure raised in another graded task's code to that task's row, when that
    task also fails a test of its own: then its code is the likely culprit, and the test's
    own task reads ok if the rest of its tests pass. Where the other task passes all of its
    own tests, the error more likely came from how this task called it: it stays (and the
    report says whose code raised it). A stub's error stays too: the row says what it needs."""
    own_failure = {t: {f.test for f in r.failed} for t, r in report.tasks.items()}
    for t, r in report.tasks.items():
        for f in list(r.failed):
            other = f"task{f.raised_in}" if f.raised_in else None
            if other is None or other == t or other not in report.tasks or _STUB.match(f.reason):
                continue
            if own_failure[other] - {f.test}:  # the other task fails a test of its own too
                f.marked = [m for m, res in report.tasks.items() if f in res.failed]
                for m in f.marked:
                    report.tasks[m].failed.remove(f)
                report.tasks[other].failed.append(f)


def _run_until_stuck(
    cmd, env, cwd, events_path: Path, test_timeout: float, deadline: float, collect_timeout: float | None = None
):
    """Run pytest; kill it if one test runs far past its timeout, if it has not collected its
    tests within `collect_timeout` (a copy that loops while it is imported: pytest-timeout
    times tests, not collection), or if the whole run passes the deadline. A process that
    has finished its tests and still runs EXIT_GRACE seconds later (a thread that is not a daemon
    keeps it alive) is stopped too, and whatever it started that still runs ends with it.
    Returns ((test, markers, reason) or None, pytest's output, its exit status, notes for the
    copy's report on what it left running)."""
    grace = 1.5 * test_timeout + 10  # pytest-timeout fires first when it can
    collect_limit = max(grace, 120.0) if collect_timeout is None else collect_timeout
    started = time.monotonic()
    with tempfile.TemporaryFile() as out:
        # A session of its own, so that a kill also ends the processes it started (the s3
        # compile workers of a stuck test).
        proc = subprocess.Popen(
            cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        stuck, ended, left = None, None, []
        while proc.poll() is None:
            time.sleep(0.2)
            events = _read_events(events_path)  # (once a tick: the three questions below read them)
            running = _running_test(events)
            now = time.monotonic()
            if ended is None and (status := _end_status(events)) is not None:
                ended = (status, now)  # pytest is done: the process has EXIT_GRACE to end
            if ended is not None:
                if now - ended[1] > EXIT_GRACE:
                    left.append(
                        f"the test process did not exit {EXIT_GRACE:g} s after its tests ended (a thread that is "
                        "not a daemon, still running?): the grader stopped it"
                    )
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    break
            elif running is not None and time.time() - running[2] > grace:
                stuck = (
                    running[0],
                    running[1],
                    f"timed out: ran past the {test_timeout:g} s limit "
                    f"(an infinite loop?); the grader stopped it after {grace:.0f} s",
                )
            elif now > deadline:
                stuck = (
                    (running[0], running[1], "timed out: the whole grading run ran out of time")
                    if running
                    else ("<collection>", [], "timed out before any test started")
                )
            elif running is None and now - started > collect_limit and not _collected(events):
                stuck = ("<collection>", [], f"timed out: no test started within {collect_limit:g} s")
            if stuck is not None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
        # What the run started and left running (a child process of the copy's code) ends too.
        if stuck is None and not left and _group_alive(proc.pid, wait=3.0):
            left.append("the tests left a process running (started by your code?): the grader ended it")
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return stuck, _head_and_tail(out), proc.returncode if ended is None else ended[0], left


# A run's output kept (its head and its tail, in bytes): a copy that printed 500 MB per call
# in a failing test once left the grader holding 7.7 GB (an attacker's test).
MAX_OUTPUT = 1_000_000


def _head_and_tail(out) -> str:
    """The text of the binary file `out`, at most MAX_OUTPUT bytes of it: its head (a
    fifth) and its tail, where pytest writes its summary and the errors the report reads."""
    size = out.seek(0, os.SEEK_END)
    head = MAX_OUTPUT // 5
    if size <= MAX_OUTPUT:
        out.seek(0)
        return out.read().decode("utf-8", "replace")
    out.seek(0)
    first = out.read(head).decode("utf-8", "replace")
    out.seek(size - (MAX_OUTPUT - head))
    last = out.read().decode("utf-8", "replace")
    return f"{first}\n... ({size - MAX_OUTPUT:,} bytes of pytest's output left out) ...\n{last}"


def _read_events(events_path: Path) -> list[dict]:
    """The plugin's events so far (a line cut short by a kill, or being written, is skipped)."""
    try:
        lines = events_path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    events = []
    for line in lines:
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events


def _group_alive(group: int, wait: float = 0.0) -> bool:
    """Whether a process of process group `group` still runs (not only exited, waiting to be
    reaped) after `wait` seconds: the reference's own compile workers may take a moment to end
    after the test process. Reads /proc: False where there is none."""
    until = time.monotonic() + wait
    while True:
        alive = False
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (name)": state, ppid, pgrp
            except (OSError, IndexError):
                continue
            alive = alive or (fields[2] == str(group) and fields[0] != "Z")
        if not alive or time.monotonic() >= until:
            return alive
        time.sleep(0.1)


def _end_status(events: list[dict]) -> int | None:
    """pytest's exit status, once the plugin said pytest is done (its "end" event) in `events`."""
    return next((e["status"] for e in events if e["event"] == "end"), None)


def _collected(events: list[dict]) -> bool:
    """Whether the run has chosen its tests (the plugin's "collected" event) in `events`."""
    return any(e["event"] == "collected" for e in events)


def _running_test(events: list[dict]) -> tuple[str, list[str], float] | None:
    """The test that started last in `events` and has not finished, with its markers and start time."""
    for event in reversed(events):
        if event["event"] == "start":
            return event["test"], event["markers"], event["time"]
        if event["event"] == "finish":
            return None
    return None


def _collect(events, done, report: GradeReport, files, package: Path, cwd: Path, rootdir: Path, reference=dict) -> None:
    """Fold one run's events into `done` (test -> failure or None) and the report's errors.
    Test ids are relative to pytest's `rootdir`; traceback paths to `cwd`, where it ran.
    `reference()`: `reference_tests`, the tests a file that cannot be imported holds."""
    for e in events:
        if e["event"] == "ran":
            report.ran[e["test"]] = e["tasks"]
        elif e["event"] == "finish":
            failure = None
            if not e["passed"]:
                failure = Failure(
                    e["test"],
                    shortened(e["reason"]),
                    _where(e.get("path"), e.get("line"), package, cwd),
                    e.get("example"),
                    e.get("timed_out", False),
                    e.get("blank", []),
                    e.get("stacks", []),
                    e.get("raised_in"),
                )
            done[e["test"]] = (e["markers"], failure)
        elif e["event"] == "collect_error":
            # A test file that cannot be imported: every task it tests fails with the reason.
            err = _import_error(e["text"], package, cwd)
            if (
                err.path
                and err not in report.file_errors
                and not any(f.path == err.path and f.line == err.line for f in report.file_errors)
            ):
                report.file_errors.append(err)
            path = (rootdir / e["path"]).resolve()
            why = f"the tests could not be imported: {err}"
            for f, tasks in files.items():
                if f.resolve() == path:
                    # Each of the file's tests fails, as many as the reference collects there;
                    # one per task where it collects none.
                    mine = {
                        test: [t for t in markers if t in tasks]
                        for test, markers in reference().items()
                        if test.startswith(f"{e['path']}::")
                    }
                    mine = {test: markers for test, markers in mine.items() if markers}
                    for test, markers in mine.items():
                        done.setdefault(test, (markers, Failure(test, why)))
                    for t in tasks:
                        if not any(t in markers for markers in mine.values()):
                            done[f"{e['path']}::<import>[{t}]"] = ([t], Failure(e["path"], why))


def _where(path: str | None, line: int | None, package: Path, cwd: Path | None = None) -> str | None:
    if not path:
        return None
    try:
        rel = ((cwd or Path.cwd()) / path).resolve().relative_to(package.parent)
    except ValueError:
        return None  # raised in the tests or a library, not in the graded code
    return f"{rel}:{line}"


_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+)|^(?P<path2>\S+\.py):(?P<line2>\d+)', re.M)


def _import_error(text: str, package: Path, cwd: Path) -> FileError:
    """The deepest frame of a collection traceback that is in the graded package, and the error."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    message = next(
        (ln.removeprefix("E").strip() for ln in reversed(lines) if re.match(r"E?\s*\w*(Error|Exception|Exit)\b", ln)),
        lines[-1] if lines else "?",
    )
    path, line = "", None
    for m in _FRAME.finditer(text):
        p, n = (m["path"], m["line"]) if m["path"] else (m["path2"], m["line2"])
        where = _where(p, int(n), package, cwd)
        if where is not None:
            path, line = where.rsplit(":", 1)[0], int(n)
    return FileError(path or "(the tests)", line, message)


def blank_tasks(package: Path) -> list[str]:
    """The tasks ("task4_4") with a region in `package` that is still the checkout's stub."""
    blank: set[str] = set()
    for path in package.rglob("*.py"):
        try:
            with tokenize.open(path) as f:  # in the encoding its coding line names, as Python reads it
                lines = f.read().splitlines()
            regions = find_solution_regions("\n".join(lines))
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):  # syntax_errors or the tests report these
            continue
        blank.update(task for task, begin, end in regions if is_stub(lines[begin + 1 : end], task))
    return sorted(blank, key=task_key)


def syntax_errors(package: Path) -> list[FileError]:
    """Every .py file of the package that does not compile: file, line, message."""
    errors = []
    for path in sorted(package.rglob("*.py")):
        if path.is_dir():
            continue  # a folder named notes.py: no module (Python imports no such thing)
        try:
            # The bytes, as Python reads them: a BOM, or a coding line (Latin-1), is no error.
            compile(path.read_bytes(), str(path), "exec")
        except SyntaxError as e:
            errors.append(FileError(str(path.relative_to(package.parent)), e.lineno, f"{type(e).__name__}: {e.msg}"))
        except (UnicodeDecodeError, ValueError) as e:
            errors.append(FileError(str(path.relative_to(package.parent)), None, f"{type(e).__name__}: {e}"))
        except (RecursionError, MemoryError) as e:  # one expression nested too deep: no import either
            msg = f"{type(e).__name__}: an expression too deep for Python to compile"
            errors.append(FileError(str(path.relative_to(package.parent)), None, msg))
        except OSError as e:  # a link to a file that is not there, a file the grader may not read
            why = "a link to a file that is not there" if path.is_symlink() and not path.exists() else e.strerror
            errors.append(FileError(str(path.relative_to(package.parent)), None, f"cannot be read: {why}"))
    return errors


# ---------------------------------------------------------------------- prerequisites
def _stored(path: Path | None) -> dict[str, dict[str, list[str]]]:
    try:
        return json.loads((path or PREREQUISITES_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}


def load_prerequisites(path: Path | None = None) -> dict[str, list[str]]:
    """task -> the other tasks its tests run, as stored in PREREQUISITES_FILE by `minisglang
    prerequisites --write` ({} where there is none: `grade` then names only the stubs a
    failure ran into)."""
    return _stored(path).get("tasks", {})


def load_test_runs(path: Path | None = None) -> dict[str, list[str]]:
    """test id -> every task whose code that test runs on the reference (stored beside the
    prerequisites): which task a failing test can blame, when it ran several."""
    return _stored(path).get("tests", {})


def needed_tasks(task: str, data: dict[str, list[str]]) -> list[str]:
    """Every other task whose code `task`'s tests run, in order: the whole chain at once (the
    trace already follows every call, so a task reached through another one is in it)."""
    return sorted((t for t in data.get(task, []) if t != task), key=task_key)


# ---------------------------------------------------------------------- printing
# What a terminal obeys: control characters (but the line feed and the tab), and the marks that
# reverse the direction of text. A copy's error message held cursor moves and erasures, which
# rewrote its own report on the instructor's screen (an attacker's test).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _shown(text: str) -> str:
    """`text` with every character a terminal would obey written as its escape (\\x1b)."""
    return _CONTROL.sub(lambda m: m[0].encode("unicode_escape").decode("ascii"), text)


def format_report(report: GradeReport) -> str:
    """The per-task table, then each failing test with its reason."""
    lines = [f"grading stage {report.stage} against {report.impl or 'the reference'}"]
    for e in report.file_errors:
        lines.append(f"ERROR in your code: {e}")
    lines += [f"{'task':10s} {'passed':>6s} {'failed':>6s}  status", "-" * 34]
    prerequisites = load_prerequisites()
    for t, r in report.tasks.items():
        total = len(r.passed) + len(r.failed)
        moved = _moved_out(t, report)
        status = "no tests!" if total + len(moved) == 0 else ("ok" if r.ok else "FAIL")
        if not r.failed and not r.passed and moved:  # (not "no tests!": an attacker's 1_2 read so)
            rows = sorted({o[4:] for o, res in report.tasks.items() for f in res.failed if f in moved})
            count = len(moved)
            status += f" (its {count} failing test{'s are' if count > 1 else ' is'} counted in {', '.join(rows)}'s row)"
        waits = task_needs(t, report, prerequisites)
        if waits:  # the failures run into other tasks' stubs: say which, in the row
            status += f" (needs {', '.join(waits)})"
        lines.append(f"{t:10s} {len(r.passed):6d} {len(r.failed):6d}  {status}")
    npass = sum(len(r.passed) for r in report.tasks.values())
    nfail = sum(len(r.failed) for r in report.tasks.values())
    lines.append(f"{npass} passed, {nfail} failed")
    lines += [f"NOTE: {n}" for n in report.notes + _stub_passes(report)]
    runs = load_test_runs()
    score = _suspicion(report, runs)
    for t, r in report.tasks.items():
        if r.failed:
            lines += _cause_notes(t, report, _failing_prerequisites(t, report, prerequisites), runs, score)
        # Failures with the same reason at the same place (a stub's "write this", one bug
        # hit by several tests) are printed once, with every test they failed.
        groups: dict[tuple, list[Failure]] = {}
        for f in r.failed:
            stub = _STUB.match(f.reason)
            key = (f.reason, f.where, tuple(f.marked)) if stub or not f.example else (f.test,)
            groups.setdefault(key, []).append(f)
        for same in groups.values():
            f = same[0]
            lines.append("")
            lines.append(f"FAIL {t} {f.test}" if len(same) == 1 else f"FAIL {t} {_test_names(same)}")
            lines.append(f"  {_indent(f.reason)}" + (f"\n  raised at {f.where}" if f.where else ""))
            if f.marked:
                lines.append(
                    f"  (a test of {', '.join(m[4:] for m in f.marked)}; counted here: the error came "
                    f"from task {t[4:]}'s code)"
                )
            elif f.raised_in and f"task{f.raised_in}" != t and not _STUB.match(f.reason):
                lines.append(f"  (the error came from task {f.raised_in}'s code, which this test also runs)")
            stub = _STUB.match(f.reason)
            others = _other_blanks(t, f)
            earlier = [b for b in others if task_key(f"task{b}")[0] < stage_number(report.stage)]
            for b in earlier:
                n = b.split("_")[0]
                lines.append(
                    f"  (task{b} is from stage s{n}: write it again, or check "
                    f"this stage out with --from YOUR_S{n}_DIR to keep yours)"
                )
            if len(others) > len(earlier):
                names = ", ".join(b for b in others if b not in earlier)
                lines.append(
                    f"  (also runs task {names}, still blank in your copy: this test cannot pass "
                    f"until {names} is written too)"
                )
            if f.example and not stub:  # an example adds nothing to "write this"
                lines.append(f"  {_indent(f.example)}")
            if f.timed_out and f.stacks:
                lines.append(
                    "  possible deadlock (or a loop): where each thread was when the test was stopped, in your files:"
                )
                lines += [f"    {line}" for line in f.stacks[:40]]
    return _shown("\n".join(lines))


def _stub_passes(report: GradeReport) -> list[str]:
    """A note for each task that passed with its region still the checkout's stub, which fails
    every task's tests: its code is elsewhere, or what ran was not the tests (a copy that
    patched the grader's plugin read ok in every task; the grader is no sandbox)."""
    return [
        f"{t[4:]} passed with its region still the checkout's stub: its code is elsewhere, or the "
        "copy's code changed what the tests report (read it)"
        for t, r in report.tasks.items()
        if r.ok and t in report.blank
    ]


def _moved_out(task: str, report: GradeReport) -> list[Failure]:
    """The failures of `task`'s tests that `attribute_failures` counted in another task's row."""
    return [f for t, r in report.tasks.items() if t != task for f in r.failed if task in f.marked]


def _unrun_tasks(
    report: GradeReport,
    tasks: list[str],
    tests_dir: Path,
    output: str,
    ended: str,
    stuck: tuple[str, list[str], str] | None,
    package: Path,
    cwd: Path,
) -> None:
    """A task none of whose tests reported, in a run that ended abnormally: the run ended
    before it chose them (a copy that calls sys.exit or os._exit, or loops, while it is
    imported). Each of the task's real tests fails with what ended the run and, where the
    traceback names a line of the copy, that line is an error in its code; an instructor's
    test once read "no tests!", 0 passed and 0 failed, with no reason."""
    unrun = [t for t in tasks if not report.tasks[t].passed and not report.tasks[t].failed]
    if not unrun:
        return
    # pytest prints an exception that escapes its collection as INTERNALERROR lines.
    text = "\n".join(line.removeprefix("INTERNALERROR>") for line in output.splitlines())
    err = _import_error(text, package, cwd) if text.strip() else None
    if stuck is not None and stuck[0] == "<collection>":
        detail = f"{stuck[2].removeprefix('timed out: ')}: a loop while the copy was imported?"
    elif err is None:
        detail = "it printed nothing: an os._exit or a crash while the copy was imported?"
    else:
        detail = err.message + (f" (at {err.path}:{err.line})" if err.line else "")
        if err.line and err not in report.file_errors:
            report.file_errors.append(err)
    why = shortened(f"did not run: the test run ended before these tests started ({ended}); {detail}")
    real = reference_tests(unrun, tests_dir)
    for t in unrun:
        mine = [test for test, markers in real.items() if t in markers]
        report.tasks[t].failed += [Failure(test, why) for test in mine] or [Failure("(the whole copy)", why)]


def task_needs(task: str, report: GradeReport, prerequisites: dict[str, list[str]]) -> list[str]:
    """The blank tasks ("2_3") that `task`, written and failing, waits for: every one whose code
    its tests run, the whole chain at once, not only the first stub a failure ran into. None
    when a failure is the task's own (a test that ran and met no other task's stub: the task's
    own code is wrong, whatever else is blank; an instructor saw carol's 2_4 read
    "needs 2_3" though its own apply tests failed), nor for a blank task."""
    r = report.tasks[task]
    if not r.failed or task in report.blank:
        return []
    if any(_ran(f) and not _other_blanks(task, f) for f in r.failed):
        return []
    chain = [b[4:] for b in needed_tasks(task, prerequisites) if b in report.blank]
    return sorted({*_waits_for(task, r.failed), *chain}, key=lambda b: task_key(f"task{b}"))


def task_status(task: str, report: GradeReport, prerequisites: dict[str, list[str]]) -> str:
    """One word for the class table and the JSON: "ok", "blank" (the task's region is still
    the stub), "needs" (`task_needs`: its tests cannot tell until those are written), "fail",
    or "no tests"."""
    r = report.tasks[task]
    if r.ok:
        return "ok"
    if not r.failed:
        return "fail" if _moved_out(task, report) else "no tests"
    if task in report.blank:
        return "blank"
    return "needs" if task_needs(task, report, prerequisites) else "fail"


# Failures of tests that never ran the copy's code: its tests could not be imported, the run
# ended first, or the grader could not run the copy at all. They tell nothing of the task's code.
_UNRUN = (
    "the tests could not be imported",
    "did not run:",
    "the grader could not run this copy",
    "timed out before any test started",
)


def _ran(failure: Failure) -> bool:
    return not failure.reason.startswith(_UNRUN)


def _failing_prerequisites(task: str, report: GradeReport, prerequisites: dict[str, list[str]]) -> list[str]:
    """The other graded tasks ("3_3") that `task`'s tests run and that fail their own tests
    with code written (not a stub): the likely cause of a wrong answer in `task`'s tests,
    where no traceback names it because nothing was raised."""
    return [
        x[4:]
        for x in prerequisites.get(task, [])
        if x in report.tasks
        and x not in report.blank
        and any(not _STUB.match(f.reason) for f in report.tasks[x].failed)
    ]


def _cause_notes(
    task: str,
    report: GradeReport,
    failing: list[str],
    runs: dict[str, list[str]],
    score: dict[str, tuple[float, int, int]],
) -> list[str]:
    """NOTE lines for `task`'s row about the other failing tasks (`failing`, "3_3") its tests run.

    Every failing test of `task` runs that task's code too (else a failure is `task`'s own and
    no note is made), so which one is wrong? The tests' outcomes say, as in spectrum-based
    fault localization (the Ochiai score, Abreu et al. 2007): code that ran in many passing
    tests is probably right, code that ran in failing tests and few passing ones probably
    not. The note names the other task when its score is higher, "either" when they tie.
    `runs` (test id -> the tasks whose code it runs on the reference) leaves out tests
    traced before they existed: those count as running every task. `score`: `_suspicion`'s.

    A task still blank (its region the stub, or a failure that ran into its own stub) is named
    as blank instead: its own stub fails its tests first, whatever the other tasks do (an
    instructor saw a blank 2_3 told to "fix 2_1 first")."""
    failed = report.tasks[task].failed
    if task in report.blank or any(task[4:] in f.blank for f in failed):
        if all((m := _STUB.match(f.reason)) and m["task"] == task[4:] for f in failed):
            return []  # every failure already reads "taskN_M: write this"
        return [
            "",
            f"NOTE {task}: still blank in your copy (its region is the checkout's stub): its tests "
            "cannot pass until it is written; write it, then grade again",
        ]
    own = [f for f in failed if not _STUB.match(f.reason) and _ran(f)]
    notes = []
    for other in failing:
        if not own or not all(f.test not in runs or f"task{other}" in runs[f.test] for f in own):
            continue
        mine, theirs = score[task[4:]], score[other]
        if not theirs[1] + theirs[2] + mine[1] + mine[2]:
            continue  # no test ran either task's code (the tests could not be imported): no evidence
        counts = (
            f"its code ran in {theirs[1]} failing and {theirs[2]} passing tests, {task[4:]}'s in "
            f"{mine[1]} failing and {mine[2]} passing"
        )
        if theirs[0] > mine[0]:
            notes.append(
                f"NOTE {task}: every failing test here also runs task {other}'s code, the likelier "
                f"culprit ({counts}): fix {other} first, then grade again"
            )
        elif theirs[0] == mine[0]:
            notes.append(
                f"NOTE {task}: every failing test here also runs task {other}'s code, which fails too "
                f"({counts}): either task may be wrong; check both against the page"
            )
    return ["", *notes] if notes else []


def _suspicion(report: GradeReport, runs: dict[str, list[str]]) -> dict[str, tuple[float, int, int]]:
    """Task ("3_3") -> (Ochiai score, failing tests that ran its code, passing ones) over this
    run's tests: failed(t) / sqrt(all failed * (failed(t) + passed(t)))."""
    passed = {test for r in report.tasks.values() for test in r.passed}
    failed = {f.test for r in report.tasks.values() for f in r.failed if _ran(f)}
    out = {}
    for task in report.tasks:
        ran = [test for test, tasks in runs.items() if task in tasks]
        ef, ep = len(failed.intersection(ran)), len(passed.intersection(ran))
        out[task[4:]] = (ef / ((len(failed) * (ef + ep)) ** 0.5) if ef else 0.0, ef, ep)
    return out


def _waits_for(task: str, failures: list[Failure]) -> list[str]:
    """The other tasks ("4_4") still blank that every one of `task`'s failures ran into,
    or [] when some failure did not (that one is the task's own)."""
    if not failures:
        return []
    others = [set(_other_blanks(task, f)) for f in failures]
    if not all(others):
        return []
    return sorted(set().union(*others), key=lambda b: task_key(f"task{b}"))


def _other_blanks(task: str, failure: Failure) -> list[str]:
    """The other tasks' stubs `failure` ran into; none when it ran into `task`'s own stub
    too (then the task's own blank is the reason, whatever else was blank)."""
    if task[4:] in failure.blank:
        return []
    return list(failure.blank)


def _test_names(failures: list[Failure]) -> str:
    """'(3 tests: test_a, test_b [2 cases])': short names, parametrized cases counted."""
    counts: dict[str, int] = {}
    for f in failures:
        name = f.test.rsplit("::", 1)[-1].split("[", 1)[0]
        counts[name] = counts.get(name, 0) + 1
    names = [name if n == 1 else f"{name} [{n} cases]" for name, n in counts.items()]
    return f"({len(failures)} tests: {', '.join(names)})"


_STUB = re.compile(r"NotImplementedError: task(?P<task>(?P<stage>\d+)_\d+): write this")


def _indent(text: str, limit: int = 12) -> str:
    lines = text.strip().splitlines()
    if len(lines) > limit:
        lines = lines[:limit] + ["..."]
    return "\n  ".join(lines)


def format_class_table(reports: list[GradeReport]) -> str:
    """One row per student (their directory's name), one column per task: "ok", "blank" (the
    region still the stub), "needs 2_3" (every failure ran into that blank task: its own
    tests cannot tell), else passed/total."""
    tasks = list(reports[0].tasks)
    names = short_names([r.impl or "reference" for r in reports])
    width = max([7, *map(len, names)])
    prerequisites = load_prerequisites()
    rows = []
    for r in reports:
        cells = []
        for t in tasks:
            res = r.tasks[t]
            status = task_status(t, r, prerequisites)
            if status in ("ok", "blank"):
                cells.append(status)
            elif status == "needs":
                cells.append(f"needs {','.join(task_needs(t, r, prerequisites))}")
            else:
                total = len(res.passed) + len(res.failed) + len(_moved_out(t, r))
                cells.append(f"{len(res.passed)}/{total}")
        rows.append(cells)
    widths = [max([8, len(t), *(len(cells[i]) for cells in rows)]) for i, t in enumerate(tasks)]
    head = f"{'student':{width}s} " + " ".join(f"{t:>{w}s}" for t, w in zip(tasks, widths)) + "    total"
    lines = [head, "-" * len(head)]
    for name, r, cells in zip(names, reports, rows):
        done = sum(res.ok for res in r.tasks.values())
        ran = any(not f.reason.startswith(_UNRUN) for res in r.tasks.values() for f in res.failed)
        ran = ran or any(res.passed for res in r.tasks.values())
        note = "  (code error)" if r.file_errors else "" if ran else "  (no test ran)"
        if _stub_passes(r):
            note += "  (passed with a stub: read its code)"
        row = " ".join(f"{c:>{w}s}" for c, w in zip(cells, widths))
        lines.append(f"{name:{width}s} {row}  {done:3d}/{len(tasks)}{note}")
    return _shown("\n".join(lines))


def format_class_summary(reports: list[GradeReport]) -> str:
    """One row per task: how many copies passed it, failed it, wait on a blank task its tests
    run (`needs`), or left it blank; each copy counts once per task, so a row sums to the class."""
    prerequisites = load_prerequisites()
    kinds = ("passed", "failed", "needs", "blank")
    head = f"{'task':10s} " + " ".join(f"{k:>6s}" for k in kinds) + f"   (of {len(reports)} copies)"
    lines = [head, "-" * len(head)]
    for t in reports[0].tasks:
        counts = dict.fromkeys(kinds, 0)
        for r in reports:
            status = task_status(t, r, prerequisites)
            counts[{"ok": "passed", "blank": "blank", "needs": "needs"}.get(status, "failed")] += 1
        lines.append(f"{t:10s} " + " ".join(f"{counts[k]:6d}" for k in kinds))
    return "\n".join(lines)


def short_names(paths: list[str]) -> list[str]:
    """The fewest trailing path parts that tell the paths apart: ~/class/alice/s2 and
    ~/class/bob/s2 are "alice/s2" and "bob/s2"."""
    parts = [Path(p).parts for p in paths]
    for k in range(1, max(map(len, parts)) + 1):
        names = ["/".join(p[-k:]) for p in parts]
        if len(set(names)) == len(names):
            return names
    return list(paths)


# ---------------------------------------------------------------------- the CLI entry
def grade(
    stage: str,
    impls: list[str] | None = None,
    *,
    test_timeout: float = DEFAULT_TEST_TIMEOUT,
    verbose: bool = False,
    json_path: str | None = None,
    only: list[str] | None = None,
) -> int:
    """Grade the reference, one student copy, or a class (all the stage's tasks, or those
    `only` names); exit status 0 only when all passed."""
    tasks = select_tasks(stage, only)  # a misspelt task fails before any test runs
    targets: list[str | None] = [*impls] if impls else [None]  # None: the reference
    reports = []
    for impl in targets:
        try:
            r = run_task_tests(stage, impl, test_timeout=test_timeout, only=only)
        except Exception as e:  # one copy the grader cannot run must not lose the class's rows
            if len(targets) == 1:
                raise
            why = shortened(f"the grader could not run this copy: {type(e).__name__}: {e}")
            r = GradeReport(stage, impl, {t: TaskResult(t) for t in tasks})
            for test, markers in reference_tests(tasks).items():  # each task's real tests fail
                failure = Failure(test, why)
                for t in markers:
                    r.tasks[t].failed.append(failure)
            for res in r.tasks.values():
                res.failed = res.failed or [Failure("(the whole copy)", why)]
        reports.append(r)
        if verbose:
            print(_shown(r.output))
        print(format_report(r), flush=True)  # each copy's report as soon as it is graded
        print()
    if len(reports) > 1:
        print(format_class_table(reports))
        print()
        print(format_class_summary(reports))
    if json_path:
        data = [r.to_json() for r in reports]
        Path(json_path).write_text(json.dumps(data if len(reports) > 1 else data[0], indent=2, ensure_ascii=False))
        print(f"wrote {json_path}")
    return 0 if all(r.ok for r in reports) else 1


__all__ = [
    "run_task_tests",
    "select_tasks",
    "format_report",
    "format_class_table",
    "format_class_summary",
    "grade",
    "stage_number",
    "GradeReport",
    "TaskResult",
    "Failure",
    "FileError",
]
