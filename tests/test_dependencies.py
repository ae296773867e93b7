"""The declared dependencies are what the package imports (issue 14, item 6).

Every third-party module that a file of `minisglang/` imports must come from a distribution
declared in pyproject.toml: in `dependencies`, or in the extra that the file belongs to
(the server's files need `serve`, the library backends need `backends`). And the files
outside an extra must import without any extra installed, so `pip install minisglang`
gives a working engine.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "minisglang"
# Files that only run with an extra installed; every other file needs only `dependencies`.
EXTRA_OF_FILE = {
    "server/__init__.py": "serve",
    "server/app.py": "serve",
    "server/engine_loop.py": "serve",
    "server/errors.py": "serve",
    "server/http_limits.py": "serve",
    "server/client_threads.py": "serve",
    "server/openai_shapes.py": "serve",
    "server/prompts.py": "serve",
    "server/request_rate.py": "serve",
    "server/routes_native.py": "serve",
    "server/routes_openai.py": "serve",
    "server/routes_responses.py": "serve",
    "server/responses_shapes.py": "serve",
    "server/state.py": "serve",
    "server/streaming.py": "serve",
    "protocol.py": "serve",
    "protocol_responses.py": "serve",
    "metrics.py": "serve",
    "backends/xgrammar_backend.py": "backends",
    "backends/outlines_backend.py": "backends",
    "backends/llguidance_backend.py": "backends",
    "constrained/library_children.py": "backends",
    "grade_zygote.py": "test",  # (the runs it forks are pytest's, as `minisglang grade` needs the test extra)
}


def _normalise(name: str) -> str:
    """A distribution name as PEP 503 compares them: Jinja2 == jinja2, prometheus_client == prometheus-client."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    """(runtime distribution names, extra -> its distribution names), normalised."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    runtime = {_normalise(Requirement(r).name) for r in project["dependencies"]}
    extras = {
        extra: {_normalise(Requirement(r).name) for r in reqs} - {project["name"]}  # `all` names us
        for extra, reqs in project["optional-dependencies"].items()
    }
    return runtime, extras


def _third_party_imports(path: Path) -> set[str]:
    """The top-level names of the non-stdlib, non-minisglang modules `path` imports (anywhere in it)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n != "minisglang"}


def _package_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_third_party_import_is_declared():
    runtime, extras = _declared()
    distributions = importlib.metadata.packages_distributions()  # import name -> distributions
    missing = []
    for path in _package_files():
        relative = path.relative_to(PACKAGE).as_posix()
        extra = EXTRA_OF_FILE.get(relative)
        allowed = runtime | (extras[extra] if extra else set())
        for name in sorted(_third_party_imports(path)):
            provided_by = {_normalise(d) for d in distributions.get(name, [])}
            if not provided_by & allowed:
                where = f"the '{extra}' extra" if extra else "dependencies"
                missing.append(
                    f"minisglang/{relative} imports {name} (from {sorted(provided_by) or '?'}), not declared in {where}"
                )
    assert not missing, "\n".join(missing) + (
        "\n(declare it in pyproject.toml; a file that only runs with an extra installed goes in EXTRA_OF_FILE)"
    )


def test_every_runtime_dependency_is_imported():
    """A runtime dependency the package never imports is weight every user installs."""
    runtime, _ = _declared()
    distributions = importlib.metadata.packages_distributions()
    imported = {
        _normalise(d)
        for path in _package_files()
        for name in _third_party_imports(path)
        for d in distributions.get(name, [])
    }
    assert runtime - imported == set(), f"declared but never imported: {sorted(runtime - imported)}"


def test_the_files_outside_extras_import_without_any_extra():
    """Import every non-extra module in a fresh Python that refuses the extras' packages."""
    runtime, extras = _declared()
    distributions = importlib.metadata.packages_distributions()
    extra_only = set().union(*extras.values()) - runtime
    blocked = sorted(
        name
        for name, dists in distributions.items()
        if {_normalise(d) for d in dists} & extra_only and not {_normalise(d) for d in dists} & runtime
    )
    modules = [
        "minisglang." + path.relative_to(PACKAGE).with_suffix("").as_posix().replace("/", ".")
        for path in _package_files()
        if path.relative_to(PACKAGE).as_posix() not in EXTRA_OF_FILE
    ]
    modules = [m.removesuffix(".__init__") for m in modules]
    script = f"""
import importlib, importlib.abc, sys
BLOCKED = set({blocked!r})

class RefuseExtras(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{{name}} belongs to an extra, not to the runtime dependencies")
        return None

sys.meta_path.insert(0, RefuseExtras())
for module in {modules!r}:
    importlib.import_module(module)
print("imported", len({modules!r}))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "fastapi" in blocked and "xgrammar" in blocked and "transformers" in blocked
