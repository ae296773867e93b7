"""The chapters' figures are up to date: each SVG in chapters/figures was made by
scripts/make_figures.py from the DOT text the code draws today (its stamp is the DOT's
SHA-256), and every figure a chapter embeds is there."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from script_modules import load_script

REPO = Path(__file__).resolve().parents[1]
make_figures = load_script(REPO / "scripts" / "make_figures.py")


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


@pytest.mark.parametrize("at_least_one", [False, True])
@pytest.mark.parametrize("stop_after_first", [False, True])
def test_the_structural_tag_drawing_follows_the_flags_and_the_trigger_automaton(at_least_one, stop_after_first):
    """Chapter 07's drawing, read as text: the free-text states are the trigger's prefixes
    with their fallbacks (after 'aa', another 'a' stays at 'aa'); the start arrow enters a
    tag directly under at_least_one; stop_after_first leads a tag to a state of EOS only."""
    from minisglang.constrained.structural_tag import parse_structural_tag
    from minisglang.drawings.structural_tag import structural_tag_dot

    tag = parse_structural_tag({"structures": [{"begin": "aab{", "schema": {"type": "object"}, "end": "}."}],
                                "triggers": ["aab"], "at_least_one": at_least_one,
                                "stop_after_first": stop_after_first})
    dot = structural_tag_dot(tag, names=["f's parameters"])
    free_drawn = not (at_least_one and stop_after_first)
    assert ('f2 [shape=doublecircle, label="\'aa\'"];' in dot) == free_drawn
    if free_drawn:
        assert "f2 -> f2 [label=\"'a'\"];" in dot and "f2 -> t_0 [label=\"'b'\"];" in dot
        assert "f1 -> f2 [label=\"'a'\"];" in dot and 'f1 -> f0 [label="other", style=dashed];' in dot
    assert ("__start -> t_0" in dot) == at_least_one and ("__start -> f0;" in dot) == (not at_least_one)
    assert ('done [shape=doublecircle, label="only EOS"];' in dot) == stop_after_first
    after = "done" if stop_after_first else "f0"
    assert "t_0 -> body_0 [label=\"'{'\", style=bold" in dot
    assert f"body_0 -> {after} [label=\"'}}.'\", style=bold" in dot
    assert "JSON value, f's parameters" in dot
