"""Start a compile worker process without re-running the user's main script.

Python's `forkserver` and `spawn` start methods prepare each child by importing the parent's
main module again (as `__mp_main__`), so that functions defined there can be unpickled.
Our workers run functions of this package only, and a plain script such as

    engine = minisglang.Engine(stage="s3")          # no `if __name__ == "__main__":`

would, re-run in each worker, load a second model there and die trying to start workers of
its own. So the workers are started with the main script hidden from that preparation:
the child then has nothing of the script's to import, and the script needs no guard.
"""

from __future__ import annotations

import sys
import threading
from multiprocessing.process import BaseProcess

# Two threads starting workers at once must not see each other's hidden main module.
_LOCK = threading.Lock()


def start_worker(process: BaseProcess) -> None:
    """`process.start()`, with the main module's `__file__` and `__spec__` (how the child
    would find the script: see multiprocessing.spawn.get_preparation_data) absent for the
    moment of the start, and put back after it."""
    main = sys.modules.get("__main__")
    with _LOCK:
        saved = {key: main.__dict__[key] for key in ("__file__", "__spec__") if main and key in main.__dict__}
        if main is not None:
            main.__dict__.pop("__file__", None)
            main.__spec__ = None  # the attribute must exist; None means "not imported by name"
        try:
            process.start()
        finally:
            if main is not None:
                main.__dict__.update(saved)
