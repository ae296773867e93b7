"""Intersection and difference in the lazy automaton (lazy_regex's AND/DIFF nodes, the
private `(?@and(A)(B))` and `(?@diff(A)(B))` groups), and what the JSON Schema compiler
builds with them: a `pattern` with minLength/maxLength, and patternProperties whose keys
overlap the listed names, each other, or additionalProperties. Oracles: `re.fullmatch`
of both sides for the nodes, `jsonschema` for the schemas."""
from __future__ import annotations

import itertools
import json
import re

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minisglang.constrained.lazy_regex import EMPTY, LazyByteDFA, RegexError, RegexPool, parse_regex


def lazy_matcher(regex: str):
    pool = RegexPool()
    dfa = LazyByteDFA(parse_regex(regex, pool, members=True), pool)

    def accepts(text: str) -> bool:
        state = dfa.walk_bytes(dfa.initial, text.encode("utf-8"))
        return state >= 0 and dfa.is_final(state)
    return accepts, dfa


# Pairs of regexes over a, b, x: overlapping, nested, disjoint, equal, with counters.
PAIRS = [("a*b", "(ab)*b?"), ("[ab]{2,5}", "a.*"), ("(ab|ba)+", "[ab]{4}"), ("x?", "x?"),
         ("a+", "b+"), ("(a|b)*", "(a|b){0,3}"), ("(a|x)*a", "x(a|b|x)*"), ("é|ab", "é")]


@pytest.mark.parametrize("a,b", PAIRS)
@pytest.mark.parametrize("op", ["and", "diff"])
def test_node_equals_both_sides_on_every_short_string(a, b, op):
    regex = f"<(?@{op}({a})({b}))>|z"   # (`|z`: an empty intersection is an error alone)
    accepts, _ = lazy_matcher(regex)
    for n in range(7):
        for chars in itertools.product("abxé", repeat=n):
            text = "".join(chars)
            left, right = re.fullmatch(a, text) is not None, re.fullmatch(b, text) is not None
            assert accepts(f"<{text}>") == (left and right if op == "and" else left and not right), (regex, text)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(PAIRS), st.sampled_from(["and", "diff"]),
       st.lists(st.text(alphabet="abxé", max_size=8), max_size=3))
def test_node_equals_both_sides_on_random_strings(pair, op, pieces):
    """`(A op B)*` with a comma after each repeat: the node inside a repeat and a sequence."""
    a, b = pair
    accepts, _ = lazy_matcher(f"(?:(?@{op}({a})({b})),)*")
    want = all((re.fullmatch(a, p) is not None) and ((re.fullmatch(b, p) is not None) == (op == "and"))
               for p in pieces)
    assert accepts("".join(p + "," for p in pieces)) == want


def test_no_state_hides_an_empty_language():
    """Every reachable state can still end (the masks rely on it): a path into an AND
    whose sides cannot end together is cut where it starts."""
    accepts, dfa = lazy_matcher("(?@and(ab*c|ad)(a(b{2})*c|ae))")
    assert accepts("abbc") and not accepts("abc") and not accepts("ad")
    for state in range(dfa.num_states):
        dfa.expand(state)
    for state in range(dfa.num_states):
        seen, todo = {state}, [state]
        while todo:
            s = todo.pop()
            if dfa.is_final(s):
                break
            for nxt in set(dfa.table[s].tolist()) - {-1}:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        else:
            raise AssertionError(f"state {state} cannot reach an accepting state")


def test_empty_results_are_empty_nodes():
    pool = RegexPool()
    assert parse_regex("x(?@and(a+)(b+))?y", pool, members=True) is parse_regex("xy", pool)
    assert pool.intersect(parse_regex("a{3}", pool), parse_regex("a{2}", pool)).kind == EMPTY
    assert pool.difference(parse_regex("a|b", pool), parse_regex("[ab]", pool)).kind == EMPTY
    with pytest.raises(RegexError, match="empty language"):
        parse_regex("(?@diff(x?)(x?))", RegexPool(), members=True)


@pytest.mark.parametrize("regex", ["(?@and(a)(a))", "(?@diff(a)(b))", "x(?@and(a)(b))"])
def test_a_users_regex_cannot_use_the_private_groups(regex):
    with pytest.raises(RegexError, match="invalid regex"):
        parse_regex(regex, RegexPool())


@pytest.mark.parametrize("regex", ["(?@and(a))", "(?@and(a)(b)(c))", "(?@diff(a)(b)"])
def test_malformed_private_groups_are_errors(regex):
    with pytest.raises(RegexError):
        parse_regex(regex, RegexPool(), members=True)
