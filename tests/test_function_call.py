"""function_call.py alone: OpenAI tools -> the structural tag, and the parser that reads
tool calls back out of text (whole, and as a stream of deltas split anywhere)."""

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minisglang as sgl
from minisglang.backends.base import InvalidGrammarObject, get_backend_class
from minisglang.function_call import (
    CALL_END,
    TRIGGER,
    CallDelta,
    FunctionTool,
    ToolCallParser,
    ToolChoice,
    arguments_schema,
    call_begin,
    format_call,
    openai_deltas,
    parse_tool_calls,
    tool_constraint,
)
from minisglang.tokenizer import Tokenizer

WEATHER = FunctionTool(
    "get_weather", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
)
TIME = FunctionTool("get_time", {"type": "object", "properties": {"zone": {"type": "string"}}})
NAMES = ["get_weather", "get_time"]


def counting_ids():
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


# ---------------------------------------------------------------------- tools -> constraint
def test_auto_is_a_structural_tag_with_one_structure_per_tool():
    c = tool_constraint([WEATHER, TIME], ToolChoice("auto"))
    assert c.kind == "structural_tag"
    assert c.value == {
        "structures": [
            {
                "begin": '<tool_call>{"name": "get_weather", "arguments": ',
                "schema": WEATHER.parameters,
                "end": "}</tool_call>",
            },
            {
                "begin": '<tool_call>{"name": "get_time", "arguments": ',
                "schema": TIME.parameters,
                "end": "}</tool_call>",
            },
        ],
        "triggers": ["<tool_call>"],
        "at_least_one": False,
        "stop_after_first": False,
    }
    # The begin, arguments and end are the chat template's own rendering of a call.
    assert format_call("f", '{"a": 1}') == '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'


@pytest.mark.parametrize(
    "choice,parallel,names,at_least_one,stop_after_first",
    [
        (ToolChoice("auto"), True, NAMES, False, False),
        (ToolChoice("auto"), False, NAMES, False, True),
        (ToolChoice("required"), True, NAMES, True, False),
        (ToolChoice("required"), False, NAMES, True, True),
        (ToolChoice("function", "get_time"), True, ["get_time"], True, True),
        (ToolChoice("function", "get_time"), False, ["get_time"], True, True),
    ],
)
def test_tool_choice_and_parallel_tool_calls(choice, parallel, names, at_least_one, stop_after_first):
    spec = tool_constraint([WEATHER, TIME], choice, parallel).value
    assert [s["begin"] for s in spec["structures"]] == [call_begin(n) for n in names]
    assert (spec["at_least_one"], spec["stop_after_first"]) == (at_least_one, stop_after_first)
    assert all(s["begin"].startswith(t) for s in spec["structures"] for t in spec["triggers"])


def test_none_is_no_constraint_and_a_named_tool_must_exist():
    assert tool_constraint([WEATHER], ToolChoice("none")) is None
    with pytest.raises(ValueError, match="'nope'"):
        tool_constraint([WEATHER], ToolChoice("function", "nope"))


def test_arguments_are_always_an_object():
    assert arguments_schema(None) == {"type": "object", "properties": {}, "additionalProperties": False}
    assert arguments_schema({"properties": {"a": {}}}) == {"properties": {"a": {}}, "type": "object"}
    assert arguments_schema(WEATHER.parameters) is WEATHER.parameters


@pytest.mark.parametrize("name", ["", "a b", "x" * 65, "<tool_call>", 'a"b', "é"])
def test_tool_names_are_openais(name):
    with pytest.raises(ValueError, match="tool name"):
        FunctionTool(name, {})


def test_allowed_tools_is_auto_or_required_over_those_tools_only():
    for mode in ("auto", "required"):
        c = tool_constraint([WEATHER, TIME], ToolChoice(mode, allowed=("get_time",)))
        assert c is not None
        assert [s["begin"] for s in c.value["structures"]] == [call_begin("get_time")]
        assert c.value["at_least_one"] == (mode == "required") and not c.value["stop_after_first"]
    with pytest.raises(ValueError, match="get_news"):
        tool_constraint([WEATHER, TIME], ToolChoice("auto", allowed=("get_news",)))


