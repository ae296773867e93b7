"""JSON Schema keywords beyond the basics, each exact or an error naming it: checked
exhaustively on small domains against `jsonschema` (the oracle): every string/value of
the domain, serialised with json.dumps, matches the compiled regex exactly when valid.
Covers constrained/json_schema/keywords.py and each type's rules (numbers.py, strings.py,
arrays.py, objects.py, applicators.py).
"""

from __future__ import annotations

import itertools
import json
import re

import jsonschema
import pytest
from test_json_schema import assert_sound, is_valid

from minisglang.constrained.json_schema import InvalidSchemaError, UnsupportedSchemaError, build_regex_from_schema


def oracle_for(schema):
    """jsonschema's verdict: draft 2020-12, or draft 7 for `dependencies` (2020-12 ignores it)."""
    if "dependencies" in schema:
        return lambda value: jsonschema.Draft7Validator(schema).is_valid(value)
    return lambda value: is_valid(value, schema)


def strings(alphabet: str, longest: int):
    for n in range(longest + 1):
        for chars in itertools.product(alphabet, repeat=n):
            yield "".join(chars)


def assert_exact_on(schema, values, **options) -> None:
    """For every value: the regex matches json.dumps(value) exactly when the value is valid
    (except a float equal to an integer, `3.0`, where the schema calls it an integer: the
    module writes integers without a fraction)."""
    regex = re.compile(build_regex_from_schema(schema, **options))
    for value in values:
        # ASCII escapes, or raw non-ASCII (strings with length bounds are written raw)
        matched = any(regex.fullmatch(json.dumps(value, ensure_ascii=ascii)) for ascii in (True, False))
        if isinstance(value, float) and value.is_integer() and not matched:
            continue
        assert matched == is_valid(value, schema), (schema, value)


# ---------------------------------------------------------------------------------------
# pattern with minLength/maxLength: the intersection, exactly
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "pattern",
    [
        "^[ab]+$",
        "a",
        "^a",
        "b$",
        "^a.b",
        "ab|^b+$",
        "^(ab|ba)*$",
        "^a{2}b?$",
        "[^a]",
        "^(?:a|bb)$",
        "^a*b*$",
        "\\\\",
        '^"?a',
    ],
)
@pytest.mark.parametrize("window", [(0, 2), (2, None), (1, 3), (3, 3), (4, 5)])
def test_pattern_with_length_is_the_exact_intersection(pattern, window):
    lo, hi = window
    schema = {"type": "string", "pattern": pattern, "minLength": lo, **({} if hi is None else {"maxLength": hi})}
    domain = list(strings('ab"\\', 5))
    try:
        build_regex_from_schema(schema)
    except UnsupportedSchemaError as e:
        if "accepts no JSON value" in str(e):  # an empty intersection
            assert not any(is_valid(s, schema) for s in domain)
        else:  # alternatives of different widths; a counted search (no leading ^)
            assert f"'pattern' '{pattern}' with 'minLength'/'maxLength' at #/pattern" in str(e)
            assert pattern == "^(?:a|bb)$" or not pattern.startswith("^")
        return
    assert_exact_on(schema, domain)


@pytest.mark.parametrize(
    "schema, whitespace, message",
    [
        (
            {"type": "string", "pattern": r"(?=\d)\d{3}-\d{4}"},
            None,
            r"'pattern' '(?=\d)\d{3}-\d{4}' at #/pattern: lookaround assertions are not supported",
        ),
        (
            {"type": "string", "pattern": "a\nb\x00(?=c)"},
            None,
            r"'pattern' 'a\nb\x00(?=c)' at #/pattern: lookaround assertions are not supported",
        ),
        (
            {"type": "object", "patternProperties": {r"^\d+(": {}}},
            None,
            r"'pattern' '^\d+(' at #/patternProperties/^\d+( is not a regex we can read: missing )",
        ),
        ({"type": "integer"}, r"\s(", r"whitespace regex '\s(' is invalid: invalid regex '\s(': missing )"),
        ({"type": "integer"}, r"[\s]*", r"whitespace regex '[\s]*' matches \s, which is not JSON whitespace"),
    ],
)
def test_a_refused_pattern_is_quoted_as_written(schema, whitespace, message):
    # Backslashes single (repr doubled them: '\\d{3}'), a newline or NUL escaped.
    with pytest.raises(ValueError) as info:
        build_regex_from_schema(schema, whitespace=whitespace)
    assert message in str(info.value) and "\\\\" not in str(info.value)


def test_pattern_with_length_refuses_varying_width_repeats_by_name():
    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": "^(a|bc)+$", "maxLength": 4}}}
    with pytest.raises(
        UnsupportedSchemaError,
        match=re.escape("'pattern' '^(a|bc)+$' with 'minLength'/'maxLength' at #/properties/x/pattern"),
    ):
        build_regex_from_schema(schema)


def test_pattern_with_length_is_sound_on_real_shapes():
    for schema in [
        {"type": "string", "pattern": "^[a-zA-Z0-9_-]+$", "maxLength": 64},
        {"type": "string", "pattern": "^[A-Z]{2}[0-9]{2,4}$", "minLength": 5},
        {"type": "string", "pattern": "\\S", "minLength": 1},
        {"type": "string", "pattern": "^[a-z]", "minLength": 3, "maxLength": 40},
        {"type": "string", "pattern": "^\\d{3}-\\d{4}$", "maxLength": 8},
    ]:
        assert_sound(schema)


