"""The autograder is honest and explains itself.

Honest: every task's tests pass on the reference and fail on blank stubs and on plausible
wrong solutions (MUTATIONS in tests/plausible_mistakes/, at least three per task), each caught by a fixed input, so
that no hypothesis seed lets one through; every solution region has a test.
Explains: a syntax error, an infinite loop and a failed assertion in a student's copy are
each reported with the test's name and the reason, and a failure is blamed on the task whose
code it ran. (Student copies: tests/test_checkout.py; each task's prerequisites:
tests/test_prerequisites.py.)
"""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import mutants
import pytest
from plausible_mistakes import MUTATIONS

from minisglang import grade_report
from minisglang.checkout import (
    PACKAGE_DIR,
    all_tasks,
    blank_solutions,
    checkout,
    task_key,
)
from minisglang.cli import main
from minisglang.grading import REPO_TESTS, format_report, run_task_tests, select_tasks
from minisglang.stages import STAGE_MODULES

STAGES_WITH_TASKS = [tag for tag in STAGE_MODULES if all_tasks(tag)]


def test_grade_rejects_a_directory_without_a_package(tmp_path):
    with pytest.raises(FileNotFoundError, match="holds no minisglang package"):
        run_task_tests("s2", impl=tmp_path)


def test_a_copy_the_grader_cannot_run_keeps_the_rest_of_the_class(tmp_path, capsys):
    """An instructor's test: one copy the grader could not run (here, no package at all) used
    to end the whole class's run with a traceback and no row; now it gets its own row."""
    from minisglang import grading
    from minisglang.grading import grade

    first, second = tmp_path / "no package", tmp_path / "typo"
    first.mkdir()
    assert grade("s2", [str(first), str(second)], only=["2_1"]) == 1
    out = capsys.readouterr().out
    assert out.count("the grader could not run this copy: FileNotFoundError") == 2, out
    assert "holds no minisglang package" in out and str(second) in out
    # each scores 0 of the task's real tests (the reference's), as a copy graded does
    real = len(grading.reference_tests(["task2_1"]))
    assert real > 1 and re.search(rf"^typo +0/{real} +0/1  \(no test ran\)$", out, re.M), out


def test_a_test_process_that_dies_leaves_its_unrun_tests_failed(tmp_path):
    """An instructor's test: a copy whose code calls os._exit ended pytest in its first test,
    and the tests after it went unreported, so a task could read "ok" on some of its tests.
    Every test a run set out to run and never reported is now a failure that says so."""
    checkout("s2", tmp_path / "exits")
    _plant(
        tmp_path / "exits",
        _region_file("task2_1"),
        "    v = allowed.shape[-1]\n",
        "    import os\n    os._exit(0)\n    v = allowed.shape[-1]\n",
    )
    report = run_task_tests("s2", impl=tmp_path / "exits", only=["2_1"], test_timeout=20)
    row = report.tasks["task2_1"]
    assert not row.ok and not row.passed
    # (each test ends the process in its turn: each fails so, the next runs in a new process)
    ended = ("did not run: the test process ended before it", "the test process ended during this test")
    assert all(f.reason.startswith(ended) for f in row.failed), row.failed


@pytest.mark.parametrize(
    "ending, said",
    [
        ('import sys\nsys.exit("debug stop")\n', "SystemExit: debug stop"),
        ("import os\nos._exit(3)\n", "os._exit(3) at minisglang/"),
    ],
)
def test_a_copy_that_ends_the_process_while_imported_fails_every_test_and_says_why(tmp_path, ending, said):
    """An instructor's test: a copy whose file calls sys.exit (a leftover debugging line) while
    it is imported ended pytest's collection before it chose a test; the copy's row read
    "no tests!", 0 passed and 0 failed, with no reason (sys.exit), or lost its blank tasks
    behind "the graded test run failed (exit status 3):" and nothing after it (os._exit).
    Every one of the task's real tests now fails, saying what ended the run and where."""
    from minisglang import grading

    checkout("s2", tmp_path / "exits", student=True)
    _plant(tmp_path / "exits", _region_file("task2_1"), "\nimport ", "\n" + ending + "import ")
    report = run_task_tests("s2", impl=tmp_path / "exits", only=["2_1"], test_timeout=20)
    row = report.tasks["task2_1"]
    real = len(grading.reference_tests(["task2_1"]))
    assert not row.passed and len(row.failed) == real > 1, row.failed
    for f in row.failed:
        assert f.reason.startswith("did not run: the test run ended before") and said in f.reason, f.reason
    text = format_report(report)
    assert "no tests!" not in text and said in text, text
    assert "task2_1" in report.blank and grade_report.task_status("task2_1", report, {}) == "blank"
    # The line is an error in the copy's code: sys.exit's traceback names it; os._exit prints
    # nothing (it once read only "it printed nothing"), and the grader's plugin noted the call.
    (error,) = report.file_errors
    assert error.path == "minisglang/" + _region_file("task2_1") and error.line, error
    assert grade_report.format_class_table([report]).endswith("(code error)")


def test_a_copy_that_loops_while_imported_is_stopped_soon_and_says_so(tmp_path):
    """An instructor's test: a copy that loops while it is imported (a student's own try of
    a function at the bottom of its file, calling a walk that never ends) started no test,
    and the grader waited for the whole run's limit, 30 minutes, before it gave that copy
    up and went on with the class. A run that has not collected its tests within its
    collection limit is stopped, and each of the task's tests fails saying why. (A limit of
    5 s here: the copy loops whenever the limit falls, and the loop burns a core meanwhile.)"""
    checkout("s2", tmp_path / "loops", student=True)
    _plant(tmp_path / "loops", _region_file("task2_1"), "\nimport ", "\nwhile True:\n    pass\nimport ")
    started = time.monotonic()
    report = run_task_tests("s2", impl=tmp_path / "loops", only=["2_1"], test_timeout=5, collect_timeout=5)
    assert time.monotonic() - started < 120
    row = report.tasks["task2_1"]
    assert not row.passed and len(row.failed) > 1, row.failed
    for f in row.failed:
        assert "no test started within 5 s" in f.reason and "while the copy was imported" in f.reason, f.reason


def test_a_copy_of_an_earlier_stage_is_named_as_such_not_as_a_code_error(tmp_path, capsys):
    """An instructor's test: `grade --stage s7 --impl` of a class's s4 copies (a slip of the
    directory) said "ERROR in your code: (the tests): ModuleNotFoundError: No module named
    'minisglang.backends'" and "(code error)" in each student's row. The copy is now named for
    what it is, before any test runs."""
    from minisglang.grading import grade

    checkout("s1", tmp_path / "s1", student=True)
    with pytest.raises(ValueError, match=r"is a checkout of stage s1, not s2"):
        run_task_tests("s2", impl=tmp_path / "s1", only=["2_1"])
    assert grade("s2", [str(tmp_path / "s1"), str(tmp_path / "s1")], only=["2_1"]) == 1
    out = capsys.readouterr().out
    assert out.count("the grader could not run this copy: ValueError") == 2 and "code error" not in out, out
    assert "minisglang checkout s2" in out, out


