"""The grading report reads right: each row's status (ok, FAIL, blank, needs), the notes that
name a blank task a failure ran into or the likelier culprit among two tasks, the class tables,
and a copy's text shown, never obeyed, on the instructor's terminal. The reports here are
built by hand; tests/test_autograder.py runs real gradings."""

import json
import re

from minisglang import grade_report


def test_a_long_reason_is_cut():
    from minisglang.grade_report import MAX_REASON, shortened

    assert shortened("short") == "short"
    cut = shortened("x" * (MAX_REASON + 500))
    assert len(cut) < MAX_REASON + 50 and cut.endswith("(500 more characters)")


def test_a_failure_that_ran_into_another_tasks_stub_says_which_task_it_needs():
    """A test marked with two tasks (2_1's round trip runs 2_2's unpack), or an engine test
    that runs a later task's code, cannot pass while that task is blank: the row and the
    failure say so, so a student who did task 2_1 first knows it is not their 2_1."""
    needs = grade_report.Failure("t::round_trip", "NotImplementedError: task2_2: write this", blank=["2_2"])
    own = grade_report.Failure("t::width", "AssertionError: 3 words, expected 4")
    old = grade_report.Failure("t::engine", "assert 'abort' == 'stop'", blank=["1_4"])
    report = grade_report.GradeReport(
        "s2",
        "/x",
        {
            "task2_1": grade_report.TaskResult("task2_1", passed=["t::a"], failed=[needs]),
            "task2_2": grade_report.TaskResult(
                "task2_2",
                failed=[
                    grade_report.Failure("t::unpack", "NotImplementedError: task2_2: write this", blank=["2_2", "2_4"])
                ],
            ),
            "task2_3": grade_report.TaskResult("task2_3", passed=["t::b"], failed=[needs, own]),
            "task2_4": grade_report.TaskResult("task2_4", passed=["t::c"], failed=[old]),
        },
    )
    out = grade_report.format_report(report)
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("task2_")}
    assert rows["task2_1"].endswith("FAIL (needs 2_2)")
    assert rows["task2_2"].endswith("FAIL")  # its own stub blank: that is the reason
    assert rows["task2_3"].endswith("FAIL")  # one failure is its own: a plain FAIL
    assert rows["task2_4"].endswith("FAIL (needs 1_4)")
    assert (
        "FAIL task2_1 t::round_trip\n  NotImplementedError: task2_2: write this\n"
        "  (also runs task 2_2, still blank in your copy: this test cannot pass until 2_2 is written too)"
    ) in out
    assert "(task1_4 is from stage s1: write it again, or check this stage out with --from YOUR_S1_DIR" in out


def test_class_rows_are_named_by_the_fewest_path_parts_that_differ():
    assert grade_report.short_names(["/home/class/alice/s2", "/home/class/bob/s2"]) == ["alice/s2", "bob/s2"]
    assert grade_report.short_names(["/x/syntax", "/x/good", "reference"]) == ["syntax", "good", "reference"]


def test_grade_names_every_blank_task_in_the_chain_at_once(tmp_path, monkeypatch):
    """A student on s6 sees every blank task whose code 6_1's tests run (the trace follows
    6_1 into 5_3, and 5_3 into 3_3 and 5_1) in one row, not one per grading run; a task that
    is written, or that only a needed task's own tests run (1_2, for 3_3), is not named."""
    from minisglang import prerequisites

    data = {
        "task6_1": ["task3_3", "task5_1", "task5_3"],
        "task5_3": ["task3_3", "task5_1"],
        "task3_3": ["task1_2"],
        "task5_1": [],
    }
    path = tmp_path / "prerequisites.json"
    path.write_text(json.dumps({"tasks": data}))
    monkeypatch.setattr(grade_report, "PREREQUISITES_FILE", path)
    assert grade_report.needed_tasks("task6_1", data) == ["task3_3", "task5_1", "task5_3"]
    assert prerequisites.grading_chain("task6_1", data) == ["task1_2", "task3_3", "task5_1", "task5_3"]
    failure = grade_report.Failure("t::call", "NotImplementedError: task5_3: write this", blank=["5_3"])
    report = grade_report.GradeReport(
        "s6",
        "/x",
        {"task6_1": grade_report.TaskResult("task6_1", failed=[failure])},
        blank=["task1_2", "task3_3", "task5_1", "task5_3"],
    )
    row = next(line for line in grade_report.format_report(report).splitlines() if line.startswith("task6_1"))
    assert row.endswith("FAIL (needs 3_3, 5_1, 5_3)"), row


