"""What a grading run found and how it is shown: the report's dataclasses (`GradeReport`,
`TaskResult`, `Failure`, `FileError`, and its `--json` form), the task prerequisites that
`minisglang prerequisites --write` stores, and the printed per-copy report and class tables.

grading.py runs the tests and fills a GradeReport; this module only reads one. A row's
status (ok, failed, blank, needs) and every note under a failure (a stub the test ran into,
another task's code that raised, a copy suspected of hiding its code) are decided here.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .checkout import PACKAGE_DIR, stage_number, task_key

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


def escape_controls(text: str) -> str:
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
            stub = STUB_ERROR.match(f.reason)
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
            elif f.raised_in and f"task{f.raised_in}" != t and not STUB_ERROR.match(f.reason):
                lines.append(f"  (the error came from task {f.raised_in}'s code, which this test also runs)")
            stub = STUB_ERROR.match(f.reason)
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
    return escape_controls("\n".join(lines))


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
            if other is None or other == t or other not in report.tasks or STUB_ERROR.match(f.reason):
                continue
            if own_failure[other] - {f.test}:  # the other task fails a test of its own too
                f.marked = [m for m, res in report.tasks.items() if f in res.failed]
                for m in f.marked:
                    report.tasks[m].failed.remove(f)
                report.tasks[other].failed.append(f)


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
        and any(not STUB_ERROR.match(f.reason) for f in report.tasks[x].failed)
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
        if all((m := STUB_ERROR.match(f.reason)) and m["task"] == task[4:] for f in failed):
            return []  # every failure already reads "taskN_M: write this"
        return [
            "",
            f"NOTE {task}: still blank in your copy (its region is the checkout's stub): its tests "
            "cannot pass until it is written; write it, then grade again",
        ]
    own = [f for f in failed if not STUB_ERROR.match(f.reason) and _ran(f)]
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


STUB_ERROR = re.compile(r"NotImplementedError: task(?P<task>(?P<stage>\d+)_\d+): write this")


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
    return escape_controls("\n".join(lines))


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
