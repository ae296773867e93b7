"""Run a stage's task tests against plausible wrong solutions ("mutants"), in one process.

    python -c "import sys; sys.path.insert(0, 'tests'); import mutants; mutants.main()" < job.json

Input: {"tasks": [the tasks whose tests the reference run covers], "mutations": [{"id",
"task", "old", "new"}, ...], "alarm": seconds a test may run (optional, SHORT_ALARM), "seed":
hypothesis's seed (optional); without a seed, hypothesis is derandomized (each test's examples
follow from its name, the same in every run); with one, every property test draws its examples
from that seed, as `minisglang grade` draws them from a random one (scripts/mutant_reruns.py
reruns the mutants with fresh seeds, and a miss replays with its seed), "explicit_only": true
to run only the property tests' explicit `@example`s (no generated example: a mutant caught so
is caught by every seed; optional, false)}. A mutation
replaces the text `old` by `new` in the task's solution region (the region's body dedented, as
`minisglang solutions` prints it; `old` must occur exactly once among the task's regions).
Output: {"results": {id: {"caught": bool, "detail": str, "timed_out": nodeid or null, "alarm": s,
"failed": the first failing test's nodeid or null, "raised_in": the task ("3_3") whose solution
region raised its error, or null (the grader moves such a failure to that task's row)}},
"reference_passes": bool or null, "reference_seconds": {nodeid: seconds of its call}}; caught
means the task's tests failed (or timed out) on the mutant. A mutant that timed out and left
threads or worker processes behind stops the run: the mutants not in "results" must be run
again in a fresh process (`run_all` does that).

A mutant is made by recompiling the one function around the region with the changed text
and swapping its `__code__`, so every reference to the function (methods, imported
names, bound methods) runs the mutant, and the module is never reloaded. The task's tests
then run in this process, all in one pytest session (`in_one_session`): pytest is configured
and the tests of every task of the job are collected once, before any mutant is applied, and
each run (`_Session.run`) is what a `pytest.main` on the task's test files with `-m task -x`
was: the same tests (in the order below), each through pytest's whole runtest protocol, ending
at the first failure, with every fixture (session-scoped ones too) torn down at its end, so
the next run sets them up afresh. Between runs the `functools` caches of the tests and the
package are cleared, so nothing computed by one mutant is reused by the next; at the end the
reference runs once more and must pass, which shows no mutant leaked into the others.

Six things keep this fast without changing a verdict. The one session: configuring pytest and
collecting the tests took about 0.4 s of each mutant's `pytest.main` in s3 (its tests' own
calls: 0.3 s). The tests that caught an earlier mutant run first (with -x a run ends
at its first failure, and one task's mistakes are mostly caught by the same few tests), then
one case of each test function, then the other cases (`_CatchersFirst`); order does not
change whether some test fails. Hypothesis does not shrink a failing example
(shrinking only makes the example smaller; the test fails either way).
A test may run SHORT_ALARM seconds, not the grader's 60: a mutant stopped there counts as
caught only if the reference ran that test at least SLOWER times faster (its time is taken in
the closing reference run); otherwise the mutant runs again with LONG_ALARM, after that
reference run. A timed-out mutant ends the process only if it left a thread or a child
process running (`_settled` waits a few seconds for them): most loops end with the alarm. And
what outlived a run is frozen out of the garbage collector's walks (`_freeze_survivors`): a
full collection walks every object of a process holding torch (0.3 s), and one comes at
the end of each run (to free what the mutant made) and whenever the tests' allocations
trigger one.
"""

from __future__ import annotations

import ast
import functools
import gc
import importlib
import inspect
import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import traceback
from pathlib import Path

import pytest
from hypothesis import Phase, settings

from minisglang.checkout import BEGIN, PACKAGE_DIR, STUB, all_tasks, find_solution_regions, task_key
from minisglang.grade_plugin import explain, raised_in
from minisglang.grade_zygote import launch

REPO = PACKAGE_DIR.parent
TESTS = REPO / "tests"
LONG_ALARM = 60  # the grader's own per-test limit (grading.DEFAULT_TEST_TIMEOUT)
SHORT_ALARM = 8  # a looping mutant stops here (caught if the reference ran that test in under 1.6 s, else rerun)
SLOWER = 5  # a timed-out mutant is caught only if the reference ran that test 5x faster
SETTLE = 10  # seconds a timed-out mutant's threads and child processes get to end
SLOW_TEST = 0.5  # seconds: a test this slow in an earlier run goes after the others


