"""The JSON Schema -> regex compiler (minisglang/constrained/json_schema/) as a whole: whitespace,
strings, const and enum, objects, arrays, the applicators, types and inference, errors, and
property tests over a family of schemas; and the oracle helpers the topic files share.
(By topic: test_json_schema_formats.py, _refs.py, _patterns.py, _numbers.py, _keywords.py,
_options.py, _allof.py and the others.)

Oracles: `jsonschema` (draft 2020-12, with its FormatChecker) judges every string that a
random walk on the regex's DFA produces (soundness, `assert_sound`); `json.dumps` writes
valid instances that the regex must match (completeness where the module promises it);
Python's `re` is a second regex engine.
"""

from __future__ import annotations

import datetime
import functools
import itertools
import json
import math
import random
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minisglang.constrained.json_schema import (
    ALL_CHARACTERS,
    ANY_VALUE_NESTING,
    DEFAULT_WHITESPACE,
    STRING_CHAR,
    UNSUPPORTED_KEYWORDS,
    InvalidSchemaError,
    UnsupportedSchemaError,
    build_regex_from_schema,
)
from minisglang.constrained.json_schema.string_chars import _hex_range, _json_string_chars
from minisglang.constrained.lazy_byte_dfa import LazyByteDFA
from minisglang.constrained.regex_ast import render
from minisglang.constrained.regex_dfa import CharDFA, compile_regex

VALIDATOR = jsonschema.Draft202012Validator
FORMAT_CHECKER = VALIDATOR.FORMAT_CHECKER


def is_valid(value, schema) -> bool:
    return VALIDATOR(schema, format_checker=FORMAT_CHECKER).is_valid(value)


def serialisations(value) -> list[str]:
    """json.dumps' default style (ASCII escapes), compact, and with raw non-ASCII."""
    return [json.dumps(value), json.dumps(value, separators=(",", ":")), json.dumps(value, ensure_ascii=False)]


def matches(schema, text: str, **options) -> bool:
    return re.fullmatch(build_regex_from_schema(schema, **options), text) is not None


@functools.lru_cache(maxsize=64)
def dfa_of(regex: str) -> CharDFA:
    return compile_regex(regex, max_states=20_000)


# ---------------------------------------------------------------------------------------
# Random walks on the DFA: the soundness oracle's input
# ---------------------------------------------------------------------------------------
CHAR_POOL = [chr(c) for c in range(0x20, 0x7F)] + ["\t", "\n", "\x00", "\x1f", "\x7f", "é", "ß", "中", "😀", "\u2028"]


def random_char(cls, rng: random.Random) -> str:
    if not cls.negated:
        return rng.choice(sorted(cls.chars))
    candidates = [c for c in CHAR_POOL if c in cls]
    return rng.choice(candidates) if candidates else next(chr(c) for c in range(0x4E00, 0x10000) if chr(c) in cls)


def random_walks(dfa: CharDFA, n: int, seed: int = 0, max_len: int = 120) -> list[str]:
    """n strings the DFA accepts: random edges, stopping at accepting states now and then;
    past max_len, only edges that get closer to an accepting state."""
    rng = random.Random(seed)
    distance = {s: 0 for s in dfa.finals}
    changed = True
    while changed:
        changed = False
        for s, row in dfa.transitions.items():
            for t in row.values():
                if t in distance and distance.get(s, math.inf) > distance[t] + 1:
                    distance[s] = distance[t] + 1
                    changed = True
    out = []
    for _ in range(n):
        state, text = dfa.initial, []
        while not (state in dfa.finals and (not dfa.transitions[state] or rng.random() < 0.15 or len(text) >= max_len)):
            edges = list(dfa.transitions[state].items())
            if len(text) >= max_len:
                edges = [(c, t) for c, t in edges if distance[t] < distance[state]]
            cls, state = rng.choice(edges)
            text.append(random_char(cls, rng))
        out.append("".join(text))
    return out


def assert_sound(schema, n: int = 150, seed: int = 0, **options) -> None:
    """Every sampled string the DFA accepts is JSON that the schema accepts, and `re` agrees."""
    regex = build_regex_from_schema(schema, **options)
    dfa = dfa_of(regex)
    for text in random_walks(dfa, n, seed):
        value = json.loads(text)
        assert is_valid(value, schema), f"{text!r} is accepted but invalid for {schema}"
        assert re.fullmatch(regex, text), f"re and the DFA disagree on {text!r}"


# ---------------------------------------------------------------------------------------
# Whitespace
# ---------------------------------------------------------------------------------------
NESTED = {
    "type": "object",
    "properties": {
        "a": {"type": "array", "items": {"type": "integer"}},
        "b": {"type": "object", "properties": {"c": {"type": "null"}}},
    },
}


