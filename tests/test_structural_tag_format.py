"""Structural tag v2 (constrained/structural_tag_format.py): parsing into frozen dataclasses,
the canonical JSON, the old shape in v2 terms, and bad input refused naming its path."""

from __future__ import annotations

import dataclasses
import json

import pytest
import xgrammar as xgr
from hypothesis import given, settings
from hypothesis import strategies as st

from minisglang.constrained.structural_tag import parse_structural_tag
from minisglang.constrained.structural_tag_format import (
    AnyTextFormat,
    ConstStringFormat,
    DispatchFormat,
    JSONSchemaFormat,
    RepeatFormat,
    SequenceFormat,
    StructuralTagFormat,
    StructuralTagFormatError,
    TagFormat,
    TokenFormat,
    TriggeredTagsFormat,
    from_legacy,
    is_v2,
)
from minisglang.constrained.structural_tag_parse import parse_structural_tag_format

TOOL = {
    "type": "structural_tag",
    "format": {
        "type": "triggered_tags",
        "triggers": ["<function="],
        "tags": [
            {
                "type": "tag",
                "begin": "<function=get_weather>",
                "content": {"type": "json_schema", "json_schema": {"type": "object"}},
                "end": "</function>",
            },
            {"begin": "<function=noop>", "content": {"type": "const_string", "value": "{}"}, "end": ["</function>"]},
        ],
        "at_least_one": True,
    },
}


def test_a_tool_call_spec_parses_into_the_dataclass_tree():
    spec = parse_structural_tag_format(TOOL)
    fmt = spec.format
    assert isinstance(fmt, TriggeredTagsFormat)
    assert fmt.triggers == ("<function=",) and fmt.at_least_one and not fmt.stop_after_first
    assert fmt.tags[0] == TagFormat("<function=get_weather>", JSONSchemaFormat({"type": "object"}), "</function>")
    assert fmt.tags[1].ends == ("</function>",) and fmt.tags[1].content == ConstStringFormat("{}")
    with pytest.raises(dataclasses.FrozenInstanceError):
        fmt.triggers = ()  # type: ignore[misc]
    assert parse_structural_tag_format(json.dumps(TOOL)) == spec  # JSON text too
    assert parse_structural_tag_format({"format": TOOL["format"]}) == spec  # "type" is optional


def test_the_canonical_json_round_trips_and_xgrammar_reads_it():
    spec = parse_structural_tag_format(TOOL)
    again = parse_structural_tag_format(spec.to_json())
    assert again == spec and again.to_json() == spec.to_json()
    xgr.StructuralTag.from_json(spec.to_json())  # xgrammar's own model accepts every field we write


def test_every_format_type_parses():
    fmt = {
        "type": "sequence",
        "elements": [
            {"type": "const_string", "value": "a"},
            {"type": "regex", "pattern": "[0-9]+"},
            {"type": "grammar", "grammar": 'root ::= "x"'},
            {"type": "optional", "content": {"type": "any_text", "excludes": ["q"], "max_chars": 3}},
            {"type": "plus", "content": {"type": "const_string", "value": "b"}},
            {"type": "star", "content": {"type": "const_string", "value": "c"}},
            {"type": "repeat", "min": 1, "max": -1, "content": {"type": "const_string", "value": "d"}},
            {"type": "or", "elements": [{"type": "token", "token": 5}, {"type": "exclude_token"}]},
            {"type": "any_tokens", "exclude_tokens": ["<eos>"], "max_tokens": 4},
            {"type": "dispatch", "rules": [["<a", {"type": "const_string", "value": "1"}]], "loop": False},
            {
                "type": "tags_with_separator",
                "separator": ",",
                "tags": [
                    {
                        "type": "tag",
                        "begin": {"type": "token", "token": "<t>"},
                        "content": {"type": "any_text"},
                        "end": "e",
                    }
                ],
            },
        ],
    }
    spec = parse_structural_tag_format({"type": "structural_tag", "format": fmt})
    assert isinstance(spec.format, SequenceFormat) and len(spec.format.elements) == 11
    assert spec.format.elements[6] == RepeatFormat(1, -1, ConstStringFormat("d"))
    assert spec.format.elements[3].content == AnyTextFormat(("q",), None, 3)
    assert spec.format.elements[10].tags[0].begin == TokenFormat("<t>")
    assert spec.format.elements[9] == DispatchFormat((("<a", ConstStringFormat("1")),), loop=False)
    assert [p for p, _ in spec.walk()][:3] == ["format", "format.elements[0]", "format.elements[1]"]
    assert parse_structural_tag_format(spec.to_json()) == spec