class MutantTimedOut(BaseException):
    """Raised by the alarm inside a looping test; a BaseException so hypothesis does not
    catch it and replay the loop."""


class _Alarm:
    """A pytest plugin: every test runs under a SIGALRM that ends it after `seconds`."""

    def __init__(self, seconds: int):
        self.seconds, self.fired = seconds, None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        def fire(signum, frame):
            self.fired = item.nodeid
            raise MutantTimedOut(f"{item.nodeid} ran past {self.seconds} s")

        previous = signal.signal(signal.SIGALRM, fire)
        signal.alarm(self.seconds)
        try:
            yield
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)


class _CatchersFirst:
    """A pytest plugin: tests that failed in an earlier run of this process go first, the most
    recent first. Then each test function's first case, then its other cases (a mistake the
    last function of a file catches did not wait for the ~100 cases of the functions before it:
    s5's array mutants each ran ~220 passing tests, ~5 s); tests an earlier run found slow
    (SLOW_TEST seconds or more, setup and teardown included) after all of those, in the same
    two rounds. The sort is stable: within a round the tests keep their collected order (the
    rounds set a file's module fixtures up at most four times)."""

    def __init__(self):
        self.catchers: list[str] = []
        self.seconds: dict[str, float] = {}  # nodeid -> its setup + call + teardown, last run

    def order(self, items: list) -> list:
        rank = {nodeid: i for i, nodeid in enumerate(self.catchers)}
        seen: set[tuple[str, str]] = set()
        key: dict[str, tuple[int, int, int]] = {}
        for item in items:
            function = (str(item.path), getattr(item, "originalname", item.name))
            later_case = function in seen
            seen.add(function)
            slow = self.seconds.get(item.nodeid, 0.0) >= SLOW_TEST
            key[item.nodeid] = (rank[item.nodeid], 0, 0) if item.nodeid in rank else (len(rank), slow, later_case)
        return sorted(items, key=lambda item: key[item.nodeid])

    def pytest_runtest_logreport(self, report):
        if report.when == "setup":
            self.seconds[report.nodeid] = 0.0
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration
        if report.failed:
            if report.nodeid in self.catchers:
                self.catchers.remove(report.nodeid)
            self.catchers.insert(0, report.nodeid)


