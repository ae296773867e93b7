"""scripts/rerun_model_benches.py reruns what the chapters quote from the bundled model; these
tests check its command lines and its resume flag without running any (each bench is tested
in its own file)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import rerun_model_benches  # noqa: E402


def test_every_step_runs_an_existing_script_with_flags_it_declares():
    steps = rerun_model_benches.steps("stage 99")
    names = [name for name, _ in steps]
    assert len(names) == len(set(names)) >= 15
    for name, argv in steps:
        source = (REPO / argv[0]).read_text(encoding="utf-8")
        for flag in (f for f in argv[1:] if f.startswith("--")):
            assert f'"{flag}"' in source, f"{name}: {argv[0]} does not declare {flag}"


def test_every_results_file_a_chapter_quotes_from_the_model_is_rerun():
    # the README's table of what bundling reruns, and the tables follow last
    scripts = {argv[0] for _, argv in rerun_model_benches.steps("x")}
    readme = (REPO / "training/candidates/README.md").read_text(encoding="utf-8")
    for script in (s for s in scripts if s.startswith("benchmarks/")):
        assert script in readme or Path(script).stem in readme, script
    assert rerun_model_benches.steps("x")[-1][1][0] == "scripts/requote_tables.py"


def test_the_label_heads_the_new_sections():
    argvs = [argv for _, argv in rerun_model_benches.steps("stage 99 (bundled)")]
    labels = [argv[argv.index("--label") + 1] for argv in argvs if "--label" in argv]
    assert len(labels) == 5 and all("stage 99 (bundled)" in label for label in labels)


def test_resume_from_a_step_and_refuse_an_unknown_one():
    script = [sys.executable, str(REPO / "scripts/rerun_model_benches.py"), "--label", "x", "--dry-run"]
    out = subprocess.run([*script, "--from", "bench_latency"], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[0].startswith("bench_latency:") and "bench_production" not in out
    bad = subprocess.run([*script, "--from", "bench_nothing"], capture_output=True, text=True)
    assert bad.returncode == 2 and "bench_nothing" in bad.stderr and "bench_latency" in bad.stderr
