"""Drawings for a classroom: whitespace visible, single characters unescaped, a title on
every drawing, one quoting rule for literal text, and long chains wrapped into rows that
fit a slide. Checked on the DOT text (the labels read back with tests/drawing_labels.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
import torch
from drawing_labels import label_matches, read_literal

from minisglang.constrained.jump_forward import JumpForwardMap
from minisglang.constrained.regex_dfa import ByteDFA, compile_regex
from minisglang.constrained.token_index import build_index_fast
from minisglang.drawings import char_dfa_dot, render_dot, token_fsm_dot
from minisglang.drawings.compressed import compressed_fsm_dot
from minisglang.drawings.layout import Layout
from minisglang.drawings.radix import radix_tree_dot
from minisglang.drawings.render import show_text
from minisglang.radix_cache import RadixCache

# (a wrapped drawing's edge into a later row ends at a dashed copy, c<row>_<state>)
EDGE = re.compile(r'^  (\d+) -> (?:c\d+_)?(\d+) \[label="((?:[^"\\]|\\.)*)"(.*)\];$', re.M)
TITLE = re.compile(r'label="((?:[^"\\]|\\.)*)"; ?\n?\s*labelloc=t;')


def edges(dot: str) -> list[tuple[int, int, str, str]]:
    """(src, dst, label with DOT's escapes undone, other attributes)."""
    return [(int(a), int(b), re.sub(r"\\(.)", r"\1", label), rest) for a, b, label, rest in EDGE.findall(dot)]


@dataclass
class Vocab:
    token_bytes: list


CHAIN = r'\{"name": "[a-z]+", "email": "[a-z]+@example\.com"\}'  # 40 states, mostly one chain


def test_whitespace_is_visible_and_single_characters_are_not_escaped():
    dfa = compile_regex('\\{"a":[ ,]\t\n\\.x y\\}')
    labels = {label for *_, label, _ in edges(char_dfa_dot(dfa))}
    assert {
        "'{'",
        "'\"'",
        "'a'",
        "':'",
        "'\\t'",
        "'\\n'",
        "'.'",
        "'x'",
        "'\u2423'",
        "'y'",
        "'}'",
        "[\u2423,]",
    } == labels
    assert not any(label.startswith("\\") or " " in label for label in labels)  # no `\{`, no bare space


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
                read_literal(label)  # well formed
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
    assert titles == {
        "char": "regex: (yes|no)",
        "token": "token FSM: 3 states, 3 edges (EOS not drawn)",
        "compressed": "regex: (yes|no)  (compressed: 4 of 5 states)",
        "radix": "radix tree: 2 nodes, 3 cached tokens",
    }
    assert 'label="my title"' in token_fsm_dot(index, Vocab([b"y", b"es", b"no", None]), title="my title")


class _Pool:
    def free(self, slots):
        pass


def test_a_40_state_chain_wraps_into_rows():
    dfa = compile_regex(CHAIN)
    assert dfa.num_states == 40
    dot = char_dfa_dot(dfa, Layout(states_per_row=10, wrap_px=None))
    starts = [int(s) for s in re.search(r"\{ rank=same; ([^}]*)\}", dot).group(1).replace(";", "").split()]
    assert len(starts) == 4 and starts[0] == dfa.initial and "rankdir=LR;" in dot
    # each row ends in a dashed copy of the next row's first state, where the edge into it ends
    for row, start in enumerate(starts[1:]):
        assert f'c{row}_{start} [shape=circle, style=dashed, label="{start}"];' in dot
        assert re.search(rf"^  \d+ -> c{row}_{start} \[", dot, re.M)
    # without wrapping: one row, left to right, and no placement lines
    plain = char_dfa_dot(dfa, Layout(wrap_px=None))
    assert "rankdir=LR;" in plain and "rank=same" not in plain and "style=dashed" not in plain


def test_wrapping_keeps_a_40_state_chain_within_slide_width():
    """Rendered: the wrapped chain is a few times narrower (points, 72 to the inch)."""
    dfa = compile_regex(CHAIN)
    widths = {}
    for name, layout in [("one row", Layout(wrap_px=None)), ("rows of 8", Layout(states_per_row=8))]:
        svg = render_dot(char_dfa_dot(dfa, layout)).decode()
        widths[name] = int(re.search(r'<svg width="(\d+)pt"', svg).group(1))
    assert widths["rows of 8"] < 1000 < widths["one row"], widths


def test_layout_options_are_checked():
    with pytest.raises(ValueError, match="rankdir must be 'LR' or 'TB'"):
        Layout(rankdir="RL")
    with pytest.raises(ValueError, match="states_per_row must be an int >= 2"):
        Layout(states_per_row=1)
    with pytest.raises(TypeError):
        Layout(wrap=10)  # unknown options are refused
    assert "rankdir=TB;" in char_dfa_dot(compile_regex("ab"), Layout(rankdir="TB"))