# ---------------------------------------------------------------------------------------
# Object keywords over a finite set of properties
# ---------------------------------------------------------------------------------------
PROPS = {"a": {"type": "integer"}, "b": {"type": ["boolean", "string"]}, "c": {"type": "null"}}
MEMBER_VALUES = {"a": [1], "b": [True, "x"], "c": [None], "d": [2]}


def small_objects(keys="abc"):
    """Every object over `keys` with keys in sorted (schema) order and values from MEMBER_VALUES."""
    for n in range(len(keys) + 1):
        for chosen in itertools.combinations(keys, n):
            for values in itertools.product(*(MEMBER_VALUES[k] for k in chosen)):
                yield dict(zip(chosen, values))


@pytest.mark.parametrize(
    "extra",
    [
        {"dependentRequired": {"a": ["b"]}},
        {"dependentRequired": {"a": ["b", "c"], "c": ["b"]}},
        {"dependentRequired": {"a": []}},
        {"dependentSchemas": {"a": {"properties": {"b": {"type": "string"}}, "required": ["b"]}}},
        {"dependentSchemas": {"b": {"required": ["c"]}, "c": False}},
        {"dependencies": {"a": ["c"], "b": {"properties": {"a": {"maximum": 0}}}}},
        {"dependentRequired": {"z": ["a"]}},  # a dependency on a key that never appears
        {"required": ["a"], "dependentRequired": {"a": ["b"]}},
        {"minProperties": 2},
        {"maxProperties": 1},
        {"minProperties": 1, "maxProperties": 2, "required": ["c"]},
        {"maxProperties": 0},
        {"minProperties": 4},
        {"minProperties": 2, "dependentRequired": {"c": ["a"]}},
    ],
)
@pytest.mark.parametrize("any_order", [False, True])
def test_object_keywords_are_exact_on_every_small_object(extra, any_order):
    schema = {"type": "object", "properties": PROPS, **extra}
    domain = list(small_objects())
    valid = oracle_for(schema)
    try:
        regex = re.compile(build_regex_from_schema(schema, any_order=any_order))
    except UnsupportedSchemaError as e:  # (JSON Schema allows other keys: our policy leaves none)
        assert "accepts no JSON value" in str(e) or "no value that minisglang writes" in str(e)
        assert not any(valid(v) for v in domain)
        return
    for value in domain:
        assert bool(regex.fullmatch(json.dumps(value))) == valid(value), value
        if any_order:  # every order of the same members
            for keys in itertools.permutations(value):
                text = json.dumps({k: value[k] for k in keys})
                assert bool(regex.fullmatch(text)) == valid(value), text


def test_min_properties_beyond_the_listed_keys_blames_the_policy_not_the_schema():
    """{"type": "object", "properties": {"a": ...}, "minProperties": 2} was refused with "the schema
    accepts no JSON value", but {"a": 1, "b": 2} is valid: it is our policy (no unlisted keys
    without additionalProperties) that leaves none (a stranger's differential fuzzing,
    2026-12-05). With the option extra_properties it compiles."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "minProperties": 2}
    assert is_valid({"a": 1, "b": 2}, schema)
    with pytest.raises(UnsupportedSchemaError) as info:
        build_regex_from_schema(schema)
    message = str(info.value)
    assert "accepts no JSON value" not in message and "no value that minisglang writes" in message
    assert "minProperties 2 at #" in message and "extra_properties" in message
    with pytest.raises(UnsupportedSchemaError, match="accepts no JSON value"):  # (a schema's own emptiness)
        build_regex_from_schema({**schema, "additionalProperties": False})
    for additional in (True, {"type": "string"}):  # (also ours: no unlisted keys beside properties)
        with pytest.raises(UnsupportedSchemaError, match="no value that minisglang writes.*extra_properties"):
            build_regex_from_schema({**schema, "additionalProperties": additional})


@pytest.mark.parametrize("automaton", ["eager", "lazy"])
def test_min_properties_beyond_what_the_patterns_allow_blames_the_policy_not_the_schema(automaton):
    """The same with patternProperties in place of properties: no key outside the patterns is
    written without additionalProperties, so {"patternProperties": {"^x$": false},
    "minProperties": 1} has no value we write, but {"a": 1} is valid. It was refused as "the
    schema accepts no JSON value", blaming the `false` (another stranger's fuzzer)."""
    schema = {"type": "object", "patternProperties": {"^x$": False}, "minProperties": 1}
    assert is_valid({"a": 1}, schema)
    with pytest.raises(UnsupportedSchemaError) as info:
        build_regex_from_schema(schema, automaton=automaton)
    message = str(info.value)
    assert "accepts no JSON value" not in message and "no value that minisglang writes" in message
    assert "minProperties 1 at #" in message and "additionalProperties" in message
    with pytest.raises(UnsupportedSchemaError, match="accepts no JSON value"):  # (a schema's own emptiness)
        build_regex_from_schema({**schema, "additionalProperties": False}, automaton=automaton)


