"""The autograder is honest and explains itself.

Honest: every task's tests pass on the reference and fail on blank stubs and on plausible
wrong solutions (MUTATIONS below, at least three per task); every solution region has a test.
Explains: a syntax error, an infinite loop and a failed assertion in a student's copy are
each reported with the test's name and the reason. Students carry their own code forward
(`checkout --from`), and a student copy holds no reference solution of a task they were given.
"""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from minisglang.checkout import (PACKAGE_DIR, all_tasks, blank_solutions, checkout, find_solution_regions,
                                 region_keys, task_key)
from minisglang.cli import main
from minisglang.grading import REPO_TESTS, format_report, run_task_tests
from minisglang.stages import STAGE_MODULES

STAGES_WITH_TASKS = [tag for tag in STAGE_MODULES if all_tasks(tag)]


def test_every_stage_after_s0_has_exercises():
    assert STAGES_WITH_TASKS == [t for t in STAGE_MODULES if t != "s0-unconstrained"]


def test_every_task_marker_is_registered_and_every_region_has_a_test():
    collected = subprocess.run([sys.executable, "-m", "pytest", str(REPO_TESTS), "--collect-only", "-q",
                                "-m", " or ".join(sorted(all_tasks()))], capture_output=True, text=True,
                               cwd=REPO_TESTS.parent)
    assert collected.returncode == 0, collected.stdout[-2000:]
    source = "".join(p.read_text() for p in REPO_TESTS.glob("test_*.py"))
    for task in all_tasks():
        assert re.search(rf"pytest\.mark\.{task}\b", source), f"no test is marked {task}"


def test_blanking_keeps_signature_docstring_and_the_region_comments():
    src = '''def f(x):
    """Docstring."""
    # BEGIN SOLUTION task9_1
    return x + 1
    # END SOLUTION


def g():
    return 2
'''
    out = blank_solutions(src, {"task9_1"})
    assert out == '''def f(x):
    """Docstring."""
    # BEGIN SOLUTION task9_1
    raise NotImplementedError("task9_1: write this")
    # END SOLUTION


def g():
    return 2
'''
    assert blank_solutions(src, {"task9_2"}) == src


def test_bad_region_markers_are_reported():
    with pytest.raises(ValueError, match="never closed"):
        find_solution_regions("# BEGIN SOLUTION task1_1\nx = 1\n")
    with pytest.raises(ValueError, match="END SOLUTION without BEGIN"):
        find_solution_regions("x = 1\n# END SOLUTION\n")


def test_regions_are_named_by_task_and_enclosing_function():
    src = '''class A:
    def f(self):
        # BEGIN SOLUTION task9_1
        return 1
        # END SOLUTION

    def g(self):
        x = 2
        # BEGIN SOLUTION task9_1
        return x
        # END SOLUTION
'''
    assert [k for k, _, _ in region_keys(src)] == [("task9_1", "f", 0), ("task9_1", "g", 0)]


def test_checkout_leaves_out_later_stages(tmp_path):
    out = checkout("s2", tmp_path)
    assert (out / "stages" / "s2_batched_mask.py").exists()
    assert not (out / "stages" / "s3_fsm_cache.py").exists()
    assert not (out / "backends").exists() and not (out / "constrained" / "jump_forward.py").exists()
    with pytest.raises(FileExistsError, match="already exists"):
        checkout("s2", tmp_path)


def reference_bodies(max_stage: int) -> dict[str, list[str]]:
    """task -> the reference bodies of its regions (stages <= max_stage), as text."""
    bodies: dict[str, list[str]] = {}
    for path in PACKAGE_DIR.rglob("*.py"):
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        for task, begin, end in find_solution_regions("".join(lines)):
            if task_key(task)[0] <= max_stage:
                bodies.setdefault(task, []).append("".join(lines[begin + 1:end]))
    return bodies


