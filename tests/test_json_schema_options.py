"""SchemaOptions of the JSON Schema compiler: key order (any_order) and extra keys
(extra_properties), checked exhaustively on small objects against `jsonschema`. Covers
constrained/json_schema/options.py and objects.py."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from test_json_schema import assert_sound, is_valid

from minisglang.constrained.json_schema import UnsupportedSchemaError, build_regex_from_schema

SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}, "c": {"type": "null"}},
    "required": ["b"],
}
VALUES = {"a": [1, "x"], "b": [True], "c": [None, 0], "ab": [2], "": [None], "d": [[1]]}


def objects(keys: list[str]):
    """Every object over `keys` (each subset, each order, each value in VALUES), as key lists."""
    for n in range(len(keys) + 1):
        for chosen in itertools.permutations(keys, n):
            for values in itertools.product(*(VALUES[k] for k in chosen)):
                yield list(zip(chosen, values))


def text_of(pairs) -> str:
    return "{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in pairs) + "}"


def test_default_is_schema_order_and_no_extra_keys():
    regex = re.compile(build_regex_from_schema(SCHEMA))
    for pairs in objects(["a", "b", "c", "ab"]):
        keys = [k for k, _ in pairs]
        expected = is_valid(dict(pairs), SCHEMA) and keys == sorted(keys) and "ab" not in keys
        assert bool(regex.fullmatch(text_of(pairs))) == expected, pairs


def test_any_order_matches_every_valid_order_and_nothing_invalid():
    regex = re.compile(build_regex_from_schema(SCHEMA, any_order=True))
    for pairs in objects(["a", "b", "c", "ab"]):
        expected = is_valid(dict(pairs), SCHEMA) and "ab" not in dict(pairs)
        assert bool(regex.fullmatch(text_of(pairs))) == expected, pairs
    assert not regex.fullmatch('{"b": true, "b": true}')  # each member once


@pytest.mark.parametrize("any_order", [False, True])
def test_extra_properties_take_unlisted_keys_after_the_listed_ones(any_order):
    regex = re.compile(build_regex_from_schema(SCHEMA, extra_properties=True, any_order=any_order))
    for pairs in objects(["a", "b", "ab", "", "d"]):
        keys = [k for k, _ in pairs]
        listed = [k for k in keys if k in SCHEMA["properties"]]
        extras_last = keys == listed + [k for k in keys if k not in SCHEMA["properties"]]
        in_order = any_order or listed == sorted(listed)
        scalar_extras = all(not isinstance(v, list) for k, v in pairs if k not in SCHEMA["properties"])
        expected = is_valid(dict(pairs), SCHEMA) and extras_last and in_order and scalar_extras
        assert bool(regex.fullmatch(text_of(pairs))) == expected, pairs


def test_extra_keys_never_repeat_a_listed_key_in_any_spelling():
    regex = re.compile(build_regex_from_schema(SCHEMA, extra_properties=True))
    assert regex.fullmatch('{"b": true, "ab": 1}')  # "ab" is not listed
    for text in [
        '{"b": true, "a": "x"}',
        '{"b": true, "\\u0061": "x"}',
        '{"b": true, "b": 1}',
        '{"b": true, "\\u0062": 1}',
    ]:
        assert not regex.fullmatch(text), text


def test_extra_properties_follow_additional_properties_schema():
    schema = {**SCHEMA, "additionalProperties": {"type": "string", "maxLength": 1}}
    regex = re.compile(build_regex_from_schema(schema, extra_properties=True))
    assert regex.fullmatch('{"b": true, "z": "q"}')
    assert not regex.fullmatch('{"b": true, "z": "qq"}')
    assert not regex.fullmatch('{"b": true, "z": 1}')
    assert re.fullmatch(
        build_regex_from_schema({**SCHEMA, "additionalProperties": False}, extra_properties=True), '{"b": true}'
    )
    assert not re.fullmatch(
        build_regex_from_schema({**SCHEMA, "additionalProperties": False}, extra_properties=True), '{"b": true, "z": 1}'
    )


@pytest.mark.parametrize(
    "options", [{"any_order": True}, {"extra_properties": True}, {"any_order": True, "extra_properties": True}]
)
def test_options_are_sound_on_nested_objects(options):
    schema = {
        "type": "object",
        "properties": {
            "x": {
                "type": "object",
                "properties": {"p": {"type": "string", "maxLength": 2}, "q": {"enum": [1, 2]}},
                "required": ["q"],
            },
            "y": {"type": "array", "items": {"type": "integer", "minimum": 0}, "maxItems": 2},
            "z": {"type": "string"},
        },
        "required": ["x"],
    }
    assert_sound(schema, **options)


def test_any_order_is_bounded_with_a_clear_error():
    schema = {"type": "object", "properties": {k: {"type": "null"} for k in "abcde"}}
    with pytest.raises(
        UnsupportedSchemaError,
        match=re.escape("option any_order at #: the object has 5 properties, more than max_any_order_properties=4"),
    ):
        build_regex_from_schema(schema, any_order=True)
    regex = build_regex_from_schema(schema, any_order=True, max_any_order_properties=5)
    assert re.fullmatch(regex, '{"e": null, "a": null, "c": null}')
    assert build_regex_from_schema(schema)  # schema order has no such limit


# ---------------------------------------------------------------------------------------
# bound_numbers: digit limits on numbers the schema does not bound (default on)
# ---------------------------------------------------------------------------------------
NUMBER_SCHEMAS = [
    {"type": "number"},
    {"type": "integer"},
    {"type": "integer", "minimum": 0},
    {"type": "number", "maximum": -2.5},
    {"type": "number", "exclusiveMinimum": 1e3},
]
LONG_NUMERALS = ["1" * 19, "-" + "9" * 25, "0." + "5" * 21, "1e1234", "12345.5", "3", "-3", "0", "2.5e-3"]


@pytest.mark.parametrize("schema", NUMBER_SCHEMAS)
def test_bound_numbers_off_writes_any_digits_and_stays_exact(schema):
    """Off: every numeral JSON allows, judged by jsonschema; on: long ones are refused."""
    bounded = re.compile(build_regex_from_schema(schema))
    free = re.compile(build_regex_from_schema(schema, bound_numbers=False))
    for text in LONG_NUMERALS:
        value = json.loads(text)
        if bounded.fullmatch(text):
            assert free.fullmatch(text) and is_valid(value, schema), text
        if "e" in text or "." in text and schema["type"] == "integer":
            continue  # integers are written without fraction or exponent
        assert bool(free.fullmatch(text)) == is_valid(value, schema), (schema, text)
    assert not any(bounded.fullmatch(t) for t in LONG_NUMERALS[:3])
    assert_sound(schema, bound_numbers=False)


def test_bound_numbers_must_be_a_boolean():
    with pytest.raises(ValueError, match="option bound_numbers must be true or false"):
        build_regex_from_schema({"type": "number"}, bound_numbers=0)