@pytest.mark.parametrize(
    "keys",
    [{}, {"additionalProperties": {"type": "integer"}}, {"patternProperties": {"^p": {}}}],
)
def test_min_properties_above_max_properties_on_a_map_writes_nothing(keys):
    """{"type": "object", "minProperties": 1, "maxProperties": 0} wrote {} (maxProperties 0 left
    no entry and minProperties 1 was forgotten): a stranger's differential fuzzing, 2026-12-05."""
    schema = {"type": "object", "minProperties": 1, "maxProperties": 0, **keys}
    assert not is_valid({}, schema)
    for automaton in ("eager", "lazy"):
        with pytest.raises(UnsupportedSchemaError, match="minProperties 1 is above maxProperties 0"):
            build_regex_from_schema(schema, automaton=automaton)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "additionalProperties": {"type": "integer"}, "maxProperties": 2},
        {"type": "object", "additionalProperties": {"type": "integer"}, "maxProperties": 0},
        {"type": "object", "required": ["a"], "additionalProperties": {"type": "integer"}, "maxProperties": 2},
        {"type": "object", "required": ["a"], "minProperties": 1},
        {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1},  # one entry or more
        {"type": "object", "minProperties": 1, "maxProperties": 2},
    ],
)
def test_max_properties_on_maps_counts_entries(schema):
    domain = [dict(zip(keys, itertools.repeat(1))) for n in range(4) for keys in itertools.combinations("abcd", n)]
    assert_exact_on(schema, domain)
    assert_sound(schema)


@pytest.mark.parametrize(
    "schema, message",
    [
        (
            {"type": "object", "properties": {"x": {"type": "object", "minProperties": 2}}},
            "keyword 'minProperties' at #/properties/x is not supported on an object with unlisted keys",
        ),
        (  # optional listed properties beside unlisted keys: no regex here counts them (a fuzzer's `{}`)
            {
                "type": "object",
                "properties": {"a": {"type": "integer"}},
                "patternProperties": {"^x": {"type": "integer"}},
                "minProperties": 1,
            },
            "keyword 'minProperties' at # is not supported on an object with unlisted keys",
        ),
        ({"const": "\ud800"}, "holds a lone surrogate, U+D800"),  # (was an assert with no message)
        ({"enum": ["a", "b\udfff"]}, "holds a lone surrogate, U+DFFF"),
        ({"type": "object", "properties": {"\udc00": {}}, "required": ["\udc00"]}, "holds a lone surrogate, U+DC00"),
        ({"dependentRequired": {"a": "b"}}, "'dependentRequired' at #/dependentRequired/a must be an array"),
        ({"dependentSchemas": {"a": ["b"]}}, "'dependentSchemas' at #/dependentSchemas/a must be a schema"),
    ],
)
def test_object_keyword_errors_name_keyword_and_place(schema, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build_regex_from_schema(schema)


def test_object_keywords_are_sound_nested():
    schema = {
        "type": "array",
        "maxItems": 2,
        "items": {
            "type": "object",
            "properties": {
                "id": {"type": "integer", "minimum": 0},
                "name": {"type": "string"},
                "tags": {"type": "array", "items": {"enum": ["x", "y"]}},
            },
            "dependentRequired": {"tags": ["name"]},
            "minProperties": 1,
            "maxProperties": 2,
        },
    }
    assert_sound(schema)


# ---------------------------------------------------------------------------------------
# not: the forms with an exact complement
# ---------------------------------------------------------------------------------------
SCALARS = [None, True, False, 0, 1, 2, -1, 1.5, -0.25, 3.0, "", "a", "ab", "b", "é", [], [1], {}, {"a": 1}]


@pytest.mark.parametrize(
    "schema",
    [
        {"not": {"type": "string"}},
        {"not": {"type": ["integer", "null"]}},
        {"not": {"type": "integer"}},
        {"not": {"not": {"type": "integer"}}},
        {"not": {"const": 1}},
        {"type": "integer", "not": {"enum": [0, 2]}, "minimum": -1, "maximum": 3},
        {"type": ["string", "boolean"], "not": {"enum": ["a", True, ""]}},
        {"type": "number", "not": {"const": 1.5}},
        {"not": {"minimum": 1}},
        {"not": {"type": "number", "exclusiveMaximum": 1}},
        {"not": {"maxLength": 1}},
        {"type": "string", "not": {"minLength": 2}},
        {"not": {"anyOf": [{"type": "string"}, {"const": None}]}},
        {"not": {"$ref": "#/$defs/small"}, "$defs": {"small": {"enum": [0, 1, "a"]}}},
        {"not": {"not": {"not": {"type": "boolean"}}}},
        {"allOf": [{"not": {"const": "a"}}, {"not": {"const": "b"}}], "type": "string"},
    ],
)
def test_not_is_exact_on_small_values(schema):
    assert_exact_on(schema, SCALARS)


@pytest.mark.parametrize(
    "schema",
    [
        {"not": {"type": "string", "x-order": 1}},
        {"not": {"type": ["integer", "null"], "nullable": True, "discriminator": {"propertyName": "kind"}}},
        {"oneOf": [{"type": "integer", "x-go-type": "int64"}, {"type": ["integer", "string"], "maximum": 1}]},
        {"not": {"maxItems": 0, "minContains": 2, "maxContains": 3}},
    ],
)
def test_not_ignores_unknown_keywords_as_the_schema_does(schema):
    """An unknown keyword (OpenAPI's nullable and discriminator, x-...), or minContains/maxContains
    without a `contains` beside them, constrains nothing, so its negation has no value: `not` of
    a branch holding one was refused ('the negation of 'x-order' cannot be written exactly'),
    and so was a oneOf whose branches may overlap (schema_fuzz)."""
    assert_exact_on(schema, SCALARS)


def test_not_true_accepts_nothing_and_not_false_anything():
    with pytest.raises(UnsupportedSchemaError, match="accepts no JSON value"):
        build_regex_from_schema({"not": True})
    assert_exact_on({"not": False, "type": "integer"}, SCALARS)


def test_not_required_means_absent():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "null"}, "b": {"type": "null"}},
        "not": {"required": ["a", "b"]},
    }
    assert_exact_on(schema, [{}, {"a": None}, {"b": None}, {"a": None, "b": None}])


