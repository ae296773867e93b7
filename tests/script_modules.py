"""Load a script of scripts/ or benchmarks/ as a module, for the tests that check it.

    from script_modules import REPO, load_script
    make_figures = load_script(REPO / "scripts" / "make_figures.py")

The module is registered in `sys.modules` under the script's name (dataclasses look their
module up there) and loaded once per session: two test files that load one script share it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def load_script(path: Path) -> ModuleType:
    """The module of the script at `path`, executed on first use."""
    loaded = sys.modules.get(path.stem)
    if loaded is not None and getattr(loaded, "__file__", None) == str(path):
        return loaded
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None, f"{path} is not a Python file"
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module