def test_default_whitespace_matches_json_dumps_and_compact_but_not_indent():
    value = {"a": [1, 2], "b": {"c": None}}
    for text in serialisations(value):
        assert matches(NESTED, text)
    assert matches(NESTED, '{ "a": [ 1, 2 ], "b": { "c": null } }')
    assert not matches(NESTED, json.dumps(value, indent=2)), "newlines are not in the default"
    assert not matches(NESTED, '{"a" : [1]}'), "no whitespace before a colon"
    assert not matches(NESTED, '{"a":  [1]}'), "at most one space by default"
    assert DEFAULT_WHITESPACE == r"[ ]?"


def test_custom_whitespace_free_and_none():
    value = {"a": [1, 2], "b": {"c": None}}
    assert matches(NESTED, json.dumps(value, indent=2), whitespace=r"[ \t\n\r]*")
    assert matches(NESTED, json.dumps(value, separators=(",", ":")), whitespace="")
    assert not matches(NESTED, json.dumps(value), whitespace="")


@pytest.mark.parametrize(
    "whitespace, message",
    [
        ("x?", "not JSON whitespace"),
        ("[ ]", "must match the empty string"),
        ("(", "is invalid"),
    ],
)
def test_bad_whitespace_regexes_are_refused(whitespace, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build_regex_from_schema({"type": "integer"}, whitespace=whitespace)


# ---------------------------------------------------------------------------------------
# Strings
# ---------------------------------------------------------------------------------------
@settings(deadline=None)
@given(st.text(max_size=8))
def test_every_string_matches_in_every_serialisation(s):
    for text in serialisations(s):
        assert matches({"type": "string"}, text)


@pytest.mark.parametrize(
    "text, ok",
    [
        ('"\x01"', False),
        ('"\\u0001"', True),
        ('"a\nb"', False),
        ('"a\\nb"', True),
        ('"\\x"', False),
        ('"\\ud800"', False),
        ('"\\ud83d\\ude00"', True),
        ('"\\"\\\\\\/"', True),
        ('"\\U0041"', False),
    ],
)
def test_string_escapes(text, ok):
    assert matches({"type": "string"}, text) == ok
    if ok:
        assert isinstance(json.loads(text), str)


def test_hand_written_string_char_agrees_with_the_generated_one_on_json_dumps_output():
    generated = re.compile(render(_json_string_chars(ALL_CHARACTERS)))
    for ch in CHAR_POOL + ["\b", "\f", "\r", '"', "\\", "/", "\uffff", "\U0010ffff", "\u00e9"]:
        for text in {json.dumps(ch)[1:-1], json.dumps(ch, ensure_ascii=False)[1:-1]}:
            assert re.fullmatch(STRING_CHAR, text) and generated.fullmatch(text), repr(text)


@settings(deadline=None)
@given(st.text(max_size=6), st.integers(0, 4), st.integers(0, 4))
def test_min_and_max_length_count_characters_not_escapes(s, lo, hi):
    schema = {"type": "string", "minLength": lo, "maxLength": hi}
    if lo > hi:
        with pytest.raises(UnsupportedSchemaError, match="accepts no JSON value"):
            build_regex_from_schema(schema)
        return
    for text in serialisations(s):  # sound in every serialisation
        if matches(schema, text):
            assert is_valid(s, schema) and lo <= len(s) <= hi
    raw = json.dumps(s, ensure_ascii=False)  # complete where only raw and short escapes are used
    if "\\u" not in raw:
        assert matches(schema, raw) == is_valid(s, schema) == (lo <= len(s) <= hi)


def test_length_bounded_string_is_sound():
    assert_sound({"type": "string", "minLength": 2, "maxLength": 3})


def test_hex_ranges_are_exact():
    rng = random.Random(0)
    for _ in range(40):
        lo = rng.randrange(0x100)
        hi = rng.randrange(lo, 0x100)
        regex = re.compile(render(_hex_range(lo, hi, width=2)))
        for v in range(0x100):
            for text in {f"{v:02x}", f"{v:02X}", f"{v:02x}".capitalize()}:
                assert bool(regex.fullmatch(text)) == (lo <= v <= hi), (lo, hi, text)


# ---------------------------------------------------------------------------------------
# const and enum
# ---------------------------------------------------------------------------------------
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.text(max_size=4)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)


@settings(deadline=None)
@given(json_values, json_values)
def test_const_matches_its_value_in_every_serialisation_and_nothing_else(value, other):
    regex = build_regex_from_schema({"const": value})
    for text in serialisations(value):
        assert re.fullmatch(regex, text)
    for text in serialisations(other):
        if re.fullmatch(regex, text):
            assert is_valid(other, {"const": value})


def test_const_numbers_match_json_equal_forms():
    assert matches({"const": 1}, "1.0") and matches({"const": 1.0}, "1")
    assert not matches({"const": 1}, "true") and not matches({"const": True}, "1")


