"""scripts/judge_candidate.py runs every measure a candidate model is weighed by; these tests
check its command lines without a model (each measure itself is tested in its own file)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import judge_candidate  # noqa: E402


def test_every_measure_runs_an_existing_script_with_flags_it_declares():
    cmds = judge_candidate.commands("some/model")
    assert len(cmds) == len(judge_candidate.MEASURES) >= 7
    for label, argv, keep in cmds:
        assert argv[0] == sys.executable and "some/model" in argv, label
        re.compile(keep)
        if argv[1] == "-m":  # the package's own command line
            source = (REPO / (argv[2].replace(".", "/") + ".py")).read_text(encoding="utf-8")
            flags = argv[4:]
        else:
            source = Path(REPO / argv[1]).read_text(encoding="utf-8")
            flags = argv[2:]
        for flag in (f for f in flags if f.startswith("--")):
            assert f'"{flag}"' in source, f"{label}: {argv[1]} does not declare {flag}"


def test_the_outsiders_and_the_production_texts_are_among_the_measures():
    labels = [label for label, _, _ in judge_candidate.MEASURES]
    assert any("second set" in label for label in labels) and any("third set" in label for label in labels)
    assert any("bench_production" in label for label in labels)