def test_a_root_ref_to_an_object_gets_no_type_beside_it():
    """A stranger's tool whose parameters are a root $ref to an object ({"$ref":
    "#/$defs/M", "$defs": ...}, zod-to-json-schema's shape) was refused by the xgrammar
    backend ("'$ref' beside other keywords"): the "type" arguments_schema added was the other keyword."""
    model = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    for params in (
        {"$ref": "#/$defs/M", "$defs": {"M": model}},
        {"$ref": "#/definitions/A", "definitions": {"A": {"$ref": "#/definitions/M~1x"}, "M/x": model}},
    ):
        assert arguments_schema(params) is params
    for not_an_object in (
        {"$ref": "#/$defs/S", "$defs": {"S": {"type": "string"}}},
        {"$ref": "#/$defs/none"},
        {"$ref": "#/$defs/A", "$defs": {"A": {"$ref": "#/$defs/A"}}},
        {"$ref": "https://example.com/m.json"},
    ):
        assert arguments_schema(not_an_object)["type"] == "object"

    tokenizer = Tokenizer.from_pretrained(sgl.DEFAULT_MODEL_PATH)
    backend = get_backend_class("xgrammar")(tokenizer, len(tokenizer.token_bytes), compile_in="thread")
    tool = FunctionTool("f", arguments_schema({"$ref": "#/$defs/M", "$defs": {"M": model}}))
    tag = tool_constraint([tool], ToolChoice("required"))
    assert tag is not None
    assert not isinstance(backend._compile_safely("structural_tag", json.dumps(tag.value)), InvalidGrammarObject)


# ---------------------------------------------------------------------- text -> calls
def test_free_text_and_calls():
    text = (
        "Let me check. "
        + format_call("get_weather", '{"city": "Paris"}')
        + " and "
        + format_call("get_time", '{"zone": "CET"}')
    )
    content, calls = parse_tool_calls(text, NAMES, counting_ids())
    assert content == "Let me check.  and "
    assert [(c.id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("call_0", "get_weather", {"city": "Paris"}),
        ("call_1", "get_time", {"zone": "CET"}),
    ]


def test_the_end_tag_inside_a_string_argument_does_not_end_the_call():
    args = json.dumps({"city": 'x"}</tool_call>{', "n": [1, {"a": "]}"}]})
    content, calls = parse_tool_calls(format_call("get_weather", args) + "tail", NAMES)
    assert (content, calls[0].arguments) == ("tail", args)


@pytest.mark.parametrize(
    "text,content,arguments",
    [
        ("<tool_call>hello", "<tool_call>hello", []),  # a trigger that starts no call
        (call_begin("unknown") + "{}" + CALL_END, call_begin("unknown") + "{}" + CALL_END, []),
        ("ok <tool_ca", "ok <tool_ca", []),  # held, then given back at the end
        (call_begin("get_time") + '{"zone": "C', call_begin("get_time") + '{"zone": "C', []),  # cut: given back
        (call_begin("get_time")[:-3], call_begin("get_time")[:-3], []),  # its opening cut: the same
        (call_begin("get_time") + "{}}</tool", "", ["{}"]),  # cut inside its end tag
        (call_begin("get_time") + "{} then", " then", ["{}"]),  # no end tag: text again
    ],
)
def test_odd_and_cut_outputs(text, content, arguments):
    got_content, calls = parse_tool_calls(text, NAMES)
    assert (got_content, [c.arguments for c in calls]) == (content, arguments)


@pytest.mark.parametrize(
    "text,cut",
    [
        ("free", False),
        ("free <tool_c", False),
        (format_call("get_time", "{}"), False),
        (format_call("get_time", "{}") + " more", False),
        (call_begin("get_time") + '{"zone"', True),
        (call_begin("get_time")[:-1], True),
        (call_begin("get_time") + "{}}</tool", False),  # the arguments are whole: only markup was cut
    ],
)
def test_a_call_cut_short_is_known(text, cut):
    parser = ToolCallParser(NAMES)
    parser.feed(text)
    parser.finish()
    assert bool(parser.cut) == cut


def test_deltas_in_openais_shape():
    parser = ToolCallParser(NAMES, counting_ids())
    events = []
    for piece in ["Hi <tool_", "call>", '{"name": "get_time", "argu', 'ments": {"zone"', ': "CET"}}</tool_call>']:
        events += parser.feed(piece)
    events += parser.finish()
    assert events[0] == "Hi " and "<" not in "".join(e for e in events if isinstance(e, str))
    assert events[1] == CallDelta(0, '{"zone": "CET"}', "call_0", "get_time")  # held until whole, sent in one
    assert openai_deltas(events) == [
        {"content": "Hi "},
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": '{"zone": "CET"}'},
                }
            ]
        },
    ]
    assert CallDelta(0, '"a"').to_openai() == {"index": 0, "function": {"arguments": '"a"'}}


