"""Intersection and difference in the lazy automaton (lazy_regex's AND/DIFF nodes, the
private `(?@and(A)(B))` and `(?@diff(A)(B))` groups), and what the JSON Schema compiler
builds with them: a `pattern` with minLength/maxLength, and patternProperties whose keys
overlap the listed names, each other, or additionalProperties. Oracles: `re.fullmatch`
of both sides for the nodes, `jsonschema` for the schemas. Covers constrained/json_schema/
strings.py, pattern_length.py and objects.py (patternProperties)."""

from __future__ import annotations

import itertools
import json
import re

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minisglang.constrained.lazy_byte_dfa import LazyByteDFA
from minisglang.constrained.lazy_regex import EMPTY, RegexError, RegexPool
from minisglang.constrained.lazy_regex_parser import parse_regex


def lazy_matcher(regex: str):
    dfa = LazyByteDFA.from_regex(regex, members=True)
    return (lambda text: dfa.matches(text.encode("utf-8"))), dfa


# Pairs of regexes over a, b, x: overlapping, nested, disjoint, equal, with counters.
PAIRS = [
    ("a*b", "(ab)*b?"),
    ("[ab]{2,5}", "a.*"),
    ("(ab|ba)+", "[ab]{4}"),
    ("x?", "x?"),
    ("a+", "b+"),
    ("(a|b)*", "(a|b){0,3}"),
    ("(a|x)*a", "x(a|b|x)*"),
    ("é|ab", "é"),
]


@pytest.mark.parametrize("a,b", PAIRS)
@pytest.mark.parametrize("op", ["and", "diff"])
def test_node_equals_both_sides_on_every_short_string(a, b, op):
    regex = f"<(?@{op}({a})({b}))>|z"  # (`|z`: an empty intersection is an error alone)
    accepts, _ = lazy_matcher(regex)
    for n in range(7):
        for chars in itertools.product("abxé", repeat=n):
            text = "".join(chars)
            left, right = re.fullmatch(a, text) is not None, re.fullmatch(b, text) is not None
            assert accepts(f"<{text}>") == (left and right if op == "and" else left and not right), (regex, text)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(PAIRS), st.sampled_from(["and", "diff"]), st.lists(st.text(alphabet="abxé", max_size=8), max_size=3)
)
def test_node_equals_both_sides_on_random_strings(pair, op, pieces):
    """`(A op B)*` with a comma after each repeat: the node inside a repeat and a sequence."""
    a, b = pair
    accepts, _ = lazy_matcher(f"(?:(?@{op}({a})({b})),)*")
    want = all((re.fullmatch(a, p) is not None) and ((re.fullmatch(b, p) is not None) == (op == "and")) for p in pieces)
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


# ---------------------------------------------------------------------------------------
# Strings: pattern, format, length bounds and excluded values together
# ---------------------------------------------------------------------------------------
def schema_matcher(schema, **options):
    from minisglang.constrained.json_schema import build_regex_from_schema

    accepts, _ = lazy_matcher(build_regex_from_schema(schema, automaton="lazy", **options))
    return accepts


STRING_SCHEMAS = [
    {"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$", "minLength": 3, "maxLength": 7},
    {"type": "string", "pattern": "a(b|cd)*", "maxLength": 5},  # a search, not anchored
    {"type": "string", "pattern": "[0-9]{2,}", "minLength": 4},
    {"type": "string", "pattern": "^(ab|c)+$", "minLength": 2, "maxLength": 6},
    {"type": "string", "pattern": "^\\S+$", "maxLength": 4, "not": {"enum": ["ab", "b"]}},
    {"type": "string", "format": "date", "pattern": "^2"},
    {"type": "string", "format": "ipv4", "maxLength": 9},
]
ALPHABET = "abcd-02é \x1c"


def complete_for(schema: dict, text: str) -> bool:
    """Whether our regex must accept `text` raw when it is valid: a control character is
    written \\u001c (never in a counted string), and `\\S` is narrowed to ASCII."""
    return "\x1c" not in text and (text.isascii() or "\\S" not in schema.get("pattern", ""))


@pytest.mark.parametrize("schema", STRING_SCHEMAS)
def test_string_intersections_equal_jsonschema(schema):
    """Raw writing (ensure_ascii=False): accepted exactly when valid; json.dumps' own
    writing: never accepted when invalid. Every string up to 4 characters, and samples."""
    accepts = schema_matcher(schema)
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    texts = ["".join(c) for n in range(5) for c in itertools.product(ALPHABET[:6], repeat=n)]
    texts += ["2020-01-01", "2020-13-01", "1999-01-01", "1.2.3.4", "10.20.30.4", "abcdefgh", "aé", "a\x1cb"]
    for text in texts:
        valid = validator.is_valid(text)
        if complete_for(schema, text):
            assert accepts(json.dumps(text, ensure_ascii=False)) == valid, (schema, text)
        assert not accepts(json.dumps(text)) or valid, (schema, text)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(STRING_SCHEMAS), st.text(alphabet=ALPHABET, max_size=9))
