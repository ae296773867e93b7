"""`minisglang checkout STAGE DIR [--student [--from PREVIOUS_DIR]]`: a standalone copy of
the engine as of a stage; `minisglang solutions STAGE` prints the reference solutions.

The copy holds the core engine and the stage modules up to STAGE (not the later ones).
With `--student`, the body of every exercise region in the copy (of that stage, of the
earlier stages, and of a later stage in a file the copy ships: the lines between a
`# BEGIN SOLUTION taskN_M` comment and the next `# END SOLUTION` comment, each comment
on a line of its own) is replaced by
`raise NotImplementedError("taskN_M: write this")` at the same indentation; signatures,
docstrings and the two comments stay. A task `taskN_M` belongs to stage sN. With
`--from`, the student's own bodies of the earlier stages' regions are copied in from their
previous checkout, found by task and enclosing function (not by file: code moves). With
`--only`, the earlier stages' regions keep the reference and only STAGE's tasks (and the
later stages' regions in the files it ships) are blanked: a class that starts mid-course.
Both: the student's own code of the stages their copy holds, the reference for the stages
the course skipped (a course of chapters 01, 04 and 08 takes s4 `--only --from ~/s1`).
"""

from __future__ import annotations

import re
import shutil
import textwrap
import tokenize
from pathlib import Path

from .stages import STAGE_FILES, STAGE_MODULES, resolve_tag

PACKAGE_DIR = Path(__file__).resolve().parent
BEGIN = re.compile(r"^(?P<indent>[ \t]*)# BEGIN SOLUTION (?P<task>task\d+_\d+)\s*$")
END = re.compile(r"^[ \t]*# END SOLUTION\s*$")


def stage_number(tag: str) -> int:
    """'s3-fsm-cache' -> 3 ('s0-unconstrained' -> 0)."""
    return int(resolve_tag(tag).split("-")[0][1:])


def _indent(begin_line: str) -> str:
    """The indentation of a `# BEGIN SOLUTION` line (one that find_solution_regions found)."""
    m = BEGIN.match(begin_line.rstrip("\n"))
    assert m is not None, begin_line
    return m["indent"]


def find_solution_regions(text: str) -> list[tuple[str, int, int]]:
    """(task, begin line, end line) for every region, 0-based; errors on bad nesting."""
    regions, open_at = [], None
    for i, line in enumerate(text.splitlines()):
        m = BEGIN.match(line)
        if m:
            if open_at is not None:
                raise ValueError(f"line {i + 1}: BEGIN SOLUTION inside another region")
            open_at = (m["task"], i)
        elif END.match(line):
            if open_at is None:
                raise ValueError(f"line {i + 1}: END SOLUTION without BEGIN")
            regions.append((open_at[0], open_at[1], i))
            open_at = None
    if open_at is not None:
        raise ValueError(f"BEGIN SOLUTION {open_at[0]} at line {open_at[1] + 1} is never closed")
    return regions


STUB = 'raise NotImplementedError("{task}: write this")'


def blank_solutions(text: str, tasks: set[str]) -> str:
    """Replace the bodies of the regions of `tasks` by `raise NotImplementedError(...)`.

    The BEGIN/END comments stay, so the student writes between them and `--from` can
    find their code again at the next stage.
    """
    lines = text.splitlines(keepends=True)
    for task, begin, end in reversed(find_solution_regions(text)):
        if task in tasks:
            indent = _indent(lines[begin])
            lines[begin + 1 : end] = [indent + STUB.format(task=task) + "\n"]
    return "".join(lines)


def is_stub(body: list[str], task: str) -> bool:
    """Whether a region's body is still the checkout's `raise NotImplementedError` line."""
    return [line.strip() for line in body if line.strip()] == [STUB.format(task=task)]


_DEF = re.compile(r"^(?P<indent>[ \t]*)(?:async\s+)?def\s+(?P<name>\w+)")


def region_keys(text: str) -> list[tuple[tuple[str, str, int], int, int]]:
    """((task, enclosing function, occurrence), begin, end) for every region of `text`.

    The key names a region by what it is, not where it is, so a student's region is found
    again when a later stage moved the function to another file.
    """
    lines = text.splitlines()
    keys: list[tuple[tuple[str, str, int], int, int]] = []
    counts: dict[tuple[str, str], int] = {}
    for task, begin, end in find_solution_regions(text):
        indent = len(_indent(lines[begin]))
        func = next(
            (m["name"] for i in range(begin - 1, -1, -1) if (m := _DEF.match(lines[i])) and len(m["indent"]) < indent),
            "<module>",
        )
        n = counts[(task, func)] = counts.get((task, func), -1) + 1
        keys.append(((task, func, n), begin, end))
    return keys


def task_key(task: str) -> tuple[int, int]:
    """'task2_10' -> (2, 10), for sorting tasks in their natural order."""
    n, m = task[4:].split("_")
    return int(n), int(m)


