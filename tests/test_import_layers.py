"""The import layers of the package hold (issue 14, item 6).

The contracts live in pyproject.toml (`[tool.importlinter]`) and are checked by
import-linter's `lint-imports`, which reads every module's imports without running them:
constrained/ imports no core, model, stage or backend; model/ and backends/ import no
stage; the core (engine, scheduler, pools, radix cache, sampler, tokenizer) imports no
server, CLI or front end, and no automaton, backend or later stage (the scheduler reaches
the constraint layer only through `stages/base.py`'s hooks, so a checkout of s1 runs without
s5's files). A forbidden import anywhere on a chain counts (a -> b -> c).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(cwd: Path, contract: str | None = None) -> subprocess.CompletedProcess:
    """Run `lint-imports` on the package and pyproject.toml found in `cwd` (no cache files written)."""
    command = [str(LINT_IMPORTS), "--no-cache", "--no-logo"] + (["--contract", contract] if contract else [])
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True)


def test_the_import_contracts_hold():
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_contract_named_in_the_issue_is_declared():
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert {c["id"] for c in contracts} == {
        "constrained-is-a-library",
        "model-no-stages",
        "backends-no-stages",
        "core-no-front-end",
        "core-no-constraint-layer",
    }


# One forbidden import per contract, added to a copy of the package: each must break its contract.
FORBIDDEN = [
    ("constrained-is-a-library", "constrained/regex_dfa.py", "from minisglang import scheduler"),
    ("constrained-is-a-library", "constrained/json_schema/build.py", "import minisglang.model.llama"),
    ("model-no-stages", "model/llama.py", "from minisglang.stages import base"),
    ("backends-no-stages", "backends/__init__.py", "import minisglang.stages.s1_masked_fill"),
    ("core-no-front-end", "radix_cache.py", "from minisglang import server"),
    ("core-no-constraint-layer", "scheduler.py", "from minisglang.backends import base"),
]


@pytest.mark.parametrize("contract, file, line", FORBIDDEN, ids=[f"{c}:{f}" for c, f, _ in FORBIDDEN])
def test_a_forbidden_import_breaks_its_contract(tmp_path, contract, file, line):
    # A copy of the sources (no assets, no caches) that `lint-imports` finds from its cwd.
    shutil.copytree(
        REPO / "minisglang", tmp_path / "minisglang", ignore=shutil.ignore_patterns("assets", "__pycache__", "*.pyc")
    )
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "minisglang" / file
    target.write_text(target.read_text(encoding="utf-8") + f"\n{line}  # added by the test\n", encoding="utf-8")

    result = lint_imports(tmp_path, contract)

    assert result.returncode == 1, result.stdout + result.stderr
    module = "minisglang." + file.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    imported = line.split()[1] if line.startswith("import") else f"{line.split()[1]}.{line.split()[3]}"
    assert f"{module} -> {imported}" in result.stdout, result.stdout