def test_a_note_names_the_likelier_culprit_when_a_tasks_failures_all_run_another_task(tmp_path, monkeypatch):
    """With a correct 3_1 and a wrong 3_3, 3_1's engine tests fail too (they run 3_3's queue,
    and 3_3's own tests run 3_1's cache). 3_1's code also ran in passing tests and 3_3's in few,
    so 3_1's row names 3_3 as the likelier culprit and 3_3's row does not send the student
    back to 3_1. When the evidence ties the note says either may be wrong; a task with a
    failure that runs no other failing task's code gets no note."""
    both, only_31, only_33 = ["task3_1", "task3_3"], ["task3_1"], ["task3_3"]
    data = {
        "tasks": {"task3_1": ["task3_3"], "task3_3": ["task3_1"]},
        "tests": {
            "e1": both,
            "e2": both,
            "q": both,
            "c1": only_31,
            "c2": only_31,
            "c3": only_31,
            "p": only_33,
            "u": only_33,
        },
    }
    path = tmp_path / "prerequisites.json"
    path.write_text(json.dumps(data))
    monkeypatch.setattr(grade_report, "PREREQUISITES_FILE", path)

    def notes(failed: dict[str, list[str]], passed: dict[str, list[str]]) -> dict[str, list[str]]:
        report = grade_report.GradeReport(
            "s3",
            "/x",
            {
                t: grade_report.TaskResult(
                    t,
                    passed=passed.get(t, []),
                    failed=[grade_report.Failure(test, "AssertionError: wrong") for test in tests],
                )
                for t, tests in failed.items()
            },
        )
        text = grade_report.format_report(report).splitlines()
        return {t: [line for line in text if line.startswith(f"NOTE {t}:")] for t in failed}

    found = notes({"task3_1": ["e1"], "task3_3": ["e2", "q"]}, {"task3_1": ["c1", "c2", "c3"], "task3_3": ["p"]})
    assert len(found["task3_1"]) == 1 and "fix 3_3 first" in found["task3_1"][0], found
    assert "3 failing and 1 passing" in found["task3_1"][0], found
    assert found["task3_3"] == [], f"3_1's code passed three tests of its own: 3_3's row must not blame it: {found}"
    found = notes({"task3_1": ["e1"], "task3_3": ["e2"]}, {})
    assert all(len(n) == 1 and "either task may be wrong" in n[0] for n in found.values()), found
    found = notes({"task3_1": ["e1", "c1"], "task3_3": ["u"]}, {})
    assert found == {"task3_1": [], "task3_3": []}, (
        f"3_1 fails c1 (its own code only), 3_3 fails u (its own only): each row is its own fault: {found}"
    )


def test_a_blank_task_is_named_blank_not_blamed_on_another_task(tmp_path, monkeypatch):
    """An instructor's class: carol's 2_3 was blank (a stub failure, and an engine test's wrong
    answer after it), her 2_1 written and wrong, and 2_3's row said "2_1's code, the likelier
    culprit ... fix 2_1 first". A blank task's NOTE says it is blank; a written one's still
    weighs the other task."""
    runs = {"p1": ["task2_1"], "p2": ["task2_1"], "p3": ["task2_1"], "f": ["task2_1", "task2_3"]}
    runs["s"] = ["task2_1", "task2_3"]
    path = tmp_path / "prerequisites.json"
    path.write_text(json.dumps({"tasks": {"task2_1": [], "task2_3": ["task2_1"]}, "tests": runs}))
    monkeypatch.setattr(grade_report, "PREREQUISITES_FILE", path)
    wrong = [grade_report.Failure(t, "AssertionError: wrong words") for t in ("p1", "p2", "p3")]
    stub = grade_report.Failure("f", "NotImplementedError: task2_3: write this", blank=["2_3"])
    answer = grade_report.Failure("s", "AssertionError: s1 and s2 differ", blank=["2_3"])
    tasks = {
        "task2_1": grade_report.TaskResult("task2_1", failed=wrong),
        "task2_3": grade_report.TaskResult("task2_3", failed=[stub, answer]),
    }
    out = grade_report.format_report(grade_report.GradeReport("s2", "/carol", tasks, blank=["task2_3"]))
    notes = [line for line in out.splitlines() if line.startswith("NOTE task2_3:")]
    assert len(notes) == 1 and "still blank in your copy" in notes[0] and "2_1" not in notes[0], out
    # written (no stub ran), the same outcomes blame 2_1 as before
    answer.blank = []
    tasks["task2_3"].failed = [answer]
    out = grade_report.format_report(grade_report.GradeReport("s2", "/carol", tasks))
    assert "fix 2_1 first" in out and "still blank" not in out, out
    # every failure its own stub's "write this": that already says blank, no NOTE
    tasks["task2_3"].failed = [stub]
    out = grade_report.format_report(grade_report.GradeReport("s2", "/carol", tasks, blank=["task2_3"]))
    assert "NOTE task2_3" not in out, out