def test_a_byte_order_mark_is_no_syntax_error(tmp_path):
    """Python reads a UTF-8 BOM; a copy saved with one was once reported with a SyntaxError
    per file (U+FEFF) though every test passed."""
    from minisglang.grading import syntax_errors

    package = tmp_path / "minisglang"
    package.mkdir()
    (package / "__init__.py").write_bytes(b"\xef\xbb\xbfx = 1\r\n")
    (package / "broken.py").write_text("def f(:\n")
    assert [e.path for e in syntax_errors(package)] == ["minisglang/broken.py"]


def test_grading_the_reference_passes_every_task():
    """The grader end to end on the reference (s2, the quickest stage). That the reference
    passes every task's tests at every stage is what the rest of this suite shows: the
    graded tests are the same tests, collected by the same markers."""
    reference = run_task_tests("s2")
    print(format_report(reference))
    assert not reference.file_errors
    for task, result in reference.tasks.items():
        assert result.ok, f"{task} on the reference: {result.failed}"


def test_grade_task_runs_only_the_named_tasks_and_names_a_misspelt_one(capsys):
    """A student working on one task grades that task alone (`--task 2_2`, or `task2_2`)."""
    report = run_task_tests("s2", only=["2_2"])
    assert list(report.tasks) == ["task2_2"] and report.ok and report.tasks["task2_2"].passed
    assert select_tasks("s2", ["task2_1", "2_2"]) == ["task2_1", "task2_2"]
    assert main(["grade", "--stage", "s2", "--task", "2_9", "1_1"]) == 2
    err = capsys.readouterr().err
    assert "stage s2 has no task 2_9, 1_1; its tasks are 2_1, 2_2, 2_3, 2_4" in err, err


# ------------------------------------------------------------------- the grader explains
def _plant(root: Path, rel_suffix: str, old: str, new: str) -> None:
    (path,) = [p for p in (root / "minisglang").rglob("*.py") if str(p).endswith(rel_suffix)]
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} is not in {path}: update the planted mistake"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def _region_file(task: str) -> str:
    return str(all_tasks()[task][0].relative_to(PACKAGE_DIR))


GRADED_CLASS_ROOT: list[Path] = []


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    """Four s1 copies graded as a class: one with a syntax error, one importing a module that
    does not exist, one with an infinite loop (task1_2 without its `seen` check), a wrong
    mask (task1_3) and forbidden logits set to 0 (task1_4), one untouched."""
    root = tmp_path_factory.mktemp("class")
    for name in ("syntax", "imports", "bugs", "good"):
        checkout("s1", root / name)
    _plant(root / "syntax", _region_file("task1_1"), "        rows = self._rows\n", "        rows = (self._rows\n")
    _plant(root / "imports", _region_file("task1_1"), "\nimport ", "\nimport no_such_module\nimport ")
    _plant(root / "bugs", _region_file("task1_2"), "if end not in seen:", "if True:")
    _plant(
        root / "bugs", _region_file("task1_3"), "        return row\n", "        row[0] = True\n        return row\n"
    )
    _plant(root / "bugs", _region_file("task1_4"), 'masked_fill_(~row, float("-inf"))', "masked_fill_(~row, 0.0)")
    report = root / "report.json"
    cmd = [
        sys.executable,
        "-m",
        "minisglang.cli",
        "grade",
        "--stage",
        "s1",
        "--timeout",
        "3",
        "--json",
        str(report),
        "--impl",
        *(str(root / n) for n in ("syntax", "imports", "bugs", "good")),
    ]
    # The time limit: a grader that hung on the loop would be stopped here and fail the test.
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO_TESTS.parent)
    GRADED_CLASS_ROOT.append(root)  # (where the copies are: grading must leave no file in them)
    return proc, json.loads(report.read_text())


def test_a_syntax_error_is_reported_with_file_and_line(graded_class):
    proc, reports = graded_class
    assert proc.returncode == 1
    where = _region_file("task1_1")
    assert re.search(
        rf"ERROR in your code: minisglang/{re.escape(where)}:\d+: SyntaxError: '\(' was never closed", proc.stdout
    ), proc.stdout
    syntax = reports[0]
    assert syntax["file_errors"][0]["path"] == f"minisglang/{where}"
    # no NOTE weighing tasks by tests that never ran (an instructor found them meaningless)
    assert "ran in 0 failing and 0 passing tests" not in proc.stdout, proc.stdout
    for task in all_tasks("s1"):
        failures = syntax["tasks"][task]["failed"]
        assert failures and all("SyntaxError" in f["reason"] for f in failures)
        # every test of the task fails, as many as the untouched copy passes (not one per file)
        assert len(failures) == len(reports[3]["tasks"][task]["passed"]), (task, failures)


def test_an_import_error_is_reported_with_file_and_line(graded_class):
    proc, reports = graded_class
    where = _region_file("task1_1")
    assert re.search(
        rf"ERROR in your code: minisglang/{re.escape(where)}:\d+: ModuleNotFoundError: "
        r"No module named 'no_such_module'",
        proc.stdout,
    ), proc.stdout
    for task in all_tasks("s1"):
        assert all("no_such_module" in f["reason"] for f in reports[1]["tasks"][task]["failed"])


def test_an_infinite_loop_fails_as_timed_out_and_names_the_test(graded_class):
    proc, reports = graded_class
    bugs = reports[2]
    loops = [f for f in bugs["tasks"]["task1_2"]["failed"] if f["timed_out"]]
    assert loops and all("timed out" in f["reason"] for f in loops)
    assert all(f["test"].startswith("tests/test_exercises_s1.py::test_") for f in loops)
    name = loops[0]["test"].split("::")[1].split("[")[0]
    assert re.search(rf"^FAIL task1_2 .*{name}.*\n  timed out", proc.stdout, re.M), proc.stdout
    # The alarm stops the endless worklist (1_2) wherever it is, often inside the walk_bytes
    # it calls (1_1): a stack through two tasks' regions blames neither (it blamed 1_1).
    assert all(f.get("raised_in") in (None, "1_2") for f in loops), loops
    assert "the error came from task 1_1's code" not in proc.stdout, proc.stdout
    # The other tasks were still graded after the loop was stopped.
    assert bugs["tasks"]["task1_1"]["ok"] and bugs["tasks"]["task1_5"]["ok"]


