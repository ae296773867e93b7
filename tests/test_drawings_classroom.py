"""Drawings for a classroom: whitespace visible, single characters unescaped, a title on
every drawing, one quoting rule for literal text, and long chains wrapped into rows that
fit a slide. Checked on the DOT text (the labels read back with tests/drawing_labels.py)."""
from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
import torch

from minisglang.constrained.jump_forward import JumpForwardMap
from minisglang.constrained.regex_dfa import ByteDFA, compile_regex
from minisglang.constrained.token_index import build_index_fast
from minisglang.drawings import char_dfa_dot, render_dot, token_fsm_dot
from minisglang.drawings.compressed import compressed_fsm_dot
from minisglang.drawings.radix import radix_tree_dot
from minisglang.drawings.render import Layout, show_text
from minisglang.radix_cache import RadixCache

from drawing_labels import label_matches, read_literal

EDGE = re.compile(r'^  (\d+) -> (\d+) \[label="((?:[^"\\]|\\.)*)"(.*)\];$', re.M)
TITLE = re.compile(r'label="((?:[^"\\]|\\.)*)"; ?\n?\s*labelloc=t;')


def edges(dot: str) -> list[tuple[int, int, str, str]]:
    """(src, dst, label with DOT's escapes undone, other attributes)."""
    return [(int(a), int(b), re.sub(r"\\(.)", r"\1", label), rest) for a, b, label, rest in EDGE.findall(dot)]


@dataclass
class Vocab:
    token_bytes: list


CHAIN = r'\{"name": "[a-z]+", "email": "[a-z]+@example\.com"\}'   # 40 states, mostly one chain


def test_whitespace_is_visible_and_single_characters_are_not_escaped():
    dfa = compile_regex('\\{"a":[ ,]\t\n\\.x y\\}')
    labels = {label for *_, label, _ in edges(char_dfa_dot(dfa))}
    assert {"'{'", "'\"'", "'a'", "':'", "'\\t'", "'\\n'", "'.'", "'x'", "'\u2423'", "'y'", "'}'", "[\u2423,]"} == labels
    assert not any(label.startswith("\\") or " " in label for label in labels)   # no `\{`, no bare space


def test_token_labels_show_spaces_and_newlines():
    vocab = [b" the", b"\n", b"a b", b"'", "中".encode()[:1], None]
    index = build_index_fast(ByteDFA.from_char_dfa(compile_regex("( the|\n|a b|')+")), vocab, 5, progress=False)
    labels = "\n".join(label for *_, label, _ in edges(token_fsm_dot(index, Vocab(vocab))))
    assert "'\u2423the'" in labels and "'\\n'" in labels and "'a\u2423b'" in labels and "'\\''" in labels


@pytest.mark.parametrize("text", ["", " ", "a b", "'q'", "back\\slash", "tab\tnew\nline\r", "中文\x00\u200b"])
def test_show_text_reads_back_exactly(text):
    shown = show_text(text)
    assert shown.startswith("'") and shown.endswith("'") and " " not in shown and "\n" not in shown
    assert read_literal(shown) == text


def test_every_label_is_a_quoted_literal_or_a_bare_class():
    """One quoting rule across the drawings: quotes mean exactly this text; a class is bare."""
    regex = r'\{"k": "[^"]{0,3}", "n": (0|[1-9][0-9]*)\} ?'
    dfa = compile_regex(regex)
    jm = JumpForwardMap.build(dfa, ByteDFA.from_char_dfa(dfa))
    for dot in (char_dfa_dot(dfa), compressed_fsm_dot(dfa, jm)):
        for _, _, label, _ in edges(dot):
            assert label.startswith("'") or label.startswith("["), label
            if label.startswith("'"):
                read_literal(label)   # well formed
    # the drawn character edges take exactly the characters the DFA takes
    for src, dst, label, _ in edges(char_dfa_dot(dfa)):
        for ch in ' "0aZ9{}:,k\n':
            assert label_matches(label, ch) == (dfa.step(src, ch) == dst), (src, dst, label, ch)


def test_every_drawing_has_a_title():
    dfa = compile_regex(r"(yes|no)")
    index = build_index_fast(ByteDFA.from_char_dfa(dfa), [b"y", b"es", b"no", None], 3, progress=False)
    cache = RadixCache(_Pool())
    cache.insert([1, 2, 3], torch.tensor([0, 1, 2]))
    drawings = {
        "char": char_dfa_dot(dfa),
        "token": token_fsm_dot(index, Vocab([b"y", b"es", b"no", None])),
        "compressed": compressed_fsm_dot(dfa, JumpForwardMap.build(dfa, ByteDFA.from_char_dfa(dfa))),
        "radix": radix_tree_dot(cache),
    }
    titles = {name: TITLE.search(dot).group(1) for name, dot in drawings.items()}
    assert titles == {"char": "regex: (yes|no)", "token": "token FSM: 3 states, 3 edges (EOS not drawn)",
                      "compressed": "regex: (yes|no)  (compressed: 4 of 5 states)",
                      "radix": "radix tree: 2 nodes, 3 cached tokens"}
    assert 'label="my title"' in token_fsm_dot(index, Vocab([b"y", b"es", b"no", None]), title="my title")


class _Pool:
    def free(self, slots):
        pass


def test_a_40_state_chain_wraps_into_rows():
    dfa = compile_regex(CHAIN)
    assert dfa.num_states == 40
    dot = char_dfa_dot(dfa, Layout(states_per_row=10))
    rows = [[int(s) for s in re.findall(r"(\d+);", row)] for row in re.findall(r"\{ rank=same; ([^}]*)\}", dot)]
    assert [len(r) for r in rows] == [10, 10, 10, 10]
    assert sorted(s for r in rows for s in r) == list(range(40))
    assert rows[0][0] == dfa.initial and "rankdir=TB;" in dot
    row_of = {s: i for i, r in enumerate(rows) for s in r}
    for src, dst, _, rest in edges(dot):
        # an edge between rows must not pull the rows apart (graphviz would draw a staircase)
        assert ("constraint=false" in rest) == (row_of[src] != row_of[dst]), (src, dst, rest)
    # without wrapping: one row, left to right, and no placement lines
    plain = char_dfa_dot(dfa)
    assert "rankdir=LR;" in plain and "rank=same" not in plain and "constraint" not in plain


def test_wrapping_keeps_a_40_state_chain_within_slide_width():
    """Rendered: the wrapped chain is a few times narrower (points, 72 to the inch)."""
    dfa = compile_regex(CHAIN)
    widths = {}
    for name, layout in [("one row", Layout()), ("rows of 8", Layout(states_per_row=8))]:
        svg = render_dot(char_dfa_dot(dfa, layout)).decode()
        widths[name] = int(re.search(r'<svg width="(\d+)pt"', svg).group(1))
    assert widths["rows of 8"] < 1000 < widths["one row"], widths


def test_layout_options_are_checked():
    with pytest.raises(ValueError, match="rankdir must be 'LR' or 'TB'"):
        Layout(rankdir="RL")
    with pytest.raises(ValueError, match="states_per_row must be an int >= 2"):
        Layout(states_per_row=1)
    with pytest.raises(TypeError):
        Layout(wrap=10)   # unknown options are refused
    assert "rankdir=TB;" in char_dfa_dot(compile_regex("ab"), Layout(rankdir="TB"))