def test_enum_keeps_only_values_the_other_keywords_accept():
    schema = {"type": "string", "maxLength": 2, "enum": ["ab", "abc", 3, None]}
    assert matches(schema, '"ab"')
    assert not any(matches(schema, t) for t in ('"abc"', "3", "null"))
    with pytest.raises(UnsupportedSchemaError, match="accepts no JSON value"):
        build_regex_from_schema({"type": "integer", "enum": ["a"]})


@pytest.mark.parametrize(
    "schema",
    [
        {"properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "const": {"b": 1, "a": 2}},
        {"type": "object", "properties": {"a": {}, "b": {"maxLength": 1}}, "enum": [{"b": "x", "a": 2}, {"b": "xy"}]},
        {
            "type": "array",
            "items": {"$ref": "#/$defs/o"},
            "enum": [[{"o": {"b": 1, "a": 2}}], [{"o": {"b": 1, "a": "x"}}]],
            "$defs": {"o": {"properties": {"o": {"properties": {"a": {"type": "integer"}, "b": {}}}}}},
        },
    ],
)
def test_enum_keeps_objects_whose_keys_are_in_another_order_than_properties(schema):
    """The rest of the schema is checked on each enum value, and its regex writes `properties`
    in order: an enum object in another key order failed that check, and the first schema
    was refused as accepting no value (schema_fuzz)."""
    values = schema["enum"] if "enum" in schema else [schema["const"]]
    lazy = LazyByteDFA.from_regex(build_regex_from_schema(schema, automaton="lazy"), members=True)
    for value in values:
        assert matches(schema, json.dumps(value)) == is_valid(value, schema), value
        assert lazy.matches(json.dumps(value).encode()) == is_valid(value, schema), value


# ---------------------------------------------------------------------------------------
# Objects
# ---------------------------------------------------------------------------------------
def test_optional_properties_any_subset_in_schema_order():
    names = ["a", "b", "c", "d"]
    for required_mask in range(16):
        required = [n for i, n in enumerate(names) if required_mask >> i & 1]
        schema = {
            "type": "object",
            "properties": {n: {"type": "integer"} for n in names},
            "required": required,
            "additionalProperties": False,
        }
        regex = re.compile(build_regex_from_schema(schema))
        for subset_mask in range(16):
            value = {n: i for i, n in enumerate(names) if subset_mask >> i & 1}
            for text in serialisations(value):
                assert bool(regex.fullmatch(text)) == is_valid(value, schema), (required, text)
            if len(value) >= 2:
                assert not regex.fullmatch(json.dumps(dict(reversed(value.items())))), "schema order only"


def test_optional_properties_grow_the_regex_polynomially():
    def size(n):
        properties = {f"p{i}": {"type": "null"} for i in range(n)}
        return len(build_regex_from_schema({"type": "object", "properties": properties}))

    assert size(40) < 5 * size(20)


def test_additional_properties_policies():
    props = {"a": {"type": "integer"}}
    for schema in (
        {"type": "object", "properties": props},
        {"type": "object", "properties": props, "additionalProperties": True},
        {"type": "object", "properties": props, "additionalProperties": False},
    ):
        assert matches(schema, '{"a": 1}') and not matches(schema, '{"a": 1, "z": 2}')
    assert matches({"properties": props, "required": ["a", "z"]}, '{"a": 1, "z": [null, "x"]}')
    with pytest.raises(UnsupportedSchemaError, match="accepts no JSON value"):
        build_regex_from_schema(
            {"type": "object", "properties": props, "required": ["z"], "additionalProperties": False}
        )
    # (without type, JSON Schema also accepts 1: only the objects have no value)
    with pytest.raises(UnsupportedSchemaError, match="has no value that minisglang writes"):
        build_regex_from_schema({"properties": props, "required": ["z"], "additionalProperties": False})


@settings(deadline=None)
@given(st.dictionaries(st.text(max_size=3), st.integers(-(10**18) + 1, 10**18 - 1), max_size=4))
def test_additional_properties_schema_without_properties_is_a_map(value):
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    for text in serialisations(value):
        assert matches(schema, text)
    assert not matches(schema, json.dumps({**value, "x": "not an integer"}))


@settings(deadline=None)
@given(st.dictionaries(st.text(max_size=3), json_scalars, max_size=4))
def test_free_object_is_a_map_of_values(value):
    for text in serialisations(value):
        assert matches({"type": "object"}, text)


def test_objects_are_sound():
    assert_sound(
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 4},
                "tags": {"type": "array", "items": {"enum": ["x", "y"]}},
                'q"é': {"type": "boolean"},
            },
            "required": ["tags"],
        }
    )
    assert_sound({"type": "object", "additionalProperties": {"type": "integer"}, "required": ["k"]})