# Free text as the structural tag allows it: anything without the trigger.
FREE = st.text(alphabet=st.sampled_from(list('ab <>_{}"\\:,tool_call/\n中')), max_size=20).filter(
    lambda t: TRIGGER not in t
)
JSON_TEXT = st.text(alphabet=st.sampled_from(list('a"\\}{][<>/ ')) | st.characters(), max_size=15)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | JSON_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
ARGUMENTS = st.dictionaries(st.text(max_size=5), JSON_VALUES, max_size=3).map(
    lambda d: json.dumps(d, ensure_ascii=False)
)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.tuples(FREE, st.sampled_from(NAMES), ARGUMENTS), max_size=4), tail=FREE)
def test_free_text_and_calls_round_trip(parts, tail):
    text = "".join(free + format_call(name, args) for free, name, args in parts) + tail
    content, calls = parse_tool_calls(text, NAMES)
    assert content == "".join(free for free, _, _ in parts) + tail
    assert [(c.name, c.arguments) for c in calls] == [(name, args) for _, name, args in parts]
    assert len({c.id for c in calls}) == len(calls) and all(c.id.startswith("call_") for c in calls)


# Any text at all: pieces of the format mixed with noise, so that odd outputs are split too.
ANY_TEXT = st.lists(
    st.sampled_from(
        [
            TRIGGER,
            call_begin("get_time"),
            call_begin("get_weather"),
            CALL_END,
            "{",
            "}",
            "[",
            "]",
            '"',
            "\\",
            "<tool",
            "}</",
            " ",
            "a",
            "中",
        ]
    )
    | FREE,
    max_size=12,
).map("".join)


def reassemble(deltas: list[dict]) -> tuple[str, list[tuple[str, str, str]]]:
    """What a client builds from the deltas: the content, and (id, name, arguments) per call index."""
    content, calls = "", {}
    for d in deltas:
        content += d.get("content", "")
        for tc in d.get("tool_calls", []):
            if "id" in tc:
                assert tc["index"] == len(calls) and tc["type"] == "function"
                calls[tc["index"]] = [tc["id"], tc["function"]["name"], ""]
            calls[tc["index"]][2] += tc["function"]["arguments"]
    return content, [tuple(c) for c in calls.values()]


@settings(max_examples=400, deadline=None)
@given(
    text=ANY_TEXT
    | st.lists(st.tuples(FREE, st.sampled_from(NAMES), ARGUMENTS), max_size=3).map(
        lambda parts: "".join(f + format_call(n, a) for f, n, a in parts)
    ),
    data=st.data(),
)
def test_stream_deltas_reassemble_into_the_whole_parse_for_any_split(text, data):
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
    parser, deltas = ToolCallParser(NAMES, counting_ids()), []
    for piece in pieces:
        deltas += openai_deltas(parser.feed(piece))
    deltas += openai_deltas(parser.finish())
    content, calls = parse_tool_calls(text, NAMES, counting_ids())
    assert reassemble(deltas) == (content, [(c.id, c.name, c.arguments) for c in calls])


@settings(max_examples=200, deadline=None)
@given(free=FREE, name=st.sampled_from(NAMES), args=ARGUMENTS)
def test_no_part_of_a_call_is_ever_sent_as_content(free, name, args):
    parser, sent = ToolCallParser(NAMES), ""
    for ch in free + format_call(name, args):
        sent += "".join(e for e in parser.feed(ch) if isinstance(e, str))
        assert free.startswith(sent)  # only the free text, never a piece of the trigger
    assert sent == free


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(st.tuples(FREE, st.sampled_from(NAMES), ARGUMENTS), min_size=1, max_size=3),
    tail=FREE,
    data=st.data(),
)
def test_an_output_cut_anywhere_gives_only_calls_that_parse_and_loses_no_text(parts, tail, data):
    """max_tokens, a stop string or an abort may end the output at any character: every call
    returned is whole (its arguments json.loads), the calls are the first ones written, and
    a call cut short comes back as content, so content and calls together hold all the text."""
    text = "".join(free + format_call(name, args) for free, name, args in parts) + tail
    cut_at = data.draw(st.integers(0, len(text)))
    parser = ToolCallParser(NAMES)
    parser.feed(text[:cut_at])
    parser.finish()
    assert [(c.name, c.arguments) for c in parser.calls] == [(n, a) for _, n, a in parts][: len(parser.calls)]
    for call in parser.calls:
        json.loads(call.arguments)
    rebuilt, rest = "", text[:cut_at]  # the cut text with each whole call's markup taken out is the content
    for call in parser.calls:
        before, _, rest = rest.partition(call_begin(call.name) + call.arguments)
        rebuilt += before
        rest = rest[len(CALL_END) :] if rest.startswith(CALL_END) else rest[:0] if CALL_END.startswith(rest) else rest
    assert parser.content == rebuilt + rest
    # free text never holds the trigger: one there opened the cut call, whose text ends the content
    assert bool(parser.cut) == (TRIGGER in rest) and parser.content.endswith(parser.cut)
    assert parser.cut == ("" if TRIGGER not in rest else rest[rest.index(TRIGGER) :])