def test_a_failed_assertion_is_reported_with_the_test_and_its_message(graded_class):
    proc, reports = graded_class
    failures = reports[2]["tasks"]["task1_3"]["failed"]
    assert failures
    for f in failures:
        assert f["reason"].startswith(("AssertionError", "assert ")) and not f["timed_out"]
        # printed under its task, with its name (alone, or in a group with the same reason)
        block = next(b for b in proc.stdout.split("\n\n") if f"\n  {f['reason']}" in b)
        assert block.startswith("FAIL task1_3 ") and f["test"].rsplit("::", 1)[-1].split("[")[0] in block


def test_a_hypothesis_failure_shows_its_failing_example(graded_class):
    proc, reports = graded_class
    failures = reports[2]["tasks"]["task1_4"]["failed"]
    examples = [f for f in failures if f["example"]]
    assert examples, failures
    for f in examples:
        assert f["example"].startswith(("Failing test case:", "Falsifying example:"))
        assert f["example"].splitlines()[0] + "\n" in proc.stdout.split(f["reason"], 1)[1]


def test_grading_keeps_no_hypothesis_examples_in_the_copies(graded_class):
    """A copy's grade must not depend on the gradings before it: hypothesis's example
    database (.hypothesis) was written into the copy, and a stranger's wrong solution passed
    once, then failed five times running, until it was deleted."""
    # (.hypothesis/constants is a cache of the source's literals, the same whatever ran before)
    found = list(GRADED_CLASS_ROOT[0].rglob(".hypothesis/examples"))
    assert not found, f"grading kept hypothesis's failing examples in the copies: {found}"


def test_the_class_table_has_one_row_per_student_and_one_column_per_task(graded_class):
    proc, reports = graded_class
    table, summary = proc.stdout[proc.stdout.index("student ") :].split("\n\n", 1)
    header, rule, *rows = table.strip().splitlines()
    assert header.split() == ["student", *sorted(all_tasks("s1"), key=task_key), "total"]
    assert [r.split()[0] for r in rows] == ["syntax", "imports", "bugs", "good"]
    assert rows[0].endswith("0/5  (code error)") and rows[1].endswith("0/5  (code error)")
    assert rows[2].split()[1] == "ok" and rows[2].split()[2] != "ok" and rows[2].endswith("2/5")
    assert rows[3].split()[1:] == ["ok"] * 5 + ["5/5"]
    assert [r["ok"] for r in reports] == [False, False, False, True]
    # then the class summary: per task, how many copies passed it, failed it, ...
    counts = {line.split()[0]: line.split()[1:] for line in summary.splitlines() if line.startswith("task")}
    assert summary.startswith("task") and "(of 4 copies)" in summary.splitlines()[0], summary
    assert counts["task1_1"] == ["2", "2", "0", "0"] and counts["task1_3"] == ["1", "3", "0", "0"], summary
    assert reports[3]["failed"] == 0 and reports[3]["passed"] > 0


