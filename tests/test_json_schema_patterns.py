"""`pattern` keywords read as jsonschema reads them (Python's `re.search` over the decoded
string, written over its JSON text; patterns we cannot read are refused by name): alternatives
whose shared prefix Python's parser moved in front (`^$|^a$` is parsed `^(?:$|a$)`), and
anchored alternatives inside a group (`^$|(^a+$)`); and how deep a free value may nest
for each automaton. Covers constrained/json_schema/patterns.py."""

from __future__ import annotations

import itertools
import json
import re

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_json_schema import dfa_of, serialisations

from minisglang.constrained.json_schema import (
    ANY_VALUE_NESTING,
    LAZY_ANY_VALUE_NESTING,
    UnsupportedSchemaError,
    build_regex_from_schema,
)
from minisglang.constrained.lazy_byte_dfa import LazyByteDFA

PATTERNS = [
    "^$|^(([0-9]|[1-9][0-9]|1[0-9]{2}|2[0-4][0-9]|25[0-5])\\.){3}([0-9]|[1-9][0-9]|1[0-9]{2}|2[0-4][0-9]|25[0-5])$",
    "^$|(^(?:\\S+\\s+){0,3}\\S+$)",
    "^ab$|^ac",
    "x(?:bc|bd)$",
    "^(a|b)c|d$",
]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(PATTERNS), st.text(alphabet="0123.9ab cdx", max_size=16))
def test_patterns_with_shared_prefixes_mean_what_re_search_means(pattern, text):
    regex = build_regex_from_schema({"type": "string", "pattern": pattern})
    found = re.search(pattern, text) is not None
    assert bool(re.fullmatch(regex, json.dumps(text))) == found


@pytest.mark.parametrize("pattern", PATTERNS)
def test_every_listed_pattern_compiles(pattern):
    assert build_regex_from_schema({"type": "string", "pattern": pattern})


def nested(depth: int):
    value: object = 1
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def lazy_accepts(regex: str, text: str) -> bool:
    return LazyByteDFA.from_regex(regex, members=True).matches(text.encode("utf-8"))


@pytest.mark.parametrize(
    "schema",
    [
        {},
        {"type": "object", "additionalProperties": True},
        {"type": "array"},
        {"type": "object", "properties": {"a": {}}},
    ],
)
def test_a_free_value_nests_deeper_on_the_lazy_automaton(schema):
    """Eager: ANY_VALUE_NESTING levels (each doubles a written-out regex); lazy: each level
    is one shared sub-expression, so LAZY_ANY_VALUE_NESTING levels."""
    eager = build_regex_from_schema(schema)
    lazy = build_regex_from_schema(schema, automaton="lazy")
    for depth in range(LAZY_ANY_VALUE_NESTING + 2):
        value = nested(depth)
        value = {"a": value} if "properties" in schema else value
        if schema.get("type") == "array":
            value = [value]
        elif schema.get("type") == "object" and not isinstance(value, dict):
            value = {"k": value}
        text = json.dumps(value)
        levels = text.count("[") + text.count("{")  # every container is nested in the previous one
        levels -= "properties" in schema  # the object of the schema's own properties
        assert jsonschema.Draft202012Validator(schema).is_valid(value)
        assert lazy_accepts(lazy, text) == (levels <= LAZY_ANY_VALUE_NESTING), text
        assert bool(re.fullmatch(eager, text)) == (levels <= ANY_VALUE_NESTING), text


# ---------------------------------------------------------------------------------------
# Several patterns: allOf of two (intersection) and `not` of one (difference), lazy only
# ---------------------------------------------------------------------------------------
SEVERAL_PATTERNS = [
    {"type": "string", "not": {"pattern": "^a"}},
    {"not": {"pattern": "b$"}},  # Python's `$` also matches before a last "\n"
    {"allOf": [{"pattern": "^a"}, {"pattern": "b$"}]},
    {"type": "string", "allOf": [{"pattern": "a"}, {"not": {"pattern": "ab"}}], "maxLength": 4},
    {"not": {"allOf": [{"pattern": "^a"}, {"pattern": "b$"}]}},
    {"type": "string", "not": {"pattern": "^\\d+$"}},  # "١" is a digit to Python
]