def test_the_old_shape_in_v2_terms_is_xgrammars_legacy_conversion():
    old = parse_structural_tag(
        {"structures": [{"begin": "<a>", "schema": {"type": "integer"}, "end": "</a>"}], "triggers": ["<a"]}
    )
    v2 = from_legacy(old)
    assert v2.format == TriggeredTagsFormat(("<a",), (TagFormat("<a>", JSONSchemaFormat({"type": "integer"}), "</a>"),))
    legacy = xgr.StructuralTag.from_legacy_structural_tag(
        [xgr.StructuralTagItem(begin="<a>", schema={"type": "integer"}, end="</a>")], ["<a"]
    )
    assert parse_structural_tag_format(legacy.model_dump_json()) == v2
    assert is_v2(v2.to_dict()) and not is_v2({"structures": [], "triggers": []})


BAD = [
    ([], "structural_tag must be an object, got a list"),
    ("{not json", "structural_tag is not valid JSON"),
    ({}, "structural_tag.format is missing"),
    ({"format": {}, "extra": 1}, "structural_tag.extra: unknown key"),
    ({"type": "json_schema", "format": {}}, "structural_tag.type must be 'structural_tag'"),
    ({"format": []}, "structural_tag.format must be a format"),
    ({"format": {}}, r"structural_tag.format.type is missing"),
    ({"format": {"type": "nope"}}, r"structural_tag.format.type: unknown format type 'nope'"),
    ({"format": {"type": "token_dispatch", "rules": []}}, r"format.type: 'token_dispatch' is an xgrammar format"),
    ({"format": {"type": "dispatch", "rules": []}}, r"structural_tag.format.rules must be a non-empty list"),
    ({"format": {"type": "dispatch", "rules": [["<a"]]}}, r"format.rules\[0\] must be a \[pattern, format\] pair"),
    ({"format": {"type": "dispatch", "rules": [["", {"type": "any_text"}]]}}, r"format.rules\[0\]\[0\] is empty"),
    ({"format": {"type": "dispatch", "rules": [["<", {"type": "x"}]]}}, r"format.rules\[0\]\[1\].type: unknown"),
    ({"format": {"type": "const_string"}}, r"structural_tag.format.value is missing"),
    ({"format": {"type": "const_string", "value": 3}}, r"structural_tag.format.value must be a string"),
    ({"format": {"type": "const_string", "value": "\ud800"}}, r"structural_tag.format.value is not valid Unicode"),
    ({"format": {"type": "const_string", "value": "a", "vaule": "b"}}, r"structural_tag.format.vaule: unknown key"),
    ({"format": {"type": "sequence", "elements": []}}, r"structural_tag.format.elements must be a non-empty list"),
    ({"format": {"type": "or", "elements": [{"type": "x"}]}}, r"format.elements\[0\].type: unknown format type"),
    (
        {"format": {"type": "repeat", "min": 2, "max": 1, "content": {"type": "any_text"}}},
        r"format.max 1 is less than min 2",
    ),
    (
        {"format": {"type": "repeat", "min": True, "max": 1, "content": {"type": "any_text"}}},
        r"format.min must be a whole",
    ),
    (
        {"format": {"type": "repeat", "min": 0, "max": -2, "content": {"type": "any_text"}}},
        r"format.max must be a whole",
    ),
    (
        {"format": {"type": "repeat", "min": 0, "max": 5000, "content": {"type": "any_text"}}},
        r"repeat bounds past 1000",
    ),
    ({"format": {"type": "any_text", "excludes": [""]}}, r"format.excludes\[0\] is empty"),
    ({"format": {"type": "any_text", "max_chars": -1}}, r"format.max_chars must be a whole number"),
    ({"format": {"type": "json_schema", "json_schema": 3}}, r"format.json_schema must be a JSON Schema"),
    ({"format": {"type": "json_schema", "json_schema": {}, "style": "yaml"}}, r"format.style must be one of"),
    ({"format": {"type": "grammar", "grammar": ""}}, r"format.grammar is empty"),
    ({"format": {"type": "grammar", "grammar": "x", "syntax": "peg"}}, r"format.syntax must be 'ebnf' or 'lark'"),
    (
        {"format": {"type": "tag", "begin": "a", "content": {"type": "any_text"}, "end": []}},
        r"format.end is an empty list",
    ),
    (
        {"format": {"type": "tag", "begin": {"type": "any_text"}, "content": {"type": "any_text"}, "end": "x"}},
        r"format.begin must be a string or a token format, got a 'any_text' format",
    ),
    ({"format": {"type": "token", "token": True}}, r"format.token must be a token id or a token string"),
    (
        {
            "format": {
                "type": "triggered_tags",
                "triggers": [],
                "tags": [{"begin": "a", "content": {"type": "any_text"}, "end": "b"}],
            }
        },
        r"format.triggers is an empty list",
    ),
    ({"format": {"type": "triggered_tags", "triggers": ["a"], "tags": []}}, r"format.tags must be a non-empty list"),
    (
        {
            "format": {
                "type": "triggered_tags",
                "triggers": ["a"],
                "tags": [{"begin": "b", "content": {"type": "any_text"}, "end": "c"}],
            }
        },
        r"format.tags\[0\].begin 'b' starts with 0 of the triggers",
    ),
    (
        {
            "format": {
                "type": "triggered_tags",
                "triggers": ["a", "ab"],
                "tags": [{"begin": "abc", "content": {"type": "any_text"}, "end": "c"}],
            }
        },
        r"format.tags\[0\].begin 'abc' starts with 2 of the triggers",
    ),
    (
        {
            "format": {
                "type": "triggered_tags",
                "triggers": ["a", "b", "a"],
                "tags": [{"begin": "abc", "content": {"type": "any_text"}, "end": "c"}],
            }
        },
        r"format.triggers\[2\] 'a' is listed twice",
    ),
    (
        {"format": {"type": "tags_with_separator", "separator": ",", "tags": [{"type": "or", "elements": []}]}},
        r"format.tags\[0\].type must be 'tag'",
    ),
    (
        {
            "format": {
                "type": "tags_with_separator",
                "separator": ",",
                "tags": [{"begin": "a", "content": {"type": "any_text"}}],
            }
        },
        r"format.tags\[0\].end is missing",
    ),
    (
        {
            "format": {
                "type": "triggered_tags",
                "triggers": ["<"],
                "tags": [
                    {"begin": "<a", "content": {"type": "any_text"}, "end": ">"},
                    {"begin": "<b", "content": {"type": "any_text"}, "end": ">"},
                    {"begin": "<c", "content": {"type": "regex"}, "end": ">"},
                ],
            }
        },
        r"structural_tag.format.tags\[2\].content.pattern is missing",
    ),
    (
        {
            "format": {
                "type": "tags_with_separator",
                "separator": ",",
                "tags": [{"begin": "a", "content": {"type": 7}, "end": "b"}],
            }
        },
        r"structural_tag.format.tags\[0\].content.type: unknown format type 7",
    ),
]