def test_grade_verbose_prints_pytests_output_and_json_writes_the_report(tmp_path, monkeypatch, capsys):
    """The CLI's plumbing, on a canned report (the runs themselves are tested above)."""
    from minisglang import grading

    canned = grade_report.GradeReport(
        "s1",
        None,
        {
            "task1_1": grade_report.TaskResult(
                "task1_1",
                passed=["t::a"],
                failed=[
                    grade_report.Failure(
                        "t::b", "AssertionError: 3 != 4", "minisglang/x.py:7", "Failing test case: b(n=3)"
                    )
                ],
            )
        },
        output="=== pytest's own output ===",
    )
    monkeypatch.setattr(grading, "run_task_tests", lambda stage, impl, test_timeout, only: canned)
    assert main(["grade", "--stage", "s1", "--verbose", "--json", str(tmp_path / "r.json")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("=== pytest's own output ===")
    assert (
        "FAIL task1_1 t::b\n  AssertionError: 3 != 4\n  raised at minisglang/x.py:7\n  Failing test case: b(n=3)" in out
    )
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["ok"] is False and data["passed"] == 1 and data["failed"] == 1
    assert data["tasks"]["task1_1"]["failed"][0]["example"] == "Failing test case: b(n=3)"
    monkeypatch.setattr(
        grading,
        "run_task_tests",
        lambda stage, impl, test_timeout, only: grade_report.GradeReport(
            "s1", None, {"task1_1": grade_report.TaskResult("task1_1", passed=["t::a"])}
        ),
    )
    assert main(["grade", "--stage", "s1"]) == 0
    assert "pytest's own output" not in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("stage", [tag.split("-")[0] for tag in STAGES_WITH_TASKS])
def test_tasks_done_in_page_order_pass_or_name_the_later_task_they_need(stage):
    """Every page says: make task N_1 pass, grade, then the next. So with a task and the ones
    before it written (the reference) and the stage's later ones blank (and every later
    stage's), its tests pass, or each failure names the later task it runs (the grader's
    "needs", from the plugin's own `explain`). Task 5_1's page promises more: it grades alone
    (its tests run the eager automaton, not 5_3's, and building the fsm backend must not
    compile arrays, 5_2). The stubs are swapped in as code objects in one process per stage
    (tests/mutants.py); that a copy's files hold those very stubs, and that the grader reads
    them, is test_every_task_fails_on_blank_stubs's."""
    tasks = sorted(all_tasks(stage), key=task_key)
    results = mutants.run_page_order(tasks)
    for i, task in enumerate(tasks):
        blank = set(tasks[i + 1 :]) | {t for t in all_tasks() if task_key(t)[0] > int(stage[1:])}
        result = results[task]
        failures = "\n".join(
            f"  {test}: {f['reason']} (stubs it ran: {f['blank']})" for test, f in result["failed"].items()
        )
        assert result["timed_out"] is None, f"{task} with {sorted(blank)} blank: {result['timed_out']} timed out"
        assert result["passed"], f"{task} with {sorted(blank)} blank: no test passes\n{failures}"
        if task == "task5_1":
            assert not result["failed"], f"task5_1 must grade alone, with 5_2 and 5_3 blank:\n{failures}"
        for test, f in result["failed"].items():
            assert f["blank"] and {f"task{b}" for b in f["blank"]} <= blank, (
                f"{task} with {sorted(blank)} blank: {test} fails without naming a later task it runs:\n{failures}"
            )


@pytest.mark.skipif(importlib.util.find_spec("pytest_timeout") is None, reason="needs pytest-timeout")
def test_a_deadlock_shows_where_each_thread_waited_in_the_graded_files(tmp_path):
    """A test that re-enters a lock (task 3_1 calling `self._compile` inside `with
    self.lock`) times out; the plugin's faulthandler dump, trimmed to the graded package,
    says which line each thread waits on, and the report says "possible deadlock"."""
    from minisglang import grade_plugin

    pkg = tmp_path / "copy" / "minisglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "locky.py").write_text(
        "import threading\nLOCK = threading.Lock()\n\n\ndef compile_it():\n"
        "    with LOCK:\n        return 1\n\n\ndef get():\n    with LOCK:\n"
        "        return compile_it()\n"
    )
    (tmp_path / "test_lock.py").write_text("from minisglang import locky\n\n\ndef test_get():\n    locky.get()\n")
    shutil.copy(grade_plugin.__file__, tmp_path / "the_plugin.py")
    events = tmp_path / "events.jsonl"
    env = dict(
        os.environ, PYTHONPATH=f"{tmp_path / 'copy'}{os.pathsep}{tmp_path}", **{grade_plugin.EVENTS_ENV: str(events)}
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "the_plugin",
            "-p",
            "no:cacheprovider",
            "--timeout=2",
            "-o",
            "addopts=",
            str(tmp_path / "test_lock.py"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    finish = [json.loads(line) for line in events.read_text().splitlines() if '"finish"' in line][0]
    assert finish["timed_out"] and not finish["passed"], finish
    assert any("minisglang/locky.py:6 in compile_it" in s for s in finish["stacks"]), finish["stacks"]
    assert not any("test_lock.py" in s or "threading.py" in s for s in finish["stacks"]), finish["stacks"]
    failure = grade_report.Failure("t::test_get", finish["reason"], timed_out=True, stacks=finish["stacks"])
    out = grade_report.format_report(
        grade_report.GradeReport("s3", "/x", {"task3_1": grade_report.TaskResult("task3_1", failed=[failure])})
    )
    assert "possible deadlock" in out and "    minisglang/locky.py:6 in compile_it" in out, out


@pytest.mark.skipif(importlib.util.find_spec("pytest_timeout") is None, reason="needs pytest-timeout")
def test_a_property_test_that_loops_is_stopped_once_not_replayed(tmp_path):
    """An infinite loop inside a hypothesis test: the plugin's alarm passes through
    hypothesis (which would take pytest's own timeout failure for a failing example and replay
    it, with no alarm left), so pytest stops the test at the limit and goes on to the next
    test in the same run; the grader never has to kill the process."""
    from minisglang import grade_plugin

    (tmp_path / "test_loop.py").write_text(
        "from hypothesis import given, strategies as st\n\n\n@given(st.integers(0, 9))\n"
        "def test_loops(n):\n    while n >= 0:\n        n = n + 1\n\n\ndef test_after():\n    assert True\n"
    )
    shutil.copy(grade_plugin.__file__, tmp_path / "the_plugin.py")
    events = tmp_path / "events.jsonl"
    env = dict(os.environ, PYTHONPATH=str(tmp_path), **{grade_plugin.EVENTS_ENV: str(events)})
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "the_plugin",
            "-p",
            "no:cacheprovider",
            "--timeout=2",
            "-o",
            "addopts=",
            str(tmp_path / "test_loop.py"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    finish = {
        e["test"].split("::")[1]: e for e in map(json.loads, events.read_text().splitlines()) if e["event"] == "finish"
    }
    assert proc.returncode == 1 and set(finish) == {"test_loops", "test_after"}, proc.stdout[-2000:]
    assert finish["test_loops"]["timed_out"] and "timed out after" in finish["test_loops"]["reason"], finish
    assert finish["test_after"]["passed"], finish


@pytest.mark.slow
@pytest.mark.parametrize("stage", STAGES_WITH_TASKS)
def test_every_task_fails_on_blank_stubs(stage, tmp_path):
    checkout(stage, tmp_path, student=True)
    student = run_task_tests(stage, impl=tmp_path)
    print(format_report(student))
    for task, result in student.tasks.items():
        assert not result.passed, f"{task}: these tests pass on a blank stub: {result.passed}"
        assert result.failed
    # The exercise page shows this very table to the student (who checks that the copy works).
    name = f"exercises/{stage.split('-')[0]}.md"
    page = (PACKAGE_DIR.parent / name).read_text(encoding="utf-8")
    shown = {
        task: int(failed)
        for task, failed in re.findall(r"^(task\d+_\d+) +0 +(\d+) +FAIL(?: \(needs [\d_, ]+\))?$", page, re.M)
    }
    counted = {task: len(result.failed) for task, result in student.tasks.items()}
    assert shown == counted, (
        f"{name}'s table of an untouched copy says {shown}; the grader counts {counted}: update the page"
    )
    total = re.search(r"^0 passed, (\d+) failed$", page, re.M)
    assert total and int(total.group(1)) == sum(counted.values()), f"{name}'s total is stale"


# ------------------------------------------------------------------- plausible mistakes
# (MUTATIONS: tests/plausible_mistakes/)


def test_every_task_has_at_least_three_plausible_mistakes():
    counts = {t: sum(m[0] == t for m in MUTATIONS) for t in all_tasks()}
    assert all(n >= 3 for n in counts.values()), counts


@pytest.mark.parametrize("stage", [tag.split("-")[0] for tag in STAGES_WITH_TASKS])
def test_every_plausible_mistake_fails_its_tasks_tests(stage):
    """Each mutation applied to the reference (tests/mutants.py, one process per stage), with
    hypothesis's generated examples off: a mistake only a generated example catches is caught
    by some seeds and not others, and `minisglang grade` draws a fresh seed each run. Caught
    here, a mistake fails its task's row in every grading run (scripts/mutant_reruns.py
    measures it: benchmarks/results/mutant_reruns.md)."""
    mine = [
        {"id": f"{task}: {what}", "task": task, "old": old, "new": new}
        for task, what, old, new in MUTATIONS
        if task_key(task)[0] == int(stage[1:])
    ]
    results, references = mutants.run_all(mine, explicit_only=True)
    assert references and all(references), "the reference fails after the mutants ran"
    survivors = {m: r["detail"] for m, r in results.items() if not r["caught"]}
    assert not survivors, (
        f"these mistakes pass the task's tests on every fixed input (add a plain test or an "
        f"`@example` that catches each): {json.dumps(survivors, indent=1)}"
    )


MUTANTS_TOY_TESTS = """import os

import pytest

FAIL = False


def log(what):
    with open(os.environ["EVENTS"], "a") as f:
        f.write(what + "\\n")


@pytest.fixture(scope="session")
def shared():
    log("session up")
    yield
    log("session down")


@pytest.fixture(scope="module")
def mod():
    log("module up")
    yield
    log("module down")


@pytest.mark.task1_1
def test_a(shared, mod):
    log("a")


@pytest.mark.task1_1
def test_b(shared):
    log("b")
    assert not FAIL


@pytest.mark.task1_2
def test_c(shared):
    log("c")
"""

MUTANTS_TOY_RUNS = """import json, sys
from pathlib import Path

sys.path.insert(0, sys.argv[1])
import mutants
from hypothesis import settings

mutants.REPO, mutants.TESTS = Path.cwd(), Path.cwd() / "tests"
settings.register_profile("mutants", mutants.profile(None, explicit_only=True))
statuses = []


def body(session):
    toy = sys.modules["test_toy"]
    statuses.append(session.run({"task1_1"}, 5)[0])
    toy.FAIL = True  # as a mutant would make test_b fail
    statuses.append(session.run({"task1_1"}, 5)[0])
    statuses.append(session.run({"task1_1"}, 5)[0])
    statuses.append(session.run({"task1_2"}, 5)[0])
    statuses.append(session.run({"task1_1"}, 5, stop_at_first=False)[0])


mutants.in_one_session({"task1_1", "task1_2"}, body)
Path("statuses.json").write_text(json.dumps(statuses))
"""


def test_each_run_of_the_mutants_session_is_what_a_fresh_pytest_main_was(tmp_path):
    """tests/mutants.py runs every mutant's tests in one pytest session; each run must be what
    `pytest.main(files, -m task, -x)` gave it: session and module fixtures set up afresh and
    torn down at its end, a stop at the first failure (with everything torn down), the tests
    that failed before first, and pytest's exit status."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_toy.py").write_text(MUTANTS_TOY_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    task1_1: a\n    task1_2: b\n")
    events = tmp_path / "events.txt"
    proc = subprocess.run(
        [sys.executable, "-c", MUTANTS_TOY_RUNS, str(PACKAGE_DIR.parent / "tests")],
        cwd=tmp_path,
        env=dict(os.environ, EVENTS=str(events)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "statuses.json").read_text()) == [0, 1, 1, 0, 1]
    runs = [
        ["session up", "module up", "a", "b", "module down", "session down"],  # passes
        ["session up", "module up", "a", "b", "module down", "session down"],  # b fails, last
        ["session up", "b", "session down"],  # b, the catcher, first: -x stops before a
        ["session up", "c", "session down"],  # another task's run
        ["session up", "b", "module up", "a", "module down", "session down"],  # no -x: a runs too
    ]
    assert events.read_text().splitlines() == [e for run in runs for e in run]


def test_a_copy_missing_a_whole_subpackage_is_not_graded_as_the_reference(tmp_path):
    """An editable install of the reference must not fill the holes of a student's copy: with
    `constrained/` deleted, the copy's tests fail on the missing module instead of passing."""
    copy = tmp_path / "student"
    checkout("s1", copy)
    shutil.rmtree(copy / "minisglang" / "constrained")
    env = dict(os.environ, PYTHONPATH=str(copy), MINISGLANG_IMPL=str(copy))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-p",
            "no:cacheprovider",
            str(REPO_TESTS / "test_exercises_s1.py"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode != 0, proc.stdout
    assert "No module named 'minisglang.constrained'" in proc.stdout + proc.stderr, proc.stdout[-2000:]


@pytest.mark.parametrize("stage", ["s1", "s2", "s3", "s4", "s5"])
def test_a_checkout_runs_the_engine_with_only_its_own_files(stage, tmp_path):
    """A copy of an early stage holds no later stage's files (no backends/ before s5, no
    structural_tag.py before s6), so the engine it ships must run without them: the
    reference install is hidden from it. The later stages' regions in the files it ships are
    blanked, as a student copy has them (task4_4 in scheduler.py, task6_2 in function_call.py)."""
    out = checkout(stage, tmp_path)
    later = {t for t in all_tasks() if task_key(t)[0] > int(stage[1:])}
    for path in out.rglob("*.py"):
        path.write_text(blank_solutions(path.read_text(encoding="utf-8"), later), encoding="utf-8")
    script = (
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if not (getattr(f, '__module__', '') or '')"
        ".startswith('__editable__')]\n"
        "import re, minisglang\n"
        f"assert minisglang.__file__.startswith({str(tmp_path)!r}), minisglang.__file__\n"
        "if __name__ == '__main__':\n"
        f"    engine = minisglang.Engine(stage={stage!r})\n"
        "    out = engine.generate('Date:', {'regex': r'[0-9]{4}-[0-9]{2}-[0-9]{2}', 'max_new_tokens': 12})\n"
        "    engine.shutdown()\n"
        "    assert re.fullmatch(r'[0-9]{4}-[0-9]{2}-[0-9]{2}', out['text']), out\n"
        "    print('ran', out['text'])\n"
    )
    (tmp_path / "run_it.py").write_text(script)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "run_it.py"], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path
    )
    assert proc.returncode == 0 and "ran " in proc.stdout, proc.stdout[-1500:] + proc.stderr[-3000:]


# ------------------------------------------------------------------- blame: which task a failure is in


def test_a_blank_task_is_found_in_the_copy(tmp_path):
    from minisglang import grading

    copy = tmp_path / "s2"
    checkout("s2", copy, student=True, only=True)
    blank = grading.blank_tasks(copy / "minisglang")
    assert [t for t in blank if task_key(t)[0] <= 2] == sorted(all_tasks("s2"), key=task_key), (
        f"a `--only` copy of s2 has s2's tasks blank and s1's written; blank_tasks found {blank}"
    )


def test_a_timeout_through_two_tasks_regions_blames_neither(tmp_path):
    """An endless worklist (task 1_2) is stopped wherever the alarm finds it, most often
    inside the walk_bytes it calls (task 1_1): a stack through both regions names neither
    (it named 1_1, sending the student to code that was fine). Any other error still names
    the innermost region, and a timeout inside one task's regions names that task."""
    from minisglang import grade_plugin

    pkg = tmp_path / "minisglang"
    pkg.mkdir()
    src = pkg / "walk.py"
    src.write_text(
        "def walk():\n    # BEGIN SOLUTION task1_1\n    raise TimeoutError('the alarm')\n    # END SOLUTION\n\n\n"
        "def build():\n    # BEGIN SOLUTION task1_2\n    while True:\n        walk()\n    # END SOLUTION\n\n\n"
        "def spin():\n    # BEGIN SOLUTION task1_2\n    raise TimeoutError('the alarm')\n    # END SOLUTION\n"
    )
    namespace: dict = {}
    exec(compile(src.read_text(), str(src), "exec"), namespace)
    errors = {}
    for name in ("build", "spin"):
        try:
            namespace[name]()
        except TimeoutError as e:
            errors[name] = e
    assert grade_plugin.raised_in(errors["build"]) == "1_1"
    assert grade_plugin.raised_in(errors["build"], timed_out=True) is None
    assert grade_plugin.raised_in(errors["spin"], timed_out=True) == "1_2"


def test_an_error_raised_in_another_tasks_code_counts_in_that_tasks_row(tmp_path):
    """A test of task 3_2 whose call goes through task 3_3's code, which raises, while 3_3
    fails its own test too: the failure is 3_3's (its row names the test) and 3_2 keeps only
    its own failure. Where the other task passes its own tests, the failure stays (the
    caller's mistake, more likely), saying whose code raised it."""
    pkg = tmp_path / "copy" / "minisglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "queue.py").write_text(
        "def poll(items):\n    # BEGIN SOLUTION task3_3\n    return items[5]\n    # END SOLUTION\n\n\n"
        "def get(items):\n    # BEGIN SOLUTION task3_2\n    if not items:\n        raise ValueError('empty')\n"
        "    return poll(items)\n    # END SOLUTION\n"
    )
    tests = tmp_path / "tests"
    tests.mkdir()
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    task3_2: x\n    task3_3: x\n")
    (tests / "test_q.py").write_text(
        "import pytest\nfrom minisglang import queue\n\n\n@pytest.mark.task3_2\ndef test_get_goes_through_poll():\n"
        "    assert queue.get([1, 2])\n\n\n@pytest.mark.task3_2\ndef test_get_refuses_nothing():\n"
        "    queue.get([])\n\n\n@pytest.mark.task3_3\ndef test_poll_own():\n    assert queue.poll([0] * 3) == 0\n"
    )
    report = run_task_tests("s3", impl=tmp_path / "copy", tests_dir=tests, only=["3_2", "3_3"])
    out = format_report(report)
    moved = [f for f in report.tasks["task3_3"].failed if f.test.endswith("test_get_goes_through_poll")]
    assert moved and moved[0].raised_in == "3_3" and moved[0].marked == ["task3_2"], out
    assert [f.test.rsplit("::", 1)[-1] for f in report.tasks["task3_2"].failed] == ["test_get_refuses_nothing"], out
    assert "(a test of 3_2; counted here: the error came from task 3_3's code)" in out, out
    # The same failure, where 3_3 passes its own tests: it stays in 3_2's row.

    stays = grade_report.Failure("t::get", "IndexError: list index out of range", raised_in="3_3")
    alone = grade_report.GradeReport(
        "s3",
        "/x",
        {
            "task3_2": grade_report.TaskResult("task3_2", failed=[stays]),
            "task3_3": grade_report.TaskResult("task3_3", passed=["t::poll"]),
        },
    )
    grade_report.attribute_failures(alone)
    assert alone.tasks["task3_2"].failed == [stays] and not alone.tasks["task3_3"].failed
    assert "(the error came from task 3_3's code, which this test also runs)" in format_report(alone)


def test_a_class_ends_with_one_table_of_each_tasks_passed_failed_and_blank_copies(monkeypatch, capsys):
    """An instructor with 30 students wanted one table: per task, how many passed, failed or
    left it blank. It follows the per-student table, which stays."""
    from minisglang import grading

    F, R = grade_report.Failure, grade_report.TaskResult
    stub = F("t::s", "NotImplementedError: task2_1: write this", blank=["2_1"])
    canned = {
        "/c/alice": grade_report.GradeReport("s2", "/c/alice", {"task2_1": R("task2_1", passed=["t::s"])}),
        "/c/bob": grade_report.GradeReport(
            "s2", "/c/bob", {"task2_1": R("task2_1", failed=[F("t::s", "AssertionError")])}
        ),
        "/c/dave": grade_report.GradeReport(
            "s2", "/c/dave", {"task2_1": R("task2_1", failed=[stub])}, blank=["task2_1"]
        ),
        "/c/erin": grade_report.GradeReport(
            "s2", "/c/erin", {"task2_1": R("task2_1", failed=[stub])}, blank=["task2_1"]
        ),
    }
    monkeypatch.setattr(grading, "run_task_tests", lambda stage, impl, test_timeout, only: canned[impl])
    assert grading.grade("s2", list(canned), only=["2_1"]) == 1
    out = capsys.readouterr().out
    students, summary = out[out.index("student ") :].strip().split("\n\n")
    assert [line.split() for line in students.splitlines()[2:]] == [
        ["alice", "ok", "1/1"],
        ["bob", "0/1", "0/1"],
        ["dave", "blank", "0/1"],
        ["erin", "blank", "0/1"],
    ], students
    head, rule, row = summary.splitlines()
    assert head.split() == ["task", "passed", "failed", "needs", "blank", "(of", "4", "copies)"], summary
    assert row.split() == ["task2_1", "1", "1", "0", "2"], summary


def test_a_copy_whose_tests_cannot_be_imported_scores_zero_of_each_tasks_real_tests(tmp_path):
    """An instructor's class: erin's syntax error scored 0/1 per task (one failure per task
    and test file) beside the others' 0/3 and 0/7. Each test the reference collects in the
    file that cannot be imported now fails, so the row reads 0/3 and 0/2 here; and no NOTE
    weighs tasks by tests that never ran."""

    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    task3_2: x\n    task3_3: x\n")
    queue = "def poll(items):\n    return items[0]\n\n\ndef get(items):\n    return poll(items)\n"
    for root in (tmp_path, tmp_path / "copy"):  # the reference (beside the tests) and a copy
        (root / "minisglang").mkdir(parents=True)
        (root / "minisglang" / "__init__.py").write_text("")
        (root / "minisglang" / "queue.py").write_text(queue)
    (tmp_path / "copy" / "minisglang" / "queue.py").write_text(queue.replace("(items):\n    return poll", "(items:"))
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_q.py").write_text(
        "import pytest\nfrom minisglang import queue\n\n\n@pytest.mark.task3_2\n"
        "@pytest.mark.parametrize('n', [1, 2])\ndef test_get(n):\n    assert queue.get([n]) == n\n\n\n"
        "@pytest.mark.task3_2\n@pytest.mark.task3_3\ndef test_both():\n    assert queue.get([0]) == queue.poll([0])\n\n\n"
        "@pytest.mark.task3_3\ndef test_poll():\n    assert queue.poll([5]) == 5\n"
    )
    report = run_task_tests("s3", impl=tmp_path / "copy", tests_dir=tests, only=["3_2", "3_3"])
    assert report.file_errors and "SyntaxError" in str(report.file_errors[0])
    assert {t: len(r.failed) for t, r in report.tasks.items()} == {"task3_2": 3, "task3_3": 2}, report.tasks
    assert all(f.reason.startswith("the tests could not be imported") for r in report.tasks.values() for f in r.failed)
    assert grade_report.format_class_table([report]).splitlines()[2].split()[1:3] == ["0/3", "0/2"]
    out = format_report(report)
    assert "NOTE" not in out and "FAIL task3_2 (3 tests: test_get [2 cases], test_both)" in out, out


# ------------------------------------------------------------------- copies made other ways
def _toy_class(root: Path, module: str, tests: str) -> Path:
    """A reference package `minisglang.queue` (`module`) with its tests (`tests`, marked with
    tasks 3_2 and 3_3) in `root`, and a copy of the package in root/copy: its path."""
    (root / "pytest.ini").write_text("[pytest]\nmarkers =\n    task3_2: x\n    task3_3: x\n")
    for where in (root, root / "copy"):
        (where / "minisglang").mkdir(parents=True)
        (where / "minisglang" / "__init__.py").write_text("")
        (where / "minisglang" / "queue.py").write_text(module)
    (root / "tests").mkdir()
    (root / "tests" / "test_q.py").write_text(tests)
    return root / "copy"


TOY_QUEUE = "def poll(items):\n    # BEGIN SOLUTION task3_2\n    return items[0]\n    # END SOLUTION\n"
TOY_TESTS = (
    "import pytest\nfrom minisglang import queue\n\n\n@pytest.mark.task3_2\n"
    "@pytest.mark.parametrize('n', [1, 2])\ndef test_poll(n):\n    assert queue.poll([n]) == n\n"
)


def test_only_the_copys_package_is_imported_from_it(tmp_path):
    """An attacker's test: a student's scratch random.py at the copy's root, beside its package,
    replaced the standard library's random (the copy's folder was first on sys.path): pytest
    could not start, and every task read "no tests!" with no reason, the copy's correct code
    never graded. Only the copy's package is imported from it."""
    copy = _toy_class(tmp_path, TOY_QUEUE, TOY_TESTS)
    (copy / "random.py").write_text("print('my scratch file')\n")
    report = run_task_tests("s3", impl=copy, tests_dir=tmp_path / "tests", only=["3_2"])
    assert report.tasks["task3_2"].ok and len(report.tasks["task3_2"].passed) == 2, format_report(report)


def test_a_thread_left_running_does_not_hold_up_the_class(tmp_path, monkeypatch):
    """An attacker's test: a copy whose code starts a thread that is not a daemon and never
    ends passed its tests, and then its test process waited for that thread to exit: the grader
    waited for the whole run's limit (30 minutes) before it went on to the next copy, and said
    nothing. A process still running EXIT_GRACE seconds after its tests ended is stopped, and
    the copy's report says so; the tests' results stand."""
    from minisglang import grading

    monkeypatch.setattr(grading, "EXIT_GRACE", 2.0, raising=False)
    forever = "    import threading, time\n    threading.Thread(target=time.sleep, args=(1000,)).start()\n"
    copy = _toy_class(tmp_path, TOY_QUEUE.replace("    return items[0]", forever + "    return items[0]"), TOY_TESTS)
    started = time.monotonic()
    report = run_task_tests("s3", impl=copy, tests_dir=tmp_path / "tests", only=["3_2"], total_timeout=90)
    assert time.monotonic() - started < 60
    out = format_report(report)
    assert report.tasks["task3_2"].ok and "NOTE: the test process did not exit 2 s after its tests ended" in out, out


def test_a_process_a_copy_left_running_is_ended(tmp_path):
    """An attacker's test: a copy whose code starts a process and leaves it running passed its
    tests, and the process outlived the grading (an instructor's machine collects them, class
    after class: a copy could as well leave one that prints until the disk is full). What the
    test run left in its process group ends with it, and the report says so."""
    pids = tmp_path / "pids"
    leave = (
        f"    import subprocess\n    print(subprocess.Popen(['sleep', '1000']).pid, file=open({str(pids)!r}, 'a'))\n"
    )
    copy = _toy_class(tmp_path, TOY_QUEUE.replace("    return items[0]", leave + "    return items[0]"), TOY_TESTS)
    report = run_task_tests("s3", impl=copy, tests_dir=tmp_path / "tests", only=["3_2"])
    left = [int(pid) for pid in pids.read_text().split()]
    time.sleep(1)
    try:
        running = [
            pid for pid in left if Path(f"/proc/{pid}").exists() and " Z " not in Path(f"/proc/{pid}/stat").read_text()
        ]
        assert len(left) == 2 and not running, (left, running)
    finally:
        for pid in left:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
    out = format_report(report)
    assert report.tasks["task3_2"].ok and "NOTE: the tests left a process running" in out, out


def test_a_folder_named_like_a_module_or_a_broken_link_is_no_grader_crash(tmp_path):
    """An attacker's test: a copy holding a folder named notes.py, or a link to a file that is
    not there (a copy made with links, moved), stopped the grader with a traceback before any
    test ran (IsADirectoryError, FileNotFoundError from its syntax check); in a class, the
    copy read "the grader could not run this copy". The folder is no module; the broken link
    is named as a file of the copy that cannot be read; the tests run."""
    copy = _toy_class(tmp_path, TOY_QUEUE, TOY_TESTS)
    (copy / "minisglang" / "notes.py").mkdir()
    (copy / "minisglang" / "helper.py").symlink_to(tmp_path / "gone" / "helper.py")
    report = run_task_tests("s3", impl=copy, tests_dir=tmp_path / "tests", only=["3_2"])
    assert report.tasks["task3_2"].ok, format_report(report)
    (error,) = report.file_errors
    assert error.path == "minisglang/helper.py" and "cannot be read" in error.message, error


def test_a_file_in_the_encoding_its_coding_line_names_is_graded(tmp_path):
    """An attacker's test: a copy whose file is saved in Latin-1 with the coding line that
    Python reads (`# -*- coding: latin-1 -*-`, valid Python) was reported as an error in the
    copy (UnicodeDecodeError, "(code error)" in the class table), and when a test's error was
    raised in that file, the grader's plugin failed reading it (INTERNALERROR): every test
    read "did not run". The file is read in its own encoding."""
    wrong = "# -*- coding: latin-1 -*-\n" + TOY_QUEUE.replace("return items[0]", "raise ValueError('\xe9tat vide')")
    copy = _toy_class(tmp_path, TOY_QUEUE, TOY_TESTS)
    (copy / "minisglang" / "queue.py").write_bytes(wrong.encode("latin-1"))
    report = run_task_tests("s3", impl=copy, tests_dir=tmp_path / "tests", only=["3_2"])
    assert not report.file_errors, report.file_errors
    failed = report.tasks["task3_2"].failed
    assert len(failed) == 2 and all(f.reason == "ValueError: \xe9tat vide" for f in failed), format_report(report)
    assert all(f.where == "minisglang/queue.py:4" and f.raised_in == "3_2" for f in failed), failed


def test_a_copy_that_prints_without_end_leaves_the_grader_a_bounded_output(tmp_path):
    """An attacker's test: a copy whose failing code printed 500 MB per call (pytest shows a
    failing test's output) left the grader holding all of it, read whole into memory and kept
    in each copy's report for --verbose: 7.7 GB of the grader's memory for one copy of a
    class. The grader keeps the head and the tail of a run's output, the test still named."""
    loud = "    print('x' * (1 << 20))\n" * 12 + "    raise ValueError('loud')\n"
    copy = _toy_class(tmp_path, TOY_QUEUE.replace("    return items[0]\n", loud), TOY_TESTS)
    report = run_task_tests("s3", impl=copy, tests_dir=tmp_path / "tests", only=["3_2"])
    failed = report.tasks["task3_2"].failed
    assert len(failed) == 2 and all(f.reason == "ValueError: loud" for f in failed), failed
    assert len(report.output) < 2 << 20, len(report.output)  # of 24 MB printed
    assert "bytes of pytest's output left out" in report.output and "failed" in report.output[-1000:]


def test_a_test_that_ends_the_process_costs_only_itself(tmp_path):
    """An attacker's test: a KeyboardInterrupt raised in task 3_2's code ended pytest in 3_2's
    first test, and every test after it read "did not run: the test process ended before it
    (... in an earlier test?)", 3_3's too, whose code is right: 0 of 5 tasks for one line,
    and no word of which test ended the run. The test during which the process ended fails
    saying so, and the tests after it run in a new process."""
    module = TOY_QUEUE.replace("    return items[0]", "    raise KeyboardInterrupt") + (
        "\n\ndef size(items):\n    # BEGIN SOLUTION task3_3\n    return len(items)\n    # END SOLUTION\n"
    )
    tests = TOY_TESTS + "\n\n@pytest.mark.task3_3\ndef test_size():\n    assert queue.size([1, 2]) == 2\n"
    copy = _toy_class(tmp_path, module, tests)
    report = run_task_tests("s3", impl=copy, tests_dir=tmp_path / "tests", only=["3_2", "3_3"])
    out = format_report(report)
    assert report.tasks["task3_3"].ok, out
    failed = report.tasks["task3_2"].failed
    assert len(failed) == 2, out
    for f in failed:
        assert f.reason.startswith("the test process ended during this test (a KeyboardInterrupt)"), f
        assert f.where == "minisglang/queue.py:3", f
    # The same with an os._exit, which ends the process with no traceback: the plugin noted the call.
    (tmp_path / "exit").mkdir()
    copy = _toy_class(tmp_path / "exit", module.replace("raise KeyboardInterrupt", "import os; os._exit(7)"), tests)
    report = run_task_tests("s3", impl=copy, tests_dir=tmp_path / "exit" / "tests", only=["3_2", "3_3"])
    failed = report.tasks["task3_2"].failed
    assert report.tasks["task3_3"].ok and len(failed) == 2, format_report(report)
    for f in failed:
        assert f.reason.startswith("the test process ended during this test (os._exit(7) at minisglang/queue.py:3)"), f
        assert f.where == "minisglang/queue.py:3", f


def test_a_file_too_deep_for_the_compiler_is_named_not_a_grader_crash(tmp_path):
    """An attacker's test: a copy's file holding one expression too deep for Python's compiler
    (`x = ------...1`, `1 + 1 + ...`) stopped the grader's syntax check with a MemoryError or
    a RecursionError (not a SyntaxError), before any test ran: a traceback, or "the grader could
    not run this copy" in a class. Python cannot import the file either: it is named as an
    error in the copy."""
    from minisglang.grading import syntax_errors

    package = tmp_path / "minisglang"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "deep.py").write_text("x = " + "-" * 100_000 + "1\n")
    (package / "long.py").write_text("x = 1" + " + 1" * 2_000_000 + "\n")
    errors = {e.path: e.message for e in syntax_errors(package)}
    assert errors.keys() == {"minisglang/deep.py", "minisglang/long.py"}, errors
    assert all("too deep for Python to compile" in m for m in errors.values()), errors


