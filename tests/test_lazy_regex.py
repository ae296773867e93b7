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
from hypothesis import given, settings
from hypothesis import strategies as st

from minisglang.constrained.lazy_byte_dfa import LazyByteDFA
from minisglang.constrained.lazy_regex import CONCAT, MAX_NESTING, AutomatonLimitError, RegexError, RegexPool
from minisglang.constrained.lazy_regex_parser import parse_regex

PATTERN = "[x-y]*x[x-y]{14}"  # ~2^15 DFA states


def test_a_non_empty_intersection_is_found_without_walking_every_state():
    pool = RegexPool()
    parse_regex(f"(?@and({PATTERN})([x-y]{{16,60}}))", pool, members=True)
    assert len(pool) < 5_000, len(pool)  # breadth first: over 100,000 nodes


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


def test_rows_made_after_the_table_grew_hold_only_states_and_markers():
    """The table doubles without writing its new rows (`_grow`): every state's row must
    still be whole, each entry a state, -1 (no match) or UNEXPLORED, never leftover memory."""
    from minisglang.constrained.lazy_byte_dfa import UNEXPLORED

    dfa = LazyByteDFA.from_regex("[a-c]*a[a-c]{7}")  # 2^8 states: the table grows twice
    todo, seen = [dfa.initial], {dfa.initial}
    while todo:
        state = todo.pop()
        dfa.expand(state)
        for nxt in set(dfa.table[state].tolist()) - {-1}:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    n = dfa.num_states
    assert n > 128 and dfa.table.shape[0] >= n
    rows = dfa.table[:n]
    assert ((rows == -1) | (rows == UNEXPLORED) | ((rows >= 0) & (rows < n))).all()
    assert not (rows == UNEXPLORED).any()  # every state was expanded
    for text in ["", "a" * 8, "ab" * 4 + "a" + "c" * 7, "b" * 9, "cabbbbbbb"]:
        assert dfa.matches(text.encode()) == (re.fullmatch("[a-c]*a[a-c]{7}", text) is not None)


def test_the_schema_compilers_regexes_are_ones_python_accepts():
    """parse_regex skips Python's whole-regex check for the JSON Schema compiler's own text
    (`members=True`: the check was a third of a schema's compile). That is sound only while
    every such text is one `re.compile` accepts (private groups read as plain groups): here,
    for the 240 MaskBench-like schemas of tests/data/maskbench, every one that compiles."""
    import json
    from pathlib import Path

    from minisglang.constrained.json_schema import build_regex_from_schema
    from minisglang.constrained.lazy_regex import _PRIVATE_GROUP

    checked = 0
    for path in sorted((Path(__file__).parent / "data" / "maskbench").glob("*.json")):
        try:
            regex = build_regex_from_schema(json.loads(path.read_text())["schema"], automaton="lazy")
        except Exception:  # a refusal: no text to parse
            continue
        re.compile(_PRIVATE_GROUP.sub("(?:", regex))
        checked += 1
    assert checked >= 200, checked


def test_an_invalid_regex_of_our_own_still_gets_pythons_message():
    """With `members`, Python's parser is asked only when ours fails, for its message."""
    with pytest.raises(RegexError, match="invalid regex .*missing \\), unterminated subpattern"):
        parse_regex("(?:ab", RegexPool(), members=True)
    with pytest.raises(RegexError, match="invalid regex .*missing \\), unterminated subpattern"):
        parse_regex("(?:ab", RegexPool())


def test_the_searches_of_one_compile_are_bounded_together():
    """Each search of an intersection is bounded alone (MAX_SET_SEARCH nodes) and all the
    searches of a pool together (`searched_limit` derivatives, lifted for generation):
    nested `not`s of `allOf`s made 1.2 million derivatives in one parse (10 s); now a named
    refusal. The same regex parses when the bound is lifted."""
    from minisglang.constrained.lazy_regex import AutomatonLimitError

    regex = f"(?@and({PATTERN})([x-y]{{0,14}}))"  # empty: every state is searched
    with pytest.raises(AutomatonLimitError, match="took more than 1,000 derivatives"):
        parse_regex(regex, RegexPool(searched_limit=1_000), members=True)
    with pytest.raises(RegexError, match="empty language"):
        parse_regex(regex, RegexPool(searched_limit=None), members=True)


def test_factoring_past_max_nesting_is_refused_before_it_is_done():
    """`(?:a|b)?` written n times: after one byte every suffix is an alternative, all with the
    same head, and factoring them nests one level per copy. The result was refused (its depth)
    only once every level was done: n = 7,600 took 6 s of compiled code holding the GIL, and
    every other client stalled (a stranger's 100 KB GBNF). Now the levels are counted. (The
    pure build without the count ran into Python's recursion limit, a RecursionError.)"""
    pool = RegexPool()
    x = parse_regex("(?:a|b)?" * 2000 + "c", pool)
    suffixes = []
    while x.kind == CONCAT:
        suffixes.append(x)
        x = x.parts[1]
    before = len(pool)
    with pytest.raises(AutomatonLimitError, match="nests more deeply"):
        pool.alt(suffixes)
    assert len(pool) - before < 2 * MAX_NESTING  # refused at the bound, not after 2,000 levels
