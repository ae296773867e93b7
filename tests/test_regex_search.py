"""regex_search: `re.search` decided by our automaton, in time linear in the text.

Oracle: Python's `re.search` itself, on patterns and texts small enough for its backtracking.
"""

import json
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from minisglang.backends.ignored_keywords import pattern_meets_listed_name
from minisglang.constrained.json_schema import UnsupportedSchemaError, build_regex_from_schema
from minisglang.constrained.regex_dfa import RegexError
from minisglang.constrained.regex_search import searches

# A stranger's stall: Python's `re` backtracks ~2^n steps on n `a`s and a `!` (2 s at 25).
EXPONENTIAL = "^(a+)+$"
NAME = "a" * 40 + "!"

ATOMS = ["a", "b", "é", ".", "[ab]", "[^a]", r"\d", r"\s", r"\n", r"\$", "(?:)", r"[^\s\S]"]
QUANTIFIERS = ["", "", "?", "*", "+", "{0,2}", "*?", "{2}"]


@st.composite
def patterns(draw, depth: int = 0) -> str:
    """A small regex: top-level alternatives of quantified atoms and groups, each maybe
    opened by `^` or `\\A` and closed by `$` or `\\Z`."""
    branches = []
    for _ in range(draw(st.integers(1, 3))):
        items = []
        for _ in range(draw(st.integers(0, 3))):
            if depth < 1 and draw(st.booleans()) and draw(st.booleans()):
                item = f"(?:{draw(patterns(depth + 1))})"
            else:
                item = draw(st.sampled_from(ATOMS))
            items.append(item + draw(st.sampled_from(QUANTIFIERS)))
        body = "".join(items)
        if depth == 0:
            body = draw(st.sampled_from(["", "", "^", "\\A"])) + body + draw(st.sampled_from(["", "", "$", "\\Z"]))
        branches.append(body)
    return "|".join(branches)


@settings(max_examples=300, deadline=None)
@given(pattern=patterns(), text=st.text(alphabet="abé\n1 $", max_size=6))
@example(pattern="a$", text="xa\n")
@example(pattern="a\\Z", text="xa\n")
@example(pattern="^a|b", text="cb")
@example(pattern="^$", text="\n")
@example(pattern="a\\\\$", text="a\\")
@example(pattern="", text="")
@example(pattern=r"^[^\s\S]$", text="a")  # (no text at all: no match, not an error)
def test_searches_is_pythons_re_search(pattern, text):
    assert searches(pattern, text) == (re.search(pattern, text) is not None), (pattern, text)


def test_an_exponential_pattern_is_decided_without_pythons_re(monkeypatch):
    def refused(*args):
        raise AssertionError("re.search was asked: it backtracks ~2^40 steps here")

    monkeypatch.setattr(re, "search", refused)
    assert not searches(EXPONENTIAL, NAME)
    assert searches(EXPONENTIAL, "a" * 40)
    schema = {"type": "object", "properties": {NAME: {"type": "string"}}, "patternProperties": {EXPONENTIAL: {}}}
    assert not pattern_meets_listed_name(schema)
    regex = build_regex_from_schema(schema)
    monkeypatch.undo()
    assert re.fullmatch(regex, json.dumps({NAME: "x"}))


@pytest.mark.parametrize(
    ("pattern", "said"),
    [
        ("(?=a)b", "lookahead assertions are not supported"),
        ("a^b", r"'a\^b': anchors other than \^ and \$"),
        ("(a", "missing \\), unterminated subpattern"),
        ("(?i)a", "inline flags"),
    ],
)
def test_what_our_automata_cannot_read_is_named(pattern, said):
    with pytest.raises(RegexError, match=said):
        searches(pattern, "a")
    schema = {"type": "object", "properties": {"a": {}}, "patternProperties": {pattern: {"type": "integer"}}}
    assert pattern_meets_listed_name(schema)  # (we cannot tell: the adapter treats it as meeting)
    with pytest.raises(UnsupportedSchemaError, match="patternProperties"):
        build_regex_from_schema(schema)


def test_a_pattern_that_matches_no_text_applies_to_no_name():
    schema = {"type": "object", "properties": {"a": {}}, "patternProperties": {r"[^\s\S]": {"type": "integer"}}}
    assert not pattern_meets_listed_name(schema)
    regex = build_regex_from_schema(schema)
    assert re.fullmatch(regex, json.dumps({"a": "x"})) and re.fullmatch(regex, "{}")


def test_a_name_with_a_lone_surrogate_is_named():
    with pytest.raises(RegexError, match="lone surrogate"):
        searches("a", "a\ud800")