def lazy_schema_accepts(schema):
    dfa = LazyByteDFA.from_regex(build_regex_from_schema(schema, automaton="lazy"), members=True)
    return lambda text: dfa.matches(text.encode("utf-8"))


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(SEVERAL_PATTERNS),
    st.one_of(st.text(alphabet="ab\n1١", max_size=6), st.integers(), st.none()),
    st.booleans(),
)
def test_several_patterns_are_sound(schema, value, ascii_only):
    accepts = lazy_schema_accepts(schema)
    if accepts(json.dumps(value, ensure_ascii=ascii_only)):
        assert jsonschema.Draft202012Validator(schema).is_valid(value)


@pytest.mark.parametrize("schema", SEVERAL_PATTERNS)
def test_several_patterns_are_complete_on_short_strings(schema):
    import itertools

    accepts = lazy_schema_accepts(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for n in range(5):
        for chars in itertools.product("ab1", repeat=n):
            text = "".join(chars)
            assert accepts(json.dumps(text)) == validator.is_valid(text), (schema, text)


@pytest.mark.parametrize("schema,keyword", [(SEVERAL_PATTERNS[0], "'not'"), (SEVERAL_PATTERNS[2], "'allOf'")])
def test_the_eager_automaton_refuses_several_patterns_naming_the_keyword(schema, keyword):
    from minisglang.constrained.json_schema import UnsupportedSchemaError

    with pytest.raises(UnsupportedSchemaError, match=f"{keyword}.*automaton='lazy'"):
        build_regex_from_schema(schema)


# ---------------------------------------------------------------------------------------
# pattern: a search over the decoded string, written over its JSON text
# ---------------------------------------------------------------------------------------
PATTERN_ALPHABET = ["a", "b", "1", "_", '"', "\\", "\n", "é", "😀"]
# (pattern, complete): complete = matches json.dumps of every alphabet string re.search accepts;
# \w, \s, `.`, [^\d] are narrowed to ASCII (sound, not complete)
SEARCH_PATTERNS = [
    ("^[ab]+$", True),
    ("b", True),
    ("^a|b$", True),
    ("^(ab|1)*$", True),
    ("[^a]", True),
    ("^[0-9]{2,3}$", True),
    ("a?b", True),
    ('^["\\\\]$', True),
    ("é", True),
    ("^😀+", True),
    ("^\\d\\d$", True),
    ("^[^b]*$", True),
    ("^(?:a|é){1,2}$", True),
    ("", True),
    ("^\\w+$", False),
    ("^.$", False),
    ("^[^\\d]$", False),
    ("^\\S+$", False),
]


@pytest.mark.parametrize("pattern, complete", SEARCH_PATTERNS)
def test_pattern_is_a_search_over_the_decoded_string(pattern, complete):
    schema = {"type": "string", "pattern": pattern}
    regex = re.compile(build_regex_from_schema(schema))
    dfa = dfa_of(regex.pattern)
    for k in range(4):
        for chars in itertools.product(PATTERN_ALPHABET, repeat=k):
            s = "".join(chars)
            expected = re.search(pattern, s) is not None
            for text in serialisations(s):
                got = regex.fullmatch(text) is not None
                assert got == dfa.accepts(text), text
                if got:
                    assert expected, f"{text!r} accepted but {pattern!r} finds nothing in it"
                elif expected and complete and not ("$" in pattern and s.endswith("\n")):
                    pytest.fail(f"{text!r} rejected but {pattern!r} finds a match in it")


@pytest.mark.parametrize(
    "pattern, message",
    [
        ("a(?=b)", "lookaround assertions"),
        ("(a)\\1", "backreferences"),
        ("a\\bc", "anchors"),
        ("a^b", "anchors"),
        ("(?i)a", "inline flags"),
        ("\\p{L}", "not a regex we can read"),
    ],
)
def test_unsupported_patterns_are_refused_by_name(pattern, message):
    with pytest.raises(UnsupportedSchemaError, match=re.escape(message)) as info:
        build_regex_from_schema({"type": "object", "properties": {"x": {"type": "string", "pattern": pattern}}})
    assert "#/properties/x/pattern" in str(info.value)