def test_excluded_strings_are_sound_in_every_spelling():
    schema = {
        "type": "object",
        "properties": {"k": {"type": "string", "not": {"enum": ["a", "é", ""]}}},
        "required": ["k"],
    }
    assert_sound(schema, n=300)
    regex = re.compile(build_regex_from_schema(schema))
    for text in ['{"k": "a"}', '{"k": "\\u0061"}', '{"k": "\\u00e9"}', '{"k": "é"}', '{"k": ""}']:
        assert not regex.fullmatch(text), text
    assert regex.fullmatch('{"k": "ab"}') and regex.fullmatch('{"k": "\\u00e9\\u00e9"}')


@pytest.mark.parametrize(
    "schema, message",
    [
        (
            {"not": {"pattern": "^a"}},
            "keyword 'not' at #/not: the negation of 'pattern' is written only for automaton='lazy'",
        ),
        ({"not": {"format": "date"}}, "keyword 'not' at #/not: the negation of 'format' cannot be written exactly"),
        (
            {"properties": {"x": {"not": {"const": [1]}}}},
            "keyword 'not' at #/properties/x/not: excluding array or object values",
        ),
        (
            {"type": "string", "maxLength": 3, "not": {"const": "a"}},
            "keyword 'not' at #/not: excluding string values from a string with pattern, format or length bounds",
        ),
        (
            {"minimum": 0, "not": {"type": "integer"}},
            "keyword 'not' at #/not: 'not integer' together with minimum/maximum",
        ),
    ],
)
def test_not_that_cannot_be_written_exactly_names_keyword_and_place(schema, message):
    with pytest.raises(UnsupportedSchemaError, match=re.escape(message)):
        build_regex_from_schema(schema)


def test_not_of_an_enum_that_is_no_array_is_an_invalid_schema():
    """The negation reads enum's values itself: a malformed one is the schema's error, as
    outside `not` (it was a TypeError from iterating None)."""
    with pytest.raises(InvalidSchemaError, match=re.escape("'enum' at #/properties/x/not must be an array, got 5")):
        build_regex_from_schema({"properties": {"x": {"not": {"enum": 5}}}})


# ---------------------------------------------------------------------------------------
# patternProperties and propertyNames
# ---------------------------------------------------------------------------------------
KEY_VALUES = {k: [1, "s"] for k in ["a", "x-1", "x-", "b", "y2", "ab"]}


def objects_over(keys: list[str]):
    """Every object over `keys` (each subset in the listed order, values 1 or "s")."""
    for n in range(len(keys) + 1):
        for chosen in itertools.combinations(keys, n):
            for values in itertools.product(*(KEY_VALUES[k] for k in chosen)):
                yield dict(zip(chosen, values))


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "patternProperties": {"^x-": {"type": "integer"}}},
        {"type": "object", "patternProperties": {"^x-": {"type": "integer"}, "^y[0-9]$": {"type": "string"}}},
        {
            "type": "object",
            "properties": {"a": {"type": "string"}},
            "patternProperties": {"^x-.": {"type": "integer"}},
            "additionalProperties": False,
        },
        {"type": "object", "properties": {"ab": {"type": ["string", "integer"]}}, "patternProperties": {"b": False}},
        {
            "type": "object",
            "properties": {"ab": {"type": "string"}, "a": {}},
            "patternProperties": {"b": False, "^x[-0-9]*$": {}},
        },
        {"type": "object", "required": ["a"], "patternProperties": {"^x": {"type": "integer"}}},
        {"type": "object", "patternProperties": {"^x-": False, "^y": {"type": "string"}}},
        {"type": "object", "patternProperties": {"^x-": {"type": "integer"}}, "maxProperties": 1},
        {"type": "object", "propertyNames": {"maxLength": 1}, "additionalProperties": {"type": "integer"}},
        {"type": "object", "propertyNames": {"pattern": "^[a-b]+$"}},
        {"type": "object", "propertyNames": {"enum": ["a", "x-"]}, "additionalProperties": True},
        {"type": "object", "properties": {"a": {}, "x-1": {}, "b": {}}, "propertyNames": {"pattern": "^[a-z]$"}},
        {"type": "object", "propertyNames": False},
        {"type": "object", "propertyNames": {"const": "b"}, "required": ["a"]},
    ],
)
def test_pattern_properties_and_property_names_are_exact_on_small_objects(schema):
    """The listed keys in schema order, then the pattern keys (or map keys) in any order."""
    domain = list(objects_over(["a", "ab", "x-1", "x-", "b", "y2"]))
    try:
        regex = re.compile(build_regex_from_schema(schema))
    except UnsupportedSchemaError as e:
        assert "accepts no JSON value" in str(e) and not any(is_valid(v, schema) for v in domain)
        return
    listed = list(schema.get("properties", {})) + [
        r for r in schema.get("required", []) if r not in schema.get("properties", {})
    ]
    patterns = schema.get("patternProperties", {})

    def written(key):  # the policy: with properties or patternProperties, no other keys
        return not (listed or patterns) or key in listed or any(re.search(p, key) for p in patterns)

    for value in domain:
        in_order = [k for k in value if k in listed] == [k for k in listed if k in value]
        listed_first = all(k in listed for k in list(value)[: sum(k in listed for k in value)])
        expected = is_valid(value, schema) and in_order and listed_first and all(map(written, value))
        assert bool(regex.fullmatch(json.dumps(value))) == expected, value
    assert_sound(schema)


