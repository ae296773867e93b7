"""The lazy token FSM's shortcut rows (constrained/lazy_token_fsm.py) against the eager
index and the brute-force mask oracle: a shortcut may only change how a row is computed,
never which tokens it holds.

- `_row_from_strings`: a state whose first element is an alternation of literal strings
  (an enum's values) is walked through the vocabulary trie along its syntax tree, without
  automaton states for its positions.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from real_tokenizers import bundled
from test_lazy_automaton import LONG_VOCAB, SMALL_VOCAB, compare_along_walks
from test_regex_dfa import REGEXES

from minisglang.constrained.json_schema import build_regex_from_schema
from minisglang.constrained.lazy_token_fsm import compile_lazy_token_fsm
from minisglang.constrained.token_fsm import ConstraintError, compile_token_fsm

ENUM_SHAPES = [
    r'"(Rome_1|item_(5|9|15)|北京_3|value_30)", ?"x"',   # values, then the rest of an object
    r'(ab|a1|b|zz)(1|z)*',          # a string of A is a prefix of another; T loops
    r'(ab|a"|b)( |a)*"',            # LONG_VOCAB's long tokens go on into T
    r'(a|b1|)z',                    # ε among the strings: tokens may start in T directly
    r'((a|b)(1|z)|ab1)\n?',          # nested alternations; a nullable tail
    r'(é|中a|中b)+',                  # multi-byte characters, the alternation repeated
    r'x(a{0,2}|b)',                 # not literal strings (a repetition): the walk decides
    r'(' + "a" * 40 + r'|b)"',      # a value longer than the trie (LONG_VOCAB's long tokens)
]


def spellable(pattern: str, vocab) -> bool:
    try:
        compile_token_fsm(pattern, vocab, 10_000)
    except ConstraintError:   # the eager index says the vocabulary cannot spell it
        return False
    return True


@pytest.mark.parametrize("pattern", ENUM_SHAPES)
def test_rows_of_alternations_of_strings_equal_the_eager_index(pattern):
    vocabularies = [v for v in (SMALL_VOCAB, LONG_VOCAB) if spellable(pattern, v)]
    for vocab in vocabularies:
        compare_along_walks(pattern, vocab, walks=8, steps=15)
    compare_along_walks(pattern, bundled(), walks=3, steps=15, oracle_every=1)


def test_rows_of_a_json_enum_equal_the_eager_index_on_the_bundled_vocabulary():
    rng = random.Random(7)
    values = [f"{rng.choice(['alpha', 'Rome', '北京', 'item'])}_{i}" for i in range(40)]
    schema = {"type": "object", "properties": {"a": {"enum": values}, "b": {"enum": values[:5]},
                                               "c": {"type": "integer"}}, "required": ["a", "b", "c"]}
    compare_along_walks(build_regex_from_schema(schema), bundled(), walks=6, steps=30, oracle_every=1)


def test_an_enum_row_builds_no_state_for_the_values_positions():
    """The row after the opening quote of a 300-value enum reads the values along the syntax
    tree: no automaton state and no derivative for a value prefix."""
    tokenizer = bundled()
    values = "|".join(f"value_{i:03d}" for i in range(300))
    fsm = compile_lazy_token_fsm(f'"({values})"', tokenizer, 4096)
    index = fsm.index
    after_quote = index.next_state(index.initial_state, tokenizer.encode('"')[0])
    states, fills = index.dfa.num_states, index.dfa.fills
    row = index.row(after_quote)
    assert (index.dfa.num_states, index.dfa.fills) == (states, fills)
    allowed = set(index.allowed_token_ids(after_quote))
    data = {t: b for t, b in enumerate(tokenizer.token_bytes) if b}
    expected = {t for t, b in data.items() if any(f"value_{i:03d}\"".encode().startswith(b) for i in range(300))}
    assert allowed == expected and row.count == len(expected)


WORDS = st.lists(st.text(alphabet="ab1z", min_size=0, max_size=4), min_size=2, max_size=6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(WORDS, REGEXES)
def test_generated_alternations_then_any_regex_equal_the_eager_index(words, tail):
    pattern = "(" + "|".join(words) + ")" + f"(?:{tail})"
    if spellable(pattern, SMALL_VOCAB):
        compare_along_walks(pattern, SMALL_VOCAB, walks=3, steps=10)
