"""`$ref` and `$defs` in the JSON Schema compiler (minisglang/constrained/json_schema/refs.py):
local references (JSON pointers with escapes), recursion unrolled to a depth bound (sound
at every bound), `$id` and `$anchor` resolved inside the document, and bad references
refused naming what is wrong. Oracle: jsonschema."""

from __future__ import annotations

import json
import re

import pytest
from test_json_schema import assert_sound, is_valid, matches

from minisglang.constrained.json_schema import InvalidSchemaError, UnsupportedSchemaError, build_regex_from_schema


@pytest.mark.parametrize(
    "ref, defs_key", [("#/$defs/x~1y", "$defs"), ("#/definitions/x~1y", "definitions"), ("#/$defs/x%2Fy", "$defs")]
)
def test_local_refs(ref, defs_key):
    schema = {defs_key: {"x/y": {"type": "integer"}}, "type": "array", "items": {"$ref": ref}}
    assert matches(schema, "[1, 2]") and not matches(schema, '["a"]')


TREE = {
    "type": "object",
    "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#"}}},
    "required": ["v"],
}


def tree(depth: int) -> dict:
    return {"v": depth, "kids": [tree(depth - 1)] if depth else []}


@pytest.mark.parametrize("max_ref_depth", [0, 1, 3])
def test_recursion_is_unrolled_to_the_depth_bound(max_ref_depth):
    regex = re.compile(build_regex_from_schema(TREE, max_ref_depth=max_ref_depth))
    for depth in range(5):
        assert bool(regex.fullmatch(json.dumps(tree(depth)))) == (depth <= max_ref_depth)


def test_recursive_schema_is_sound():
    assert_sound(TREE, max_ref_depth=2)


@pytest.mark.parametrize(
    "schema, error, message",
    [
        ({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, InvalidSchemaError, "refers to itself"),
        ({"$ref": "#/$defs/missing"}, InvalidSchemaError, "points to nothing"),
        (
            {"$ref": "https://example.com/s.json"},
            UnsupportedSchemaError,
            "'$ref' 'https://example.com/s.json' at #: 'https://example.com/s.json' is not a schema resource of this "
            "document",
        ),
        ({"$ref": "#anchor"}, InvalidSchemaError, "'$ref' '#anchor' at #: no $anchor 'anchor'"),
        (
            {"$defs": {"a": {"$id": "a.json"}}, "properties": {"x": {"$ref": "b.json"}}},
            UnsupportedSchemaError,
            "'$ref' 'b.json' at #/properties/x",
        ),
    ],
)
def test_bad_refs(schema, error, message):
    with pytest.raises(error, match=re.escape(message)):
        build_regex_from_schema(schema)


def test_refs_to_ids_and_anchors_in_the_document():
    """$ref resolves against the base URI where it stands (the innermost $id), as in
    JSON Schema 2020-12; `enum` values that look like schemas are not resources."""
    small = {"type": "integer", "minimum": 0, "maximum": 3}
    cases = [
        ({"$defs": {"a": {"$anchor": "small", **small}}, "$ref": "#small"}, [0, 3], [4, "x"]),
        (
            {
                "$id": "http://example.com/root.json",
                "$defs": {"a": {"$id": "int.json", **small}},
                "properties": {"x": {"$ref": "int.json"}},
                "required": ["x"],
            },
            [{"x": 2}],
            [{"x": 5}],
        ),
        (
            {
                "$id": "http://example.com/root.json",
                "$defs": {
                    "a": {"$id": "nested/", "$defs": {"b": {"$id": "b.json", **small}}},
                    "c": {"$ref": "nested/b.json"},
                },
                "$ref": "#/$defs/c",
            },
            [1],
            [9],
        ),
        (
            {
                "$defs": {"a": {"$id": "http://example.com/a.json", "$defs": {"s": small}}},
                "$ref": "http://example.com/a.json#/$defs/s",
            },
            [1],
            [-1],
        ),
        (
            {
                "$defs": {"a": {"$id": "http://example.com/a.json", "$anchor": "here", **small}},
                "$ref": "http://example.com/a.json#here",
            },
            [1],
            [7],
        ),
    ]
    for schema, good, bad in cases:
        regex = re.compile(build_regex_from_schema(schema))
        for value in good + bad:
            assert bool(regex.fullmatch(json.dumps(value))) == is_valid(value, schema) == (value in good), value
    with pytest.raises(UnsupportedSchemaError, match="is not a schema resource"):
        build_regex_from_schema({"enum": [{"$id": "http://example.com/e.json"}], "$ref": "http://example.com/e.json"})
