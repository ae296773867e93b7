"""The compressed FSM drawing: DOT checked as text, against the DFA and re.fullmatch."""

from __future__ import annotations

import itertools
import re

import pytest
from drawing_labels import label_matches, read_literal
from hypothesis import given, settings
from hypothesis import strategies as st

from minisglang.constrained.jump_forward import JumpForwardMap
from minisglang.constrained.regex_dfa import ByteDFA, compile_regex
from minisglang.drawings import Drawing, char_dfa_dot
from minisglang.drawings.compressed import compressed_fsm_dot

EDGE = re.compile(r'^  (\d+) -> (\d+) \[label="((?:[^"\\]|\\.)*)"(, style=bold, penwidth=2)?\];$', re.M)
NODE = re.compile(r'^  (\d+) \[shape=(circle|doublecircle), label="\d+"\];$', re.M)


def build(regex):
    dfa = compile_regex(regex)
    return dfa, JumpForwardMap.build(dfa, ByteDFA.from_char_dfa(dfa))


def parse(dot):
    """(nodes {id: shape}, edges [(src, dst, label text with DOT escapes undone, bold)])."""
    nodes = {int(n): shape for n, shape in NODE.findall(dot)}
    edges = [(int(a), int(b), re.sub(r"\\(.)", r"\1", label), bool(bold)) for a, b, label, bold in EDGE.findall(dot)]
    return nodes, edges


def accepts(nodes, edges, initial, text):
    """Run the drawn machine: a bold edge reads its whole string, another edge one character
    of its class (the label is regex syntax). Oracle-free: only the drawing is used."""
    state, i = initial, 0
    while i < len(text):
        for src, dst, label, bold in edges:
            if src != state:
                continue
            if bold and text.startswith(read_literal(label), i):
                state, i = dst, i + len(read_literal(label))
                break
            if not bold and label_matches(label, text[i]):
                state, i = dst, i + 1
                break
        else:
            return False
    return nodes[state] == "doublecircle"


def test_json_object_with_fixed_keys_draws_its_chains_bold():
    regex = r'\{"name": "[a-z]+", "age": [0-9]+\}'
    dfa, jm = build(regex)
    dot = compressed_fsm_dot(dfa, jm)
    nodes, edges = parse(dot)
    assert dot.startswith("digraph compressed_fsm {") and dot.rstrip().endswith("}")
    assert "__start -> 0;" in dot
    bold = {(a, read_literal(label), b) for a, b, label, is_bold in edges if is_bold}
    after_name = dfa.walk(0, '{"name": "li"')
    assert bold == {
        (0, '{"name": "', dfa.walk(0, '{"name": "')),
        (after_name, ', "age": ', dfa.walk(after_name, ', "age": ')),
    }
    # the 26 letters are several interegular classes; drawn as one merged edge, as char_dfa_dot does
    inside = dfa.walk(0, '{"name": "a')
    assert (inside, inside, "[a-z]", False) in edges
    assert len(nodes) < dfa.num_states
    assert f"(compressed: {len(nodes)} of {dfa.num_states} states)" in dot
    assert {n for n, shape in nodes.items() if shape == "doublecircle"} == set(dfa.finals)


def test_nothing_to_compress_draws_the_same_machine_as_char_dfa_dot_1084():
    dfa, jm = build(r"[-+]?[0-9]+[ ]*")  # #1084: the final state loops, so nothing jumps
    nodes, edges = parse(compressed_fsm_dot(dfa, jm))
    plain_nodes, plain_edges = parse(char_dfa_dot(dfa))
    assert not any(bold for *_, bold in edges)
    assert nodes == plain_nodes and sorted(edges) == sorted(plain_edges)


def test_a_fixed_string_is_one_bold_edge():
    dfa, jm = build("hello world")
    nodes, edges = parse(compressed_fsm_dot(dfa, jm))
    assert nodes == {0: "circle", dfa.walk(0, "hello world"): "doublecircle"}
    assert edges == [(0, dfa.walk(0, "hello world"), "'hello\u2423world'", True)]  # the space shown as ␣


def test_quotes_backslashes_and_chinese_survive_escaping():
    regex = r'"a\\b" (x|y)我喜欢(编程|摄影)。'
    dfa, jm = build(regex)
    nodes, edges = parse(compressed_fsm_dot(dfa, jm))
    chains = sorted(read_literal(label) for *_, label, bold in edges if bold)
    assert chains == ['"a\\b" ', "影。", "我喜欢", "程。"]  # 程 and 影 both lead to one state: 。
    for text in ['"a\\b" x我喜欢编程。', '"a\\b" y我喜欢摄影。']:
        assert accepts(nodes, edges, 0, text)
    assert not accepts(nodes, edges, 0, '"a\\b" x我喜欢编程')


PARTS = ["ab", "a", "b", "(a|b)", "c?", "x", "中", "[0-9]", "b+", "(ab|c)*", "[^a]", '"']


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(PARTS), min_size=1, max_size=5), st.data())
def test_the_drawn_machine_accepts_exactly_what_the_regex_matches(parts, data):
    """Oracle re.fullmatch: every string up to 4 characters over a small alphabet, plus
    longer matching strings drawn by hypothesis from the regex itself."""
    regex = "".join(parts)
    dfa, jm = build(regex)
    nodes, edges = parse(compressed_fsm_dot(dfa, jm))
    for a, b, label, bold in edges:  # chains are exactly the forced strings of jump_forward
        if bold:
            assert jm.jump_forward(a) == (read_literal(label).encode(), b)
    alphabet = sorted(set('abcx中0"z'))
    for n in range(5):
        for chars in itertools.product(alphabet, repeat=n):
            text = "".join(chars)
            assert accepts(nodes, edges, dfa.initial, text) == bool(re.fullmatch(regex, text)), (regex, text)
    for _ in range(5):
        assert accepts(nodes, edges, dfa.initial, data.draw(st.from_regex(regex, fullmatch=True)))


def test_a_jump_map_from_another_regex_is_refused():
    dfa, _ = build(r"ab(c|d)")
    _, other = build(r"xy(c|d)")
    with pytest.raises(ValueError, match=r"jump_map was not built from this DFA \(regex 'ab\(c\|d\)'\)"):
        compressed_fsm_dot(dfa, other)


def test_renders_with_graphviz():
    dfa, jm = build(r'\{"city": "(Paris|Rome)"\}')
    svg = Drawing(compressed_fsm_dot(dfa, jm))._repr_svg_()
    assert "<svg" in svg and "&#39;, &quot;" not in svg and "{&quot;city&quot;: &quot;" in svg
