"""The autograder is honest: every task's tests pass on the reference and fail on blank stubs,
and every solution region has at least one test."""
import re
import subprocess
import sys

import pytest

from minisglang.checkout import all_tasks, blank_solutions, checkout, find_solution_regions
from minisglang.grading import REPO_TESTS, format_table, run_task_tests
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


def test_blanking_keeps_signature_and_docstring():
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
    raise NotImplementedError("task9_1: write this")


def g():
    return 2
'''
    assert blank_solutions(src, {"task9_2"}) == src


def test_bad_region_markers_are_reported():
    with pytest.raises(ValueError, match="never closed"):
        find_solution_regions("# BEGIN SOLUTION task1_1\nx = 1\n")
    with pytest.raises(ValueError, match="END SOLUTION without BEGIN"):
        find_solution_regions("x = 1\n# END SOLUTION\n")


def test_checkout_leaves_out_later_stages(tmp_path):
    out = checkout("s2", tmp_path)
    assert (out / "stages" / "s2_batched_mask.py").exists()
    assert not (out / "stages" / "s3_fsm_cache.py").exists()
    assert not (out / "backends").exists() and not (out / "constrained" / "jump_forward.py").exists()
    with pytest.raises(FileExistsError, match="already exists"):
        checkout("s2", tmp_path)


def test_grade_rejects_a_directory_without_a_package(tmp_path):
    with pytest.raises(FileNotFoundError, match="holds no minisglang package"):
        run_task_tests("s2", impl=tmp_path)


def test_grading_the_reference_passes_every_task():
    """The grader end to end on the reference (s2, the quickest stage). That the reference
    passes every task's tests at every stage is what the rest of this suite shows: the
    graded tests are the same tests, collected by the same markers."""
    reference = run_task_tests("s2")
    print(format_table(reference))
    for task, result in reference.items():
        assert result.passed and not result.failed, f"{task} on the reference: {result.failed}"


@pytest.mark.slow
@pytest.mark.parametrize("stage", STAGES_WITH_TASKS)
def test_every_task_fails_on_blank_stubs(stage, tmp_path):
    checkout(stage, tmp_path, student=True)
    student = run_task_tests(stage, impl=tmp_path)
    print(format_table(student))
    for task, result in student.items():
        assert not result.passed, f"{task}: these tests pass on a blank stub: {result.passed}"
        assert result.failed
