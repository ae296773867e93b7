"""The course text teaches without printing the answers, and every code quote is checked.

Course text = the chapters, the exercise pages, the notebooks (markdown and code cells),
README.md, COURSE.md and chapters/SOURCES.md.

1. No solution leaks. For every `# BEGIN SOLUTION` region of the package:
   - no non-trivial line of it appears anywhere in the course text (whitespace collapsed, so
     a line wrapped across two lines of prose still counts), and
   - no run of three consecutive lines of it (short lines included) appears as a block.
   A line is trivial when it is short (`return state`, `continue`, brackets) or when the same
   line also stands in the package outside every solution region: a student's checkout
   shows it anyway, so quoting it gives nothing away.

2. Checked excerpts. A fenced code block in a chapter that quotes the package says so on
   the line before it: `<!-- source: minisglang/PATH.py QUALNAME -->` (QUALNAME such as
   `Scheduler.step`, a function, a class, or a module-level assignment; omit it to quote
   the module). The block must equal that definition's current source, except that a line
   holding only `...` stands for lines left out; each piece between such lines may be
   shifted left or right as a whole (a method body quoted without its class's indent). A
   quote may never include a line of a solution region.
   The rule for every other block: it is an illustration (pseudocode or a usage example),
   so it must not contain two non-trivial lines of the package's code (that is a quote:
   mark it), and a `python` block that uses `self.` or defines a function or class under
   a name the package defines must be marked (pseudocode goes in a block tagged `text`).

3. Sources a reader can open: no "seed NNN" citation; self-test answers folded in
   `<details>`; every stage's exercise page starts with the expected-red step.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from minisglang.checkout import find_solution_regions

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from requote_tables import is_columns_of, quoted_tables, requote, table_cells  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "minisglang"
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]-*.md"))
COURSE_FILES = (
    CHAPTERS
    + sorted((ROOT / "exercises").glob("*.md"))
    + [
        p
        for p in (
            ROOT / "README.md",
            ROOT / "COURSE.md",
            ROOT / "chapters" / "README.md",
            ROOT / "chapters" / "SOURCES.md",
        )
        if p.exists()
    ]
    + sorted((ROOT / "notebooks").glob("*.ipynb"))
)
MIN_LINE_CHARS = 20  # a solution line shorter than this (normalised) is too common to count
BLOCK_LINES = 3  # this many consecutive solution lines, however short, are a leak
MARKER = re.compile(r"^<!--\s*source:\s*(?P<path>\S+)(?:\s+(?P<name>[\w.]+))?\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>```+|~~~+)(?P<lang>[\w+-]*)\s*$")
ELISION = re.compile(r"^\s*(\.\.\.|…)\s*$")


def norm(text: str) -> str:
    """Collapse every run of whitespace to one space (so wrapping and indentation do not matter)."""
    return " ".join(text.split())


def course_text(path: Path) -> str:
    """A markdown file as it is, or a notebook's cells (markdown and code) one after another."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        return "\n\n".join("".join(cell["source"]) for cell in cells)
    return path.read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# 1. No solution leaks


@dataclass
class Region:
    task: str
    path: Path
    lines: list[str]  # the region's lines between BEGIN and END, as written


def package_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def solution_regions() -> list[Region]:
    regions = []
    for path in package_files():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for task, begin, end in find_solution_regions(text):
            regions.append(Region(task, path, lines[begin + 1 : end]))
    return regions


def code_outside_solutions() -> str:
    """Every package line outside the solution regions, normalised and joined by newlines."""
    kept = []
    for path in package_files():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        inside = set()
        for _, begin, end in find_solution_regions(text):
            inside.update(range(begin, end + 1))
        kept += [norm(line) for i, line in enumerate(lines) if i not in inside]
    return "\n" + "\n".join(kept) + "\n"


REGIONS = solution_regions()
OUTSIDE = code_outside_solutions()
# The same lines as one run of text: a block of short lines that the package also writes outside
# its solutions (a `req.finish(` call wrapped over three lines) is an idiom, not the answer.
OUTSIDE_RUN = " ".join(line for line in OUTSIDE.split("\n") if line)
COURSE = {path: norm(course_text(path)) for path in COURSE_FILES}