_SCANNED: dict[Path, tuple[str, list[tuple[str, int, int]]]] = {}


def _file_regions(path: Path) -> list[tuple[str, int, int]]:
    """find_solution_regions of a package file, scanned again only when its text changed."""
    # Scanning a file's lines costs 6x reading it and all_tasks() runs once per autograder
    # mutant; the key is the text, not the mtime, which two quick writes can leave unchanged.
    text = path.read_text(encoding="utf-8")
    known = _SCANNED.get(path)
    if known is None or known[0] != text:
        known = _SCANNED[path] = (text, find_solution_regions(text))
    return known[1]


def all_tasks(stage: str | None = None) -> dict[str, list[Path]]:
    """task -> files holding its regions, over the whole package (or one stage's tasks)."""
    found: dict[str, list[Path]] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        for task, _, _ in _file_regions(path):
            if stage is None or int(task[4:].split("_")[0]) == stage_number(stage):
                if path not in found.setdefault(task, []):  # a file with two regions of a task: once
                    found[task].append(path)
    return found


def checkout(
    stage: str,
    dest: str | Path,
    student: bool = False,
    from_dir: str | Path | None = None,
    notes: list[str] | None = None,
    only: bool = False,
) -> Path:
    """Write the package as of `stage` into dest/minisglang; returns that directory.

    `student`: blank every exercise region in the copy, of any stage (a student copy
    holds no reference solution, neither of a task they were given nor of one still to
    come). `from_dir`: a student's own earlier checkout; the bodies of their regions of
    the earlier stages are copied in. `only`: the earlier stages' regions keep the
    reference (a student who starts at this stage). What happened to the earlier tasks is
    appended to `notes` (for the command line).
    """
    if from_dir is not None and not student:
        raise ValueError("--from only makes sense with --student")
    if only and not student:
        raise ValueError("--only only makes sense with --student")
    tag = resolve_tag(stage)
    tags = list(STAGE_MODULES)
    later_tags = tags[tags.index(tag) + 1 :]
    later = [f"stages/{STAGE_MODULES[t].rsplit('.', 1)[1]}.py" for t in later_tags]
    later += [path for t in later_tags for path in STAGE_FILES.get(t, [])]
    out = Path(dest) / "minisglang"
    if out.exists():
        raise FileExistsError(f"{out} already exists; choose an empty directory")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(PACKAGE_DIR, out, ignore=ignore)
    for rel in later:
        target = out / rel
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
    if student:
        # Every region, not only this stage's and the earlier ones': a later stage's task can
        # sit in a file this copy ships (task6_2 in function_call.py, which the server imports
        # from s1 on). This stage never runs it (it refuses the later feature), and the
        # student has not been given that task yet.
        every_task = set(all_tasks())
        number = stage_number(tag)
        if only:  # the earlier stages stay the reference; this stage and the later ones are blank
            every_task = {t for t in every_task if task_key(t)[0] >= number}
        for path in out.rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            blanked = blank_solutions(text, every_task)
            if blanked != text:
                path.write_text(blanked, encoding="utf-8")
        tasks = {t for t in all_tasks() if task_key(t)[0] <= number}
        earlier = sorted((t for t in tasks if task_key(t)[0] < number), key=task_key)
        carried = set(earlier)
        if only and from_dir is not None:  # yours where your copy has them, the reference for the stages it lacks
            held = copy_stage(student_package(Path(from_dir)))
            carried = {t for t in earlier if held is not None and task_key(t)[0] <= held}
        kept = carry_forward(out, Path(from_dir), carried) if from_dir is not None else set()
        if only:
            if notes is not None and kept:
                notes.append(f"kept your own {', '.join(sorted(kept, key=task_key))} from {from_dir}")
            reference = [t[4:] for t in earlier if t not in kept]
            if notes is not None and reference:
                notes.append(
                    f"tasks {', '.join(reference)} hold the reference (--only): only stage s{number}'s tasks are blank"
                )
        elif notes is not None:
            if kept:
                notes.append(f"kept your own {', '.join(sorted(kept, key=task_key))} from {from_dir}")
            for n in sorted({task_key(t)[0] for t in earlier if t not in kept}):
                blank = [t[4:] for t in earlier if task_key(t)[0] == n and t not in kept]
                notes.append(
                    f"tasks {', '.join(blank)} are blank: pass --from YOUR_S{n}_DIR to keep yours"
                    if from_dir is None
                    else f"tasks {', '.join(blank)} are blank in {from_dir} too"
                )
    return out


def copy_stage(package: Path) -> int | None:
    """The number of the newest stage whose module `package` holds (a checkout of sN holds
    those of s0..sN only), or None where it holds none."""
    modules = [package / "stages" / f"{module.rsplit('.', 1)[1]}.py" for module in STAGE_MODULES.values()]
    # (a link to nothing is held too: the copy has the module, which cannot be read)
    held = [n for n, path in enumerate(modules) if path.exists() or path.is_symlink()]
    return max(held) if held else None