def test_the_class_table_says_blank_and_needs_only_where_the_tasks_own_tests_cannot_tell(tmp_path, monkeypatch):
    """An instructor's class: an all-blank copy read `0/3 0/3 0/7 0/7`, like wrong work, and
    carol's 2_4 read "FAIL (needs 2_3)" though its own apply tests (which run no 2_3) failed.
    A stub's task reads `blank`; "needs" stays where every failure ran into the blank task."""
    path = tmp_path / "prerequisites.json"
    path.write_text(json.dumps({"tasks": {"task2_1": [], "task2_3": ["task2_1"], "task2_4": ["task2_3"]}}))
    monkeypatch.setattr(grade_report, "PREREQUISITES_FILE", path)
    F, R = grade_report.Failure, grade_report.TaskResult

    def stub(test, task, also=()):
        return F(test, f"NotImplementedError: task{task}: write this", blank=[task, *also])

    blank = grade_report.GradeReport(
        "s2",
        "/class/dave",
        {
            "task2_1": R("task2_1", failed=[stub("p", "2_1")]),
            "task2_3": R("task2_3", failed=[stub("e", "2_1", ["2_3"])]),
            "task2_4": R("task2_4", failed=[stub("a", "2_4"), stub("e", "2_1", ["2_3"])]),
        },
        blank=["task2_1", "task2_3", "task2_4"],
    )
    carol = grade_report.GradeReport(  # 2_3 blank; 2_4's own apply test wrong, its engine test needs 2_3
        "s2",
        "/class/carol",
        {
            "task2_1": R("task2_1", passed=["p"]),
            "task2_3": R("task2_3", failed=[stub("e", "2_3")]),
            "task2_4": R("task2_4", failed=[F("a", "RuntimeError: shapes"), stub("e", "2_3")]),
        },
        blank=["task2_3"],
    )
    jo = grade_report.GradeReport(  # 2_4 written; every failure runs the blank 2_3: its tests cannot tell
        "s2",
        "/class/jo",
        {
            "task2_1": R("task2_1", passed=["p"]),
            "task2_3": R("task2_3", failed=[stub("e", "2_3")]),
            "task2_4": R("task2_4", passed=["a"], failed=[stub("e", "2_3")]),
        },
        blank=["task2_3"],
    )
    erin = grade_report.GradeReport(  # a syntax error: no test ran; the blank 2_3 is all that is known
        "s2",
        "/class/erin",
        {
            t: R(t, failed=[F("tests/t.py", "the tests could not be imported: x.py:9: SyntaxError")])
            for t in blank.tasks
        },
        blank=["task2_3"],
    )
    table = grade_report.format_class_table([blank, carol, jo, erin]).splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in table[2:]}
    assert rows["dave"] == ["blank", "blank", "blank", "0/3"], table
    assert rows["carol"] == ["ok", "blank", "0/2", "1/3"], table
    assert rows["jo"] == ["ok", "blank", "needs", "2_3", "1/3"], table
    # cannot tell: keeps "needs"; and none of its tests ran
    assert rows["erin"] == ["0/1", "blank", "needs", "2_3", "0/3", "(no", "test", "ran)"], table
    status = {
        line.split()[0]: line for line in grade_report.format_report(carol).splitlines() if line.startswith("task")
    }
    assert status["task2_4"].endswith("FAIL"), status
    status = {line.split()[0]: line for line in grade_report.format_report(jo).splitlines() if line.startswith("task")}
    assert status["task2_4"].endswith("FAIL (needs 2_3)"), status
    data = carol.to_json()["tasks"]
    assert [data[t]["status"] for t in carol.tasks] == ["ok", "blank", "fail"], data
    assert data["task2_3"]["blank"] and not data["task2_4"]["blank"] and data["task2_4"]["needs"] == []
    assert jo.to_json()["tasks"]["task2_4"] | {"passed": 0, "failed": 0} == {
        "ok": False,
        "status": "needs",
        "blank": False,
        "needs": ["2_3"],
        "passed": 0,
        "failed": 0,
    }