# ---------------------------------------------------------------------------------------
# Arrays
# ---------------------------------------------------------------------------------------
def test_min_and_max_items_are_exact():
    for lo, hi in itertools.product(range(4), [None, 0, 1, 3, 4]):
        schema = {"type": "array", "items": {"type": "integer"}, "minItems": lo}
        if hi is not None:
            schema["maxItems"] = hi
        try:
            regex = re.compile(build_regex_from_schema(schema))
        except UnsupportedSchemaError:
            assert hi is not None and hi < lo
            continue
        for n in range(7):
            for text in serialisations(list(range(n))):
                assert bool(regex.fullmatch(text)) == is_valid(list(range(n)), schema), text


def test_prefix_items_then_items_and_tuples():
    for items in ({"type": "boolean"}, False, None):
        schema = {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "minItems": 1}
        if items is not None:
            schema["items"] = items
        regex = re.compile(build_regex_from_schema(schema))
        for value in ([], [1], [1, "a"], [1, "a", True], [1, "a", True, False], ["a"], [1, 2], [1, "a", 3]):
            expected = is_valid(value, schema) and (items is not None or len(value) <= 2)
            assert bool(regex.fullmatch(json.dumps(value))) == expected, (items, value)


def test_draft7_items_array_is_a_tuple():
    schema = {"type": "array", "items": [{"type": "integer"}], "additionalItems": {"type": "null"}}
    assert matches(schema, "[1, null, null]") and not matches(schema, '[1, "x"]')


@pytest.mark.parametrize(
    ("uri", "validator"),
    [
        ("http://json-schema.org/draft-07/schema#", jsonschema.Draft7Validator),
        ("http://json-schema.org/draft-04/schema#", jsonschema.Draft4Validator),
        ("https://json-schema.org/draft/2020-12/schema", jsonschema.Draft202012Validator),
        (None, jsonschema.Draft202012Validator),
    ],
)
def test_a_refs_siblings_apply_from_2019_09_on_and_are_ignored_before(uri, validator):
    """Up to draft 7, "all other properties in a $ref object MUST be ignored"; 2019-09 and
    2020-12 apply them with the $ref (no $schema: 2020-12, our default). Applied to a draft 7
    schema, a sibling that contradicts the target left no value (`s` here; refused as empty
    where it was required, diffuzz)."""
    schema = {
        "type": "object",
        "properties": {
            "n": {"$ref": "#/definitions/small", "maximum": 3},
            "s": {"$ref": "#/definitions/small", "type": "string"},
        },
        "definitions": {"small": {"type": "integer", "minimum": 0}},
    }
    if uri is not None:
        schema["$schema"] = uri
    for value in ({"n": 2}, {"n": 3}, {"n": 4}, {"n": 40}, {"n": -1}, {"s": 1}, {"s": "x"}, {"n": 1, "s": 5}):
        expected = validator(schema).is_valid(value)
        assert matches(schema, json.dumps(value)) == expected, (uri, value, expected)


def test_arrays_are_sound():
    assert_sound(
        {
            "type": "array",
            "prefixItems": [{"const": "x"}],
            "items": {"type": "integer", "minimum": 0},
            "minItems": 1,
            "maxItems": 4,
        }
    )


# ---------------------------------------------------------------------------------------
# anyOf, oneOf, allOf
# ---------------------------------------------------------------------------------------
def test_any_of_with_sibling_keywords_means_both():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "anyOf": [{"required": ["a"]}, {"required": ["b"]}],
    }
    for value in ({}, {"a": 1}, {"b": 2}, {"a": 1, "b": 2}):
        assert matches(schema, json.dumps(value)) == is_valid(value, schema)


PETS = {
    "oneOf": [
        {
            "type": "object",
            "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer", "maximum": 9}},
            "required": ["kind", "lives"],
        },
        {"type": "object", "properties": {"kind": {"const": "dog"}, "good": {"type": "boolean"}}, "required": ["kind"]},
        {"type": "null"},
    ]
}


def test_one_of_with_disjoint_branches_is_sound():
    assert matches(PETS, '{"kind": "cat", "lives": 9}') and matches(PETS, "null")
    assert_sound(PETS)


@pytest.mark.parametrize(
    "branches",
    [
        [{"type": "integer"}, {"type": "number"}],
        [{"type": "object", "properties": {"a": {"const": 1}}}, {"type": "object", "properties": {"a": {"const": 2}}}],
        [{"minimum": 0}, {"type": "string"}],
    ],
)
def test_one_of_that_may_overlap_is_written_with_negations(branches):
    """Branch i and not the branches it may overlap (exactness: test_json_schema_keywords.py)."""
    schema = {"oneOf": branches}
    assert_sound(schema)
    regex = re.compile(build_regex_from_schema(schema))
    for value in [1, 2.5, -1, "x", {"a": 1}, {"a": 2}, {"a": 3}, None]:
        if regex.fullmatch(json.dumps(value)):
            assert is_valid(value, schema), value