class _Durations:
    """A pytest plugin: how long each test's call took."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report):
        if report.when == "call":
            self.seconds[report.nodeid] = report.duration


class _Outcomes:
    """A pytest plugin: the tests that passed, and each failure, in order, as the grader
    explains it (grade_plugin.explain: its reason, the tasks whose stubs it ran into; and
    raised_in: the task whose solution region raised its error, the grader's attribution)."""

    def __init__(self):
        self.passed: list[str] = []
        self.failed: dict[str, dict] = {}

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.failed.setdefault(report.nodeid, explain(report))
        elif report.when == "call" and report.passed:
            self.passed.append(report.nodeid)

    def pytest_exception_interact(self, node, call, report):
        # After logreport: whose code the error came from.
        failure = self.failed.get(report.nodeid)
        if failure is not None and "raised_in" not in failure and call.excinfo is not None:
            failure["raised_in"] = raised_in(call.excinfo.value)

    def first_failure(self) -> tuple[str | None, str | None]:
        """(the first failing test, the task its error was raised in), or (None, None)."""
        test = next(iter(self.failed), None)
        return test, None if test is None else self.failed[test].get("raised_in")


CATCHERS = _CatchersFirst()


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def _enclosing_function(tree: ast.Module, line: int) -> tuple[list[str], ast.FunctionDef]:
    """(enclosing class names, the outermost function) around 1-based `line`."""
    classes, body = [], tree.body
    while True:
        for node in body:
            if node.lineno <= line <= node.end_lineno:
                if isinstance(node, ast.ClassDef):
                    classes.append(node.name)
                    body = node.body
                    break
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    return classes, node
        else:
            raise ValueError(f"line {line} is in no function")


def _live_function(module, classes: list[str], name: str):
    owner = module
    for c in classes:
        owner = getattr(owner, c)
    attr = inspect.getattr_static(owner, name)
    if isinstance(attr, (classmethod, staticmethod)):
        attr = attr.__func__
    return inspect.unwrap(attr)


def _find_code(code, name: str):
    for const in code.co_consts:
        if inspect.iscode(const):
            if const.co_name == name:
                return const
            found = _find_code(const, name)
            if found is not None:
                return found
    return None


def _regions(task: str):
    """(path, the file's lines, begin, end, indent, dedented body) of each region of `task`."""
    for path in all_tasks()[task]:
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines(keepends=True)
        for t, begin, end in find_solution_regions(text):
            if t == task:
                indent = BEGIN.match(lines[begin].rstrip("\n"))["indent"]
                yield path, lines, begin, end, indent, textwrap.dedent("".join(lines[begin + 1 : end]))


def make_mutant(task: str, old: str, new: str):
    """(the live function, its mutant code object) for a mutation of `task`'s region."""
    hits = []
    for path, lines, begin, end, indent, body in _regions(task):
        if body.count(old) == 1:
            hits.append((path, lines, begin, end, indent, body))
        elif body.count(old) > 1:
            raise ValueError(f"{old!r} occurs more than once in {task}'s region")
    if len(hits) != 1:
        raise ValueError(f"{old!r} occurs in {len(hits)} regions of {task}, not exactly one")
    path, lines, begin, end, indent, body = hits[0]
    return _region_with_body(path, lines, begin, end, indent, body.replace(old, new))


def blank_task(task: str) -> list[tuple]:
    """(live function, code object) pairs that make every region of `task` the student
    checkout's stub (`raise NotImplementedError("taskN_M: write this")`), as
    `checkout.blank_solutions` writes it into a copy's files."""
    return [
        _region_with_body(path, lines, begin, end, indent, STUB.format(task=task) + "\n")
        for path, lines, begin, end, indent, _ in _regions(task)
    ]


def _region_with_body(path: Path, lines: list[str], begin: int, end: int, indent: str, body: str):
    """(the live function around the region lines[begin:end], its code with `body` there)."""
    mutated = textwrap.indent(body, indent, lambda ln: ln.strip() != "")
    new_lines = lines[: begin + 1] + mutated.splitlines(keepends=True) + lines[end:]
    tree = ast.parse("".join(lines))
    classes, node = _enclosing_function(tree, begin + 1)
    # The function's own lines, mutated: from its `def` to its end, shifted by the change.
    shift = len(mutated.splitlines()) - (end - begin - 1)
    source = textwrap.dedent("".join(new_lines[node.lineno - 1 : node.end_lineno + shift]))
    if classes:  # compiled inside a class, so that `super()` gets its `__class__` cell
        source = "class _Mutant:\n" + textwrap.indent(source, "    ")
    module_tree = ast.parse(source)
    ast.increment_lineno(module_tree, node.lineno - 1 - (1 if classes else 0))
    code = _find_code(compile(module_tree, str(path), "exec"), node.name)
    func = _live_function(importlib.import_module(_module_name(path)), classes, node.name)
    if code.co_freevars != func.__code__.co_freevars:
        raise ValueError(f"the mutant of {node.name} needs other closure variables: {code.co_freevars}")
    return func, code


def _clear_caches() -> None:
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None) or ""
        if name.startswith("minisglang") or file.startswith(str(TESTS)):
            for value in list(vars(module).values()):
                if callable(getattr(value, "cache_clear", None)) and isinstance(value, (functools._lru_cache_wrapper,)):
                    value.cache_clear()
    # Token rows shared between grammars: a mutant's wrong rows must not reach the next run.
    from minisglang.constrained.lazy_token_fsm import SHARED_ROWS

    SHARED_ROWS.clear()


def _test_files(tasks: set[str]) -> list[str]:
    return [
        str(f)
        for f in sorted(TESTS.glob("test_*.py"))
        if any(re.search(rf"pytest\.mark\.{t}\b", f.read_text(encoding="utf-8")) for t in tasks)
    ]