@pytest.mark.parametrize(
    "schema, message",
    [
        (
            {"patternProperties": {"^a": {}, "b$": {}}},
            "keyword 'patternProperties' at #/patternProperties/b$: some key matches both 'b$' and '^a'",
        ),
        (
            {"properties": {"ab": {}}, "patternProperties": {"^a": {}}, "additionalProperties": False},
            "keyword 'patternProperties' at #/patternProperties/^a: the pattern also matches the listed property 'ab'",
        ),
        (
            {"patternProperties": {"^a": {}}, "additionalProperties": {"type": "integer"}},
            "keyword 'patternProperties' at # together with additionalProperties is not supported",
        ),
        (
            {"patternProperties": {"^a": {}}, "propertyNames": {"maxLength": 3}},
            "keyword 'patternProperties' at # together with propertyNames is not supported",
        ),
        (
            {"type": "object", "properties": {"x": {"patternProperties": {"^(?=a)": {}}}}},
            "#/properties/x/patternProperties/^(?=a)",
        ),
    ],
)
def test_pattern_properties_that_cannot_be_exact_name_keyword_and_place(schema, message):
    with pytest.raises(UnsupportedSchemaError, match=re.escape(message)):
        build_regex_from_schema(schema)


# ---------------------------------------------------------------------------------------
# unevaluatedProperties / unevaluatedItems where they equal additionalProperties / items
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "integer"}}, "unevaluatedProperties": False},
        {"type": "object", "unevaluatedProperties": {"type": "integer"}},
        {"type": "object", "additionalProperties": {"type": "integer"}, "unevaluatedProperties": False},
        {"type": "array", "prefixItems": [{"type": "integer"}], "unevaluatedItems": False},
        {"type": "array", "prefixItems": [{"type": "integer"}], "unevaluatedItems": {"type": "string"}},
        {"type": "array", "items": {"type": "integer"}, "unevaluatedItems": False},
    ],
)
def test_unevaluated_without_applicators_is_exact(schema):
    values = [
        {},
        {"a": 1},
        {"a": "x"},
        {"b": 1},
        {"a": 1, "b": 2},
        {"b": "x"},
        [],
        [1],
        ["x"],
        [1, 2],
        [1, "x"],
        [1, "x", "y"],
    ]
    assert_exact_on(schema, values)


def test_unevaluated_with_applicators_stays_an_error():
    schema = {"allOf": [{"properties": {"a": {}}}], "unevaluatedProperties": False}
    with pytest.raises(UnsupportedSchemaError, match="keyword 'unevaluatedProperties' at #"):
        build_regex_from_schema(schema)


# ---------------------------------------------------------------------------------------
# if / then / else: (if and then) or (not if and else)
# ---------------------------------------------------------------------------------------
KINDS = [{"kind": k, "size": s} for k in ["a", "b", 1, None] for s in [0, 5, "x"]] + [
    {"size": 0},
    {"kind": "a"},
    {},
    "a",
    3,
    None,
]


@pytest.mark.parametrize(
    "schema",
    [
        {
            "type": "object",
            "properties": {"kind": {"enum": ["a", "b", 1, None]}, "size": {}},
            "if": {"properties": {"kind": {"const": "a"}}, "required": ["kind"]},
            "then": {"properties": {"size": {"type": "integer", "maximum": 3}}},
            "else": {"properties": {"size": {"type": "string"}}},
        },
        {
            "type": "object",
            "properties": {"kind": {}, "size": {}},
            "if": {"properties": {"kind": {"enum": ["a", "b"]}}},
            "then": {"required": ["size"]},
        },
        {
            "if": {"type": "string"},
            "then": {"const": "a"},
            "else": {"type": "object", "properties": {"kind": {}, "size": {}}},
        },
        {
            "type": "object",
            "properties": {"kind": {}, "size": {}},
            "if": {"required": ["kind"]},
            "else": {"properties": {"size": {"minimum": 1}}},
        },
        {"type": "object", "properties": {"kind": {}, "size": {}}, "then": {"required": ["kind"]}},  # no if: ignored
    ],
)
def test_if_then_else_is_exact_on_small_values(schema):
    assert_exact_on(schema, KINDS)


def test_if_that_cannot_be_negated_names_the_place():
    schema = {"type": "string", "if": {"pattern": "^a"}, "then": {"maxLength": 3}}
    with pytest.raises(UnsupportedSchemaError, match=re.escape("keyword 'not' at #/if: the negation of 'pattern'")):
        build_regex_from_schema(schema)