def test_all_of_merges_exactly():
    schema = {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
            {"properties": {"a": {"minimum": 5}, "b": {"type": "string"}}},
        ]
    }
    for value in ({"a": 5}, {"a": 4}, {"a": 5, "b": "x"}, {"b": "x"}):
        assert matches(schema, json.dumps(value)) == is_valid(value, schema), value
    closed = {"allOf": [{"properties": {"a": {"type": "integer"}}}, {"additionalProperties": False}]}
    assert matches(closed, "{}") and not matches(closed, '{"a": 1}'), "the second part forbids a"
    with pytest.raises(UnsupportedSchemaError, match="accepts no JSON value"):
        build_regex_from_schema({"allOf": [{"type": "string"}, {"type": "integer"}]})


def test_all_of_conflicts_are_refused_by_name():
    with pytest.raises(UnsupportedSchemaError, match="'allOf' at #: two subschemas give 'format' different values"):
        build_regex_from_schema({"allOf": [{"format": "date"}, {"format": "email"}]})
    # Two patterns: the lazy automaton intersects them (tests/test_json_schema_patterns.py).
    with pytest.raises(UnsupportedSchemaError, match="'allOf' at #: a string must match several 'pattern's"):
        build_regex_from_schema({"allOf": [{"pattern": "a"}, {"pattern": "b"}]})


# ---------------------------------------------------------------------------------------
# Types, inference, any value
# ---------------------------------------------------------------------------------------
@settings(deadline=None)
@given(
    json_scalars | st.lists(json_scalars, max_size=3) | st.dictionaries(st.text(max_size=2), json_scalars, max_size=2)
)
def test_empty_schema_accepts_values_up_to_the_nesting_bound(value):
    assert ANY_VALUE_NESTING >= 1
    for schema in ({}, True, {"description": "annotations only", "title": "t"}):
        assert matches(schema, json.dumps(value))


def test_missing_type_is_inferred_from_keywords():
    assert matches({"minLength": 1}, '"a"') and not matches({"minLength": 1}, "1")
    assert matches({"maximum": 3}, "2.5") and not matches({"maximum": 3}, '"a"')
    assert matches({"type": ["string", "null"]}, "null")


def test_sound_for_any_value():
    assert_sound({}, n=200)


TRICKY = [
    {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
            {"properties": {"a": {"exclusiveMaximum": 3}, "b": {}}, "required": ["a"]},
        ]
    },
    {
        "type": ["object", "string"],
        "properties": {"x": {"const": 'é"\\'}},
        "maxLength": 2,
        "anyOf": [{"required": ["x"]}, {"minLength": 1}],
    },
    {"enum": [1, 1.5, "a", [1, {"k": None}], {"z": [True]}], "type": ["number", "array", "object"]},
    {"enum": ["ab", "abc", [1, [2]]], "maxLength": 2},
    {"oneOf": [{"const": 1}, {"const": "1"}, {"type": "array", "maxItems": 1}]},
    {
        "type": "array",
        "prefixItems": [
            {"type": "string", "pattern": '^\\\\["a-c]$'},
            {"type": "number", "minimum": -0.5, "exclusiveMaximum": 0.25},
        ],
        "items": False,
        "minItems": 1,
    },
    {
        "$defs": {
            "n": {
                "anyOf": [
                    {"type": "null"},
                    {
                        "type": "object",
                        "required": ["v"],
                        "properties": {
                            "next": {"$ref": "#/$defs/n"},
                            "v": {"type": "integer", "minimum": 7, "maximum": 1234},
                        },
                    },
                ]
            }
        },
        "$ref": "#/$defs/n",
    },
    {"type": "string", "pattern": "[^\\d\\s]\\W"},
    {"type": "object", "required": ["a", "b"], "properties": {"b": {"type": "boolean"}}},
    {"items": {"type": "integer", "exclusiveMinimum": -10.5, "maximum": 1e3}},
]


@pytest.mark.parametrize("schema", TRICKY, ids=range(len(TRICKY)))
def test_keyword_combinations_are_sound(schema):
    assert_sound(schema, n=150)


def test_enum_with_only_a_type_keeps_nested_values():
    schema = TRICKY[2]
    for value in schema["enum"]:
        assert matches(schema, json.dumps(value)) == (value != "a")


# ---------------------------------------------------------------------------------------
# Errors name the keyword and the place
# ---------------------------------------------------------------------------------------
UNSUPPORTED_EXAMPLES = {
    "unevaluatedItems": False,
    "unevaluatedProperties": False,
    "$dynamicRef": "#x",
    "$recursiveRef": "#",
    "$recursiveAnchor": True,
}


def test_every_unsupported_keyword_has_an_example():
    assert set(UNSUPPORTED_EXAMPLES) == UNSUPPORTED_KEYWORDS


