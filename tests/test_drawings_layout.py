"""Drawings for the back row: every course figure, and `viz` of every course regex with
its default layout, fits a 1920x1080 slide with text at least 18 px high; wrapping never
tangles an alternation; the layout options are declared and checked; the radix view
boxes each token. Sizes are read from graphviz's own SVG (points, 72 to the inch; a
slide's px are 96 to the inch)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from drawing_labels import read_graph, read_literal
from hypothesis import given, settings
from hypothesis import strategies as st
from script_modules import load_script

from minisglang.cli import build_parser, main
from minisglang.constrained.regex_dfa import compile_regex
from minisglang.constrained.structural_tag import FreeText, parse_structural_tag
from minisglang.drawings import char_dfa_dot, render_dot
from minisglang.drawings.fsm import class_label
from minisglang.drawings.layout import Layout, chain_order, segments_at_seams
from minisglang.drawings.radix import MAX_TOKENS_SHOWN, radix_tokens_dot
from minisglang.drawings.structural_tag import structural_tag_dot
from minisglang.radix_cache import RadixCache

REPO = Path(__file__).resolve().parents[1]
make_figures = load_script(REPO / "scripts" / "make_figures.py")

SLIDE = (1920, 1080)
MIN_TEXT_PX = 18
PX_PER_PT = 96 / 72


def slide_size(svg: str) -> tuple[float, float, float]:
    """(width px, height px) of the drawing scaled so that its smallest text is 18 px high,
    and that smallest text's height in px before scaling."""
    w, h = (float(x) for x in re.search(r'<svg width="([\d.]+)pt" height="([\d.]+)pt"', svg).groups())
    texts = re.findall(r"<text [^>]*>", svg)
    sizes = [float(m.group(1)) for t in texts if (m := re.search(r'font-size="([\d.]+)"', t))]
    assert texts and len(sizes) == len(texts), "every text must say its size"
    text_px = min(sizes) * PX_PER_PT
    scale = MIN_TEXT_PX / text_px
    return w * PX_PER_PT * scale, h * PX_PER_PT * scale, text_px


@pytest.mark.parametrize("figure", make_figures.ALL, ids=lambda f: f.name)
def test_every_course_figure_fits_a_slide_with_readable_text(figure):
    width, height, text_px = slide_size(render_dot(figure.make()).decode("utf-8"))
    assert text_px >= MIN_TEXT_PX, f"{figure.name}: smallest text {text_px:.1f} px as drawn"
    assert width <= SLIDE[0] and height <= SLIDE[1], f"{figure.name}: {width:.0f}x{height:.0f} px at 18 px text"


# Structural tags other than chapter 07's: real triggers (Llama's '<function=' and
# '<|python_tag|>'), two triggers with a prefix in common, a one-character trigger, and
# the flags. (Two long triggers apart from their first character, such as Llama's two
# together, are two chains side by side: about 1,950 x 1,450 px, more than a slide.)
OTHER_TAGS = {
    "function=": (
        ["<function="],
        [("<function=get_weather>", "</function>"), ("<function=search>", "</function>")],
        {},
    ),
    "python_tag": (["<|python_tag|>"], [("<|python_tag|>", "<|eom_id|>")], {}),
    "shared prefix": (["<tool>", "<tools>"], [("<tool>", "</tool>"), ("<tools>[", "]</tools>")], {}),
    "one character": (["@"], [("@a(", ")"), ("@b(", ")")], {}),
    "at_least_one": (["<tool_call>"], [("<tool_call>{", "}</tool_call>")], {"at_least_one": True}),
    "stop_after_first": (["<tool_call>"], [("<tool_call>{", "}</tool_call>")], {"stop_after_first": True}),
}


def _edge_chars(label: str) -> set[str]:
    """The characters of a free-text edge: one quoted character, or a bracketed list."""
    return set(read_literal(label)) if label.startswith("'") else set(read_literal("'" + label[1:-1] + "'"))


