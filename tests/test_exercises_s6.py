"""Exercise tests of stage s6-function-calling (`minisglang grade --stage s6`).

Each graded test carries the marker of the task it grades:

- task6_2  _JsonScan.step (minisglang/function_call.py): where a tool call's arguments
           end, the piece that lets `parse_tool_calls` and the streaming `ToolCallParser`
           read calls back out of the generated text

The oracles never use the code under test. task6_2: Python's own JSON parser
(`json.JSONDecoder.raw_decode` says where a JSON value ends; `json.loads` that the
arguments read back are the value written), on values built to be hard for a scanner:
strings holding brackets, quotes, backslashes and the end tag itself.
"""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minisglang.function_call import CALL_END, TRIGGER, CallDelta, ToolCallParser, _JsonScan, format_call, parse_tool_calls

NAMES = ["get_weather", "search"]

# ---------------------------------------------------------------------------------------
# task6_2: reading the calls back
# ---------------------------------------------------------------------------------------
# Characters that a scanner must treat with care inside a string; the rest are plain.
TRICKY = '{}[]"\\:,' + "</>" + "é北 \n\t"
strings = st.text(alphabet=st.sampled_from(list(TRICKY) + list("abc")), max_size=8)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), strings)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(strings, inner, max_size=3)), max_leaves=8)
arguments = st.dictionaries(strings, values, max_size=4)
layouts = st.sampled_from([dict(), dict(separators=(",", ":")), dict(ensure_ascii=False), dict(indent=1)])
# Free text around the calls: anything but the start of a trigger.
free_text = st.lists(st.sampled_from(list("ab }{\"\\]>é") + ["tool_call"]), max_size=8).map("".join)


def scan_end(text: str) -> int | None:
    """Feed `text` to a fresh scanner; the index just past the character that closed the value."""
    scan = _JsonScan()
    for i, ch in enumerate(text):
        if scan.step(ch):
            return i + 1
    return None


@pytest.mark.task6_2
@settings(max_examples=150, deadline=None)
@given(values.filter(lambda v: isinstance(v, (dict, list))), layouts, st.text(max_size=6))
def test_the_scan_closes_exactly_where_the_json_value_ends(value, layout, after):
    """The scanner's end equals `raw_decode`'s, whatever follows the value."""
    text = json.dumps(value, **layout)
    _, end = json.JSONDecoder().raw_decode(text + after)
    assert scan_end(text + after) == end, f"the value {text!r} ends at {end}, not where the scan said"


@pytest.mark.task6_2
@pytest.mark.parametrize("args", [
    '{"q": "a}b"}',                      # a closing brace inside a string
    '{"q": "say \\"hi\\" }"}',           # escaped quotes, then a brace, inside the string
    '{"path": "C:\\\\"}',                # a string that ends with an escaped backslash
    '{"path": "C:\\\\", "x": "}"}',      # ... and a brace in the next string
    '{"a": [1, {"b": "]"}], "c": {}}',   # nesting, and a bracket inside a string
    '{"end": "}</tool_call>"}',          # the end tag itself inside the arguments
    '{"u": "\\u007d\\\\\\""}',           # \u escapes, an escaped backslash, then an escaped quote
    '{}',
])
def test_tricky_arguments_are_read_back_whole(args):
    text = "Checking. " + format_call("search", args) + " Done }"
    content, calls = parse_tool_calls(text, NAMES)
    assert [(c.name, c.arguments) for c in calls] == [("search", args)], (
        f"the arguments of {text!r} read back as {[c.arguments for c in calls]}")
    assert json.loads(calls[0].arguments) == json.loads(args)
    assert content == "Checking.  Done }"


@pytest.mark.task6_2
@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(free_text, st.sampled_from(NAMES), arguments, layouts), min_size=1, max_size=3), free_text)
def test_calls_between_free_text_read_back_as_written(parts, tail):
    """Free text, calls and free text again: the content is the free text, each call's
    arguments are exactly the JSON text written, and `json.loads` gives the value back."""
    text, want = "", []
    for before, name, args, layout in parts:
        written = json.dumps(args, **layout)
        text += before + format_call(name, written)
        want.append((name, written, args))
    text += tail
    content, calls = parse_tool_calls(text, NAMES)
    assert [(c.name, c.arguments) for c in calls] == [(n, w) for n, w, _ in want], text
    assert [json.loads(c.arguments) for c in calls] == [a for _, _, a in want]
    assert content == "".join(p[0] for p in parts) + tail


@pytest.mark.task6_2
@settings(max_examples=100, deadline=None)
@given(arguments, layouts, st.lists(st.integers(1, 7), min_size=1, max_size=40))
def test_streamed_argument_deltas_join_into_the_arguments(args, layout, sizes):
    """The text arrives in pieces of any size (as detokenized tokens do): the tool-call
    deltas of one call join into exactly its arguments, and nothing of them is content."""
    written = json.dumps(args, **layout)
    text = "Sure. " + format_call("get_weather", written) + " Anything else?"
    parser, events, at = ToolCallParser(NAMES), [], 0
    for size in sizes * (len(text) // len(sizes) + 1):
        if at >= len(text):
            break
        events += parser.feed(text[at:at + size])
        at += size
    events += parser.finish()
    deltas = [e for e in events if isinstance(e, CallDelta)]
    assert deltas and deltas[0].name == "get_weather"
    assert "".join(d.arguments for d in deltas) == written
    assert "".join(e for e in events if isinstance(e, str)) == "Sure.  Anything else?"


@pytest.mark.task6_2
def test_text_after_the_arguments_that_is_not_the_end_tag_is_content():
    """The scan must stop at the value's end: what follows is the end tag or free text."""
    text = format_call("search", '{"q": 1}')[:-len(CALL_END)] + "} and then " + TRIGGER[:4]
    content, calls = parse_tool_calls(text, NAMES)
    assert [c.arguments for c in calls] == ['{"q": 1}']
    assert content == "} and then " + TRIGGER[:4]