@pytest.mark.parametrize("keyword", sorted(UNSUPPORTED_EXAMPLES))
def test_unsupported_keywords_are_errors_naming_keyword_and_path(keyword):
    # unevaluated* are supported where no in-place applicator (allOf, ...) could evaluate more
    context = {"allOf": [{}]} if keyword.startswith("unevaluated") else {}
    schema = {"type": "object", "properties": {"x": {keyword: UNSUPPORTED_EXAMPLES[keyword], **context}}}
    message = f"keyword '{keyword}' at #/properties/x is not supported"
    with pytest.raises(UnsupportedSchemaError, match=re.escape(message)):
        build_regex_from_schema(schema)


def test_unique_items_false_constrains_nothing():
    assert matches({"type": "array", "uniqueItems": False}, "[1, 1]")


def test_unknown_formats_are_refused():
    with pytest.raises(
        UnsupportedSchemaError, match="'format': 'url' at # is not supported.*unknown_formats='annotation'"
    ):
        build_regex_from_schema({"type": "string", "format": "url"})


def test_unknown_formats_as_annotations_are_any_string():
    """The option gives `format` JSON Schema's default meaning (an annotation); known
    formats are still enforced."""
    schema = {"type": "string", "format": "full-date", "maxLength": 3}
    regex = re.compile(build_regex_from_schema(schema, unknown_formats="annotation"))
    for text in ["", "abc", "2024-01-01", "xyzw"]:
        assert bool(regex.fullmatch(json.dumps(text))) == (len(text) <= 3), text
    assert not re.fullmatch(
        build_regex_from_schema({"type": "string", "format": "date"}, unknown_formats="annotation"), '"abc"'
    )


@pytest.mark.parametrize(
    "schema, message",
    [
        ("{not json", "the schema is not valid JSON"),
        ("3", "a schema must be a JSON object or a boolean, got int"),
        ({"type": "strin"}, "'type' at # must be one of"),
        ({"type": "object", "required": "a"}, "'required' at # must be an array of strings"),
        ({"type": "string", "minLength": -1}, "'minLength' at # must be a non-negative integer"),
        ({"type": "object", "properties": []}, "'properties' at # must be an object"),
        ({"enum": 3}, "'enum' at # must be an array"),
        ({"anyOf": []}, "'anyOf' at # must be a non-empty array of schemas"),
        ({"type": "integer", "minimum": "3"}, "'minimum' at # must be a number"),
        ({"properties": {"a": 5}}, "the schema at #/properties/a must be an object or a boolean"),
        ({"$ref": 5}, "'$ref' at # must be a string"),
        # a validator enforces any truthy uniqueItems and fails on a null bound: they read as
        # absent here, so [1, 1] was written (schema_fuzz)
        ({"type": "array", "uniqueItems": 1}, "'uniqueItems' at # must be true or false, got 1"),
        ({"type": "object", "maxProperties": None}, "'maxProperties' at # must be a non-negative integer, got None"),
        ({"type": "string", "maxLength": None}, "'maxLength' at # must be a non-negative integer, got None"),
    ],
)
def test_invalid_schemas_say_why(schema, message):
    with pytest.raises(InvalidSchemaError, match=re.escape(message)):
        build_regex_from_schema(schema)


def test_false_schema_has_nothing_to_generate():
    with pytest.raises(UnsupportedSchemaError, match="accepts no JSON value"):
        build_regex_from_schema(False)


@pytest.mark.parametrize(
    "schema, written",
    [
        ({"minItems": 1, "maxItems": 0}, "array"),
        ({"type": "object", "required": ["a"], "properties": {"a": {"minimum": 5, "maximum": 1}}}, "number"),
        ({"items": {"type": "integer"}, "contains": {"type": "null"}}, "array"),  # (the cause: a typed part)
    ],
)
def test_an_untyped_part_empty_in_its_keywords_types_blames_our_policy(schema, written):
    """Without `type` the compiler writes the types its keywords name, and JSON Schema accepts
    the others too (1 for {"minItems": 1, "maxItems": 0}): 'the schema accepts no JSON value'
    was false there (schema_fuzz)."""
    with pytest.raises(UnsupportedSchemaError, match="the schema has no value that minisglang writes") as info:
        build_regex_from_schema(schema)
    assert f"only {written} values are written" in str(info.value)
    assert any(is_valid(v, schema) for v in (1, "a", None, {"a": "a"}))


# ---------------------------------------------------------------------------------------
# Property tests over a family of schemas
# ---------------------------------------------------------------------------------------
PROPERTY_NAMES = ["a", "b", "é", 'q"k']
# what json.dumps writes raw or as a short escape (with ensure_ascii, non-ASCII is \\uXXXX)
COUNTED_ALPHABET = st.characters(min_codepoint=0x20, max_codepoint=0x7E) | st.sampled_from('\n\t"\\/')
FAMILY_PATTERNS = ["^[a-z]{1,3}$", "^(ab|c)+$", "^[A-Z][0-9]?$"]


