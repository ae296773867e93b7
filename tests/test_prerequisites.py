"""Each task's prerequisites (minisglang/prerequisites.py): the table that opens each exercise
page is what the grader's stored trace gives, and that trace is what tracing the tests finds now."""

from minisglang.checkout import all_tasks, task_key
from minisglang.grade_report import format_report
from minisglang.grading import run_task_tests
from minisglang.stages import STAGE_MODULES

STAGES_WITH_TASKS = [tag for tag in STAGE_MODULES if all_tasks(tag)]


def test_each_exercise_page_lists_the_prerequisites_the_grader_stored():
    """exercises/sN.md opens with a generated table of each task's prerequisites; it must be
    what the stored data (the grader's trace, exercises/prerequisites.json) gives now, and
    the data must hold every task (regenerate both: `minisglang prerequisites --write`)."""
    from minisglang import grade_report, prerequisites

    data = grade_report.load_prerequisites()
    missing = sorted(set(all_tasks()) - set(data), key=task_key)
    assert not missing, (
        f"exercises/prerequisites.json has no entry for {missing}: run `minisglang prerequisites --write`"
    )
    for tag in STAGES_WITH_TASKS:
        page = prerequisites.page_path(tag).read_text(encoding="utf-8")
        want = prerequisites.page_block(tag, data)
        assert want in page, (
            f"{prerequisites.page_path(tag)}: its prerequisites table is not what the stored data "
            f"gives; run `minisglang prerequisites --pages`. Expected:\n{want}"
        )


def test_the_stored_prerequisites_are_what_tracing_the_tests_finds_now():
    """The data is the grader's own: tracing task 2_3's tests (an s1 compile, s2's packing and
    the engine's fill; quick) on the reference finds exactly the tasks stored for it."""
    from minisglang import grade_report

    report = run_task_tests("s2", only=["2_3"], trace=True)
    assert report.ok, format_report(report)
    found = sorted(set().union(*report.ran.values()) - {"task2_3"}, key=task_key)
    assert found == grade_report.load_prerequisites()["task2_3"], (
        f"task 2_3's tests run the regions of {found} on the reference, but exercises/prerequisites.json says "
        f"{grade_report.load_prerequisites()['task2_3']}: run `minisglang prerequisites --write`"
    )
    stored = grade_report.load_test_runs()
    for test, tasks in report.ran.items():
        assert set(tasks) <= set(stored.get(test, [])), (
            f"{test} runs the regions of {tasks} on the reference, but exercises/prerequisites.json says "
            f"{stored.get(test)}: run `minisglang prerequisites --write`"
        )