def significant(line: str) -> bool:
    """Part of a block: anything but blank lines, comments and lone brackets."""
    n = norm(line)
    return bool(n) and not n.startswith("#") and not re.fullmatch(r"[\])}]+,?", n)


def distinctive_lines(region: Region) -> list[str]:
    """The region's lines that would give the answer away on their own."""
    found = []
    for line in region.lines:
        n = norm(line)
        if len(n) >= MIN_LINE_CHARS and f"\n{n}\n" not in OUTSIDE and n not in found:
            found.append(n)
    return found


def blocks(region: Region) -> list[str]:
    """Every run of BLOCK_LINES consecutive significant lines, joined as one normalised text,
    that the package does not also write outside its solutions."""
    lines = [norm(line) for line in region.lines if significant(line)]
    runs = [" ".join(lines[i : i + BLOCK_LINES]) for i in range(len(lines) - BLOCK_LINES + 1)]
    return [run for run in runs if run not in OUTSIDE_RUN]


def test_there_are_solution_regions_and_course_files():
    assert len(REGIONS) >= 15, [r.task for r in REGIONS]
    assert len(CHAPTERS) >= 7 and any(p.suffix == ".ipynb" for p in COURSE_FILES)
    # Every region has something this test can look for, or the test below would prove nothing.
    empty = [r.task for r in REGIONS if not distinctive_lines(r) and not blocks(r)]
    assert not empty, f"regions with nothing to check: {empty}"


@pytest.mark.parametrize("region", REGIONS, ids=lambda r: f"{r.task}-{r.path.stem}")
def test_no_solution_line_appears_in_the_course_text(region: Region):
    leaks = []
    for path, text in COURSE.items():
        for line in distinctive_lines(region):
            if line in text:
                leaks.append(f"{path.relative_to(ROOT)}: line {line!r}")
        for block in blocks(region):
            if block in text:
                leaks.append(f"{path.relative_to(ROOT)}: the lines {block!r}")
    assert not leaks, (
        f"{region.task} ({region.path.relative_to(ROOT)}) is printed in the course text; "
        f"describe the idea instead:\n" + "\n".join(leaks)
    )


def test_the_leak_check_catches_a_pasted_solution():
    """The check itself: a pasted region, re-indented and wrapped, is found; a paraphrase is not."""
    region = max(REGIONS, key=lambda r: len(distinctive_lines(r)))
    pasted = norm("Here is the answer:\n\n```python\n" + textwrap.dedent("\n".join(region.lines)) + "\n```\n")
    assert any(line in pasted for line in distinctive_lines(region))
    assert any(block in pasted for block in blocks(region))
    paraphrase = norm("Walk each distinct byte string once; keep the ids whose walk survives.")
    assert not any(line in paraphrase for line in distinctive_lines(region))


# ---------------------------------------------------------------------------------------------
# 2. Checked excerpts


@dataclass
class CodeBlock:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    body: list[str]
    marker: re.Match | None  # the `<!-- source: ... -->` line before it, if any

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def fenced_blocks(path: Path) -> list[CodeBlock]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, start = m["fence"], i
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        before = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        found.append(CodeBlock(path, start + 1, m["lang"], lines[start + 1 : j], MARKER.match(before.strip())))
        i = j + 1
    return found


ALL_BLOCKS = [b for path in CHAPTERS for b in fenced_blocks(path)]
MARKED = [b for b in ALL_BLOCKS if b.marker]
UNMARKED = [b for b in ALL_BLOCKS if not b.marker]


def find_definition(tree: ast.Module, qualname: str) -> ast.AST | None:
    """The class, function or module-level assignment named `A.b.c`."""
    scope: list[ast.stmt] = tree.body
    node = None
    for part in qualname.split("."):
        node = None
        for stmt in scope:
            names = []
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [stmt.name]
            elif isinstance(stmt, ast.Assign):
                names = [t.id for t in stmt.targets if isinstance(t, ast.Name)]
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                names = [stmt.target.id]
            if part in names:
                node = stmt
                break
        if node is None:
            return None
        scope = getattr(node, "body", [])
    return node