def test_string_intersections_are_sound_and_complete_on_random_strings(schema, text):
    accepts = schema_matcher(schema)
    valid = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).is_valid(text)
    assert not accepts(json.dumps(text)) or valid
    if complete_for(schema, text):
        assert accepts(json.dumps(text, ensure_ascii=False)) == valid


def test_an_empty_intersection_is_no_value():
    from minisglang.constrained.json_schema import UnsupportedSchemaError, build_regex_from_schema

    with pytest.raises(UnsupportedSchemaError, match="accepts no JSON value"):
        build_regex_from_schema({"type": "string", "pattern": "^a{5}$", "maxLength": 3}, automaton="lazy")
    regex = build_regex_from_schema(
        {"anyOf": [{"type": "string", "pattern": "^a{5}$", "maxLength": 3}, {"type": "null"}]}, automaton="lazy"
    )
    assert regex == "null"


def test_the_eager_automaton_refuses_what_it_cannot_intersect_naming_the_keyword():
    from minisglang.constrained.json_schema import UnsupportedSchemaError, build_regex_from_schema

    schema = {"type": "string", "pattern": "^(ab|c)+$", "maxLength": 6}
    with pytest.raises(UnsupportedSchemaError, match="'pattern'.*minLength'/'maxLength'"):
        build_regex_from_schema(schema)
    with pytest.raises(UnsupportedSchemaError, match="'format' together with 'pattern'"):
        build_regex_from_schema({"type": "string", "format": "date", "pattern": "^2"})
    assert "(?@" not in build_regex_from_schema({"type": "string", "pattern": "^[a-z]+$", "maxLength": 6})


@pytest.mark.parametrize("pattern", ["^\\S+$", "^[^\\s]+$", "^[^\\d\\s]+$", "^\\w+$", "^[^\\W]+$", "^\\D+$"])
def test_negated_classes_leave_out_what_either_engine_puts_in_them(pattern):
    """Python's \\s also holds \\x1c-\\x1f (ECMA-262's does not): `\\S` must not take them."""
    from minisglang.constrained.json_schema import build_regex_from_schema

    regex = build_regex_from_schema({"type": "string", "pattern": pattern})
    for code in range(0x80):
        text = json.dumps(chr(code))
        if re.fullmatch(regex, text):
            assert re.search(pattern, chr(code)), (pattern, hex(code))


# ---------------------------------------------------------------------------------------
# Object keys: patternProperties overlapping the listed names, each other, and
# additionalProperties / propertyNames
# ---------------------------------------------------------------------------------------
KEY_SCHEMAS = [
    {
        "type": "object",
        "properties": {"ab": {"type": "integer"}},
        "patternProperties": {"^a": {"type": "string"}},
        "additionalProperties": False,
    },
    {
        "type": "object",
        "patternProperties": {"^a": {"type": "string", "maxLength": 2}, "b$": {"enum": ["x", "yy", 3]}},
        "additionalProperties": {"type": "integer"},
    },
    {
        "type": "object",
        "patternProperties": {"^a": {"type": "integer"}},
        "additionalProperties": {"type": "null"},
        "propertyNames": {"maxLength": 2},
    },
    {
        "type": "object",
        "patternProperties": {"\\d": {"type": "integer"}, "^[0-9a]+$": {"type": "null"}},
        "additionalProperties": True,
    },
]
KEYS = ["a", "ab", "b", "ba", "c", "abc", "1", "a1"]  # ("١" is a digit to Python's \d: only sound, below)
VALUES = ['"x"', '"yy"', "3", "null", '"xyz"']


def object_texts(schema: dict, size: int):
    """Objects of `size` distinct keys from KEYS with values from VALUES, listed properties first."""
    listed = list(schema.get("properties", {}))
    for keys in itertools.permutations(KEYS, size):
        if sorted(keys, key=lambda k: k not in listed) != list(keys):
            continue
        for values in itertools.product(VALUES, repeat=size):
            members = [f"{json.dumps(k, ensure_ascii=False)}: {v}" for k, v in zip(keys, values)]
            yield "{" + ", ".join(members) + "}"