@st.composite
def leaf_schemas(draw):
    kind = draw(st.sampled_from(["string", "integer", "number", "boolean", "null", "enum", "format", "pattern"]))
    if kind == "string":
        lo = draw(st.integers(0, 2))
        schema = {"type": "string", "minLength": lo}
        hi = draw(st.none() | st.integers(lo, 3))
        return schema if hi is None else {**schema, "maxLength": hi}
    if kind in ("integer", "number"):
        schema = {"type": kind}
        lo = draw(st.none() | st.integers(-50, 50))
        # hi >= lo + 2: with both ends exclusive, an integer range must still hold a value
        hi = draw(st.none() | st.integers(-50 if lo is None else lo + 2, 60))
        if lo is not None:
            schema[draw(st.sampled_from(["minimum", "exclusiveMinimum"]))] = lo
        if hi is not None:
            schema[draw(st.sampled_from(["maximum", "exclusiveMaximum"]))] = hi
        return schema
    if kind == "enum":
        return {"enum": draw(st.lists(json_scalars, min_size=1, max_size=3, unique_by=json.dumps))}
    if kind == "format":
        return {"type": "string", "format": draw(st.sampled_from(["date", "uuid", "ipv4"]))}
    if kind == "pattern":
        return {"type": "string", "pattern": draw(st.sampled_from(FAMILY_PATTERNS))}
    return {"type": kind}


@st.composite
def object_schemas(draw, inner):
    properties = draw(st.dictionaries(st.sampled_from(PROPERTY_NAMES), inner, max_size=3))
    required = [n for n in properties if draw(st.booleans())]
    schema = {"type": "object", "properties": properties, "required": required}
    return {**schema, "additionalProperties": False} if draw(st.booleans()) else schema


@st.composite
def array_schemas(draw, inner):
    lo = draw(st.integers(0, 2))
    return {"type": "array", "items": draw(inner), "minItems": lo, "maxItems": draw(st.integers(lo, 3))}


family = st.recursive(
    leaf_schemas(),
    lambda inner: (
        object_schemas(inner) | array_schemas(inner) | st.builds(lambda a, b: {"anyOf": [a, b]}, inner, inner)
    ),
    max_leaves=3,
)


def instances(schema) -> st.SearchStrategy:
    """Valid instances of a family schema, with keys in schema order."""
    if "anyOf" in schema:
        return st.one_of([instances(b) for b in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema["type"]
    if kind == "string":
        if "format" in schema:
            return {
                "date": st.dates().map(datetime.date.isoformat),
                "uuid": st.uuids().map(str),
                "ipv4": st.ip_addresses(v=4).map(str),
            }[schema["format"]]
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True)
        if "minLength" in schema or "maxLength" in schema:  # counted strings: raw or short escapes
            return st.text(COUNTED_ALPHABET, min_size=schema.get("minLength", 0), max_size=schema.get("maxLength", 6))
        return st.text(max_size=6)
    if kind in ("integer", "number"):
        lo = schema.get("minimum", schema.get("exclusiveMinimum"))
        hi = schema.get("maximum", schema.get("exclusiveMaximum"))
        if kind == "integer":  # a side without a bound: at most 18 digits (the default limit)
            values = st.integers(-(10**18) + 1 if lo is None else lo, 10**18 - 1 if hi is None else hi)
        else:  # decimals written without exponent; never -0.0
            values = (
                st.decimals(lo, hi, places=1, allow_nan=False, allow_infinity=False)
                .map(lambda d: float(d) + 0.0)
                .filter(lambda x: "e" not in repr(x))
            )  # json.dumps(1e16) == "1e+16"
        return values.filter(lambda x: x != schema.get("exclusiveMinimum") and x != schema.get("exclusiveMaximum"))
    if kind == "array":
        return st.lists(instances(schema["items"]), min_size=schema["minItems"], max_size=schema["maxItems"])
    if kind == "object":
        members = [
            st.tuples(st.just(n), instances(s)).map(lambda x: [x])
            if n in schema["required"]
            else st.one_of(st.just([]), st.tuples(st.just(n), instances(s)).map(lambda x: [x]))
            for n, s in schema["properties"].items()
        ]
        return st.tuples(*members).map(lambda parts: dict(item for part in parts for item in part))
    return st.just({"boolean": True, "null": None}[kind])


FAMILY_SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)


@FAMILY_SETTINGS
@given(st.data())
def test_family_valid_instances_serialised_with_json_dumps_match(data):
    schema = data.draw(family)
    regex = re.compile(build_regex_from_schema(schema))
    for _ in range(5):
        value = data.draw(instances(schema))
        assert is_valid(value, schema), (value, schema)
        for text in serialisations(value):
            assert regex.fullmatch(text), (text, schema)


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family, st.integers(0, 1000))
def test_family_every_sampled_dfa_string_is_valid_json_for_the_schema(schema, seed):
    assert_sound(schema, n=40, seed=seed)


