"""The one way benchmarks publish: print the table, then write it where the chapters read it,
ending with one line that says where and when it was measured."""

import datetime
import hashlib
import os
import platform
from pathlib import Path


def machine_line(*details: str) -> str:
    """'Machine: ...; measured <date>.': platform, CPUs, load, torch, Python, then `details`
    (a script's own facts: library versions, the load before its runs, its duration)."""
    import torch  # every benchmark has it loaded already; the line names its version and threads

    load = f"load average {os.getloadavg()[0]:.1f} at the end" if hasattr(os, "getloadavg") else None
    facts = [
        platform.platform(),
        f"{os.cpu_count()} CPUs (shared with other jobs)",
        load,
        f"torch {torch.__version__} with {torch.get_num_threads()} thread(s)",
        f"Python {platform.python_version()}",
        *details,
    ]
    return f"Machine: {', '.join(f for f in facts if f)}; measured {datetime.date.today().isoformat()}."


def model_checksum(model_path: str | Path) -> str:
    """The first 16 hex digits of the sha256 of a model's weights (its *.safetensors files,
    in name order): which checkpoint a results file measured."""
    digest = hashlib.sha256()
    for f in sorted(Path(model_path).glob("*.safetensors")):
        digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


def write_results(text: str, path: Path) -> None:
    print(text)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")


def write_section(text: str, path: Path, heading: str) -> None:
    """Like `write_results`, for a script that owns one section of a shared results file:
    replace the section that starts with `heading` (up to the next '## ' heading), or add it
    at the end."""
    print(text)
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    start = old.find(heading)
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + text.rstrip("\n") + "\n"
    else:
        end = old.find("\n## ", start + len(heading))
        new = old[:start] + text.rstrip("\n") + "\n" + (old[end:] if end >= 0 else "")
    path.write_text(new, encoding="utf-8")
    print(f"wrote {path}")
