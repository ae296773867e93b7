"""`integer` also written with a zero fraction (`1.0`), as JSON Schema counts it since draft 6.

Oracle: `jsonschema` (the validator of the schema's declared draft, 2020-12 by default)
on the parsed value; a double reads `1.0`, so only integers it holds exactly get the
zero fraction, and draft 4 schemas keep plain integers.
"""
import json
import re

import jsonschema
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from minisglang.constrained.json_schema import UnsupportedSchemaError, build_regex_from_schema

DRAFT4 = "http://json-schema.org/draft-04/schema#"


def valid(schema: dict, text: str) -> bool:
    return jsonschema.validators.validator_for(schema)(schema).is_valid(json.loads(text))


@st.composite
def integer_schemas(draw) -> dict:
    schema: dict = {"type": "integer"}
    if draw(st.booleans()):
        schema["minimum"] = draw(st.integers(-10**17, 10**17) | st.integers(-50, 50))
    if draw(st.booleans()):
        schema["maximum"] = schema.get("minimum", 0) + draw(st.integers(0, 10**17) | st.integers(0, 100))
    if draw(st.booleans()):
        schema["multipleOf"] = draw(st.sampled_from([1, 2, 5, 7, 10]))
    if draw(st.booleans()):
        schema["$schema"] = DRAFT4
    return schema


numerals = st.builds(
    lambda n, zeros, other: f"{n}" + ("." + "0" * zeros if zeros else "") + other,
    st.integers(-10**18, 10**18) | st.integers(-200, 200) | st.sampled_from([2**53, 2**53 + 1, -(2**53) - 1]),
    st.integers(0, 3), st.sampled_from(["", "", "", "5", "e0", "1"]))


@settings(max_examples=300, deadline=None)
@given(integer_schemas(), st.lists(numerals, min_size=1, max_size=8))
def test_accepted_numerals_are_valid(schema, texts):
    try:
        regex = build_regex_from_schema(schema)
    except UnsupportedSchemaError:   # multipleOf with bounds holding too many multiples
        assume(False)
    for text in texts:
        if re.fullmatch(regex, text):
            assert valid(schema, text), (schema, text)


@settings(max_examples=200, deadline=None)
@given(st.integers(-10**14, 10**14), st.integers(1, 20), st.integers(0, 5))
def test_small_integers_with_zero_fraction_are_accepted(n, zeros, width):
    for schema in ({"type": "integer"}, {"type": "integer", "minimum": n - width, "maximum": n + width}):
        regex = build_regex_from_schema(schema)
        assert re.fullmatch(regex, str(n)) and re.fullmatch(regex, f"{n}.{'0' * zeros}"), schema


def test_where_integers_stay_plain():
    for schema in ({"type": "integer", "$schema": DRAFT4},          # draft 4: 1.0 is not an integer
                   {"type": "integer", "minimum": 0},               # one bound: numerals may pass 2**53
                   {"type": "integer", "maximum": 10**16, "minimum": 0}):  # bounds beyond a double's integers
        regex = build_regex_from_schema(schema)
        assert re.fullmatch(regex, "1") and not re.fullmatch(regex, "1.0"), schema
    regex = build_regex_from_schema({"type": "integer"})
    assert not re.fullmatch(regex, "1.5") and not re.fullmatch(regex, "1." + "0" * 21)  # fraction digit limit
    assert not re.fullmatch(regex, "1" * 16 + ".0")                # beyond 2**53: plain only