def quoted_source(path: Path, name: str | None) -> tuple[list[str], int]:
    """The lines of the named definition (decorators included) and its first line's number."""
    text = path.read_text(encoding="utf-8")
    if not name:
        return text.splitlines(), 1
    node = find_definition(ast.parse(text), name)
    if node is None:
        raise LookupError(f"{path.relative_to(ROOT)} has no definition {name!r}")
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return text.splitlines()[first - 1 : node.end_lineno], first


def pieces(body: list[str]) -> list[list[str]]:
    """The excerpt cut at its `...` lines; empty pieces dropped."""
    out, current = [], []
    for line in body:
        if ELISION.match(line):
            out.append(current)
            current = []
        else:
            current.append(line.rstrip())
    out.append(current)
    return [p for p in out if any(line.strip() for line in p)]


def find_piece(piece: list[str], source: list[str], start: int) -> int:
    """First index >= start where `piece` equals the source, up to one indent shift; -1 if none."""
    want = textwrap.dedent("\n".join(piece)).splitlines()
    for i in range(start, len(source) - len(want) + 1):
        window = [line.rstrip() for line in source[i : i + len(want)]]
        if textwrap.dedent("\n".join(window)).splitlines() == want:
            return i
    return -1


def match_excerpt(block: CodeBlock) -> tuple[list[int], str]:
    """The 0-based indices (within the definition) of the quoted lines, or an explanation."""
    path = ROOT / block.marker["path"]
    if not path.is_file():
        return [], f"{block.where()}: the source {block.marker['path']} does not exist"
    try:
        source, _ = quoted_source(path, block.marker["name"])
    except LookupError as e:
        return [], f"{block.where()}: {e}"
    used, at = [], 0
    for piece in pieces(block.body):
        i = find_piece(piece, source, at)
        if i < 0:
            return [], (
                f"{block.where()}: this part of the excerpt is not in the current source of "
                f"{block.marker['path']} {block.marker['name'] or ''} (in this order):\n" + "\n".join(piece)
            )
        used += range(i, i + len(piece))
        at = i + len(piece)
    return used, ""


def test_chapters_quote_the_package():
    assert len(MARKED) >= 10, "the chapters should quote the code they teach, marked with its source"


@pytest.mark.parametrize("block", MARKED, ids=lambda b: b.where())
def test_a_marked_excerpt_equals_its_source(block: CodeBlock):
    used, problem = match_excerpt(block)
    assert not problem, problem + "\nUpdate the excerpt to the code (or the marker to the code's new name)."


@pytest.mark.parametrize("block", MARKED, ids=lambda b: b.where())
def test_a_marked_excerpt_quotes_no_solution(block: CodeBlock):
    path = ROOT / block.marker["path"]
    text = path.read_text(encoding="utf-8")
    _, first = quoted_source(path, block.marker["name"])
    inside = {line for _, begin, end in find_solution_regions(text) for line in range(begin, end + 1)}
    used, problem = match_excerpt(block)
    assert not problem, problem
    leaked = sorted(first - 1 + i for i in used if first - 1 + i in inside)
    assert not leaked, (
        f"{block.where()} quotes solution lines {[n + 1 for n in leaked]} of "
        f"{block.marker['path']}; elide them with a '...' line"
    )


def code_lines(path: Path) -> list[str]:
    """The file's lines of code: not comments, docstrings or lines of data (string literals)."""
    text = path.read_text(encoding="utf-8")
    in_strings = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.end_lineno > node.lineno:
            in_strings.update(range(node.lineno, node.end_lineno + 1))
    return [
        norm(line)
        for i, line in enumerate(text.splitlines(), 1)
        if i not in in_strings and not norm(line).startswith(("#", '"', "'"))
    ]


def defined_names() -> set[str]:
    names = set()
    for path in package_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
    return names


SOURCE_LINES = {line for path in package_files() for line in code_lines(path) if len(line) >= 24}
DEFINED = defined_names()


@pytest.mark.parametrize("block", UNMARKED, ids=lambda b: b.where())
def test_an_unmarked_block_is_an_illustration(block: CodeBlock):
    quoted = [norm(line) for line in block.body if norm(line) in SOURCE_LINES]
    assert len(quoted) < 2, (
        f"{block.where()} copies lines of the package {quoted}: mark it with "
        f"<!-- source: minisglang/PATH.py NAME --> so that a test keeps it true"
    )
    if block.lang == "python":
        looks_like_source = [
            line
            for line in block.body
            if "self." in line or ((m := re.match(r"\s*(?:async\s+)?(?:def|class)\s+(\w+)", line)) and m[1] in DEFINED)
        ]
        assert not looks_like_source, (
            f"{block.where()} is Python that reads like the package's code ({looks_like_source[0].strip()!r}): "
            f"quote the real code with a source marker, or tag pseudocode as `text`"
        )