def test_a_task_whose_every_failure_counts_in_another_row_reads_fail_not_no_tests():
    """An attacker's test: an s1 copy whose 1_1 code raised (SystemExit, a GeneratorExit, any
    error) failed all of 1_2's tests in 1_1's code, and those failures were counted in 1_1's
    row (1_1 fails its own tests too): 1_2's row read "no tests!", 0 passed and 0 failed, and
    "0/0" in the class table, as if it had no tests. It reads FAIL, says where its tests
    failed, and counts them."""
    moved = grade_report.Failure("t::get", "SystemExit: 0", raised_in="3_3")
    report = grade_report.GradeReport(
        "s3",
        "/x",
        {
            "task3_2": grade_report.TaskResult("task3_2", failed=[moved]),
            "task3_3": grade_report.TaskResult("task3_3", failed=[grade_report.Failure("t::poll", "SystemExit: 0")]),
        },
    )
    grade_report.attribute_failures(report)
    assert not report.tasks["task3_2"].failed and moved.marked == ["task3_2"]  # (counted in 3_3's row)
    out = grade_report.format_report(report)
    assert "no tests" not in out and "FAIL (its 1 failing test is counted in 3_3's row)" in out, out
    assert grade_report.task_status("task3_2", report, {}) == "fail"
    assert grade_report.format_class_table([report]).splitlines()[2].split()[1:3] == ["0/1", "0/2"]


def test_a_copys_text_reaches_the_terminal_with_its_control_characters_shown_not_obeyed():
    """An attacker's test: a copy whose error message held terminal escape sequences (cursor up,
    erase line: `raise ValueError("\\x1b[1A\\x1b[2K...")`) had them printed as they were in its
    report, where the instructor's terminal obeyed them: the message could erase its own FAIL
    lines, or write "ok" over them. Control characters a copy wrote are shown escaped."""
    sneaky = "ValueError: \x1b[1A\x1b[2Ktask1_1         3      0  ok\x1b[8m"
    report = grade_report.GradeReport(
        "s1",
        "/class/\x1b[2Jmallory",
        {
            "task1_1": grade_report.TaskResult(
                "task1_1", failed=[grade_report.Failure("t::w", sneaky, example="x = '\r ok'")]
            )
        },
        file_errors=[grade_report.FileError("minisglang/\u202eyp.py", 3, "SyntaxError: \x07")],
    )
    out = grade_report.format_report(report) + grade_report.format_class_table([report])
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e]", out), repr(out)
    assert "ValueError: \\x1b[1A\\x1b[2Ktask1_1" in out and "\\u202e" in out, out


def test_a_task_that_passes_with_its_stub_in_place_is_pointed_out():
    """An attacker's test: a blank s1 copy with four lines in its __init__.py (the grader's
    plugin patched to report no failure) read "ok" in every task and 5/5 in the class table,
    though the grader had found every task's region still the checkout's stub, which fails
    every task's tests (test_every_task_fails_on_blank_stubs). The grader cannot stop such a
    copy (COURSE.md: it is no sandbox), but it says what it saw: a pass with the stub in place."""
    report = grade_report.GradeReport(
        "s3",
        "/class/mallory",
        {"task3_2": grade_report.TaskResult("task3_2", passed=["t::a"]), "task3_3": grade_report.TaskResult("task3_3")},
        blank=["task3_2"],
    )
    out = grade_report.format_report(report)
    assert "NOTE: 3_2 passed with its region still the checkout's stub" in out, out
    assert grade_report.format_class_table([report]).endswith("(passed with a stub: read its code)")