class _Session:
    """A pytest plugin that holds one pytest session for the whole process: it collects the tests
    of every task the process may run once, and its `pytest_runtestloop` calls `body(self)`,
    whose every `run` is what one `pytest.main` on those tasks' tests was."""

    def __init__(self, tasks: set[str], body):
        self.body = body
        self.files = {t: set(_test_files({t})) for t in tasks}  # the files a run of `t` once collected
        self.alarm = _Alarm(LONG_ALARM)
        self.session: pytest.Session | None = None
        self.broken_files: set[str] = set()  # files whose collection failed
        self.error: BaseException | None = None

    def pytest_collectreport(self, report):
        if report.failed:
            self.broken_files.add(str(REPO / report.nodeid.split("::")[0]))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session):
        self.session = session
        try:
            self.body(self)
        except BaseException as e:  # raised again by `in_one_session`, after pytest's own ending
            self.error = e
        return True

    def run(
        self,
        tasks: set[str],
        alarm: int,
        stop_at_first: bool = True,
        durations: _Durations | None = None,
        outcomes: _Outcomes | None = None,
    ) -> tuple[int, str | None]:
        """pytest's exit status on the tasks' tests, and the test that ran past `alarm` s, if one did.
        The tests are those a `pytest.main(files of the tasks, -m "the tasks")` runs, in
        `_CatchersFirst`'s order; the run ends with every fixture torn down, session ones too, so
        the next run sets them up again, as a new `pytest.main` did."""
        session = self.session
        assert session is not None, "run is for the body, inside the session's test loop"
        files = set().union(*(self.files[t] for t in tasks))
        if files & self.broken_files:
            return int(pytest.ExitCode.INTERRUPTED), None  # pytest.main stopped at its collection error
        items = CATCHERS.order(
            [i for i in session.items if str(i.path) in files and tasks & {m.name for m in i.iter_markers()}]
        )
        plugins = [p for p in (durations, outcomes) if p is not None]
        for plugin in plugins:
            session.config.pluginmanager.register(plugin)
        self.alarm.seconds, self.alarm.fired = alarm, None
        # What pytest.main's -x does: the session's own count of failures stops the run at the
        # first, and the failing test's teardown then tears down every fixture.
        session.config.option.maxfail = 1 if stop_at_first else 0
        session.testsfailed, session._shouldfail, session._shouldstop = 0, False, False
        status = None
        try:
            for i, item in enumerate(items):
                nextitem = items[i + 1] if i + 1 < len(items) else None
                item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
                if session.shouldfail:
                    break
                if session.shouldstop:
                    status = pytest.ExitCode.INTERRUPTED
                    break
        except (KeyboardInterrupt, pytest.exit.Exception) as e:
            code = getattr(e, "returncode", None)
            status = pytest.ExitCode.INTERRUPTED if code is None else code
        except BaseException:
            traceback.print_exc()  # pytest.main printed it as an INTERNALERROR
            status = pytest.ExitCode.INTERNAL_ERROR
        finally:
            session._setupstate.teardown_exact(None)  # as pytest.main's session end did
            for plugin in plugins:
                session.config.pluginmanager.unregister(plugin)
        if status is None:
            status = (
                pytest.ExitCode.TESTS_FAILED
                if session.testsfailed
                else pytest.ExitCode.NO_TESTS_COLLECTED
                if not items
                else pytest.ExitCode.OK
            )
        _clear_caches()
        _freeze_survivors()
        return int(status), self.alarm.fired


def in_one_session(tasks: set[str], body, seed: int | None = None) -> None:
    """Collect the tests of `tasks` once and call `body(session)` inside that pytest session;
    `body` runs tests with `session.run(...)`. `seed`: hypothesis's (the "mutants" profile
    must then not be derandomized)."""
    args = [
        *_test_files(tasks),
        "-q",
        "--no-header",
        "-p",
        "no:cacheprovider",
        "-m",
        " or ".join(sorted(tasks)),
        "--hypothesis-profile=mutants",
        "-p",
        "no:randomly",
        "-o",
        "addopts=--strict-markers",
    ]
    if seed is not None:
        args.append(f"--hypothesis-seed={seed}")
    runner = _Session(tasks, body)
    code = pytest.main(args, plugins=[runner.alarm, CATCHERS, runner])
    if runner.error is not None:
        raise runner.error
    if runner.session is None:
        raise RuntimeError(f"pytest ended (exit status {code}) before its test loop: see its output above")


def _freeze_survivors() -> None:
    """Move every object still alive after a full collection into gc's permanent generation.
    A full collection walks every object of the process: with torch and the test modules
    loaded, 0.3 s each. Frozen, the objects that outlived a run are not walked again;
    everything a later run makes is collected as before (and what the run's end left
    unreachable is collected here first, so nothing is frozen as garbage)."""
    gc.collect()
    gc.freeze()


