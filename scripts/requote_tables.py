"""Bring the results tables the chapters quote up to date after a benchmark is rerun.

A chapter quotes a results table by linking benchmarks/results/FILE.md at most 12 lines before
it; each quoted row is a row of that file, or some of its columns in order
(tests/test_course_text.py checks this, with the functions below). After a rerun the check
fails on every changed number; this script rewrites each quoted row from the file: the row
with the same first cell, in a table whose header holds the chapter's header cells in order.
What it cannot match (a renamed column, a row label that changed) it prints, for a person.

    python scripts/requote_tables.py            # list the stale rows and what they would become
    python scripts/requote_tables.py --write    # rewrite them in place

The prose around a table is not touched: read it again against the new numbers.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS_LINK = re.compile(r"benchmarks/results/([\w-]+\.md)")


def table_cells(row: str) -> list[str]:
    """A markdown table row's cells, whitespace collapsed, en dashes as hyphens."""
    return [" ".join(c.replace("–", "-").split()) for c in row.strip().strip("|").split("|")]


def quoted_tables(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, results file, data rows) for every table that starts within 12 lines after a
    link to benchmarks/results/FILE.md: the chapter says it quotes that file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, link, link_at, i = [], None, -100, 0
    while i < len(lines):
        m = RESULTS_LINK.search(lines[i])
        if m:
            link, link_at = m[1], i
        if lines[i].startswith("|"):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            if link and i - link_at <= 12:
                found.append((i + 1, link, lines[i + 2 : j]))  # skip the header and the |---| line
            i = j
        else:
            i += 1
    return found


def is_columns_of(cells: list[str], row: list[str]) -> bool:
    """``cells`` are some of ``row``'s cells, in order."""
    it = iter(row)
    return all(any(c == r for r in it) for c in cells)


def column_indices(header: list[str], source_header: list[str]) -> list[int] | None:
    """Where each of ``header``'s cells stands in ``source_header`` (in order), or None."""
    at, start = [], 0
    for cell in header:
        try:
            start = source_header.index(cell, start)
        except ValueError:
            return None
        at.append(start)
        start += 1
    return at


def results_tables(text: str) -> list[list[list[str]]]:
    """Every table of a results file: its rows as cells, the header first (the |---| line dropped)."""
    tables, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            if not re.fullmatch(r"\|[\s:|-]*", line):
                current.append(table_cells(line))
        elif current:
            tables.append(current)
            current = []
    return tables


def is_label(cell: str) -> bool:
    """A cell that names a row (`fsm`, `auto`, `s7 NGRAM, k=2`) rather than a measured value."""
    return re.search(r"[A-Za-z]{2}", cell) is not None and not re.fullmatch(r"\**(met|missed)\**", cell)


def agreement(candidate: list[str], old: list[str]) -> tuple[int, int]:
    """How well a source row matches an old quoted row: equal label cells, then equal cells."""
    pairs = list(zip(candidate, old))
    return sum(a == b for a, b in pairs if is_label(b)), sum(a == b for a, b in pairs)


def requote(path: Path, write: bool) -> list[str]:
    """Rewrite ``path``'s stale quoted rows from their results files; return what could not be."""
    lines = path.read_text(encoding="utf-8").splitlines()
    problems = []
    for line_no, results, rows in quoted_tables(path):
        tables = results_tables((ROOT / "benchmarks" / "results" / results).read_text(encoding="utf-8"))
        header = table_cells(lines[line_no - 1])
        for k, row in enumerate(rows):
            cells = table_cells(row)
            if any(is_columns_of(cells, r) for t in tables for r in t):
                continue
            # the source row with the same first cell that agrees with the old row in the most
            # label cells, then in the most cells ("fsm | required" is not "fsm | auto", and a
            # row that shares its numbers with the old row is not the old row's label)
            candidates = [
                [r[i] for i in at]
                for t in tables
                if (at := column_indices(header, t[0]))
                for r in t[1:]
                if r[0] == cells[0]
            ]
            new = max(candidates, key=lambda c: agreement(c, cells), default=None)
            where = f"{path.name}:{line_no + 2 + k}"
            if new is None:
                problems.append(f"{where}: no row {cells[0]!r} under these columns in {results}")
                continue
            print(f"{where}\n  - {row}\n  + | {' | '.join(new)} |")
            lines[line_no + 1 + k] = f"| {' | '.join(new)} |"
    if write:
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return problems


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--write", action="store_true", help="rewrite the stale rows in place")
    args = ap.parse_args()
    problems = [p for path in sorted((ROOT / "chapters").glob("[0-9][0-9]-*.md")) for p in requote(path, args.write)]
    for p in problems:
        print("cannot requote:", p)


if __name__ == "__main__":
    main()
