"""benchmarks/device_check.sh runs end to end: on this CPU with --smoke sizes (its numbers
mean nothing there; the test checks that every check ran and printed its row, not timings)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "device_check.sh"


def run(*args: str, **env_overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, **env_overrides}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_smoke_run_prints_one_table_with_every_check():
    results = ROOT / "benchmarks" / "results" / "device_check.md"
    before = results.read_text(encoding="utf-8") if results.exists() else None
    done = run("--smoke", "--device", "cpu")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    start = lines.index("| check | measured | target | verdict |")
    rows = [line for line in lines[start + 2 :] if line.startswith("|")]
    assert len(rows) == 5, rows
    jump, versus, mask, speculative, overlap = rows
    assert re.search(
        r"s4 / s3 .*\| \d+\.\d\dx \(s3 [\d.]+/s, s4 [\d.]+/s; valid \d/2, \d/2\) \| >= 1\.5x \| (met|\*\*missed\*\*) \|$",
        jump,
    )
    assert re.search(r"transformers \+ outlines-core .*\| \d+\.\d\dx .*\| >= 3x \| (met|\*\*missed\*\*) \|$", versus)
    assert re.search(r"mask per decode step .*\| \d+\.\d\d ms \(\d+% of an s3 decode step", mask)
    assert re.search(r"speculative: .*\| \d+\.\d\dx requests/s; .* \d+\.\d\dx; same text as s6 2/2 \|", speculative)
    assert re.search(r"overlap: .*\| \d+% by the trace, -?\d+% by the clock .*\| >= 70% \(trace\) \|", overlap)
    assert "device CPU" in done.stdout
    # A smoke run's numbers mean nothing: it leaves the results file alone.
    assert (results.read_text(encoding="utf-8") if results.exists() else None) == before


def test_cuda_without_a_device_is_refused_by_name(monkeypatch):
    """In this process, with torch told it sees no GPU (the script's own run is the smoke test's:
    a fresh interpreter here spent ~20 s importing what the refusal does not need)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import device_check
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="torch sees no CUDA device"):
        device_check.main(["--device", "cuda"])
