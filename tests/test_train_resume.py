"""scripts/train_tiny_model.py trains in sittings: stopped after a checkpoint and resumed,
it takes exactly the steps (same batches, same losses, same weights) of an uninterrupted run."""
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
TINY = ["--examples", "200", "--steps", "4", "--checkpoint-every", "2", "--tokens-per-batch", "256",
        "--hidden", "32", "--intermediate", "64", "--layers", "2", "--vocab-size", "600", "--threads", "1"]


def train(tmp: Path, name: str, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(REPO / "scripts" / "train_tiny_model.py"), "--out", str(tmp / name / "out"),
           "--state", str(tmp / name / "state"), *TINY, *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)


def test_stop_and_resume_equals_one_run(tmp_path):
    train(tmp_path, "whole", "--stop-after", "4")
    first = train(tmp_path, "split", "--stop-after", "2")
    assert "stopped after step 2" in first.stdout
    assert torch.load(tmp_path / "split" / "state" / "checkpoint.pt", weights_only=False)["step"] == 2
    train(tmp_path, "split", "--resume", "--stop-after", "4")
    whole = torch.load(tmp_path / "whole" / "state" / "checkpoint.pt", weights_only=False)
    split = torch.load(tmp_path / "split" / "state" / "checkpoint.pt", weights_only=False)
    assert split["step"] == whole["step"] == 4
    assert split["losses"] == whole["losses"]
    for key, value in whole["model"].items():
        assert torch.equal(split["model"][key], value), key
    assert (tmp_path / "split" / "state" / "step-2" / "model.safetensors").exists()


def test_resume_refuses_another_recipe(tmp_path):
    train(tmp_path, "a", "--stop-after", "2")
    cmd = [sys.executable, str(REPO / "scripts" / "train_tiny_model.py"), "--out", str(tmp_path / "a" / "out"),
           "--state", str(tmp_path / "a" / "state"), *TINY, "--lr", "0.001", "--resume"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0 and "was made by another recipe" in proc.stderr
