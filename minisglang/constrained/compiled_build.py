"""Which build of the lazy automaton's hot modules this process runs: compiled or pure Python.

The modules in COMPILED are ordinary, readable Python (chapter 05 teaches them) and they
are also compiled, from these same files, by mypyc (scripts/build_compiled.py, run by
scripts/setup.sh). There is no second implementation: the compiled build is the same
program, only faster (derivatives are most of a first visit's cost), and tests compare
the two builds' masks bit for bit (tests/test_compiled_build.py).

How the choice is made. The build lives outside the package, in BUILD_DIR, as extension
modules laid out like the package (`.../minisglang/constrained/lazy_regex.cpython-*.so`).
`use(__path__)` (called by this package's __init__ before anything imports those modules)
puts that directory FIRST on the package's search path, so `import
minisglang.constrained.lazy_regex` finds the compiled module there, and every module not
compiled falls through to the source directory. Built in place instead, the extension
files would sit beside the sources and always win: a checkout for a student (`minisglang
checkout`, which copies the package) or a mutant of the autograder would run the compiled
module and ignore the edited source.

It is used only when all of these hold; otherwise the pure-Python files run:
- MINISGLANG_PURE is unset or "0" (MINISGLANG_PURE=1 asks for the pure build: the tests
  and benchmarks run both);
- the build exists and was made for this Python (its extension suffix);
- every compiled file's source is byte for byte the one it was built from (sha256 in the
  build's manifest): a source edited since the build is run as source, with one warning,
  never a stale compiled copy.
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
import warnings
from pathlib import Path

# The modules compiled by mypyc (in this package). The trie walks are numba loops already,
# and the row code (lazy_token_fsm.py, lazy_row_shortcuts.py) is numpy calls and the
# tests' monkeypatch seams, so they stay Python; a loop of the row code that only reads and
# fills the automaton lives in lazy_byte_dfa.py instead (`LazyByteDFA.fill_ahead`, the walk's
# look-ahead), and is compiled with it. regex_ast.py is the syntax tree every JSON Schema
# compile builds and lowers into the pool (a quarter of a large schema's compile).
COMPILED = ("lazy_regex", "lazy_byte_dfa", "regex_ast")
SOURCE_DIR = Path(__file__).resolve().parent
BUILD_DIR = SOURCE_DIR.parents[1] / "build" / "mypyc"  # the repository's build/, git-ignored
MANIFEST = BUILD_DIR / "SOURCES"

# What `use` decided: "compiled", or "pure (<why>)"; read by the tests and benchmarks.
active = "pure (not decided yet)"


def source_digests() -> dict[str, str]:
    """{module: sha256 of its source file} for the COMPILED modules."""
    return {name: hashlib.sha256((SOURCE_DIR / f"{name}.py").read_bytes()).hexdigest() for name in COMPILED}


def manifest_text() -> str:
    """The manifest a build writes: the extension suffix, then one `sha256 module` per line."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    return "\n".join([f"suffix {suffix}", *(f"{digest} {name}" for name, digest in source_digests().items())]) + "\n"


def _why_not() -> str | None:
    """None when the compiled build may be used, else the reason it is not."""
    if os.environ.get("MINISGLANG_PURE", "0") not in ("", "0"):
        return "MINISGLANG_PURE is set"
    if not MANIFEST.is_file():
        return "no compiled build (scripts/build_compiled.py makes one)"
    if MANIFEST.read_text() != manifest_text():
        return "the compiled build is stale or for another Python"
    return None


def use(package_path: list[str]) -> None:
    """Put the compiled build first on `package_path` (this package's `__path__`) when it
    may be used (see the module doc); warn once when a build exists but is stale."""
    global active
    why = _why_not()
    if why is None:
        package_path.insert(0, str(BUILD_DIR / "minisglang" / "constrained"))
        active = "compiled"
        return
    active = f"pure ({why})"
    if why.startswith("the compiled build is stale"):
        warnings.warn(
            f"minisglang: {why}: running the lazy automaton as pure Python; rebuild with "
            "`python scripts/build_compiled.py`",
            RuntimeWarning,
            stacklevel=2,
        )
