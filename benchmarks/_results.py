"""The one way benchmarks publish: print the table, then write it where the chapters read it."""
from pathlib import Path


def write_results(text: str, path: Path) -> None:
    print(text)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
