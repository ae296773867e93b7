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
from pathlib import Path

from . import grade_plugin
from .checkout import PACKAGE_DIR, all_tasks, copy_stage, find_solution_regions, is_stub, stage_number, task_key
from .grade_report import (
    Failure,
    FileError,
    GradeReport,
    TaskResult,
    attribute_failures,
    escape_controls,
    format_class_summary,
    format_class_table,
    format_report,
    shortened,
)
from .grade_zygote import launch

REPO_TESTS = PACKAGE_DIR.parent / "tests"
PLUGIN_NAME = "minisglang_grade_plugin"  # grade_plugin.py, copied under this name for the run
IMPL_ENV = "MINISGLANG_IMPL"  # tests/conftest.py checks that minisglang came from there
DEFAULT_TEST_TIMEOUT = 60.0
MAX_CRASHES = 20  # runs of a copy that may end during a test, each started again after that test
EXIT_GRACE = 30.0  # seconds a test process may take to exit after its tests (then it is stopped)


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
                running = _running_test(events)
                if running is None or crashes >= MAX_CRASHES or time.monotonic() >= deadline:
                    break
                crashes += 1
                ended_in = _ended_during(running[0], returncode, output, package, where_from, events)
                done[running[0]] = (running[1], ended_in)
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
        exit_call = _exit_call(events, package, where_from)
        _unrun_tasks(report, tasks, tests_dir, "\n".join(outputs), ended, stuck, package, where_from, exit_call)
    attribute_failures(report)
    report.output = "\n".join(outputs)
    return report


def _compiled(folder: str, names: list[str]) -> list[str]:
    """The compiled code in `folder` (a copytree ignore): Python would run it instead of the source."""
    return [n for n in names if n == "__pycache__" or n.endswith((".pyc", ".pyo", ".so", ".pyd"))]


def _exit_call(events: list[dict], package: Path, where_from: Path) -> FileError | None:
    """The copy's last call to os._exit in these events (the plugin notes it before the
    process ends): its file, line and message `os._exit(N)`; None where there is none."""
    for e in reversed(events):
        if e["event"] == "os_exit" and (where := _where(e.get("path"), e.get("line"), package, where_from)):
            return FileError(where.rsplit(":", 1)[0], e.get("line"), f"os._exit({e.get('status')})")
    return None


def _ended_during(
    test: str, returncode: int, output: str, package: Path, where_from: Path, events: list[dict]
) -> Failure:
    """The failure of `test`, during which the test process ended (`returncode`; `output`,
    pytest's, may name the line; `events`, the run's, name an os._exit's)."""
    tail = output[-20_000:]
    exit_call = _exit_call(events, package, where_from)
    if exit_call is not None:
        what = f"{exit_call.message} at {exit_call.path}:{exit_call.line}"
    elif "KeyboardInterrupt" in tail:
        what = "a KeyboardInterrupt"
    elif returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else -returncode
        what = f"killed by {name}: a crash?"
    else:
        what = f"exit status {returncode}: an os._exit?"
    err = _import_error(tail, package, where_from) if tail.strip() else None
    cause = exit_call or err
    where = f"{cause.path}:{cause.line}" if cause is not None and cause.line else None
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
            cmd = [*_pytest_cmd(files, tasks, DEFAULT_TEST_TIMEOUT), "--collect-only"]
            proc = launch(cmd, env, tests_dir.parent, os.devnull)
            try:
                proc.wait(timeout=600)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            for e in _read_events(events_path):
                if e["event"] == "collected":
                    collected.update(e["tests"])
        tests = {test: [m for m in markers if m in tasks] for test, markers in collected.items()}
        _REFERENCE_TESTS[key] = {test: markers for test, markers in tests.items() if markers}
    return _REFERENCE_TESTS[key]


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
    with tempfile.NamedTemporaryFile(prefix="minisglang-run-") as out:
        # A session of its own, so that a kill also ends the processes it started (the s3
        # compile workers of a stuck test); forked by the zygote, which has imported torch.
        proc = launch(cmd, env, cwd, out.name)
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


def _unrun_tasks(
    report: GradeReport,
    tasks: list[str],
    tests_dir: Path,
    output: str,
    ended: str,
    stuck: tuple[str, list[str], str] | None,
    package: Path,
    cwd: Path,
    exit_call: FileError | None = None,
) -> None:
    """A task none of whose tests reported, in a run that ended abnormally: the run ended
    before it chose them (a copy that calls sys.exit or os._exit, or loops, while it is
    imported). Each of the task's real tests fails with what ended the run and, where the
    traceback (or `exit_call`: where the copy called os._exit) names a line of the copy,
    that line is an error in its code; an instructor's test once read "no tests!", 0 passed
    and 0 failed, with no reason."""
    unrun = [t for t in tasks if not report.tasks[t].passed and not report.tasks[t].failed]
    if not unrun:
        return
    # pytest prints an exception that escapes its collection as INTERNALERROR lines.
    text = "\n".join(line.removeprefix("INTERNALERROR>") for line in output.splitlines())
    err = _import_error(text, package, cwd) if text.strip() else None
    if stuck is not None and stuck[0] == "<collection>":
        detail = f"{stuck[2].removeprefix('timed out: ')}: a loop while the copy was imported?"
    elif exit_call is not None:
        detail = f"{exit_call.message} at {exit_call.path}:{exit_call.line}, while the copy was imported"
        error = FileError(exit_call.path, exit_call.line, f"{exit_call.message} while the copy was imported")
        if error not in report.file_errors:
            report.file_errors.append(error)
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
            print(escape_controls(r.output))
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


__all__ = ["run_task_tests", "select_tasks", "reference_tests", "syntax_errors", "grade"]