@pytest.mark.parametrize(
    ("schema", "place"),
    [
        (
            {"type": "object", "if": {"required": ["a"]}, "then": {"properties": {"b": {"pattern": "(?<=x)"}}}},
            "#/then/properties/b/pattern",
        ),
        ({"if": {"minimum": 3}, "then": {"type": "integer"}, "else": {"multipleOf": -1}}, "#/else"),
        (
            {"type": "object", "properties": {"x": {"if": {"minimum": 3}, "then": {"multipleOf": 0}}}},
            "#/properties/x/then",
        ),
        (
            {"type": "object", "dependentSchemas": {"a": {"properties": {"b": {"pattern": "(?=y)"}}}}},
            "#/dependentSchemas/a/properties/b/pattern",
        ),
    ],
)
def test_an_error_inside_then_else_or_a_dependency_names_the_users_place(schema, place):
    """if/then/else and dependencies are compiled as an anyOf the compiler writes; an error in
    a branch names where that branch is in the user's schema, not the internal `#/anyOf/0`."""
    with pytest.raises((UnsupportedSchemaError, InvalidSchemaError)) as info:
        build_regex_from_schema(schema)
    assert f" at {place}" in str(info.value) and "anyOf" not in str(info.value)


# ---------------------------------------------------------------------------------------
# contains / minContains / maxContains: N* (Y N*){lo,hi}
# ---------------------------------------------------------------------------------------
def small_arrays(values, longest=4):
    for n in range(longest + 1):
        yield from (list(items) for items in itertools.product(values, repeat=n))


ITEMS = {"enum": [1, 2, "a", None]}


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": ITEMS, "contains": {"const": 1}},
        {"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 2}},
        {"type": "array", "items": ITEMS, "contains": {"type": "string"}, "minContains": 2},
        {"type": "array", "items": ITEMS, "contains": {"type": "string"}, "maxContains": 1},
        {"type": "array", "items": ITEMS, "contains": {"enum": [1, "a"]}, "minContains": 2, "maxContains": 3},
        {"type": "array", "items": ITEMS, "contains": {"const": 1}, "minContains": 0, "maxContains": 1},
        {"type": "array", "items": ITEMS, "contains": {"const": 1}, "minContains": 0},
        {"type": "array", "items": {"const": 1}, "contains": {"const": 1}, "maxContains": 2},
        {"type": "array", "items": ITEMS, "contains": {"type": "string"}, "minContains": 3, "maxContains": 2},
        # with minItems/maxItems: a walk over (items, matches) counts both
        {"type": "array", "items": ITEMS, "contains": {"const": 1}, "maxItems": 3},
        {"type": "array", "items": ITEMS, "contains": {"const": 1}, "minItems": 2, "maxItems": 4},
        {
            "type": "array",
            "items": ITEMS,
            "contains": {"enum": [1, "a"]},
            "minContains": 2,
            "maxContains": 3,
            "minItems": 3,
            "maxItems": 4,
        },
        {
            "type": "array",
            "items": ITEMS,
            "contains": {"type": "string"},
            "minContains": 0,
            "maxContains": 1,
            "maxItems": 2,
        },
        {"type": "array", "items": {"const": 1}, "contains": {"const": 1}, "minContains": 2, "maxItems": 3},
        {"type": "array", "items": ITEMS, "contains": {"const": 1}, "minContains": 3, "maxItems": 2},
    ],
)
def test_contains_is_exact_on_small_arrays(schema):
    domain = list(small_arrays([1, 2, "a", None]))
    try:
        build_regex_from_schema(schema)
    except UnsupportedSchemaError as e:
        assert "accepts no JSON value" in str(e) and not any(is_valid(v, schema) for v in domain)
        return
    assert_exact_on(schema, domain)


def test_contains_over_any_items_is_refused_by_size_not_compiled_for_minutes():
    with pytest.raises(
        UnsupportedSchemaError,
        match=re.escape("keyword 'contains' at #: the item regexes with and without a match take"),
    ):
        build_regex_from_schema({"type": "array", "contains": {"const": 1}})


def test_contains_that_cannot_be_exact_names_keyword_and_place():
    with pytest.raises(
        UnsupportedSchemaError,
        match=re.escape("keyword 'contains' at #/items together with minItems (without maxItems)"),
    ):
        build_regex_from_schema({"type": "array", "items": {"type": "array", "contains": {}, "minItems": 3}})
    with pytest.raises(UnsupportedSchemaError, match=re.escape("keyword 'contains' at # together with uniqueItems")):
        build_regex_from_schema({"type": "array", "items": ITEMS, "contains": {"const": 1}, "uniqueItems": True})
    with pytest.raises(
        UnsupportedSchemaError, match=re.escape("keyword 'not' at #/contains: the negation of 'pattern'")
    ):
        build_regex_from_schema({"type": "array", "contains": {"pattern": "a"}})


