"""FSM drawings: DOT text checked as text, plus one real render through graphviz."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

import pytest

from minisglang.constrained.regex_dfa import ByteDFA, compile_regex
from minisglang.constrained.token_index import LazyTokenIndex, build_index_fast
from minisglang.drawings import Drawing, GraphvizNotFoundError, char_dfa_dot, dot_escape, render_dot, token_fsm_dot
from minisglang.drawings import render as render_module

# (a wrapped drawing's edge into a later row ends at a dashed copy, c<row>_<state>)
EDGE = re.compile(r'^  (\d+) -> (?:c\d+_)?(\d+) \[label="((?:[^"\\]|\\.)*)"\];$', re.M)
NODE = re.compile(r"^  (\d+) \[shape=(circle|doublecircle), label=\"\d+\"\];$", re.M)


def parse(dot: str):
    """(nodes {id: shape}, edges [(src, dst, label as DOT source)]) of our DOT output."""
    nodes = {int(n): shape for n, shape in NODE.findall(dot)}
    edges = [(int(a), int(b), label) for a, b, label in EDGE.findall(dot)]
    return nodes, edges


def test_char_dfa_dot_has_start_arrow_states_and_merged_class_labels():
    dfa = compile_regex(r"[a-zA-Z_][a-zA-Z_0-9]*")
    dot = char_dfa_dot(dfa)
    nodes, edges = parse(dot)
    assert dot.startswith("digraph char_dfa {") and dot.rstrip().endswith("}")
    assert "__start -> 0;" in dot and "__start [shape=point" in dot
    assert nodes == {0: "circle", 1: "doublecircle"}
    # state 1 loops on two interegular classes ([0-9] and [A-Z_a-z]): drawn as ONE edge
    assert sorted(edges) == [(0, 1, "[A-Z_a-z]"), (1, 1, "[0-9A-Z_a-z]")]


def test_char_dfa_dot_counts_match_the_dfa():
    dfa = compile_regex(r"((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])")
    nodes, edges = parse(char_dfa_dot(dfa))
    assert len(nodes) == dfa.num_states
    assert {n for n, shape in nodes.items() if shape == "doublecircle"} == set(dfa.finals)
    pairs = {(s, t) for s, row in dfa.transitions.items() for t in row.values()}
    assert len(edges) == len(pairs) and {(a, b) for a, b, _ in edges} == pairs


def test_char_dfa_dot_escapes_quotes_and_backslashes():
    dot = char_dfa_dot(compile_regex(r'"([^"\\]|\\")*"'))
    _, edges = parse(dot)
    labels = {label for _, _, label in edges}
    assert "'\\\"'" in labels  # the character " is the literal '"', its quote written \" inside a DOT string
    assert '[^\\"\\\\\\\\]' in labels  # [^"\\] (a regex class) with both characters escaped
    assert 'label="regex: \\"([^\\"\\\\\\\\]|\\\\\\\\\\")*\\""' in dot


@dataclass
class FakeTokenizer:
    token_bytes: list


VOCAB = [b'"', b"a", b"ab", b'"a', b"b", b"\\", b'a"', "中".encode()[:1], "中".encode()[1:], b"abab", b"ba", None]
EOS = 11


def test_token_fsm_dot_groups_tokens_per_edge_and_caps_them():
    index = build_index_fast(ByteDFA.from_char_dfa(compile_regex('"[ab中]*"')), VOCAB, EOS, progress=False)
    dot = token_fsm_dot(index, FakeTokenizer(VOCAB), max_tokens_per_edge=2)
    nodes, edges = parse(dot)
    assert set(nodes) == set(index.state_to_tokens)
    assert {n for n, s in nodes.items() if s == "doublecircle"} == {
        s for s in index.state_to_tokens if index.is_final(s)
    }
    grouped = {}
    for src, tokens in index.state_to_tokens.items():
        for token_id, dst in tokens.items():
            if token_id != EOS:
                grouped.setdefault((src, dst), []).append(token_id)
    assert {(a, b) for a, b, _ in edges} == set(grouped)
    inside = index.next_state(0, 0)  # after the opening quote
    loop = next(label for a, b, label in edges if a == b == inside)
    # a, ab, b, abab, ba loop inside the string: two shown (lowest ids), then the count
    assert loop == "'a'\\n'ab'\\n… +3 more"
    assert "'\\\"'" in dot  # the token " shown as '"' with the quote escaped for DOT
    assert "b'\\\\xe4'" in dot  # half a character is shown as bytes
    assert "EOS" not in dot.replace("(EOS not drawn)", "") and str(EOS) not in [label for *_, label in edges]


def test_token_fsm_dot_caps_the_number_of_edges_and_draws_lazy_indexes():
    lazy = LazyTokenIndex(ByteDFA.from_char_dfa(compile_regex('"[ab]*"')), VOCAB, EOS)
    inside = lazy.next_state(0, 0)
    lazy.allowed_token_ids(inside)  # visited: 0 and the inside of the string
    dot = token_fsm_dot(lazy, FakeTokenizer(VOCAB), max_edges=2)
    nodes, edges = parse(dot)
    pairs = {(s, d) for s in (0, inside) for t, d in lazy.state_to_tokens[s].items() if t != EOS}
    assert len(pairs) == 3  # start -> inside, inside -> inside, inside -> after the closing quote
    assert [(a, b) for a, b, _ in edges] == sorted(pairs)[:2]
    assert '__more [shape=note, label="… +1 more edges"];' in dot
    assert set(nodes) == {s for pair in pairs for s in pair}  # unvisited destinations drawn too
    assert nodes[lazy.next_state(inside, 0)] == "doublecircle"


def test_dot_escape():
    assert dot_escape('a"b\\c') == 'a\\"b\\\\c'


def test_render_to_svg_and_save(tmp_path):
    dot = char_dfa_dot(compile_regex(r'[^"\\]{0,2}"(0|[1-9][0-9]*)'))
    svg = Drawing(dot)._repr_svg_()
    assert "<svg" in svg and "[^&quot;\\\\]" in svg  # the label survived escaping
    assert Drawing(dot).source == dot
    out = Drawing(dot).save(tmp_path / "dfa.png")
    assert out.read_bytes().startswith(b"\x89PNG")
    assert Drawing(dot).save(tmp_path / "dfa.SVG").read_text().lstrip().startswith("<?xml")
    with pytest.raises(ValueError, match=r"cannot save a drawing as 'dfa\.gif': use one of the suffixes"):
        Drawing(dot).save(tmp_path / "dfa.gif")


def test_missing_graphviz_names_the_install_command(monkeypatch):
    monkeypatch.setattr(render_module.shutil, "which", lambda name: None)
    with pytest.raises(GraphvizNotFoundError, match="apt-get install graphviz"):
        Drawing("digraph { a }")._repr_svg_()


def test_dot_errors_are_reported():
    with pytest.raises(ValueError, match="graphviz dot failed"):
        render_dot("digraph { -> }")
    # sanity: the same program renders valid text
    assert subprocess.run(["dot", "-V"], capture_output=True).returncode == 0