def _runs_our_code(thread: threading.Thread) -> bool:
    """Whether a frame of the package or of the tests is on `thread`'s stack. An idle pool
    worker (waiting on its queue) or tqdm's monitor is parked in library code and cannot
    touch the next mutant's run."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code.co_filename.startswith((str(PACKAGE_DIR), str(TESTS))):
            return True
        frame = frame.f_back
    return False


def _settled(threads_before: set[threading.Thread]) -> bool:
    """Whether every thread started since `threads_before` has ended or is parked outside our
    code, and every child process has ended (waiting up to SETTLE seconds for them): only then
    can the next mutant run in this process."""
    deadline = time.monotonic() + SETTLE
    while time.monotonic() < deadline:
        busy = [t for t in set(threading.enumerate()) - threads_before if t.is_alive() and _runs_our_code(t)]
        if not busy and not multiprocessing.active_children():
            return True
        time.sleep(0.05)
    return False


def _run_mutant(session: _Session, m: dict, alarm: int) -> dict:
    """Apply one mutation, run its task's tests, undo it: its entry of "results"."""
    try:
        func, code = make_mutant(m["task"], m["old"], m["new"])
    except (ValueError, KeyError) as e:
        return {
            "caught": False,
            "detail": f"does not apply: {e}",
            "timed_out": None,
            "alarm": alarm,
            "failed": None,
            "raised_in": None,
        }
    original = func.__code__
    func.__code__ = code
    outcomes = _Outcomes()
    try:
        status, timed_out = session.run({m["task"]}, alarm, outcomes=outcomes)
    finally:
        func.__code__ = original
    detail = f"pytest exit status {status}" + (f" (timed out after {alarm} s in {timed_out})" if timed_out else "")
    failed, raised = outcomes.first_failure()
    return {
        "caught": status == 1,
        "timed_out": timed_out,
        "alarm": alarm,
        "detail": detail,
        "failed": failed,
        "raised_in": raised,
    }


def _slow_on_the_reference(result: dict, seconds: dict[str, float]) -> bool:
    """A mutant stopped by the short alarm on a test the reference does not run SLOWER times faster."""
    test = result["timed_out"]
    return test is not None and not seconds.get(test, SHORT_ALARM) * SLOWER < SHORT_ALARM


def profile(seed: int | None, explicit_only: bool) -> settings:
    """Hypothesis's settings for the mutants' runs (the "mutants" profile)."""
    # No example database: a failure one mutant found must not be replayed against the next.
    # Derandomized unless a seed is given (in_one_session passes it). Explicit only: a property
    # test without an `@example` runs no example at all (hypothesis skips it).
    return settings(
        database=None,
        derandomize=seed is None,
        deadline=None,
        phases=[Phase.explicit] if explicit_only else [Phase.explicit, Phase.generate],
    )


def main() -> int:
    job = json.load(sys.stdin)
    mutations, alarm, seed = job["mutations"], int(job.get("alarm", SHORT_ALARM)), job.get("seed")
    settings.register_profile("mutants", profile(seed, bool(job.get("explicit_only"))))
    results, reference, durations = {}, None, _Durations()
    threads_before = set(threading.enumerate())

    def body(session: _Session) -> None:
        nonlocal reference
        for m in mutations:
            results[m["id"]] = _run_mutant(session, m, alarm)
            if results[m["id"]]["timed_out"] and not _settled(threads_before):
                return
        status, timed_out = session.run(set(job["tasks"]), LONG_ALARM, stop_at_first=False, durations=durations)
        reference = status == 0 and not timed_out
        again = [
            m
            for m in mutations
            if alarm < LONG_ALARM and m["id"] in results and _slow_on_the_reference(results[m["id"]], durations.seconds)
        ]
        for m in again:  # the long alarm, then the reference once more
            del results[m["id"]]
            results[m["id"]] = _run_mutant(session, m, LONG_ALARM)
            if results[m["id"]]["timed_out"] and not _settled(threads_before):
                reference = None
                return
        if again:
            status, timed_out = session.run(set(job["tasks"]), LONG_ALARM, stop_at_first=False)
            reference = reference and status == 0 and not timed_out

    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # pytest's report goes to stderr; stdout carries the JSON
    try:
        in_one_session(set(job["tasks"]) | {m["task"] for m in mutations}, body, seed)
    finally:
        sys.stdout = real_stdout
    print(json.dumps({"results": results, "reference_passes": reference, "reference_seconds": durations.seconds}))
    return 0