# ---------------------------------------------------------------------------------------
# uniqueItems over a few possible values: every arrangement of distinct values
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": {"enum": [1, "a", None]}, "uniqueItems": True},
        {"type": "array", "items": {"type": "boolean"}, "uniqueItems": True, "minItems": 1},
        {"type": "array", "items": {"enum": [1, 1.0, 2, [1]]}, "uniqueItems": True, "maxItems": 2},
        {"type": "array", "items": {"type": ["boolean", "null"]}, "uniqueItems": True, "minItems": 3},
        {"type": "array", "items": {"enum": [1, 2, 3]}, "uniqueItems": True, "minItems": 4},
        {"type": "array", "items": {"type": "integer"}, "uniqueItems": True, "maxItems": 1},
    ],
)
def test_unique_items_is_exact_on_small_arrays(schema):
    domain = list(small_arrays([1, 2, "a", None, True, False, [1]], longest=4))
    try:
        build_regex_from_schema(schema)
    except UnsupportedSchemaError as e:
        assert "accepts no JSON value" in str(e) and not any(is_valid(v, schema) for v in domain)
        return
    assert_exact_on(schema, domain)


@pytest.mark.parametrize(
    "schema, message",
    [
        (
            {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
            "keyword 'uniqueItems' at # is supported only for items with at most 4 possible values",
        ),
        (
            {"type": "array", "items": {"enum": [1, 2, 3, 4, 5]}, "uniqueItems": True},
            "keyword 'uniqueItems' at #: 5 possible item values, more than 4",
        ),
        (
            {"type": "array", "prefixItems": [{"const": 1}], "uniqueItems": True},
            "keyword 'uniqueItems' at # together with prefixItems",
        ),
    ],
)
def test_unique_items_that_cannot_be_exact_names_keyword_and_place(schema, message):
    with pytest.raises(UnsupportedSchemaError, match=re.escape(message)):
        build_regex_from_schema(schema)


# ---------------------------------------------------------------------------------------
# multipleOf: integer steps, decimal places
# ---------------------------------------------------------------------------------------
NUMERALS = [n for n in range(-1100, 1101)] + [x / 100 for x in range(-300, 301, 7)] + [2.5, -7.5, 0.125]


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "multipleOf": 5},
        {"type": "integer", "multipleOf": 8, "minimum": 0},
        {"type": "integer", "multipleOf": 25, "exclusiveMaximum": 0},
        {"type": "integer", "multipleOf": 3, "minimum": -20, "maximum": 40},
        {"type": "integer", "multipleOf": 7, "exclusiveMinimum": 14, "exclusiveMaximum": 70.5},
        {"type": "number", "multipleOf": 2},
        {"type": "integer", "multipleOf": 0.5},
        {"type": "integer", "multipleOf": 1.5, "minimum": 0, "maximum": 30},
        {"type": "number", "multipleOf": 0.01, "minimum": -1, "maximum": 1.5},
        {"type": "number", "multipleOf": 0.1, "exclusiveMinimum": -0.5, "maximum": 3},
        {"type": "number", "multipleOf": 2.5, "minimum": -10, "maximum": 10},
        {"type": "integer", "multipleOf": 1000, "minimum": 0},
        # validators divide by the double: 1 / 1e-05 is 99999.99999999999, no multiple; every
        # integer was written (schema_fuzz). 1 / 0.1 is 10.0: all integers stay
        {"type": "integer", "multipleOf": 1e-05, "minimum": -50, "maximum": 200},
        {"type": "integer", "multipleOf": 0.1},
    ],
)
def test_multiple_of_is_exact_on_numbers(schema):
    assert_exact_on(schema, NUMERALS)
    assert_sound(schema)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "number", "multipleOf": 0.5, "minimum": 0, "maximum": 10},
        {"type": "number", "multipleOf": 2, "minimum": -4, "maximum": 10},
        {"type": "number", "multipleOf": 5},
    ],
)
def test_whole_multiples_of_a_number_match_as_json_dumps_writes_floats(schema):
    """json.dumps writes the float 4.0 as "4.0": a valid multiple that the number type accepts."""
    regex = re.compile(build_regex_from_schema(schema))
    for value in [0.0, 4.0, 10.0, -4.0, 20.0, 3.0, 4.5, 7.0]:
        assert bool(regex.fullmatch(json.dumps(value))) == is_valid(value, schema), value