def test_the_excerpt_check_catches_drift():
    """An excerpt that is off by one argument fails; the same excerpt, elided, passes."""
    target = ROOT / "minisglang" / "scheduler.py"
    source, _ = quoted_source(target, "Scheduler")
    body = source[:2] + ["        ..."] + source[-2:]
    ok = CodeBlock(target, 1, "python", body, MARKER.match("<!-- source: minisglang/scheduler.py Scheduler -->"))
    assert match_excerpt(ok)[1] == ""
    drifted = CodeBlock(target, 1, "python", [source[0] + " # not in the source"], ok.marker)
    assert "not in the current source" in match_excerpt(drifted)[1]
    missing = CodeBlock(
        target,
        1,
        "python",
        source[:1],
        MARKER.match("<!-- source: minisglang/scheduler.py Scheduler.no_such_method -->"),
    )
    assert "has no definition" in match_excerpt(missing)[1]


# ---------------------------------------------------------------------------------------------
# 3. Sources, folded answers, expected-red steps

SEED = re.compile(r"\bseeds? 0\d\d\b")


@pytest.mark.parametrize("path", COURSE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_citation_a_reader_cannot_open(path: Path):
    found = SEED.findall(course_text(path))
    assert not found, f"{path.relative_to(ROOT)} cites {found}: cite what a reader can open (chapters/SOURCES.md)"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_self_test_answers_are_folded(path: Path):
    text = path.read_text(encoding="utf-8")
    assert re.search(r"<details>\s*<summary>[^<]*[Aa]nswers", text), (
        f"{path.name}: put the self-test answers in a <details><summary>Answers</summary> block"
    )


@pytest.mark.parametrize("path", sorted((ROOT / "exercises").glob("s[0-9].md")), ids=lambda p: p.name)
def test_every_stage_starts_with_the_expected_red_step(path: Path):
    text = path.read_text(encoding="utf-8")
    assert re.search(r"(?i)step 0", text) and "everything fails" in text.lower(), (
        f"{path.name}: start with the expected-red step (grade the stubs; everything fails)"
    )


def test_sources_page_lists_what_the_course_cites():
    sources = (ROOT / "chapters" / "SOURCES.md").read_text(encoding="utf-8")
    for needed in [
        "Fast JSON Decoding for Local LLMs with Compressed Finite State Machine",
        "Willard",
        "XGrammar",
        "llguidance",
        "22085081b",
    ]:
        assert needed in sources, f"chapters/SOURCES.md should list {needed!r}"


TEST_REFERENCE = re.compile(r"tests/(test_\w+)\.py::\s*(\w+)")
ALL_TESTS = {
    m
    for path in (ROOT / "tests").glob("test_*.py")
    for m in re.findall(r"^(?:async )?def (test_\w+)", path.read_text(encoding="utf-8"), re.M)
}


@pytest.mark.parametrize("path", COURSE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_test_the_text_names_exists(path: Path):
    """`tests/test_x.py::test_name` in the text is a claim that such a test checks it."""
    text, missing = course_text(path), []
    for m in TEST_REFERENCE.finditer(text):
        file = ROOT / "tests" / f"{m[1]}.py"
        if not file.exists() or not re.search(rf"^(async )?def {m[2]}\b", file.read_text(encoding="utf-8"), re.M):
            missing.append(m[0])
    # A test named on its own (`test_name`, as the exercise pages list them) must exist somewhere.
    missing += [name for name in sorted(set(re.findall(r"`(test_\w+)`", text))) if name not in ALL_TESTS]
    assert not missing, f"{path.relative_to(ROOT)} names tests that do not exist: {missing}"


# ---------------------------------------------------------------------------------------------
# 4. Numbers quoted from a benchmark's results file

QUOTED = [(path, *t) for path in CHAPTERS for t in quoted_tables(path)]


def test_chapters_quote_benchmark_results():
    assert len(QUOTED) >= 5


@pytest.mark.parametrize("path,line,results,rows", QUOTED, ids=lambda v: v.name if isinstance(v, Path) else str(v))
def test_a_quoted_results_table_equals_the_results_file(path: Path, line: int, results: str, rows: list[str]):
    """Every row is a row of the results file, or some of its columns in order: a rerun of
    the benchmark that changes a number makes the chapter's copy fail here."""
    source = [
        table_cells(r)
        for r in (ROOT / "benchmarks" / "results" / results).read_text(encoding="utf-8").splitlines()
        if r.startswith("|")
    ]

    stale = [r for r in rows if not any(is_columns_of(table_cells(r), s) for s in source)]
    assert not stale, (
        f"{path.relative_to(ROOT)}:{line} quotes benchmarks/results/{results}, but these rows "
        f"are not in it (rerun numbers?):\n" + "\n".join(stale)
    )


# ---------------------------------------------------------------------------------------------
# 5. Each task's page names the function that holds its region


def enclosing_qualnames(path: Path) -> dict[str, set[str]]:
    """task -> qualified names (`Class.method`) of the functions that hold its regions."""
    text = path.read_text(encoding="utf-8")
    spans = []

    def walk(body, prefix):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + node.name
                if not isinstance(node, ast.ClassDef):
                    spans.append((node.lineno, node.end_lineno, name))
                walk(node.body, name + ".")

    walk(ast.parse(text).body, "")
    found: dict[str, set[str]] = {}
    for task, begin, _ in find_solution_regions(text):
        inner = [s for s in spans if s[0] <= begin + 1 <= s[1]]
        if inner:
            found.setdefault(task, set()).add(max(inner, key=lambda s: s[0])[2])
    return found


TASK_FUNCTIONS: dict[str, set[str]] = {}
for _path in package_files():
    for _task, _names in enclosing_qualnames(_path).items():
        TASK_FUNCTIONS.setdefault(_task, set()).update(_names)
TASK_HEADING = re.compile(r"^## Task (\d+)_(\d+): `([\w.]+)\(", re.M)


@pytest.mark.parametrize("path", sorted((ROOT / "exercises").glob("s[0-9].md")), ids=lambda p: p.name)
def test_a_task_heading_names_the_function_that_holds_the_task(path: Path):
    """`## Task 4_4: `Scheduler.readmit(...)`` must stay true when code moves between files."""
    wrong = []
    for major, minor, name in TASK_HEADING.findall(path.read_text(encoding="utf-8")):
        holders = TASK_FUNCTIONS.get(f"task{major}_{minor}", set())
        if not any(h == name or h.endswith("." + name) for h in holders):
            wrong.append(f"task {major}_{minor}: the page says {name}, the region is in {sorted(holders)}")
    assert not wrong, f"{path.name}: " + "; ".join(wrong)


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("path", [p for p in COURSE_FILES if p.suffix == ".md"], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path):
    """A link to a chapter, notebook, figure or results file that was renamed fails here."""
    broken = [
        target
        for target in LINK.findall(path.read_text(encoding="utf-8"))
        if "://" not in target and not (path.parent / target).exists()
    ]
    assert not broken, f"{path.relative_to(ROOT)} links to files that do not exist: {broken}"


def test_every_benchmark_script_is_named_in_the_benchmarks_readme():
    """A script added to benchmarks/ gets its row in benchmarks/README.md (what it compares,
    its results file, its command); `_`-prefixed helpers are modules, not scripts."""
    readme = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    scripts = [
        p.name
        for p in sorted((ROOT / "benchmarks").iterdir())
        if p.suffix in (".py", ".sh") and not p.name.startswith("_")
    ]
    assert len(scripts) > 10  # the oracle itself: the directory was found
    missing = [name for name in scripts if f"`{name}`" not in readme]
    assert not missing, f"benchmarks/README.md does not name {missing}"


def test_every_script_reads_its_arguments_so_help_only_prints():
    """benchmarks/README.md: "Every script takes `--help`". A script that never parses its
    arguments ignores `--help` and does its whole job: json_schema_conformance.py ran the
    suite and rewrote its results file, maskbench_schemas.py rewrote tests/data/maskbench,
    build_compiled.py rebuilt build/mypyc."""
    scripts = [
        p
        for folder in ("benchmarks", "scripts")
        for p in sorted((ROOT / folder).glob("*.py"))
        if not p.name.startswith("_") and re.search(r"^if __name__ == .__main__.:", p.read_text(encoding="utf-8"), re.M)
    ]
    assert len(scripts) > 20  # the oracle itself: the folders were found
    deaf = [str(p.relative_to(ROOT)) for p in scripts if ".parse_args(" not in p.read_text(encoding="utf-8")]
    assert not deaf, f"these scripts ignore --help (they never parse their arguments): {deaf}"


def modules_the_contributing_table_covers() -> set[str]:
    """The package files CONTRIBUTING.md's "Where a module's tests are" table names, relative
    to minisglang/: a path, a bare name in the directory of the row's first path, a folder
    (`model/`: every file under it), a glob (`constrained/lazy_*.py`) and a range of stages
    (`stages/s1_masked_fill.py` ... `s7_speculative.py`)."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text.split("## Where a module's tests are")[1].split("\n## ")[0]
    files = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py"))
    covered: set[str] = set()
    for row in section.splitlines():
        if not row.startswith("| `"):
            continue
        cell = row.split("|")[1]
        names = re.findall(r"`([^`]+)`", cell)
        first = next((n for n in names if "/" in n.rstrip("/")), "")
        folder = first.rsplit("/", 1)[0] + "/" if "/" in first.rstrip("/") else ""
        paths = [n if "/" in n else folder + n for n in names]
        for pattern in paths:
            covered.update(f for f in files if f.startswith(pattern) if pattern.endswith("/"))
            covered.update(f for f in files if re.fullmatch(re.escape(pattern).replace(r"\*", "[^/]*"), f))
        if " ... " in cell and len(paths) == 2:
            covered.update(f for f in files if paths[0] <= f <= paths[1] and f.startswith(folder))
    return covered


def test_every_modules_tests_are_found_by_its_name_or_in_the_contributing_table():
    """CONTRIBUTING.md: a module x.py's tests are tests/test_x.py (test_<package>_x.py for a
    package's module); where not, its table says where they are. A module found neither way
    (the step view's, library_children.py) left a newcomer searching."""
    covered = modules_the_contributing_table_covers()
    assert {"sampler.py", "model/llama.py", "stages/s3_fsm_cache.py", "constrained/lazy_rows.py"} <= covered
    lost = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE))
        if path.name == "__init__.py" or rel in covered:
            continue
        by_name = [f"test_{path.stem}.py", f"test_{path.parent.name}_{path.stem}.py"]
        if not any((ROOT / "tests" / name).exists() for name in by_name):
            lost.append(rel)
    assert not lost, f"no tests/test_<module>.py and no row in CONTRIBUTING.md's table: {lost}"


@pytest.mark.parametrize("path,line,results,rows", QUOTED, ids=lambda v: v.name if isinstance(v, Path) else str(v))
def test_a_quoted_table_repeats_no_row(path: Path, line: int, results: str, rows: list[str]):
    """Two equal rows in one quoted table are a copy gone wrong (a rerun quoted one backend's
    row under two labels' places), which the row-by-row check above cannot see."""
    assert len(set(rows)) == len(rows), f"{path.relative_to(ROOT)}:{line}: a row appears twice"


def test_requote_brings_a_stale_quoted_row_back_to_its_results_file(tmp_path):
    """scripts/requote_tables.py rewrites a quoted row from the results file after a rerun,
    choosing the row that agrees in the most cells when first cells repeat."""
    chapter = ROOT / "chapters" / "07-function-calling.md"
    line, results, rows = next(t for t in quoted_tables(chapter) if t[1] == "tool_calls.md")
    text = chapter.read_text(encoding="utf-8")
    cells = rows[2].split("|")
    cells[3] = " 999/80 (1%) "  # a number the rerun changed; the labels (backend, tool_choice) kept
    stale = "|".join(cells)
    copy = tmp_path / chapter.name
    copy.write_text(text.replace(rows[2], stale, 1), encoding="utf-8")
    assert requote(copy, write=True) == []
    assert copy.read_text(encoding="utf-8") == text