def student_package(from_dir: Path) -> Path:
    """The minisglang package of a student's earlier checkout (`from_dir` or the package itself)."""
    src_pkg = from_dir / "minisglang" if (from_dir / "minisglang").is_dir() else from_dir
    if not (src_pkg / "__init__.py").exists():
        raise FileNotFoundError(
            f"{from_dir} holds no minisglang package (the directory you "
            "passed to `minisglang checkout ... --student` earlier)"
        )
    return src_pkg


def carry_forward(out: Path, from_dir: Path, tasks: set[str]) -> set[str]:
    """Copy the bodies of the student's regions of `tasks` from their package in `from_dir`
    into the package `out`; returns the tasks whose code was carried (not still a stub, and
    not the lines `out` already holds there: with --only, the reference an --only copy of an
    earlier stage passed on is not the student's own)."""
    src_pkg = student_package(from_dir)
    theirs: dict[tuple[str, str, int], list[str]] = {}
    unreadable: list[str] = []  # (named if a region is then missing: it may be in one of them)
    for path in sorted(src_pkg.rglob("*.py")):
        if path.is_dir():
            continue  # a folder named notes.py: no module
        try:
            with tokenize.open(path) as f:  # in the encoding its coding line names, as Python reads it
                text = f.read()
        except (OSError, SyntaxError, UnicodeDecodeError) as e:  # a dangling link, a wrong coding line
            dangling = path.is_symlink() and not path.exists()
            why = "a link to a file that is not there" if dangling else f"{type(e).__name__}: {e}"
            unreadable.append(f"{path.relative_to(from_dir)} ({why})")
            continue
        try:
            keys = region_keys(text)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
        lines = text.splitlines(keepends=True)
        for key, begin, end in keys:
            if key[0] in tasks:
                indent = _indent(lines[begin])
                theirs[key] = [ln[len(indent) :] if ln.startswith(indent) else ln for ln in lines[begin + 1 : end]]
    kept = set()
    for path in sorted(out.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines(keepends=True)
        changed = False
        for key, begin, end in reversed(region_keys(text)):
            if key[0] not in tasks:
                continue
            if key not in theirs:
                held = copy_stage(src_pkg)
                number = task_key(key[0])[0]
                if held is not None and held < number:  # an older stage's copy: that file or region is not in it yet
                    raise ValueError(
                        f"{from_dir} is a checkout of stage s{held}: it holds no task {number}_*, "
                        f"such as task {key[0][4:]}. Pass the checkout of the stage just before this one "
                        f"(--from YOUR_S{max(task_key(t)[0] for t in tasks)}_DIR), or, in a course that skipped the "
                        "stages between, add --only (yours for the stages your copy holds, the reference for "
                        "the others)"
                    )
                raise ValueError(
                    f"{from_dir} has no region {key[0]} in function {key[1]}() (were its "
                    "# BEGIN SOLUTION / # END SOLUTION comments removed?"
                    + (f" These files could not be read: {'; '.join(unreadable)}" if unreadable else "")
                    + ")"
                )
            if is_stub(theirs[key], key[0]):
                continue
            indent = _indent(lines[begin])
            carried = [indent + ln if ln.strip() else ln for ln in theirs[key]]
            if carried == lines[begin + 1 : end]:
                continue  # (the same lines `out` holds there: the reference, when an --only copy passed it on)
            lines[begin + 1 : end] = carried
            kept.add(key[0])
            changed = True
        if changed:
            path.write_text("".join(lines), encoding="utf-8")
    return kept


def format_solutions(stage: str, task: str | None = None) -> str:
    """The reference solution regions of a stage (or one task), with file and line: for instructors."""
    number = stage_number(stage)
    if task is not None:
        task = task if task.startswith("task") else f"task{task}"
        if task not in all_tasks():
            known = ", ".join(sorted(all_tasks(stage), key=task_key))
            raise ValueError(f"no task {task!r}; the tasks of {stage}: {known}")
        if task_key(task)[0] != number:
            raise ValueError(f"{task} belongs to stage s{task_key(task)[0]}, not {stage}")
    parts = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for (t, func, _), begin, end in region_keys(text):
            if task_key(t)[0] == number and (task is None or t == task):
                rel = path.relative_to(PACKAGE_DIR.parent)
                parts.append(
                    (
                        task_key(t),
                        f"# {t}: {func}() in {rel}:{begin + 2}-{end}\n"
                        + textwrap.dedent("\n".join(lines[begin + 1 : end])),
                    )
                )
    return "\n\n".join(text for _, text in sorted(parts, key=lambda p: p[0]))