@pytest.mark.parametrize("stage", [tag.split("-")[0] for tag in STAGES_WITH_TASKS])
def test_a_student_copy_holds_no_reference_solution_of_its_own_or_an_earlier_stage(stage, tmp_path):
    notes = []
    out = checkout(stage, tmp_path, student=True, notes=notes)
    text = "".join(p.read_text(encoding="utf-8") for p in out.rglob("*.py"))
    for task, bodies in reference_bodies(int(stage[1:])).items():
        for body in bodies:
            assert body not in text, f"the student copy of {stage} ships the reference solution of {task}"
    if stage != "s1":
        assert "tasks 1_1, 1_2, 1_3, 1_4, 1_5 are blank: pass --from YOUR_S1_DIR to keep yours" in notes


def test_from_carries_the_students_own_code_forward(tmp_path, capsys):
    assert main(["checkout", "s1", str(tmp_path / "s1"), "--student"]) == 0
    # The student's own task1_1, written differently from the reference, and task1_2 left blank.
    (path,) = all_tasks("s1")["task1_1"]
    mine = tmp_path / "s1" / path.relative_to(PACKAGE_DIR.parent)
    text = mine.read_text(encoding="utf-8")
    stub = '        raise NotImplementedError("task1_1: write this")\n'
    assert stub in text
    own = ("        for b in data:  # my own walk\n"
           "            state = int(self.table[state, b])\n"
           "            if state == -1:\n"
           "                break\n"
           "        return state\n")
    mine.write_text(text.replace(stub, own), encoding="utf-8")
    capsys.readouterr()
    assert main(["checkout", "s2", str(tmp_path / "s2"), "--student", "--from", str(tmp_path / "s1")]) == 0
    out = capsys.readouterr().out
    assert "kept your own task1_1" in out and "tasks 1_2, 1_3, 1_4, 1_5 are blank in" in out
    copied = "".join(p.read_text(encoding="utf-8") for p in (tmp_path / "s2").rglob("*.py"))
    assert own in copied
    assert 'raise NotImplementedError("task1_2: write this")' in copied
    assert 'raise NotImplementedError("task2_1: write this")' in copied


def test_from_refuses_a_copy_whose_region_comments_are_gone(tmp_path):
    checkout("s1", tmp_path / "s1", student=True)
    for p in (tmp_path / "s1").rglob("*.py"):
        text = p.read_text(encoding="utf-8")
        if "# BEGIN SOLUTION task1_3" in text:
            p.write_text(text.replace("# BEGIN SOLUTION task1_3\n", "\n"), encoding="utf-8")
    with pytest.raises(ValueError, match="END SOLUTION without BEGIN|no region task1_3"):
        checkout("s2", tmp_path / "s2", student=True, from_dir=tmp_path / "s1")
    with pytest.raises(FileNotFoundError, match="holds no minisglang package"):
        checkout("s2", tmp_path / "s2b", student=True, from_dir=tmp_path / "nothing")


def test_solutions_prints_the_reference_regions_for_instructors(capsys):
    assert main(["solutions", "s1", "--task", "1_2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# task1_2: build_index_reference() in minisglang/")
    for body in reference_bodies(1)["task1_2"]:
        assert all(line.strip() in out for line in body.splitlines())
    assert main(["solutions", "s2"]) == 0
    out = capsys.readouterr().out
    assert all(f"# {t}:" in out for t in all_tasks("s2")) and "task1_" not in out
    with pytest.raises(ValueError, match="belongs to stage s1"):
        main(["solutions", "s2", "--task", "task1_1"])


def test_grade_rejects_a_directory_without_a_package(tmp_path):
    with pytest.raises(FileNotFoundError, match="holds no minisglang package"):
        run_task_tests("s2", impl=tmp_path)


def test_grading_the_reference_passes_every_task():
    """The grader end to end on the reference (s2, the quickest stage). That the reference
    passes every task's tests at every stage is what the rest of this suite shows: the
    graded tests are the same tests, collected by the same markers."""
    reference = run_task_tests("s2")
    print(format_report(reference))
    assert not reference.file_errors
    for task, result in reference.tasks.items():
        assert result.ok, f"{task} on the reference: {result.failed}"


# ------------------------------------------------------------------- the grader explains
def _plant(root: Path, rel_suffix: str, old: str, new: str) -> None:
    (path,) = [p for p in (root / "minisglang").rglob("*.py") if str(p).endswith(rel_suffix)]
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} is not in {path}: update the planted mistake"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def _region_file(task: str) -> str:
    return str(all_tasks()[task][0].relative_to(PACKAGE_DIR))


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    """Three s1 copies graded as a class: one with a syntax error, one with an infinite loop
    (task1_2 without its `seen` check) and a wrong mask (task1_3), one untouched."""
    root = tmp_path_factory.mktemp("class")
    for name in ("syntax", "bugs", "good"):
        checkout("s1", root / name)
    _plant(root / "syntax", _region_file("task1_1"), "        rows = self._rows\n", "        rows = (self._rows\n")
    _plant(root / "bugs", _region_file("task1_2"), "if end not in seen:", "if True:")
    _plant(root / "bugs", _region_file("task1_3"), "        return row\n", "        row[0] = True\n        return row\n")
    report = root / "report.json"
    cmd = [sys.executable, "-m", "minisglang.cli", "grade", "--stage", "s1", "--timeout", "3", "--json", str(report),
           "--impl", *(str(root / n) for n in ("syntax", "bugs", "good"))]
    # The time limit: a grader that hung on the loop would be stopped here and fail the test.
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO_TESTS.parent)
    return proc, json.loads(report.read_text())


