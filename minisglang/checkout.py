"""`minisglang checkout STAGE DIR [--student]`: a standalone copy of the engine as of a stage.

The copy holds the core engine and the stage modules up to STAGE (not the later ones).
With `--student`, the solution regions of that stage's exercises (the lines from a
`# BEGIN SOLUTION taskN_M` comment to the next `# END SOLUTION` comment, each comment on
a line of its own) are replaced by `raise NotImplementedError("taskN_M: write this")` at
the same indentation, so signatures and docstrings stay. A task `taskN_M` belongs to stage sN.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

from .stages import STAGE_FILES, STAGE_MODULES, resolve_tag

PACKAGE_DIR = Path(__file__).resolve().parent
BEGIN = re.compile(r"^(?P<indent>[ \t]*)# BEGIN SOLUTION (?P<task>task\d+_\d+)\s*$")
END = re.compile(r"^[ \t]*# END SOLUTION\s*$")


def stage_number(tag: str) -> int:
    """'s3-fsm-cache' -> 3 ('s0-unconstrained' -> 0)."""
    return int(resolve_tag(tag).split("-")[0][1:])


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


def blank_solutions(text: str, tasks: set[str]) -> str:
    """Replace the regions of `tasks` by `raise NotImplementedError(task)`."""
    lines = text.splitlines(keepends=True)
    for task, begin, end in reversed(find_solution_regions(text)):
        if task in tasks:
            indent = BEGIN.match(lines[begin].rstrip("\n"))["indent"]
            lines[begin:end + 1] = [f'{indent}raise NotImplementedError("{task}: write this")\n']
    return "".join(lines)


def all_tasks(stage: str | None = None) -> dict[str, list[Path]]:
    """task -> files holding its regions, over the whole package (or one stage's tasks)."""
    found: dict[str, list[Path]] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        for task, _, _ in find_solution_regions(path.read_text(encoding="utf-8")):
            if stage is None or int(task[4:].split("_")[0]) == stage_number(stage):
                found.setdefault(task, []).append(path)
    return found


def checkout(stage: str, dest: str | Path, student: bool = False) -> Path:
    """Write the package as of `stage` into dest/minisglang; returns that directory."""
    tag = resolve_tag(stage)
    tags = list(STAGE_MODULES)
    later_tags = tags[tags.index(tag) + 1:]
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
        tasks = set(all_tasks(tag))
        for path in out.rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            blanked = blank_solutions(text, tasks)
            if blanked != text:
                path.write_text(blanked, encoding="utf-8")
    return out
