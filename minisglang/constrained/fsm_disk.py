"""The on-disk FSM cache (stage s3, SGLang #63): a restart does not recompile.

One `.npz` file per (regex, tokenizer fingerprint, facts such as the rows' width), holding
the flat arrays of constrained/fsm_arrays.py and a JSON header with the key's parts and a
checksum. Files are written atomically (a temporary file, then a rename); a corrupt,
partial or foreign file is ignored and rebuilt, never trusted.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import stat
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

from .fsm_arrays import Arrays, checksum

DISK_FORMAT = 4  # 2: int32 arrays; 3: plus the packed rows and their width; 4: plus the jump map


@functools.cache
def compiler_fingerprint() -> str:
    """sha256 over the sources of the regex compiler (this package's modules) and the version
    of interegular, which it reads regexes with: a fact of every file. DISK_FORMAT names the
    arrays' layout, not what the compiler makes of a regex; a directory kept across an
    upgrade served the FSMs of the older version's reading (`[[:alpha:]]` as the characters
    it spells and a `]`, which the newer one refuses by name) where a fresh process compiles
    the newer one's."""
    h = hashlib.sha256()
    for source in sorted(Path(__file__).parent.glob("*.py")):
        h.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    try:
        h.update(importlib.metadata.version("interegular").encode())
    except importlib.metadata.PackageNotFoundError:  # (the compiler then fails on its own)
        pass
    return h.hexdigest()


class FSMDiskCache:
    """Compiled FSM arrays in `directory`, by regex, for one vocabulary (`fingerprint`)."""

    def __init__(self, directory: str | Path, fingerprint: str, meta: dict[str, Any] | None = None):
        self.directory = Path(directory)
        self.fingerprint = fingerprint
        # More facts a file must match: the compiler's code, the rows' width, the jump map.
        self.meta = {"compiler": compiler_fingerprint(), **(meta or {})}
        self.hits = 0
        self.lock = threading.Lock()

    def path(self, regex: str) -> Path:
        key = hashlib.sha256(json.dumps([regex, self.fingerprint, self.meta], sort_keys=True).encode())
        return self.directory / f"fsm-{key.hexdigest()}.npz"

    def save(self, regex: str, arrays: Arrays) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        meta = {
            "format": DISK_FORMAT,
            "regex": regex,
            "fingerprint": self.fingerprint,
            "checksum": checksum(arrays),
            **self.meta,
        }
        # Write to a temporary file in the same directory, then rename: readers see either
        # no file or the whole file, never half of one.
        fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, meta=np.array(json.dumps(meta)), **arrays)
            os.replace(tmp, self.path(regex))
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def load(self, regex: str) -> Arrays | None:
        """The cached arrays, or None when absent, corrupt, or for another regex/tokenizer."""
        try:
            # Non-blocking, and only a regular file: a FIFO planted under the name (by anyone
            # who can write the shared directory) blocked the compile's read forever.
            fd = os.open(self.path(regex), os.O_RDONLY | os.O_NONBLOCK)
        except OSError:  # (absent, or not readable)
            return None
        try:
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    return None
                with np.load(f, allow_pickle=False) as data:
                    meta = json.loads(str(data["meta"]))
                    arrays = {k: data[k] for k in data.files if k != "meta"}
        except Exception:  # corrupt or truncated: rebuild rather than trust it
            return None
        if (
            meta.get("format") != DISK_FORMAT
            or meta.get("regex") != regex
            or meta.get("fingerprint") != self.fingerprint
            or meta.get("checksum") != checksum(arrays)
            or any(meta.get(k) != v for k, v in self.meta.items())
        ):
            return None
        with self.lock:
            self.hits += 1
        return arrays
