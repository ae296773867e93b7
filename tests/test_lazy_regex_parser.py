"""The lazy automaton's parser of a user's regex (constrained/lazy_regex_parser.py): what its
refusals say."""

from __future__ import annotations

import pytest

from minisglang.constrained.lazy_regex import RegexError
from minisglang.constrained.lazy_regex_parser import parse_tree


@pytest.mark.parametrize(
    "regex, message",
    [
        ("(?i)yes", "inline flags at position 0 are not supported"),
        ("(?=a)a", "lookahead at position 0 is not supported"),
        ("(?<!x)a", "lookbehind at position 0 is not supported"),
    ],
)
def test_a_refused_construct_is_named_in_a_sentence(regex, message):
    """The fsm backend told a client "inline flags at position 0 is not supported"."""
    with pytest.raises(RegexError) as refused:
        parse_tree(regex)
    assert message in str(refused.value)