@pytest.mark.parametrize(
    "schema, message",
    [
        ({"type": "integer", "multipleOf": 3}, "keyword 'multipleOf' at #: multiples of 3 are supported within bounds"),
        ({"type": "integer", "multipleOf": 2, "minimum": 1}, "keyword 'multipleOf' at #: multiples of 2"),
        (
            {"type": "number", "multipleOf": 0.5},
            "keyword 'multipleOf' at #: a fractional multipleOf (0.5) is supported "
            "only between a minimum and a maximum",
        ),
        ({"type": "number", "multipleOf": 0.001, "minimum": 0, "maximum": 1}, "more than 256 multiples of 0.001"),
        ({"type": "integer", "multipleOf": 0}, "'multipleOf' at # must be greater than 0"),
        ({"type": "integer", "multipleOf": 1e-05}, "keyword 'multipleOf' at #: validators divide by the double"),
    ],
)
def test_multiple_of_that_cannot_be_exact_names_keyword_and_place(schema, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build_regex_from_schema(schema)


# ---------------------------------------------------------------------------------------
# oneOf with branches that may overlap: branch i and not the branches it may meet
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "schema",
    [
        {"oneOf": [{"type": "string"}, {"maxLength": 2}]},
        {"type": "string", "oneOf": [{"minLength": 2}, {"maxLength": 3}]},
        {"oneOf": [{"enum": [1, 2, "a"]}, {"enum": [2, "a", None]}, {"type": "boolean"}]},
        {"type": "object", "properties": {"a": {}, "b": {}}, "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
    ],
)
def test_one_of_with_overlaps_is_exact_when_branches_negate(schema):
    values = SCALARS + ["abcd", "abc", {"a": 1, "b": 2}, {"b": 1}, 2.5, 5, -3]
    assert_exact_on(schema, values)


@pytest.mark.parametrize(
    "schema, types",
    [
        ({"anyOf": [{"type": "number"}, {"type": "null"}]}, {"number", "null"}),
        ({"type": "number", "anyOf": [{"type": "integer"}, {"type": "string"}]}, {"integer"}),
        ({"oneOf": [{"enum": [1, "a"]}, {"anyOf": [{"type": "boolean"}]}]}, {"integer", "string", "boolean"}),
        ({"anyOf": [{"type": "integer"}, {"minimum": 3}]}, None),  # (a branch of any type: any)
        ({"type": "string", "anyOf": [{"$ref": "#/$defs/x"}]}, {"string"}),
    ],
)
def test_declared_types_read_an_any_of_whose_branches_all_declare_theirs(schema, types):
    from minisglang.constrained.json_schema.keywords import _declared_types

    assert _declared_types(schema, "#") == types


def test_one_of_is_disjoint_by_the_types_of_a_branch_s_any_of():
    """A stranger's tool fuzzing: a oneOf whose number branch was wrapped in anyOf, beside a
    string with a format, was refused (the format's negation cannot be written), though no
    value can fit both: the branch's types are its anyOf's."""
    schema = {"oneOf": [{"anyOf": [{"type": "number"}, {"type": "null"}]}, {"type": "string", "format": "date"}]}
    assert_exact_on(schema, [*SCALARS, "2024-02-29", "2023-02-29", 2.5])


def test_one_of_that_cannot_be_negated_says_why():
    schema = {"type": "string", "oneOf": [{"pattern": "a"}, {"format": "date"}]}
    with pytest.raises(
        UnsupportedSchemaError,
        match=re.escape("'oneOf' at #: branches 0 and 1 may both accept a value") + ".*negation of 'format'",
    ):
        build_regex_from_schema(schema)
    # The negation of a pattern is a difference: the lazy automaton's, refused by the eager one.
    schema = {"type": "string", "oneOf": [{"pattern": "a"}, {"pattern": "b"}]}
    with pytest.raises(UnsupportedSchemaError, match="negation of 'pattern' is written only for automaton='lazy'"):
        build_regex_from_schema(schema)
    from minisglang.constrained.lazy_byte_dfa import LazyByteDFA

    dfa = LazyByteDFA.from_regex(build_regex_from_schema(schema, automaton="lazy"), members=True)
    for text, valid in [("a", True), ("xb", True), ("ab", False), ("x", False)]:
        assert dfa.matches(json.dumps(text).encode()) == valid, text


@pytest.mark.parametrize(
    "schema, reason",
    [
        ({"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 2}]}, "'not integer' together with minimum"),
        ({"oneOf": [{"type": "string", "minLength": 2}, {"type": "string", "pattern": "^a"}]}, "negation of 'pattern'"),
    ],
)
def test_a_one_of_refused_for_its_negation_names_the_one_of_not_a_not_the_user_never_wrote(schema, reason):
    """A stranger's fuzzer: the negation the rewrite adds is compiled with the branches' values,
    after the check that names the oneOf, so these read "keyword 'not' at #/oneOf/0: ..."."""
    with pytest.raises(UnsupportedSchemaError) as refused:
        build_regex_from_schema(schema)
    message = str(refused.value)
    assert message.startswith("'oneOf' at #: branches 0 and 1 may both accept a value"), message
    assert reason in message and "use anyOf if overlaps are fine" in message, message


def test_a_one_of_branch_refused_on_its_own_says_so_in_its_own_words():
    schema = {"oneOf": [{"type": "string", "minLength": 2}, {"type": "string", "pattern": "(?=a)"}]}
    with pytest.raises(ValueError, match="lookaround assertions are not supported") as refused:
        build_regex_from_schema(schema)
    assert str(refused.value).startswith("'pattern' '(?=a)' at #/oneOf/1/pattern"), str(refused.value)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": {"type": "integer"}, "enum": [[1, 1.0]]},
        {"allOf": [{"type": "array", "items": {"type": "integer"}}], "const": [2.0, 3]},
    ],
)
def test_an_enum_value_with_whole_floats_under_integers_is_written(schema):
    """`[1, 1.0]` under integer items is valid (1.0 is an integer), but its text failed the
    integer regex, and the schema was refused as "the schema accepts no JSON value" (a
    stranger's fuzzer; `{"type": "integer", "enum": [1.0]}` already worked). Every spelling
    of the value is written, and only the value."""
    regex = build_regex_from_schema(schema)
    value = (schema.get("enum") or [schema["const"]])[0]
    texts = {json.dumps(value), json.dumps(value).replace(".0", ""), "[1, 2]", '[2, {"a": 4}]', "[]"}
    for text in texts:
        assert bool(re.fullmatch(regex, text)) == is_valid(json.loads(text), schema), text
    assert re.fullmatch(regex, json.dumps(value).replace(".0", ""))