def test_a_syntax_error_is_reported_with_file_and_line(graded_class):
    proc, reports = graded_class
    assert proc.returncode == 1
    where = _region_file("task1_1")
    assert re.search(rf"ERROR in your code: minisglang/{re.escape(where)}:\d+: SyntaxError: '\(' was never closed",
                     proc.stdout), proc.stdout
    syntax = reports[0]
    assert syntax["file_errors"][0]["path"] == f"minisglang/{where}"
    for task in all_tasks("s1"):
        failures = syntax["tasks"][task]["failed"]
        assert failures and all("SyntaxError" in f["reason"] for f in failures)


def test_an_infinite_loop_fails_as_timed_out_and_names_the_test(graded_class):
    proc, reports = graded_class
    bugs = reports[1]
    loops = [f for f in bugs["tasks"]["task1_2"]["failed"] if f["timed_out"]]
    assert loops and all("timed out" in f["reason"] for f in loops)
    assert all(f["test"].startswith("tests/test_exercises_s1.py::test_") for f in loops)
    assert f"FAIL task1_2 {loops[0]['test']}\n  timed out" in proc.stdout
    # The other tasks were still graded after the loop was stopped.
    assert bugs["tasks"]["task1_1"]["ok"] and bugs["tasks"]["task1_5"]["ok"]


def test_a_failed_assertion_is_reported_with_the_test_and_its_message(graded_class):
    proc, reports = graded_class
    failures = reports[1]["tasks"]["task1_3"]["failed"]
    assert failures
    for f in failures:
        assert f["reason"].startswith(("AssertionError", "assert ")) and not f["timed_out"]
        assert f"FAIL task1_3 {f['test']}\n  {f['reason']}" in proc.stdout


def test_the_class_table_has_one_row_per_student_and_one_column_per_task(graded_class):
    proc, reports = graded_class
    table = proc.stdout[proc.stdout.index("student "):]
    header, rule, *rows = table.strip().splitlines()[:-1]   # the last line: "wrote FILE"
    assert header.split() == ["student", *sorted(all_tasks("s1"), key=task_key), "total"]
    assert [r.split()[0] for r in rows] == ["syntax", "bugs", "good"]
    assert rows[0].endswith("0/5  (code error)")
    assert rows[1].split()[1] == "ok" and rows[1].split()[2] != "ok" and rows[1].endswith("3/5")
    assert rows[2].split()[1:] == ["ok"] * 5 + ["5/5"]
    assert [r["ok"] for r in reports] == [False, False, True]
    assert reports[2]["failed"] == 0 and reports[2]["passed"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("stage", STAGES_WITH_TASKS)
def test_every_task_fails_on_blank_stubs(stage, tmp_path):
    checkout(stage, tmp_path, student=True)
    student = run_task_tests(stage, impl=tmp_path)
    print(format_report(student))
    for task, result in student.tasks.items():
        assert not result.passed, f"{task}: these tests pass on a blank stub: {result.passed}"
        assert result.failed