@pytest.mark.parametrize("name", OTHER_TAGS)
def test_a_structural_tag_drawing_fits_a_slide_and_shows_every_prefix_and_fallback(name):
    """Drawn with the default layout, the tag fits a slide at 18 px; read back, the drawing
    has one state per prefix of a trigger, and from each, for each character of the
    triggers, the edge `FreeText._next` takes (those back to free text left to the
    legend); an edge into another row ends at a dashed copy of its target."""
    triggers, tags, flags = OTHER_TAGS[name]
    tag = parse_structural_tag(
        {
            "structures": [{"begin": b, "schema": {"type": "object"}, "end": e} for b, e in tags],
            "triggers": triggers,
            **flags,
        }
    )
    dot = structural_tag_dot(tag)
    width, height, text_px = slide_size(render_dot(dot).decode("utf-8"))
    assert text_px >= MIN_TEXT_PX and width <= SLIDE[0] and height <= SLIDE[1], (width, height, text_px)
    nodes, edges = read_graph(dot)
    original = {copy: re.fullmatch(r"c\d+_(\d+)", copy).group(1) for copy in nodes if copy.startswith("c")}
    for copy, state in original.items():
        assert "dashed" in nodes[copy][1] and nodes[copy][0] == nodes[state][0], copy
    label = {name: text for name, (text, attrs) in nodes.items() if name not in original}
    assert len(set(label.values())) == len(label), "each state is drawn once"
    drawn = {(label[src], label[original.get(dst, dst)]): text for src, dst, text, _ in edges}
    free = FreeText(tag.triggers)
    quoted = {prefix: f"'{prefix}'" if prefix else "free text" for prefix in free.states}
    assert set(quoted.values()) <= set(label.values())
    prefix_of = {state: prefix for prefix, state in free.states.items()}
    expected: dict[tuple[str, str], set[str]] = {}
    for prefix in free.states:
        for c in {c for t in tag.triggers for c in t}:
            target = free._next(prefix + c)
            if target != 0:  # a whole trigger, or a longest prefix
                into = f"'{target[1]}'" if isinstance(target, tuple) else quoted[prefix_of[target]]
                expected.setdefault((quoted[prefix], into), set()).add(c)
    out_of_free_text = {pair: _edge_chars(text) for pair, text in drawn.items() if pair[0] in quoted.values()}
    assert out_of_free_text == expected
    assert "each character without an edge goes back to free text" in dot


@pytest.mark.parametrize("kind", ["char", "compressed"])
@pytest.mark.parametrize("regex", make_figures.COURSE_REGEXES)
def test_viz_defaults_fit_a_slide_for_the_course_regexes(tmp_path, regex, kind):
    out = tmp_path / "drawing.svg"
    assert main(["viz", regex, "--kind", kind, "-o", str(out)]) == 0
    width, height, text_px = slide_size(out.read_text(encoding="utf-8"))
    assert text_px >= MIN_TEXT_PX and width <= SLIDE[0] and height <= SLIDE[1], (width, height, text_px)


def test_a_wrapped_chain_is_narrower_and_its_rows_start_flush_left():
    dfa = compile_regex(r'\{"name": "[a-z]+", "email": "[a-z]+@example\.com"\}')
    one_row = render_dot(char_dfa_dot(dfa, Layout(wrap_px=None))).decode()
    wrapped_dot = char_dfa_dot(dfa)
    wrapped = render_dot(wrapped_dot).decode()
    assert slide_size(one_row)[0] > SLIDE[0] >= slide_size(wrapped)[0]
    starts = re.search(r"\{ rank=same; ([^}]*)\}", wrapped_dot).group(1).split()
    assert starts[0] == f"{dfa.initial};" and len(starts) >= 2


# -- wrapping never tangles an alternation ----------------------------------------------
WORDS = st.text(alphabet="abcdefgh", min_size=1, max_size=5)
PART = st.one_of(
    WORDS,
    st.lists(WORDS, min_size=2, max_size=4, unique=True).map(lambda ws: "(" + "|".join(ws) + ")"),
    WORDS.map(lambda w: f"({w})?"),
    st.just("[0-9]+"),
)


def _drawn_edges(dot: str) -> list[tuple[str, str, str]]:
    return re.findall(r'^  (\d+) -> (c\d+_\d+|\d+) \[label="((?:[^"\\]|\\.)*)"', dot, re.M)


@settings(max_examples=60, deadline=None)
@given(parts=st.lists(PART, min_size=2, max_size=8), wrap=st.integers(200, 900))
def test_wrapping_keeps_every_alternation_in_one_row_and_every_edge_drawn(parts, wrap):
    """Rows are cut only where every edge across goes forward: so a loop, and the
    branches of an alternation (which all lead back into one join state) stay in one row,
    and each DFA edge is drawn exactly once, into its state or that state's dashed copy."""
    regex = "".join(parts)
    dfa = compile_regex(regex)
    layout = Layout(wrap_px=wrap)
    dot = char_dfa_dot(dfa, layout)
    edges = {(src, dst) for src in range(dfa.num_states) for dst in dfa.transitions[src].values()}
    drawn = _drawn_edges(dot)
    assert sorted((int(a), int(b.split("_")[-1].lstrip("c"))) for a, b, _ in drawn) == sorted(edges)
    merged = {}
    for src in range(dfa.num_states):
        for char_class, dst in dfa.transitions[src].items():
            merged[src, dst] = merged[src, dst].union(char_class) if (src, dst) in merged else char_class
    placement = layout.place(
        dfa.initial, list(merged), list(range(dfa.num_states)), {pair: class_label(c) for pair, c in merged.items()}
    )
    row = placement.row_of or {s: 0 for s in range(dfa.num_states)}
    order = chain_order(dfa.initial, sorted(edges), list(range(dfa.num_states)))
    position = {s: i for i, s in enumerate(order)}
    for src, dst in edges:
        if row[src] != row[dst]:  # across rows: forward only, never a loop's way back
            assert row[src] < row[dst] and position[src] < position[dst], (regex, src, dst)
            assert f"  {src} -> c{row[src]}_{dst} " in dot
    # inside a segment between clean seams, a row ends only where at most one edge skips
    # past the next row's first state (an optional part): never between parallel branches
    for seg in segments_at_seams(order, sorted(edges)):
        for a, b in zip(seg, seg[1:]):
            if row[a] != row[b]:
                k = position[b]
                past = {(x, y) for x, y in edges if position[x] < k < position[y]}
                assert len(past) <= 1, (regex, b, past)


