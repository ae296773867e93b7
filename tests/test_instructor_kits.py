"""The instructor kits (instructors/NN-name/) are complete, runnable and never leak.

Every chapter has a kit; chapters 01, 03, 04 and 07 a full one. Every `minisglang ...`
command a kit shows parses with the real command line parser, so a renamed flag fails
here and not in front of a class. No kit file reaches a student checkout, and no
walkthrough holds a line of a reference solution (the walkthroughs explain, they do not
print code: `minisglang solutions` does that).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from minisglang.checkout import checkout
from minisglang.cli import build_parser, main

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_checkout import solution_only_lines  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
KITS = REPO / "instructors"
CHAPTERS = sorted(p.stem for p in (REPO / "chapters").glob("[0-9][0-9]-*.md"))
FULL = {"01-masked-fill", "03-fsm-cache", "04-jump-forward", "07-function-calling"}
FULL_FILES = ("session-plan.md", "handout.md", "quiz.md", "walkthrough.md")
BASIC_FILES = ("session-plan.md", "quiz.md")
KIT_FILES = sorted(KITS.rglob("*.md"))


def kit_commands(text: str) -> list[str]:
    """Every `minisglang ...` command line: lines of fenced blocks, and inline code spans."""
    found, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced and line.strip().startswith("minisglang "):
            found.append(line.strip())
        elif not fenced:
            found += [m for m in re.findall(r"`([^`]+)`", line) if m.startswith("minisglang ")]
    return found


def test_every_chapter_has_its_kit():
    assert len(CHAPTERS) >= 9
    for chapter in CHAPTERS:
        for name in FULL_FILES if chapter in FULL else BASIC_FILES:
            path = KITS / chapter / name
            assert path.exists(), f"{path.relative_to(REPO)} is missing"
            assert len(path.read_text(encoding="utf-8").split()) > 150, f"{path.relative_to(REPO)} is a stub"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_quiz_has_ten_questions_each_with_an_answer(chapter):
    text = (KITS / chapter / "quiz.md").read_text(encoding="utf-8")
    questions = re.findall(r"^\*\*\d+\.", text, flags=re.M)
    assert len(questions) >= 10, f"{chapter}: {len(questions)} questions"
    assert text.count("*Answer") >= len(questions), f"{chapter}: a question without its answer"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_session_plan_is_timed_to_90_minutes_and_has_a_live_demo(chapter):
    text = (KITS / chapter / "session-plan.md").read_text(encoding="utf-8")
    slots = re.findall(r"^\| (\d+)-(\d+) \|", text, flags=re.M)
    assert slots and slots[0][0] == "0" and slots[-1][1] == "90", f"{chapter}: the plan does not run 0-90"
    assert all(a[1] == b[0] for a, b in zip(slots, slots[1:])), f"{chapter}: the slots leave gaps"
    assert kit_commands(text), f"{chapter}: no minisglang command for the live demo"


def test_every_command_in_a_kit_parses_with_the_real_parser():
    parser = build_parser()
    commands = {c: p for p in KIT_FILES for c in kit_commands(p.read_text(encoding="utf-8"))}
    assert len(commands) >= 30
    for command, path in commands.items():
        argv = shlex.split(command)[1:]
        try:
            parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"{path.relative_to(REPO)}: `{command}` does not parse")


def test_no_kit_file_reaches_a_student_checkout(tmp_path):
    """A checkout copies the package only; the kits sit beside it. Checked by name and by text."""
    out = checkout("s4", tmp_path / "s4", student=True)
    assert not {p.name for p in out.rglob("*")} & set(FULL_FILES)
    shipped = "\n".join(
        p.read_text(encoding="utf-8", errors="replace")
        for p in out.rglob("*")
        if p.is_file() and p.suffix in (".py", ".md", ".txt", ".json")
    )
    for path in KIT_FILES:
        prose = [line for line in path.read_text(encoding="utf-8").splitlines() if len(line) > 60]
        assert not [line for line in prose if line in shipped], f"{path.relative_to(REPO)} is in the student copy"


def leaks(text: str, secret: dict[str, str]) -> list[str]:
    """Lines of reference solutions in `text`: a whole line as it stands, or a distinctive
    one (20 characters or more) anywhere in the text, whitespace collapsed."""
    found = [line.strip() for line in text.splitlines() if line.strip() and line.strip() in secret]
    flat = " ".join(text.split())
    return found + [line for line in secret if len(line) >= 20 and line in flat and line not in found]


def test_no_walkthrough_holds_a_line_of_a_reference_solution():
    secret = solution_only_lines()
    assert len(secret) > 100
    walkthroughs = sorted(KITS.glob("*/walkthrough.md"))
    assert len(walkthroughs) >= len(FULL)
    for path in walkthroughs:
        leaked = leaks(path.read_text(encoding="utf-8"), secret)
        assert not leaked, (
            f"{path.relative_to(REPO)} quotes reference solution lines of "
            f"{sorted({secret[line] for line in leaked})}: {leaked}"
        )
    # The check itself: one pasted line of task 4_2's solution is found, in a table cell too.
    pasted = next(line for line, task in secret.items() if task == "task4_2" and len(line) >= 20)
    assert leaks(f"| mistake | {pasted} | test |", secret) == [pasted]


def test_solutions_points_at_the_walkthrough(capsys):
    assert main(["solutions", "s4", "--task", "4_2"]) == 0
    last = capsys.readouterr().out.rstrip("\n").splitlines()[-1]
    assert last == "# why, and the wrong solutions each test catches: instructors/04-jump-forward/walkthrough.md"
    assert (REPO / "instructors" / "04-jump-forward" / "walkthrough.md").exists()
    for stage in ("s1", "s2", "s3", "s5", "s6", "s7"):  # every graded stage has its walkthrough
        assert main(["solutions", stage]) == 0
        last = capsys.readouterr().out.rstrip("\n").splitlines()[-1]
        assert last.startswith("# why, and the wrong solutions each test catches: instructors/"), (stage, last)
        assert (REPO / last.split(": ", 1)[1]).exists(), (stage, last)


CHEAP = ("viz", "fsm-allowed")  # seconds each; generate, trace and grade run a model or a test suite


def kit_assignments(text: str) -> list[str]:
    """The shell variables a kit's fenced blocks set (`DATE='...'`), which its commands use."""
    return [line.strip() for line in text.splitlines() if re.match(r"^\s*[A-Z_]+=", line)]


def shell_argv(assignments: list[str], command: str) -> list[str]:
    """`command`'s arguments after `minisglang`, as bash expands them after `assignments`."""
    script = "\n".join([*assignments, 'printf "%s\\0" ' + command.split(None, 1)[1]])
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    return out.split("\0")[:-1]


def test_every_cheap_kit_command_runs(tmp_path, monkeypatch, capsys):
    """The kits' drawings and token lists run as written (their shell variables set as the kit
    sets them): a demo that parses but fails on its regex or its --after text fails here."""
    monkeypatch.chdir(tmp_path)
    ran = 0
    for path in KIT_FILES:
        text = path.read_text(encoding="utf-8")
        for command in kit_commands(text):
            argv = shell_argv(kit_assignments(text), command)
            if argv[0] not in CHEAP or "radix" in argv:
                continue
            code = main(argv)
            err = capsys.readouterr().err
            assert code == 0, f"{path.relative_to(REPO)}: `{command}` exited {code}: {err}"
            ran += 1
    assert ran >= 20
