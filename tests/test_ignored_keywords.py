"""The library backends never hand back a weaker grammar (issue 30, item 8): a keyword a
library compiles without enforcing is refused by name (backends/ignored_keywords.py), the
keywords it does enforce still compile, and every output an accepted schema allows validates.

Oracles: `jsonschema` for outputs; the JSON-Schema-Test-Suite run through each adapter
(benchmarks/json_schema_conformance.py) found the cases, each checked alone here.
"""

import json
import math
from decimal import Decimal

import jsonschema
import pytest
from grammar_backends import (
    BACKENDS,
    INT,
    LIBRARIES,
    PAD,
    A,
    S,
    _byte_token,
    accepts,
    backends_fixture,
    compiled,
    mask_row,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st

from minisglang.backends.base import GrammarError, InvalidGrammarObject
from minisglang.backends.ignored_keywords import IgnoredKeywordError

backends = backends_fixture(*BACKENDS)

# ------------------------------------------------- never a weaker grammar (issue 30, item 8)
# (backend, schema, the keyword the refusal names, where): each one a keyword its library
# compiles without enforcing, found by running the JSON-Schema-Test-Suite through the adapter
# (benchmarks/json_schema_conformance.py) and checked alone here.
_TAGGED_STRINGS = {  # "tags" of required properties on strings: every string is in both branches
    "oneOf": [{**S, "properties": {"t": {"const": t}}, "required": ["t"]} for t in ("a", "b")]
}
_STRING_OR_INTEGERS = {**S, "anyOf": [INT, {**S, "maxLength": 3}]}
IGNORED_CASES = [
    ("xgrammar", {**A, "uniqueItems": True}, "uniqueItems", "#"),
    # (a stranger's stall hunt 9: each wrote a value the schema rejects, `", "`, `0`, `18`,
    # `{"x": 4}`, `[12]`, with finish_reason "stop")
    ("xgrammar", _TAGGED_STRINGS, "oneOf", "#"),
    ("outlines", _TAGGED_STRINGS, "oneOf", "#"),
    ("xgrammar", {"oneOf": [{"const": 0}, {"const": -0.0}]}, "oneOf", "#"),
    ("outlines", {"oneOf": [{"enum": [0, 1]}, {"enum": [-0.0, 2]}]}, "oneOf", "#"),
    ("xgrammar", _STRING_OR_INTEGERS, "type", "#"),
    ("outlines", _STRING_OR_INTEGERS, "type", "#"),
    ("xgrammar", {"type": "integer", "oneOf": [{"type": "number"}, S]}, "type", "#"),
    ("outlines", {"type": "boolean", "properties": {"x": INT}, "required": ["x"]}, "properties", "#"),
    ("outlines", {"type": ["object", "null"], "properties": {"x": INT}}, "properties", "#"),
    ("outlines", {**S, "prefixItems": [INT]}, "prefixItems", "#"),
    # (a stranger's validity fuzzer: llguidance wrote 10000000000000000 under an exclusive
    # maximum of 1e16, and outlines-core read `a~1b` in a pointer as written, not as `a/b`)
    ("llguidance", {**INT, "exclusiveMaximum": 1e16}, "exclusiveMaximum", "#"),
    ("llguidance", {"type": ["integer", "null"], "exclusiveMinimum": -1e16}, "exclusiveMinimum", "#"),
    ("outlines", {"$defs": {"a~1b": S, "a/b": INT}, "$ref": "#/$defs/a~1b"}, "$ref", "#"),
    ("outlines", {"$defs": {"a b": INT}, "properties": {"x": {"$ref": "#/$defs/a%20b"}}}, "$ref", "#/properties/x"),
    # (a stranger's fuzzer: each library's grammar took `{"a": 1, "a": 2}` for two keys, and
    # xgrammar `{"xy": 1}` under a `^x` string pattern and a `y$` integer one)
    ("xgrammar", {"type": "object", "additionalProperties": INT, "minProperties": 2}, "minProperties", "#"),
    ("llguidance", {"type": "object", "patternProperties": {"^x": S}, "minProperties": 2}, "minProperties", "#"),
    # (another stranger's fuzzer: llguidance writes unlisted keys where additionalProperties is
    # not written, and `{"a": 1, "x": 1, "x": 2}` met minProperties 3 beside one listed property)
    (
        "llguidance",
        {"type": "object", "properties": {"a": INT}, "required": ["a"], "minProperties": 3},
        "minProperties",
        "#",
    ),
    (
        "xgrammar",
        {"type": "object", "patternProperties": {"^x": S, "y$": INT}, "additionalProperties": False},
        "patternProperties",
        "#",
    ),
    # (keys matched against the wrong schema: llguidance matched a pattern against a key's
    # escaped spelling, `{"\u0061b": "x"}` under `^a` integers; xgrammar let `{"b": "x"}` take the
    # extra keys' schema beside a `^b` pattern, and checked no listed name against propertyNames)
    ("llguidance", {"type": "object", "patternProperties": {"^a": INT}}, "patternProperties", "#"),
    # (a stranger's fuzzer: extra keys kept to raw names left a required `\n` or `a\b` unwritable,
    # and llguidance called the schema unsatisfiable)
    ("llguidance", {"type": "object", "properties": {"a": INT}, "required": ["\n"]}, "required", "#"),
    (
        "llguidance",
        {"properties": {"a": INT}, "required": ['a"b'], "additionalProperties": S},
        "required",
        "#",
    ),
    (
        "llguidance",
        {"allOf": [{"properties": {"a\\b": {"const": 1}}, "required": ["a\\b"]}, {"properties": {"b": INT}}]},
        "allOf",
        "#",
    ),
    (
        "llguidance",
        {"type": "array", "items": {"properties": {"a": S}, "patternProperties": {"^b": INT}}},
        "patternProperties",
        "#/items",
    ),
    (
        "xgrammar",
        {"type": "object", "properties": {"a": INT}, "patternProperties": {"^b": INT}, "additionalProperties": S},
        "patternProperties",
        "#",
    ),
    (
        "xgrammar",
        {
            "type": "object",
            "properties": {"abcd": INT},
            "additionalProperties": True,
            "propertyNames": {**S, "maxLength": 3},
        },
        "propertyNames",
        "#",
    ),
    # (a stranger's fuzzer: outlines-core dropped these, and wrote invalid output under stop)
    ("outlines", {"anyOf": [S, INT], "maxLength": 1}, "anyOf", "#"),
    ("outlines", {"oneOf": [S, {"type": "null"}], "minLength": 1}, "oneOf", "#"),
    (
        "outlines",
        {
            "$defs": {"x": {"$id": "http://e.com/x", "$defs": {"y": {"type": "boolean"}}, "$ref": "#/$defs/y"}},
            "$ref": "#/$defs/x",
        },
        "$id",
        "#/$defs/x",
    ),
    (
        "outlines",
        {
            "type": "object",
            "properties": {"v": INT, "kids": {"type": "array", "items": {"$ref": "#"}}},
            "required": ["v", "kids"],
        },
        "$ref",
        "#/properties/kids/items/$ref",
    ),
    (
        "xgrammar",
        {"type": "object", "properties": {"a/b": {**A, "uniqueItems": True}}},
        "uniqueItems",
        "#/properties/a~1b",
    ),
    ("xgrammar", {**A, "contains": {"const": 1}}, "contains", "#"),
    ("xgrammar", {"allOf": [{**INT, "minimum": 1}, {**INT, "maximum": 3}]}, "allOf", "#"),
    ("xgrammar", {**INT, "minimum": 0, "anyOf": [{**INT, "maximum": 5}, {**INT, "minimum": 9}]}, "anyOf", "#"),
    ("xgrammar", {"oneOf": [INT, {**INT, "minimum": 2}]}, "oneOf", "#"),
    ("xgrammar", {**INT, "if": {"minimum": 0}, "then": {"maximum": 5}}, "if", "#"),
    ("xgrammar", {**INT, "not": {"const": 1}}, "not", "#"),
    ("xgrammar", {**S, "pattern": "^a+$", "maxLength": 2}, "maxLength", "#"),
    ("xgrammar", {"type": "number", "multipleOf": 0.5}, "multipleOf", "#"),
    ("xgrammar", {"maxLength": 2}, "maxLength", "#"),
    (
        "xgrammar",
        {"type": "object", "properties": {"a": INT, "b": INT}, "dependentRequired": {"a": ["b"]}},
        "dependentRequired",
        "#",
    ),
    ("xgrammar", {"type": "object", "required": ["a"], "additionalProperties": INT}, "required", "#"),
    (
        "xgrammar",
        {"type": "object", "properties": {"ab": S}, "patternProperties": {"^a": {**S, "maxLength": 1}}},
        "patternProperties",
        "#",
    ),
    ("xgrammar", {"type": "integer", "enum": [1, 5], "minimum": 2}, "enum", "#"),
    # xgrammar writes at most 6 fraction digits: between these bounds it wrote no number at all,
    # and the object closed as `{"x": }` (a stranger's attack)
    ("xgrammar", {"type": "number", "minimum": 1e-7, "maximum": 5e-7}, "minimum", "#"),
    (
        "xgrammar",
        {
            "type": "object",
            "properties": {"x": {"type": "number", "exclusiveMinimum": 0.5, "exclusiveMaximum": 0.500001}},
        },
        "exclusiveMinimum",
        "#/properties/x",
    ),
    ("xgrammar", {"$defs": {"p": {**INT, "$anchor": "p"}}, "$ref": "#p"}, "$ref", "#"),
    # xgrammar refused these with its raw "Schema 'false' cannot accept any value"
    ("xgrammar", {"type": "object", "properties": {"a": False, "b": S}}, "properties", "#"),
    ("xgrammar", {"$defs": {"p": INT}, "$ref": "#/$defs/p", "type": "integer", "minimum": 2}, "$ref", "#"),
    ("outlines", {**S, "pattern": "^a+$", "maxLength": 2}, "pattern", "#"),
    ("outlines", {**INT, "minimum": 1}, "minimum", "#"),
    ("outlines", {**A, "uniqueItems": True}, "uniqueItems", "#"),
    ("outlines", {**INT, "not": {"const": 1}}, "not", "#"),
    ("outlines", {**INT, "if": {"minimum": 0}, "then": {"maximum": 5}}, "if", "#"),
    ("outlines", {"oneOf": [INT, {**INT, "multipleOf": 2}]}, "oneOf", "#"),
    ("outlines", {"allOf": [{}, {"type": "number"}]}, "allOf", "#"),
    ("outlines", {"type": "object", "required": ["a"], "additionalProperties": INT}, "required", "#"),
    ("outlines", {"enum": ["abc", "a"], "maxLength": 2}, "enum", "#"),
    ("outlines", {"type": "object", "properties": {"a\nb": INT}}, "properties", "#"),
    ("outlines", {**S, "format": "date", "maxLength": 12}, "format", "#"),
    # llguidance writes these classes' JSON escapes too widely: `[^"]` took `\"`
    ("llguidance", {**S, "pattern": '^[^"]+$'}, "pattern", "#"),
    ("llguidance", {**S, "pattern": "^[\\x00-\\x1f]$"}, "pattern", "#"),
    ("llguidance", {"type": "object", "patternProperties": {'^[^"]$': INT}}, "patternProperties", "#"),
    # its Rust regex reads these otherwise than Python and JavaScript (a stranger's attack: the
    # first wrote "gbl", a class intersection, where Python and JS see a class and a literal ']')
    ("llguidance", {**S, "pattern": "^[a-z&&[^aeiou]]{3}$"}, "pattern", "#"),
    ("llguidance", {**S, "pattern": "^[[:digit:]]+$"}, "pattern", "#"),
    ("llguidance", {**S, "pattern": "^(?i)ab$"}, "pattern", "#"),
    ("llguidance", {"type": "object", "properties": {"a": {**S, "pattern": "\\x{41}"}}}, "pattern", "#/properties/a"),
    ("llguidance", {"type": "object", "patternProperties": {"[a-z--q]": INT}}, "patternProperties", "#"),
    # llguidance divides the decimal text: 0.3 under multipleOf 0.1 (a stranger's tool fuzzing)
    ("llguidance", {"type": "object", "properties": {"x": {"multipleOf": 0.1}}}, "multipleOf", "#/properties/x"),
    # an empty list accepts no value: the libraries wrote "", `{"a": }` or a whole object with
    # finish_reason "stop" (a stranger's attack); fsm and llguidance refuse these themselves
    ("xgrammar", {"anyOf": []}, "anyOf", "#"),
    ("xgrammar", {"type": "object", "properties": {"a": {"type": []}}}, "type", "#/properties/a"),
    ("xgrammar", {"type": "array", "items": {"oneOf": []}, "minItems": 1}, "oneOf", "#/items"),
    ("outlines", {"enum": []}, "enum", "#"),
    ("outlines", {"type": "object", "required": ["a"], "properties": {"a": {"enum": []}}}, "enum", "#/properties/a"),
    ("outlines", {"anyOf": [{"allOf": []}, S]}, "allOf", "#/anyOf/0"),
    # a stranger's differential fuzzing (jsonschema on every "stop" output, 558 schemas a backend):
    # xgrammar drops an integer multipleOf beside a bound or past 1024 ("16" for multipleOf 5)
    ("xgrammar", {**INT, "multipleOf": 5, "maximum": 100}, "multipleOf", "#"),
    ("xgrammar", {**INT, "multipleOf": 1025}, "multipleOf", "#"),
    # `[1]` and `[1.0]` are one value: no oneOf branch pair is disjoint by them
    ("xgrammar", {"oneOf": [{"const": [1]}, {"const": [1.0]}]}, "oneOf", "#"),
    # xgrammar and llguidance read numbers as doubles (9007199254740993 wrote ...992)
    ("xgrammar", {"const": 9223372036854775809}, "const", "#"),
    ("llguidance", {**INT, "minimum": 9007199254740993}, "minimum", "#"),
    ("llguidance", {"type": "object", "properties": {"a": {"enum": [[1, 2**60]]}}}, "enum", "#/properties/a"),
    # llguidance reads \D, \W, \S over ASCII, Python's jsonschema over Unicode ("٣" for \D)
    ("llguidance", {**S, "pattern": "^\\D$"}, "pattern", "#"),
    ("llguidance", {**S, "pattern": "^[^\\w.]+$"}, "pattern", "#"),
    # outlines-core ignores min/maxItems beside prefixItems, and writes keys inside values raw
    ("outlines", {"prefixItems": [{"const": 1}], "minItems": 2}, "minItems", "#"),
    ("outlines", {"const": {'a"': 1}}, "const", "#"),
]


def test_xgrammar_keeps_bounds_that_hold_a_number_it_writes(backends, tokenizer):
    """The refusal above is only for bounds with no number of 6 fraction digits between them."""
    for schema, text in [
        ({"type": "number", "minimum": 1e-7, "maximum": 1e-6}, "0.000001"),
        ({"type": "number", "minimum": 0.5, "maximum": 0.5}, "0.5"),
    ]:
        grammar = backends["xgrammar"].compile("json_schema", json.dumps(schema))
        for token in tokenizer.encode(text):
            grammar.accept_token(token)


@pytest.mark.parametrize(
    "name, schema, keyword, where", IGNORED_CASES, ids=[f"{n}-{k}-{i}" for i, (n, _, k, _) in enumerate(IGNORED_CASES)]
)
def test_keywords_a_library_ignores_are_refused_by_name(backends, name, schema, keyword, where):
    with pytest.raises(IgnoredKeywordError) as refused:
        backends[name].compile("json_schema", json.dumps(schema))
    message = str(refused.value)
    assert f"does not enforce {keyword!r}" in message and f"(at {where})" in message, message
    assert f"the {name!r} backend refuses" in message and "'fsm' grammar backend" in message, message
    # Through the request path: the same words end that request (HTTP 400 in the server).
    g = compiled(backends[name], "json_schema", json.dumps(schema))
    assert isinstance(g, InvalidGrammarObject) and f"does not enforce {keyword!r}" in g.message


# Schemas each adapter must still compile: what its library does enforce (precision).
ENFORCED = {
    "xgrammar": [
        {"const": 2**53},  # every integer up to 2**53 is a double
        {"oneOf": [{"const": [1]}, {"const": [2]}]},  # disjoint values inside arrays
        {"type": "object", "properties": {"a": INT}, "required": []},  # an empty list that asks nothing
        {**A, "uniqueItems": False},
        {"oneOf": [INT, S]},
        {**S, "maxLength": 3},
        {**INT, "multipleOf": 3},
        {"$defs": {"p": {**INT, "minimum": 2}}, "$ref": "#/$defs/p"},
        {"type": "integer", "enum": [1, 2]},
        {"type": "object", "properties": {"a": INT}, "required": ["a"], "minProperties": 1},
        {"type": "object", "properties": {"a": INT, "b": INT}, "minProperties": 2},  # no unlisted key: none repeats
        {"type": "object", "patternProperties": {"^x": S}, "additionalProperties": False},  # one pattern
        {
            "oneOf": [
                {"type": "object", "properties": {"k": {"const": "a"}}, "required": ["k"]},
                {"type": "object", "properties": {"k": {"const": "b"}}, "required": ["k"]},
            ]
        },
        {"type": "number", "anyOf": [INT, {"type": "number", "maximum": 0}]},  # branches inside the type
        {"type": ["string", "null"], "oneOf": [S, {"type": "null"}]},
    ],
    "outlines": [
        {"prefixItems": [{"const": 1}]},
        {"type": "object", "properties": {"a": INT}, "required": []},  # an empty list that asks nothing
        {**A, "uniqueItems": False},
        {"oneOf": [INT, S]},
        {**S, "pattern": "^[^a]{3}$"},
        {**S, "maxLength": 3},
        {"enum": ["a\nb", 'c"d']},
        {"type": "array", "prefixItems": [INT, S]},
        # (`items: false` after the prefix; with a `{}` prefix item, outlines-core's index of
        # any JSON value takes 20-100 s: WALKED compiles that one and walks it)
        {"type": "array", "prefixItems": [INT], "items": False},
    ],
    "llguidance": [
        {**S, "pattern": "^\\d+\\s\\w+$"},  # the plain shorthands: a subset of Python's reading
        {**S, "pattern": "^a+$", "maxLength": 2},
        {**INT, "minimum": 1},
        {**S, "pattern": "^[^\\n]$"},
        {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        # (each object's extra keys one pattern: two different ones in an allOf were "not disjoint")
        {"allOf": [{"properties": {"a": INT}, "required": ["a"]}, {"properties": {"b": S}, "required": ["b"]}]},
        # (a name written only escaped, required where no listed properties keep extra keys raw, or listed)
        {"type": "object", "required": ["\n"]},
        {"type": "object", "properties": {'a"b': INT}, "required": ['a"b']},
    ],
}


@pytest.mark.parametrize("branches", ["anyOf", "oneOf"])
def test_xgrammar_takes_a_union_with_a_false_branch_as_the_union_without_it(backends, tokenizer, branches):
    """`false` meets no value, so `{"anyOf": [integer, false]}` is `{"anyOf": [integer]}`
    (and "exactly one" is the same): xgrammar refused it, "Schema 'false' cannot accept any
    value" (a stranger's fuzzer). The adapter drops such branches; one of only `false` is still
    refused."""
    schema = {branches: [INT, False, {**S, "maxLength": 2}]}
    for text, valid in (("3", True), ('"ab"', True), ('"abc"', False), ("true", False)):
        g = compiled(backends["xgrammar"], "json_schema", json.dumps(schema))
        assert not isinstance(g, InvalidGrammarObject), g.message
        try:
            for t in tokenizer.encode(text):
                g.accept_token(t)
            g.accept_token(tokenizer.eos_token_id)
            took = True
        except GrammarError:
            took = False
        assert took == valid == jsonschema.Draft202012Validator(schema).is_valid(json.loads(text)), text
    assert isinstance(
        compiled(backends["xgrammar"], "json_schema", json.dumps({branches: [False]})), InvalidGrammarObject
    )


def test_a_librarys_refusal_says_what_the_library_does_in_a_readable_length(backends):
    """Two library messages a stranger's fuzzer found misleading: xgrammar said "additional
    properties aren't allowed" of a schema that does not write additionalProperties (it reads
    absent as none), and llguidance wrote a date format's whole 300-character regex to say
    that maxLength 9 leaves no date."""
    listed = {"type": "object", "properties": {"a": INT}, "minProperties": 2}
    refused = compiled(backends["xgrammar"], "json_schema", json.dumps(listed))
    assert isinstance(refused, InvalidGrammarObject)
    assert "where 'additionalProperties' is not written, xgrammar writes no key" in refused.message
    refused = compiled(backends["llguidance"], "json_schema", json.dumps({**S, "format": "date", "maxLength": 9}))
    assert isinstance(refused, InvalidGrammarObject)
    assert "Unsatisfiable schema: Regex is empty" in refused.message
    assert len(refused.message) < 260 and ".../" in refused.message, refused.message


@pytest.mark.parametrize("name", LIBRARIES)
def test_keywords_a_library_enforces_still_compile(backends, name):
    for schema in ENFORCED[name]:
        backends[name].compile("json_schema", json.dumps(schema))


# Schemas the adapters accept whose outputs an adapter once got wrong: a raw newline from
# outlines-core's pattern `[^a]`, raw control characters from xgrammar's maxLength strings.
WALKED = [
    {**S, "pattern": "^[^a]{3}$"},
    {**S, "pattern": "^.{2}$"},
    {**S, "maxLength": 3},
    {
        "type": "object",
        "properties": {"t": {**S, "minLength": 1, "maxLength": 4}, "n": {"enum": [1, "x"]}},
        "required": ["t", "n"],
        "additionalProperties": False,
    },
    {"type": "array", "items": {"oneOf": [INT, S]}, "maxItems": 2},
    # (found by random walks over JSONSchemaBench schemas and edge cases, reduced by hand)
    {"type": "object", "properties": {"a": {}, "b": INT}, "required": ["a", "b"]},
    {"type": "array", "prefixItems": [{}], "items": False},
    {**S, "format": "date-time"},
    {**S, "format": "uri"},
    {**S, "pattern": "^[0-9]{1,3}(\\.[0-9]{1,2})?$"},
]


@pytest.mark.parametrize("name", LIBRARIES)
@pytest.mark.parametrize("schema", WALKED, ids=[f"schema{i}" for i in range(len(WALKED))])
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_every_output_an_accepted_schema_allows_validates(backends, tokenizer, name, schema, data):
    """Random walks over the adapter's masks: every text that ends with EOS parses as JSON
    (no raw control character inside a string) and validates (jsonschema is the oracle,
    formats checked)."""
    width = tokenizer.vocab_size + PAD
    g = compiled(backends[name], "json_schema", json.dumps(schema))
    assert not isinstance(g, InvalidGrammarObject), g.message
    ids = []
    for _ in range(40):
        row = mask_row(g, width)
        choices = row.nonzero().flatten().tolist()
        assert choices, "a live state allows no token"
        if tokenizer.eos_token_id in choices and (
            choices == [tokenizer.eos_token_id] or data.draw(st.booleans(), label="stop if allowed")
        ):
            g.accept_token(tokenizer.eos_token_id)
            text = tokenizer.decode_bytes(ids, skip_special_tokens=False).decode("utf-8")
            jsonschema.validate(json.loads(text), schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
            return
        choices = [t for t in choices if t != tokenizer.eos_token_id]
        t = data.draw(st.sampled_from(choices), label="token")
        g.accept_token(t)
        ids.append(t)


def pydantic_union(second_tag: str) -> dict:
    """What Pydantic writes for `pet: Cat | Dog = Field(discriminator="kind")`: the branches
    are `$ref`s into `$defs`, with OpenAPI's `discriminator` beside the `oneOf`."""

    def pet(tag: str, field: str) -> dict:
        return {
            "type": "object",
            "properties": {"kind": {"const": tag, "type": "string"}, field: INT},
            "required": ["kind", field],
            "additionalProperties": False,
        }

    return {
        "$defs": {"Cat": pet("cat", "meows"), "Dog": pet(second_tag, "barks")},
        "type": "object",
        "properties": {
            "pet": {
                "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}],
                "discriminator": {"propertyName": "kind", "mapping": {"cat": "#/$defs/Cat", "dog": "#/$defs/Dog"}},
            }
        },
        "required": ["pet"],
        "additionalProperties": False,
    }


def test_a_pydantic_tagged_union_is_served_by_xgrammar_and_an_untagged_one_refused(backends, tokenizer):
    """xgrammar refused every Pydantic discriminated union (sdk_clients' find): `discriminator`
    counted as a validating keyword beside `oneOf`, and the branches, `$ref`s, could not be
    shown disjoint. Their tags are read through the `$ref`s now; branches with one tag still
    overlap ("exactly one" is then not "any") and are refused."""
    tagged = json.dumps(pydantic_union("dog"))
    assert accepts(backends["xgrammar"], tokenizer, tagged, '{"pet": {"kind": "dog", "barks": 3}}', "json_schema")
    assert not accepts(backends["xgrammar"], tokenizer, tagged, '{"pet": {"kind": "dog", "meows": 3}}', "json_schema")
    g = compiled(backends["xgrammar"], "json_schema", json.dumps(pydantic_union("cat")))
    assert isinstance(g, InvalidGrammarObject) and "'oneOf' with branches that may overlap" in g.message
    assert "#/properties/pet" in g.message


_VALUES = st.sampled_from([0, 1, 1.0, True, "a", "b", None, [1], [1.0], {"k": 1}])
_BRANCH = st.one_of(
    st.builds(lambda v: {"const": v}, _VALUES),
    st.builds(lambda vs: {"enum": vs}, st.lists(_VALUES, max_size=3)),
    st.builds(lambda t: {"type": t}, st.sampled_from(["string", "integer", "number", "object", ["null", "string"]])),
    st.builds(
        lambda tag, other: {
            "type": "object",
            "properties": {"kind": {"const": tag}, "x": other},
            "required": ["kind", "x"],
        },
        _VALUES,
        st.one_of(st.builds(lambda v: {"const": v}, _VALUES), st.just({"type": "integer"})),
    ),
    st.just({"type": "object"}),
    st.booleans(),
)


def _pairwise_overlap(branches: list) -> bool:
    """The oracle: two branches that `_disjoint` cannot tell apart, every pair compared."""
    from minisglang.backends.ignored_keywords import _Branch, _disjoint

    read = [_Branch.of(b) for b in branches]
    return any(not _disjoint(a, b) for i, a in enumerate(read) for b in read[i + 1 :])


@settings(max_examples=300, deadline=None)
@given(branches=st.lists(_BRANCH, max_size=10))
def test_one_ofs_branches_overlap_exactly_where_a_pairwise_comparison_says(branches):
    """`overlapping_branches` compares only branches that share a value or a tag value (an
    index, not every pair): the answer is every pair's."""
    from minisglang.backends.ignored_keywords import overlapping_branches

    assert overlapping_branches({"oneOf": branches}) == _pairwise_overlap(branches)


def test_a_big_one_of_is_judged_without_comparing_every_pair(monkeypatch):
    """A stranger's `oneOf` of 20,000 consts kept a compile thread for 50 minutes, past its
    request's timeout and beyond cancel (every pair compared, a JSON dump per branch per
    pair): consts and tagged unions are now judged by an index of their values, and a big
    oneOf nothing tells apart is refused without comparing its branches."""
    from minisglang.backends import ignored_keywords as ik

    compared = []
    real = ik._disjoint
    monkeypatch.setattr(ik, "_disjoint", lambda a, b: compared.append(1) or real(a, b))
    consts = [{"const": i} for i in range(20_000)]
    assert not ik.overlapping_branches({"oneOf": consts}) and not compared
    assert ik.overlapping_branches({"oneOf": [*consts, {"const": 7.0}]}) and len(compared) == 1
    compared.clear()
    tagged = [
        {"type": "object", "properties": {"kind": {"const": f"k{i}"}}, "required": ["kind"]} for i in range(5_000)
    ]
    assert not ik.overlapping_branches({"oneOf": tagged}) and not compared
    untold = [{"type": "object", "properties": {f"p{i}": INT}, "required": [f"p{i}"]} for i in range(300)]
    assert ik.overlapping_branches({"oneOf": untold}) and not compared
    assert _pairwise_overlap(untold[:2])  # (they do overlap: {"p0": 1, "p1": 1} is both)
    assert f"more than {ik.MAX_COMPARED_BRANCHES}" in ik.ONE_OF_OVERLAP


@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize("schema", [{**S, "minLength": 1, "maxLength": 4}, S, {**S, "pattern": "^.{2}$"}])
def test_no_backend_lets_a_string_hold_a_surrogate(backends, tokenizer, name, schema):
    """After `"` and the byte ED, a string may go on with 80-9F (U+D000-D7FF) but never with
    A0-BF: ED A0-BF is a surrogate (U+D800-DFFF) encoded, which is not UTF-8, so the output
    could not be decoded. (xgrammar read the `[\\s\\S]` of a length-counted string as every
    code point and allowed it.)"""
    width = tokenizer.vocab_size + PAD
    g = compiled(backends[name], "json_schema", json.dumps(schema))
    assert not isinstance(g, InvalidGrammarObject), g.message
    for t in tokenizer.encode('"', add_special_tokens=False):
        g.accept_token(t)
    lead = _byte_token(tokenizer, 0xED)
    assert mask_row(g, width)[lead], f"{name}: a string of {schema} does not allow the lead byte ED (U+D000-DFFF)"
    g.accept_token(lead)
    row = mask_row(g, width)
    assert row[_byte_token(tokenizer, 0x9F)], f"{name}: ED 9F (U+D7C0-D7FF, valid UTF-8) is refused in {schema}"
    surrogates = [b for b in range(0xA0, 0xC0) if row[_byte_token(tokenizer, b)]]
    assert not surrogates, f"{name}: {schema} lets a string hold ED {surrogates[0]:02X}, a surrogate: not UTF-8"


# ------------------------------------------- outputs a library allowed that break the schema
def accepts_json(backend, tokenizer, schema, text: str) -> bool:
    """Whether the backend's matcher for `schema` takes `text` and then allows EOS."""
    return accepts(backend, tokenizer, json.dumps(schema), text, kind="json_schema")


# (backend, schema, a text the library took though the schema rejects it, a text it accepts)
BROKEN_BEFORE = [
    # outlines-core wrote `{}` as a bare `a|b|...`, splitting the object's regex
    (
        "outlines",
        {"type": "object", "properties": {"a": {}, "b": INT}, "required": ["a", "b"]},
        "651",
        '{"a": [1], "b": 2}',
    ),
    # its formats: a raw `"` in a uri, a non-ASCII digit in a date, a time without offset
    ("outlines", {**S, "format": "uri"}, '"urn:a:"]"', '"urn:a:b"'),
    ("outlines", {**S, "format": "date"}, '"396\u0663-05-09"', '"2024-02-29"'),
    ("outlines", {**S, "format": "time"}, '"06:29:39"', '"06:29:39Z"'),
    # xgrammar: an ipv4 with a leading zero; a pattern's range of control characters written
    # raw; \A and \Z read as letters; an optional group's first character skipped
    ("xgrammar", {**S, "format": "ipv4"}, '"01.77.147.245"', '"1.77.147.245"'),
    ("xgrammar", {**S, "pattern": "^[\\u0000-\\u001f]{1,3}$"}, '"\x1f"', '"\\n"'),
    ("xgrammar", {**S, "pattern": "\\Aab\\Z"}, '"AabZ"', '"ab"'),
    ("xgrammar", {**S, "pattern": "^5(x[0-9]{1,3})?Z$"}, '"52Z"', '"5x2Z"'),
    ("xgrammar", {**S, "format": "time"}, '"06:29:1945172307Z"', '"06:29:19Z"'),  # (its fraction's `?`)
    # llguidance: a leap second at any minute
    ("llguidance", {**S, "format": "time"}, '"21:09:60Z"', '"21:09:59Z"'),
    # llguidance holds a number's decimal text to a bound, the validator its double: texts with
    # more digits than a double keeps round onto the bound (a stranger's tool fuzzing), and it
    # read a 16-digit bound as 1; at 0 it allowed 0 itself beside a maximum under 1
    ("llguidance", {"type": "number", "exclusiveMinimum": 1}, "1.00000000000000001", "1.5"),
    ("llguidance", {"type": "number", "exclusiveMaximum": 2}, "1.99999999999999999", "1.5"),
    ("llguidance", {"type": "number", "exclusiveMinimum": 0}, "0." + "0" * 330 + "1", "0.0001"),
    ("llguidance", {"type": "number", "maximum": 0.9999999999999999}, "1", "0.5"),
    ("llguidance", {"type": "number", "exclusiveMinimum": 0, "maximum": 0.5}, "0", "0.25"),
    ("llguidance", {"type": "number", "exclusiveMaximum": 0, "minimum": -0.9}, "-0", "-0.25"),
    # xgrammar: a text of 6 fraction digits rounds onto an exclusive bound past ~1e10
    ("xgrammar", {"type": "number", "exclusiveMinimum": 1e11}, "100000000000.000001", "100000000000.5"),
    ("xgrammar", {"type": "number", "exclusiveMaximum": -1e13}, "-10000000000000.000001", "-10000000000000.5"),
    # (and a draft-4 boolean exclusiveMinimum beside the rewritten minimum keeps its meaning)
    (
        "llguidance",
        {
            "$schema": "http://json-schema.org/draft-04/schema#",
            "type": "number",
            "minimum": 1,
            "exclusiveMinimum": True,
        },
        "1",
        "1.5",
    ),
    (
        "llguidance",
        {"type": "object", "properties": {"x": {"type": ["number", "null"], "exclusiveMinimum": 0.1}}},
        '{"x": 0.10000000000000001}',
        '{"x": 0.2}',
    ),
    # xgrammar's reader of a JSON pattern takes `\U0001f600` for letters (our rewrite of a part
    # that can match nothing wrote it so) and a class opening with `\^` for a negated one
    # (a stranger's fuzzing)
    ("xgrammar", {**S, "pattern": "^(?:[a😀]?)+$"}, '"U0001f600"', '"😀a"'),
    ("xgrammar", {**S, "pattern": "^(?:😀?)+$"}, '"U"', '"😀😀"'),
    ("xgrammar", {**S, "pattern": "^[é^]$"}, '"b"', '"é"'),
    (
        "xgrammar",
        {"type": "object", "patternProperties": {"^[a^é]$": INT}, "additionalProperties": False},
        '{"b": 1}',
        '{"é": 1}',
    ),
    # xgrammar wrote a name pattern's `"` raw inside the name (a stranger's fuzzing)
    (
        "xgrammar",
        {"type": "object", "patternProperties": {'^"': {"type": "boolean"}}, "additionalProperties": False},
        '{""": true}',
        '{"\\"a": true}',
    ),
]


@pytest.mark.parametrize(
    "name, schema, wrong, right", BROKEN_BEFORE, ids=[f"{n}-{i}" for i, (n, *_) in enumerate(BROKEN_BEFORE)]
)
def test_a_library_no_longer_takes_what_the_schema_rejects(backends, tokenizer, name, schema, wrong, right):
    for text, valid in [(wrong, False), (right, True)]:
        try:
            value = json.loads(text)
            jsonschema.validate(value, schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
            oracle = True
        except (json.JSONDecodeError, jsonschema.ValidationError):
            oracle = False
        assert oracle == valid, (text, "the oracle disagrees with the case")
        assert accepts_json(backends[name], tokenizer, schema, text) == valid, (name, schema, text)


def near_texts(bound: float) -> list[str]:
    """Decimal texts within 1e-1 .. 1e-21 (relative) of `bound` on both sides, the bound's own
    text, and near 0 texts with up to 330 zeros after the point."""
    exact = Decimal(repr(bound))
    texts = {format(exact, "f")}
    for k in range(1, 22):
        for step in (1, 5, 9):
            for sign in (1, -1):
                texts.add(format(exact + sign * step * Decimal(10) ** (exact.adjusted() - k), "f"))
    if bound == 0:
        texts |= {f"{sign}0.{'0' * zeros}1" for zeros in (5, 29, 30, 330) for sign in ("", "-")}
    return sorted(texts)


@settings(max_examples=8, deadline=None)
@given(
    bound=st.floats(min_value=-1e12, max_value=1e12, allow_nan=False) | st.sampled_from([0.0, 1.0, 0.1, 5e-324]),
    keyword=st.sampled_from(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]),
)
@example(bound=0.9999999999999999, keyword="maximum")
@example(bound=1.0, keyword="exclusiveMinimum")
@example(bound=-1e-40, keyword="exclusiveMaximum")
@example(bound=1e11, keyword="exclusiveMinimum")
@example(bound=-123456789012.5, keyword="exclusiveMaximum")
@pytest.mark.parametrize("name", ["llguidance", "xgrammar"])
def test_a_library_holds_a_number_to_its_bound_as_a_validator_does(backends, tokenizer, name, bound, keyword):
    """Every text near a bound that the library backend takes reads, as a double, inside the
    bound (jsonschema is the oracle), and a text well inside is taken: the adapters hand the
    library inclusive bounds it holds exactly (inclusive_number_bounds)."""
    schema = {"type": "number", keyword: bound}
    g = compiled(backends[name], "json_schema", json.dumps(schema))
    assert not isinstance(g, InvalidGrammarObject), g.message
    taken = [t for t in near_texts(bound) if accepts_json(backends[name], tokenizer, schema, t)]
    wrong = [t for t in taken if not jsonschema.Draft202012Validator(schema).is_valid(json.loads(t))]
    assert not wrong, (schema, wrong[:3])
    exact = Decimal(repr(bound))
    # (a whole number well inside: xgrammar writes at most 6 fraction digits)
    inside = str(math.ceil(exact + abs(exact) + 1) if "inimum" in keyword else math.floor(exact - abs(exact) - 1))
    assert accepts_json(backends[name], tokenizer, schema, inside), (schema, inside)


@pytest.mark.parametrize("name", ["llguidance", "xgrammar"])
@pytest.mark.parametrize(
    "text", ['{"type": "number", "minimum": 1e999}', '{"exclusiveMaximum": -1e999, "type": "number"}']
)
def test_a_library_refuses_a_bound_beyond_a_double_by_name(backends, name, text):
    """1e999 reads as infinity (Python's json): refused as the fsm backend refuses it, where the
    bounds rewrite met it with decimal.InvalidOperation and xgrammar with a JSON syntax error."""
    g = compiled(backends[name], "json_schema", text)
    assert isinstance(g, InvalidGrammarObject) and "must be a finite number" in g.message, g


def test_llguidance_refuses_bounds_with_no_number_it_can_hold_between_them(backends):
    schema = {"type": "number", "exclusiveMinimum": 1, "exclusiveMaximum": 1.0000000000000004}
    g = compiled(backends["llguidance"], "json_schema", json.dumps(schema))
    assert (
        isinstance(g, InvalidGrammarObject) and "no number between them of at most 15 significant digits" in g.message
    ), g


@pytest.mark.parametrize("name", LIBRARIES)
def test_format_beside_pattern_is_refused(backends, name):
    """xgrammar enforced only the format: '2.2.2.2' passed `pattern: ^1`."""
    g = compiled(backends[name], "json_schema", json.dumps({**S, "format": "ipv4", "pattern": "^1"}))
    assert isinstance(g, InvalidGrammarObject) and "'format' 'ipv4' beside 'pattern'" in g.message, g


# ------------------------------------- a key written with an escape is the name it decodes to
# xgrammar and llguidance matched a key against the listed names as spelled: `"\u0061"` was an
# extra key to them, `a` to every JSON parser, so `{"\u0061": "x"}` broke `a`'s integer schema
# wherever extra keys were allowed (a stranger's fuzzer). Their adapters keep extra keys to
# names of raw characters that are not listed (ignored_keywords.unlisted_raw_names).
_OPEN_A = {"type": "object", "properties": {"a": INT}, "additionalProperties": True}
_STRING_EXTRAS = {"type": "object", "properties": {"a": INT}, "required": ["a"], "additionalProperties": S}
_BYTE_TOKENS: dict[int, int] = {}


def reachable(backend, tokenizer, schema, text: str) -> bool:
    """Whether `text` is an output of the backend's grammar for `schema`: every token allowed by
    the mask and EOS after the last, as the tokenizer writes it or one byte a token."""
    if not _BYTE_TOKENS:
        for i in range(tokenizer.vocab_size):
            b = tokenizer.decode_bytes([i], skip_special_tokens=False)
            if len(b) == 1:
                _BYTE_TOKENS.setdefault(b[0], i)
    g = compiled(backend, "json_schema", json.dumps(schema))
    assert not isinstance(g, InvalidGrammarObject), g.message
    spellings = [tokenizer.encode(text, add_special_tokens=False), [_BYTE_TOKENS[b] for b in text.encode()]]
    return any(_takes(g.copy(), tokenizer, ids) for ids in spellings)


def _takes(g, tokenizer, ids: list[int]) -> bool:
    """Whether matcher `g` takes the tokens `ids`, each allowed by its mask, and then EOS."""
    width = tokenizer.vocab_size + PAD
    for t in ids:
        if not mask_row(g, width)[t]:
            return False
        g.accept_token(t)
    return bool(mask_row(g, width)[tokenizer.eos_token_id])


# (libraries, schema, spellings with an escape the grammar must not take, texts it still takes)
ESCAPED_KEYS = [
    # the stranger's cases
    (["llguidance"], {"properties": {"a": INT}}, ['{"\\u0061": "x"}'], ['{"a": 1}', '{"b": "x"}', '{"a": 1, "b": 2}']),
    (
        ["llguidance"],
        {"type": "object", "properties": {"a": INT}, "required": ["a"]},
        ['{"a": 1, "\\u0061": "x"}'],
        ['{"a": 1, "b": "x"}'],
    ),
    (
        LIBRARIES[::2],
        _OPEN_A,
        ['{"\\u0061": "x"}', '{"\\u0062": 1}', '{"\\"": 1}'],
        ['{"a": 1}', '{"b": 1}', '{"é": 1}'],
    ),
    (LIBRARIES[::2], _STRING_EXTRAS, ['{"a": 1, "\\u0061": "x"}'], ['{"a": 1, "b": "x"}', '{"a": 1, "ab": "x"}']),
    (
        LIBRARIES[::2],
        {"type": "object", "additionalProperties": True, "properties": {"a": {"const": 1}}},
        ['{"\\u0061": 2}'],
        ['{"a": 1}', '{"b": 2}'],
    ),
    (
        LIBRARIES[::2],
        {"type": "object", "patternProperties": {"^a": INT}, "additionalProperties": False},
        ['{"\\u0061b": 1}'],
        ['{"ab": 1}'],
    ),
    # the same hole elsewhere: nested, in an array's items, through $ref, in an anyOf branch
    (
        LIBRARIES[::2],
        {"type": "object", "properties": {"o": _STRING_EXTRAS}, "additionalProperties": S},
        ['{"o": {"a": 1, "\\u0061": "x"}}', '{"\\u006f": "x"}'],
        ['{"o": {"a": 1, "c": "x"}, "p": "x"}'],
    ),
    (
        LIBRARIES[::2],
        {"$defs": {"o": _OPEN_A}, "type": "array", "items": {"$ref": "#/$defs/o"}},
        ['[{"b": 1}, {"\\u0061": "x"}]'],
        ['[{"a": 1}, {"b": "x"}]'],
    ),
    (LIBRARIES[::2], {"anyOf": [_STRING_EXTRAS, INT]}, ['{"a": 1, "\\u0061": "x"}'], ['{"a": 1, "b": "x"}', "1"]),
    # listed names that need an escape, or have one a writer may use, are still written as listed
    (
        LIBRARIES[::2],
        {"type": "object", "properties": {'a"b': INT, "é": INT, "😀": INT, "a/b": INT}, "additionalProperties": S},
        ['{"a\\u0022b": "x"}', '{"\\u00e9": "x"}', '{"\\ud83d\\ude00": "x"}', '{"a\\/b": "x"}'],
        ['{"a\\"b": 1}', '{"é": 1}', '{"😀": 1}', '{"a/b": 1}', '{"éé": "x"}', '{"": "x"}'],
    ),
]


@pytest.mark.parametrize(
    "names, schema, escaped, plain", ESCAPED_KEYS, ids=[f"escaped-key-{i}" for i in range(len(ESCAPED_KEYS))]
)
def test_a_key_written_with_an_escape_is_not_an_extra_key(backends, tokenizer, names, schema, escaped, plain):
    for name in names:
        for text in escaped:
            assert not reachable(backends[name], tokenizer, schema, text), (name, schema, text)
        for text in plain:
            jsonschema.validate(json.loads(text), schema)
            assert reachable(backends[name], tokenizer, schema, text), (name, schema, text)


@pytest.mark.parametrize("name", ["xgrammar", "llguidance"])
def test_a_listed_name_too_long_to_leave_out_of_the_extra_keys_is_refused_by_name(backends, tokenizer, name):
    """The extra keys' pattern nests a few groups per letter of a listed name: a 64-letter name
    passed llguidance's 250 nested parentheses and a 90-letter one our check of xgrammar's regex,
    each refused in words about a regex the user never wrote. Past the adapter's
    LONGEST_EXCLUDED_NAME the schema is refused naming the property; a name of that length
    still compiles and is written."""
    import importlib

    longest = importlib.import_module(f"minisglang.backends.{name}_backend").LONGEST_EXCLUDED_NAME

    def schema(n: int) -> dict:
        return {"type": "object", "properties": {"k" * n: INT, "kx": S}, "additionalProperties": S}

    with pytest.raises(GrammarError, match=f"property name 'k+'\\.\\.\\.'k+' \\({longest + 1} characters\\)"):
        backends[name].compile("json_schema", json.dumps(schema(longest + 1)))
    fits = schema(longest)
    assert reachable(backends[name], tokenizer, fits, json.dumps({"k" * longest: 1}))


_NAME = st.text(st.sampled_from('ab"\\\né😀/'), max_size=3)


def _spelled(key: str, how: str) -> str:
    """`key` as a JSON string: as json.dumps writes it (ASCII or not), or every UTF-16 unit escaped."""
    if how == "escaped":
        units = key.encode("utf-16-be")
        return '"' + "".join(f"\\u{int.from_bytes(units[i : i + 2], 'big'):04x}" for i in range(0, len(units), 2)) + '"'
    return json.dumps(key, ensure_ascii=how == "ascii")


@pytest.mark.parametrize("name", LIBRARIES[::2])
@settings(max_examples=30, deadline=None)
@given(
    listed=st.lists(_NAME, min_size=1, max_size=3, unique=True),
    key=_NAME,
    how=st.sampled_from(["ascii", "raw", "escaped"]),
    extra=st.sampled_from([True, S]),
)
@example(listed=["a"], key="a", how="escaped", extra=True)
def test_an_extra_key_is_taken_exactly_when_it_is_unlisted_and_written_raw(
    backends, tokenizer, name, listed, key, how, extra
):
    """`{KEY: "x"}` under listed integer properties: taken exactly when the key decodes to a name
    that is not listed and its spelling has no escape (the cost: an extra key there holds no
    `"`, `\\` or control character); whatever is taken validates."""
    schema = {"type": "object", "properties": {n: INT for n in listed}, "additionalProperties": extra}
    text = "{" + _spelled(key, how) + ': "x"}'
    expected = key not in listed and "\\" not in _spelled(key, how)
    assert reachable(backends[name], tokenizer, schema, text) == expected, (schema, text)
    if expected:
        jsonschema.validate(json.loads(text), schema)