@pytest.mark.parametrize("schema", KEY_SCHEMAS)
def test_key_regions_equal_jsonschema(schema):
    """Every object of up to two keys (listed ones first): accepted exactly when valid;
    other writings of a key (\\\\u escapes) never accepted when invalid."""
    accepts = schema_matcher(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for size in range(3):
        for text in object_texts(schema, size):
            assert accepts(text) == validator.is_valid(json.loads(text)), (schema, text)
    for text in [
        '{"\\u0061b": "x"}',
        '{"\\u0061b": 3}',
        '{"\\u0061": 3}',
        '{"c\\u0062": "x"}',
        '{"\\u0661": null}',
        '{"١": null}',
        '{"١": 3}',
        '{"a١": "x"}',
        '{"a": "x", "a": 3}',
    ]:
        assert not accepts(text) or validator.is_valid(json.loads(text)), (schema, text)


@settings(max_examples=120, deadline=None)
@given(
    st.sampled_from(KEY_SCHEMAS),
    st.dictionaries(st.text(alphabet="ab1١c", max_size=3), st.sampled_from([None, 3, "x", "yy", "xyz"]), max_size=3),
    st.booleans(),
)
def test_key_regions_are_sound_for_any_writing(schema, instance, ascii_only):
    accepts = schema_matcher(schema)
    text = json.dumps(instance, ensure_ascii=ascii_only)
    assert not accepts(text) or jsonschema.Draft202012Validator(schema).is_valid(instance)


def test_the_eager_automaton_refuses_overlapping_keys_naming_the_keyword():
    from minisglang.constrained.json_schema import UnsupportedSchemaError, build_regex_from_schema

    for schema, what in [
        (KEY_SCHEMAS[0], "also matches the listed property"),
        (KEY_SCHEMAS[1], "additionalProperties is not supported"),
        ({**KEY_SCHEMAS[3], "additionalProperties": False}, "matches both"),
    ]:
        with pytest.raises(UnsupportedSchemaError, match=f"'patternProperties'.*{what}"):
            build_regex_from_schema(schema)


def test_the_eager_overlap_check_reads_patterns_as_python_does():
    """`\\d` also matches "١" in Python (jsonschema's reading): `^\\d$` and `^١$` overlap."""
    from minisglang.constrained.json_schema import UnsupportedSchemaError, build_regex_from_schema

    with pytest.raises(UnsupportedSchemaError, match="matches both"):
        build_regex_from_schema({"patternProperties": {"^\\d$": {"type": "integer"}, "^١$": {"type": "null"}}})


# ---------------------------------------------------------------------------------------
# Generation through the engine (bundled model, fsm backend, lazy automaton)
# ---------------------------------------------------------------------------------------
GENERATION_SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "pattern": "^[A-Z][a-z]+( [A-Z][a-z]+)*$", "minLength": 3, "maxLength": 12}
        },
        "required": ["name"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 99}},
        "patternProperties": {"^x": {"type": "string", "maxLength": 3}},
        "additionalProperties": {"type": "boolean"},
        "maxProperties": 3,
        "required": ["id"],
    },
]


@pytest.mark.parametrize("schema", GENERATION_SCHEMAS)
def test_generation_under_intersections_validates(schema):
    """Every finished output validates; one cut by max_new_tokens is a prefix we do not judge."""
    import minisglang as sgl

    engine, finished = sgl.Engine(), 0
    try:
        for seed in range(4):
            out = engine.generate(
                "<|user|>\nJohn Smith, 42\n<|assistant|>\n",
                {"json_schema": schema, "max_new_tokens": 48, "temperature": 1.0, "seed": seed},
            )
            finish = out["meta_info"]["finish_reason"]
            assert finish["type"] in ("stop", "length"), finish
            if finish["type"] == "stop":
                jsonschema.validate(json.loads(out["text"]), schema)
                finished += 1
        assert finished > 0
    finally:
        engine.shutdown()


def test_max_properties_with_every_listed_property_required_and_unlisted_keys():
    schema = GENERATION_SCHEMAS[1]
    accepts = schema_matcher(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for text in [
        '{"id": 1}',
        '{"id": 1, "xa": "ab"}',
        '{"id": 1, "xa": "ab", "b": true}',
        '{"id": 1, "xa": "ab", "b": true, "c": false}',
        '{"id": 1, "xa": "abcd"}',
        '{"id": 1, "b": 3}',
        '{"xa": "a", "id": 1}',
        '{"id": 100}',
    ]:
        assert not accepts(text) or validator.is_valid(json.loads(text)), text
        if (
            text.startswith('{"id"') and '"b"' not in text
        ):  # (additionalProperties next to properties: our policy adds no keys)
            assert accepts(text) == validator.is_valid(json.loads(text)), text
    assert schema_matcher(schema, extra_properties=True)('{"id": 1, "xa": "ab", "b": true}')
    assert not schema_matcher(schema, extra_properties=True)('{"id": 1, "xa": "ab", "b": true, "c": false}')