def test_a_copy_whose_package_is_a_link_is_graded_where_it_leads(tmp_path):
    """An attacker's test: a copy whose minisglang folder is a link to the student's package
    elsewhere failed every test with "RuntimeError: grading DIR but minisglang was imported
    from DIR/minisglang/__init__.py" (tests/conftest.py compared the package's real path with
    DIR). It is graded where the link leads; a link to the reference package itself is refused
    as no copy (it passed nothing before, for the same reason)."""

    checkout("s1", tmp_path / "elsewhere")
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "minisglang").symlink_to(tmp_path / "elsewhere" / "minisglang")
    report = run_task_tests("s1", impl=tmp_path / "linked", only=["1_1"])
    assert report.tasks["task1_1"].ok, format_report(report)
    (tmp_path / "reference").mkdir()
    (tmp_path / "reference" / "minisglang").symlink_to(PACKAGE_DIR)
    with pytest.raises(ValueError, match="is a link to the reference package"):
        run_task_tests("s1", impl=tmp_path / "reference", only=["1_1"])


def test_the_grader_runs_the_copys_source_not_bytecode_it_ships(tmp_path):
    """An attacker's test: a copy whose source of task 3_2 is wrong (or the stub), shipped with
    a __pycache__ .pyc compiled from a right one in "unchecked-hash" mode (Python then never
    compares it with the source; git keeps such a file), passed 3_2: the grader ran code
    that no reader of the copy's source could see. The copy's package is now run from a copy
    of it without its compiled files."""
    import py_compile

    copy = _toy_class(tmp_path, TOY_QUEUE, TOY_TESTS)
    source = copy / "minisglang" / "queue.py"
    py_compile.compile(str(source), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH, doraise=True)
    source.write_text(TOY_QUEUE.replace("return items[0]", "return None"))
    assert list((copy / "minisglang" / "__pycache__").glob("queue.*.pyc"))
    report = run_task_tests("s3", impl=copy, tests_dir=tmp_path / "tests", only=["3_2"])
    assert not report.tasks["task3_2"].passed and len(report.tasks["task3_2"].failed) == 2, format_report(report)
