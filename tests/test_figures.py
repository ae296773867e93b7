"""The chapters' figures are up to date: each SVG in chapters/figures was made by
scripts/make_figures.py from the DOT text the code draws today (its stamp is the DOT's
SHA-256), and every figure a chapter embeds is there."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("make_figures", REPO / "scripts" / "make_figures.py")
make_figures = importlib.util.module_from_spec(_spec)
sys.modules["make_figures"] = make_figures   # dataclasses look their module up there
_spec.loader.exec_module(make_figures)


@pytest.mark.parametrize("figure", [f for f in make_figures.ALL if not f.needs_model], ids=lambda f: f.name)
def test_figure_matches_the_code_that_draws_it(figure):
    assert make_figures.stale(figure) is None, "run: python scripts/make_figures.py"


def test_every_svg_figure_comes_from_the_script_and_every_embedded_figure_exists():
    names = {f.name for f in make_figures.ALL}
    for svg in make_figures.FIGURES.glob("*.svg"):
        assert svg.stem in names, f"{svg.name} is not made by scripts/make_figures.py"
        assert make_figures.STAMP.search(svg.read_text(encoding="utf-8")), f"{svg.name} has no stamp"
    for chapter in (REPO / "chapters").glob("*.md"):
        for ref in re.findall(r"\]\((figures/[^)]+)\)", chapter.read_text(encoding="utf-8")):
            assert (REPO / "chapters" / ref).exists(), f"{chapter.name} embeds {ref}, which is missing"


def test_a_changed_drawing_is_reported_stale(tmp_path):
    figure = next(f for f in make_figures.ALL if f.name == "01-date-char-dfa")
    (tmp_path / "01-date-char-dfa.svg").write_text(make_figures.stamped_svg(figure.make()))
    assert make_figures.stale(figure, tmp_path) is None
    changed = make_figures.Figure(figure.name, lambda: figure.make().replace("regex:", "Regex:"))
    assert "no longer matches" in make_figures.stale(changed, tmp_path)
    assert "missing" in make_figures.stale(make_figures.Figure("nope", figure.make), tmp_path)
