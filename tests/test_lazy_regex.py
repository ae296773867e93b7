"""constrained/lazy_regex.py: how an intersection's search for a match is walked.

Whether an AND/DIFF node matches anything is decided by walking its derivatives (chapter 05
§7). The walk goes best first (nearest a match by `min_len`), so a non-empty intersection of
a pattern whose DFA is exponential with a length range costs about the length of a match,
not every state within it: the issue-30 schema (`^(x|y)*x(x|y){14}$` with min/maxLength)
took 2^16 nodes per search breadth first. Oracle: `re.fullmatch` of both sides.
"""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings, strategies as st

from minisglang.constrained.lazy_regex import LazyByteDFA, RegexError, RegexPool, parse_regex

PATTERN = "[x-y]*x[x-y]{14}"   # ~2^15 DFA states


def test_a_non_empty_intersection_is_found_without_walking_every_state():
    pool = RegexPool()
    parse_regex(f"(?@and({PATTERN})([x-y]{{16,60}}))", pool, members=True)
    assert len(pool) < 5_000, len(pool)   # breadth first: over 100,000 nodes


def test_an_empty_intersection_is_still_refused():
    """No string of at most 14 characters ends with x and 14 more: the walk meets every
    state and the node is EMPTY (an error alone: the regex matches nothing)."""
    with pytest.raises(RegexError, match="empty language"):
        parse_regex(f"(?@and({PATTERN})([x-y]{{0,14}}))", RegexPool(), members=True)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="xy", max_size=34) | st.text(alphabet="xyz", max_size=40))
def test_every_state_of_the_intersection_agrees_with_both_sides(text):
    dfa = LazyByteDFA.from_regex(f"(?@and({PATTERN})([x-y]{{16,30}}))", members=True)
    want = re.fullmatch(PATTERN, text) is not None and re.fullmatch("[x-y]{16,30}", text) is not None
    assert dfa.matches(text.encode()) == want