@pytest.mark.parametrize("spec, message", BAD, ids=lambda x: None)
def test_a_bad_spec_names_the_path_of_the_field(spec, message):
    with pytest.raises(StructuralTagFormatError, match=message):
        parse_structural_tag_format(spec)


def test_deep_and_large_specs_are_refused_before_anything_is_built():
    fmt: dict = {"type": "const_string", "value": "x"}
    for _ in range(200):
        fmt = {"type": "optional", "content": fmt}
    with pytest.raises(StructuralTagFormatError, match="nest more than 64 deep"):
        parse_structural_tag_format({"format": fmt})
    wide = {"type": "sequence", "elements": [{"type": "const_string", "value": "x"}] * 5000}
    with pytest.raises(StructuralTagFormatError, match="more than 4096 formats"):
        parse_structural_tag_format({"format": wide})
    with pytest.raises(StructuralTagFormatError, match="not valid JSON"):
        parse_structural_tag_format('{"format":' * 100_000)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text("ab<", max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["type", "format", "elements", "content", "value", "begin", "end", "tags", "triggers"]),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@settings(max_examples=300)
@given(st.dictionaries(st.sampled_from(["type", "format"]), JSONISH, max_size=2))
def test_any_input_parses_or_is_refused_naming_a_field(spec):
    try:
        parsed = parse_structural_tag_format(spec)
    except StructuralTagFormatError as e:
        assert str(e).startswith("structural_tag")
    else:
        assert isinstance(parsed, StructuralTagFormat)