def run_all(
    mutations: list[dict], timeout: float = 900, seed: int | None = None, explicit_only: bool = False
) -> tuple[dict, list[bool]]:
    """Run every mutant, in as many fresh processes as timeouts need; (results, whether the
    reference passed at the end of each process that got there). A mutant stopped by the short
    alarm on a test the reference does not run SLOWER times faster is run again with the long one.
    `seed`: hypothesis's seed for every process (None: derandomized); `explicit_only`: no generated
    examples, only the tests' explicit ones."""
    results, references, seconds = {}, [], {}
    tasks = sorted({m["task"] for m in mutations})
    for alarm in (SHORT_ALARM, LONG_ALARM):
        todo = [m for m in mutations if m["id"] not in results]
        if not todo and alarm == LONG_ALARM:
            break
        while True:
            job = {"tasks": tasks, "mutations": todo, "alarm": alarm, "seed": seed, "explicit_only": explicit_only}
            out = _in_a_fresh_process("main", job, timeout)
            results.update(out["results"])
            seconds.update(out["reference_seconds"])
            if out["reference_passes"] is not None:
                references.append(out["reference_passes"])
            todo = [m for m in todo if m["id"] not in out["results"]]
            if not todo and out["reference_passes"] is not None:
                break
            # else: go on; with nothing left to mutate, the next process only runs the reference
        if alarm == LONG_ALARM:
            break
        for id_, r in list(results.items()):  # stopped early on a test the reference also finds slow?
            if r["alarm"] == SHORT_ALARM and _slow_on_the_reference(r, seconds):
                del results[id_]
    return results, references


def page_order_main() -> int:
    """Input: {"tasks": a stage's tasks in page order}. Output: {task: {"passed": [nodeid],
    "failed": {nodeid: grade_plugin.explain's dict}, "timed_out": nodeid or null}}: each task's
    tests run with every later task blank (the stage's later ones and every later stage's), as
    a student who did the tasks in page order grades them (`checkout.blank_solutions` writes the
    same stubs into a copy's files; here they are swapped in as code objects, as mutants are)."""
    tasks = json.load(sys.stdin)["tasks"]
    settings.register_profile("mutants", profile(None, explicit_only=False))
    later_stages = [t for t in all_tasks() if task_key(t)[0] > task_key(tasks[0])[0]]
    results = {}

    def body(session: _Session) -> None:
        for i, task in enumerate(tasks):
            swaps = [pair for later in [*tasks[i + 1 :], *later_stages] for pair in blank_task(later)]
            originals = [(func, func.__code__) for func, _ in swaps]
            outcomes = _Outcomes()
            try:
                for func, code in swaps:
                    func.__code__ = code
                _, timed_out = session.run({task}, LONG_ALARM, stop_at_first=False, outcomes=outcomes)
            finally:
                for func, code in reversed(originals):
                    func.__code__ = code
            results[task] = {"passed": outcomes.passed, "failed": outcomes.failed, "timed_out": timed_out}

    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # pytest's report goes to stderr; stdout carries the JSON
    try:
        in_one_session(set(tasks), body)
    finally:
        sys.stdout = real_stdout
    print(json.dumps(results))
    return 0


def run_page_order(tasks: list[str], timeout: float = 900) -> dict:
    """`page_order_main` for one stage's tasks (in page order), in a fresh process."""
    return _in_a_fresh_process("page_order_main", {"tasks": tasks}, timeout)


def _in_a_fresh_process(entry: str, job: dict, timeout: float) -> dict:
    """Run `mutants.<entry>()` in a new interpreter with `job` on its stdin; its JSON output."""
    # Started with -c, not as a script: s3's compile workers (forkserver) re-import the main
    # script, and this one, imported there, broke them.
    code = f"import sys; sys.path.insert(0, {str(TESTS)!r}); import mutants; sys.exit(mutants.{entry}())"
    # A mutant swaps a function's code object: the pure build's (a compiled function has none).
    # Forked from the grader's zygote (torch, hypothesis and pytest imported: ~4 s of a fresh
    # interpreter's start on a slow machine), or a fresh process where it cannot be.
    with tempfile.TemporaryDirectory() as tmp:
        given, out, err = (os.path.join(tmp, name) for name in ("job.json", "out", "err"))
        Path(given).write_text(json.dumps(job))
        Path(out).touch()
        Path(err).touch()
        proc = launch([sys.executable, "-c", code], dict(os.environ, MINISGLANG_PURE="1"), REPO, out, err, given)
        try:
            status = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # (the run leads a session of its own)
            proc.wait()
            raise
        if status != 0:
            raise RuntimeError(f"the mutant runner failed:\n{Path(err).read_text()[-3000:]}")
        return json.loads(Path(out).read_text())


if __name__ == "__main__":
    sys.exit(main())
