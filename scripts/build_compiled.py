"""Compile the lazy automaton's hot modules with mypyc, from the same source files.

    .venv/bin/python scripts/build_compiled.py

Builds minisglang/constrained/compiled_build.COMPILED into build/mypyc/ (git-ignored; the
package loads it from there, see compiled_build.py) and writes its manifest last, so a
build cut short is never used. Needs a C compiler and mypy (the `test` extra). Exits 1,
saying why in one line, when it cannot build: the package then runs as pure Python.
scripts/setup.sh runs this after installing; run it again after editing a compiled module
(until then that module runs as pure Python, with a warning).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # --help, nothing else
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    os.environ["MINISGLANG_PURE"] = "1"  # this process reads the sources, never an old build
    from minisglang.constrained import compiled_build

    if shutil.which(os.environ.get("CC", "cc")) is None and shutil.which("gcc") is None:
        print("[build_compiled] no C compiler found: the lazy automaton runs as pure Python")
        return 1
    try:
        from mypyc.build import mypycify
        from setuptools import setup
    except ImportError as e:
        print(f"[build_compiled] {e}: the lazy automaton runs as pure Python")
        return 1
    build = compiled_build.BUILD_DIR
    shutil.rmtree(build, ignore_errors=True)
    files = [f"minisglang/constrained/{name}.py" for name in compiled_build.COMPILED]
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            # The mypy configuration is pyproject.toml's (the build type-checks as `mypy` does);
            # its per-module sections for modules not built here are expected, not a mistake.
            # One group, named inside the package: its shared library is then found on the
            # package's path like the modules (a default group name is a top-level module).
            extensions = mypycify(
                ["--no-warn-unused-configs", *files],
                opt_level="3",
                target_dir=str(ROOT / "build" / "mypyc-c"),
                group_name="minisglang.constrained.lazy_automaton",
            )
            setup(
                name="minisglang-compiled",
                py_modules=[],
                packages=[],
                ext_modules=extensions,
                script_args=[
                    "build_ext",
                    "--build-lib",
                    str(build),
                    "--build-temp",
                    str(ROOT / "build" / "mypyc-temp"),
                ],
            )
    except (Exception, SystemExit) as e:  # mypy's errors end in SystemExit; the compiler's in an error
        shutil.rmtree(build, ignore_errors=True)
        tail = log.getvalue().strip().splitlines()[-3:]
        print(
            f"[build_compiled] the build failed ({type(e).__name__}: {e}): the lazy automaton runs as "
            f"pure Python. Last lines:\n  " + "\n  ".join(tail)
        )
        return 1
    compiled_build.MANIFEST.write_text(compiled_build.manifest_text())
    print(f"[build_compiled] compiled {', '.join(compiled_build.COMPILED)} into {build.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