def _walk(dfa, state: int, text: str) -> list[int]:
    states = [state]
    for ch in text:
        states.append(dfa.step(states[-1], ch))
    return states


def test_an_alternation_stays_in_one_row_when_wrapped_tightly():
    dfa = compile_regex(r"size: (small|medium|large), colour: (red|green|blue)!")
    layout = Layout(wrap_px=400)
    edges = [(s, d) for s in range(dfa.num_states) for d in dfa.transitions[s].values()]
    row = layout.place(dfa.initial, edges, list(range(dfa.num_states))).row_of
    assert len(set(row.values())) >= 3  # it did wrap
    for before, branches in [
        ("size: ", ["small", "medium", "large"]),
        ("size: small, colour: ", ["red", "green", "blue"]),
    ]:
        fork = _walk(dfa, dfa.initial, before)[-1]
        join = _walk(dfa, fork, branches[0])[-1]
        branch_states = {s for word in branches for s in _walk(dfa, fork, word)} - {join}
        assert {row[s] for s in branch_states} == {row[fork]}, (before, branch_states)
        # the join starts the next row, if it is not in this one: every branch then ends
        # in the same dashed copy of it
        assert row[join] in (row[fork], row[fork] + 1)


# -- the options ---------------------------------------------------------------------------
def test_layout_options_are_declared_and_checked():
    with pytest.raises(TypeError):
        Layout(wrap=10)  # an unknown option is refused, not ignored
    for bad, message in [
        ({"rankdir": "RL"}, "rankdir must be 'LR' or 'TB'"),
        ({"wrap_px": 50}, "wrap_px must be an int >= 200"),
        ({"wrap_px": "wide"}, "wrap_px must be"),
        ({"font_px": 3}, "font_px must be a number from 8 to 72"),
        ({"states_per_row": 1}, "states_per_row must be an int >= 2"),
    ]:
        with pytest.raises(ValueError, match=message):
            Layout(**bad)
    dot = char_dfa_dot(compile_regex("ab"), Layout(rankdir="TB", font_px=24))
    assert "rankdir=TB;" in dot and "node [fontsize=18];" in dot and "edge [fontsize=18];" in dot


def test_viz_takes_the_layout_options(capsys):
    args = build_parser().parse_args(["viz", "ab", "--direction", "TB", "--wrap", "none", "--font-px", "24"])
    assert (args.direction, args.wrap, args.font_px) == ("TB", "none", 24.0)
    assert main(["viz", "ab(c|d)", "--direction", "TB", "--font-px", "24"]) == 0
    out = capsys.readouterr().out
    assert "rankdir=TB;" in out and "graph [fontsize=18];" in out
    assert main(["viz", "ab", "--wrap", "wide"]) == 2
    assert "--wrap takes a width in px" in capsys.readouterr().err
    assert main(["viz", "--kind", "char"]) == 2
    assert "draws a regex: give one" in capsys.readouterr().err
    assert main(["viz", "--kind", "radix"]) == 2
    assert "needs at least one --prompt" in capsys.readouterr().err


# -- the radix view ------------------------------------------------------------------------
class _Pool:
    def free(self, slots):
        pass


class _Pieces:
    def __init__(self, pieces):
        self.pieces = pieces

    def decode(self, ids, skip_special_tokens=True):
        return "".join(self.pieces[i] for i in ids)


def test_the_radix_view_boxes_each_token_and_shows_a_branch():
    """' 7' '7' and ' 77' read the same as text: only the boxes tell them apart."""
    tok = _Pieces({1: "age:", 2: " 7", 3: "7", 4: " 77", 5: "<&>"})
    cache = RadixCache(_Pool())
    cache.insert([1, 2, 3], torch.tensor([0, 1, 2]))
    cache.insert([1, 4, 5], torch.tensor([0, 3, 4]))
    dot = radix_tokens_dot(cache, tok)
    rows = re.findall(r"<tr>((?:<td>[^<]*</td>)+)</tr>", dot)
    cells = [re.findall(r"<td>([^<]*)</td>", r) for r in rows]
    assert sorted(cells) == sorted([["root"], ["'age:'"], ["'␣7'", "'7'"], ["'␣77'", "'&lt;&amp;&gt;'"]])
    assert dot.count(" -> ") == 3 and "rankdir=TB;" in dot
    render_dot(dot)  # graphviz reads the HTML labels


def test_the_radix_view_cuts_a_long_edge():
    cache = RadixCache(_Pool())
    key = list(range(1, MAX_TOKENS_SHOWN + 4))
    cache.insert(key, torch.arange(len(key)))
    dot = radix_tokens_dot(cache)
    assert "… +3</td>" in dot and dot.count("<td>") == 1 + MAX_TOKENS_SHOWN  # root, the ids shown