@pytest.mark.parametrize("numeral", ["1e-400", "-2.5E-330", "0." + "0" * 399 + "1"])
def test_a_number_below_the_smallest_double_is_refused_not_read_as_zero(numeral):
    """`minimum: 1e-400` read as 0 would allow 0, which the schema forbids: a silent weakening."""
    with pytest.raises(InvalidSchemaError, match="below the smallest double") as info:
        build_regex_from_schema(f'{{"type": "number", "minimum": {numeral}}}')
    assert numeral[:20] in str(info.value)
    assert matches({"type": "number", "minimum": 0.0}, "0")  # zero written as zero is fine
    assert build_regex_from_schema('{"type": "number", "minimum": 0e-400, "maximum": 5e-324}')  # (zero digits: 0)


def test_a_requests_schema_text_is_parsed_once(monkeypatch):
    """The fsm backend's arrival asks `is_cached`, then `get_cached_or_future_value`, and
    compiles: one json parse of the schema text for all three (the cache key's), and the
    lazy automaton reads the compiler's tree (no regex text parsed back)."""
    import minisglang
    import minisglang.backends.base as base
    import minisglang.constrained.json_schema.build as build
    import minisglang.constrained.lazy_token_fsm as lazy_token_fsm
    from minisglang.backends.base import get_backend_class
    from minisglang.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(minisglang.DEFAULT_MODEL_PATH)
    backend = get_backend_class("fsm")(tok, tok.vocab_size, threads=1)
    loads, parses = [], []
    monkeypatch.setattr(base, "load_schema", lambda text, real=base.load_schema: loads.append(text) or real(text))
    monkeypatch.setattr(build, "load_schema", lambda text, real=build.load_schema: loads.append(text) or real(text))
    monkeypatch.setattr(
        lazy_token_fsm, "parse_regex", lambda *a, real=lazy_token_fsm.parse_regex: parses.append(a) or real(*a)
    )
    try:
        text = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
        assert not backend.is_cached("json_schema", text)
        value, ready = backend.get_cached_or_future_value("json_schema", text)
        grammar = value if ready else value.result(timeout=60)
        assert type(grammar).__name__ == "FSMGrammar", grammar
        assert len(loads) == 1 and parses == [], (loads, parses)
    finally:
        backend.shutdown()


def test_a_schemas_long_strings_are_not_kept_after_its_compile():
    """The compiler's caches keyed by a schema's own strings (keys, consts and enum values,
    a `not`'s words; their regex text) keep only short ones: a client's 50 KB property names
    were kept ~150 KiB a schema, refused or not, ~180 MiB per 1,000 requests (a stranger's
    soak test). Short ones are still remembered (keys come back in every schema)."""
    from minisglang.constrained import regex_ast
    from minisglang.constrained.json_schema import string_chars

    for write, cache in [
        (regex_ast._escaped_text, regex_ast._remembered_escape),
        (string_chars._string_literal, string_chars._remembered_string_literal),
        (lambda text: string_chars._string_except([text, "b"]), string_chars._remembered_string_except),
    ]:
        before = cache.cache_info().currsize
        write("k" * (regex_ast.REMEMBERED_TEXT_CHARS + 1))
        assert cache.cache_info().currsize == before, f"{cache.__name__} kept a long text"
        write(f"short {id(cache)}")
        assert cache.cache_info().currsize == before + 1, f"{cache.__name__} no longer keeps a short text"
    schema = {"type": "object", "properties": {"k" * 50_000: {"const": "w" * 50_000}}, "required": ["k" * 50_000]}
    assert re.fullmatch(build_regex_from_schema(json.dumps(schema)), json.dumps({"k" * 50_000: "w" * 50_000}))


def test_the_remembered_character_classes_are_bounded_by_their_ranges():
    """A pattern's class is a client's to make, and its JSON-text regex grows with its ranges
    (`\\w`'s 734 held ~1.2 MB): 4,096 remembered classes by count could hold gigabytes. The
    remembered ones hold at most `max_ranges` ranges in all; a class asked for again is the
    same tree (remembered), and the least recently used goes first."""
    import minisglang.constrained.json_schema.string_chars as string_chars
    from minisglang.constrained.json_schema.string_chars import _json_string_chars, _RememberedClasses
    from minisglang.constrained.python_regex import shorthand_ranges

    word = list(shorthand_ranges("w"))
    cache = _RememberedClasses(max_ranges=3 * len(word))
    original, string_chars.REMEMBERED_CLASSES = string_chars.REMEMBERED_CLASSES, cache
    try:
        digits = _json_string_chars([(0x30, 0x39)])
        assert _json_string_chars([(0x30, 0x39)]) is digits  # remembered
        for i in range(10):  # ten distinct classes of about \w's size
            _json_string_chars(word[: len(word) - i])
            assert cache.ranges <= cache.max_ranges
        assert len(cache) <= 3
        assert _json_string_chars([(0x30, 0x39)]) is not digits  # the oldest went first
    finally:
        string_chars.REMEMBERED_CLASSES = original
