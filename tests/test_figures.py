"""The chapters' figures are up to date: each SVG in chapters/figures was made by
scripts/make_figures.py from the DOT text the code draws today (its stamp is the DOT's
SHA-256), and every figure a chapter embeds is there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from drawing_labels import read_graph
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
    """Chapter 07's drawing, read back as states and edges: the free-text states are the
    trigger's prefixes with their fallbacks (after 'aa', another 'a' stays at 'aa'; the
    edges back to free text are left to the legend); the start enters a tag directly
    under at_least_one; stop_after_first leads a tag to a state of EOS only."""
    from minisglang.constrained.structural_tag import parse_structural_tag
    from minisglang.drawings.structural_tag import structural_tag_dot

    tag = parse_structural_tag(
        {
            "structures": [{"begin": "aab{", "schema": {"type": "object"}, "end": "}."}],
            "triggers": ["aab"],
            "at_least_one": at_least_one,
            "stop_after_first": stop_after_first,
        }
    )
    dot = structural_tag_dot(tag, names=["f's parameters"])
    nodes, edges = read_graph(dot)
    label = {name: text for name, (text, _) in nodes.items()}
    drawn = {(label[src], label[dst]): (text, attrs) for src, dst, text, attrs in edges}
    free_drawn = not (at_least_one and stop_after_first)
    assert ("'aa'" in label.values()) == free_drawn
    assert ("each character without an edge goes back to free text" in dot) == free_drawn
    if free_drawn:
        assert drawn["'aa'", "'aa'"][0] == "'a'" and drawn["'aa'", "'aab'"][0] == "'b'"
        assert drawn["'a'", "'aa'"][0] == "'a'" and ("'a'", "free text") not in drawn
    assert (drawn.get(("", "start")) is not None) == at_least_one
    assert (drawn.get(("start", "'aab'"), ("",))[0] == "'aab'") == at_least_one
    assert (("", "free text") in drawn) == (not at_least_one)
    assert ("only EOS" in label.values()) == stop_after_first
    after = "only EOS" if stop_after_first else "free text"
    body = "JSON value\nf's parameters"
    assert drawn["'aab'", body][0] == "'{'" and "style=bold" in drawn["'aab'", body][1]
    assert drawn[body, after][0] == "'}.'" and "style=bold" in drawn[body, after][1]
