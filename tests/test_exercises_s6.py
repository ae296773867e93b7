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

import itertools
import json
import re

import jsonschema
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import minisglang as sgl
from minisglang.constrained.json_schema import build_regex_from_schema
from minisglang.constrained.structural_tag import FreeText, parse_structural_tag
from minisglang.function_call import (
    CALL_END,
    TRIGGER,
    CallDelta,
    FunctionTool,
    ToolCallParser,
    ToolChoice,
    _JsonScan,
    call_begin,
    format_call,
    parse_tool_calls,
    tool_constraint,
)

NAMES = ["get_weather", "search"]
USER = "<|user|>\n{}\n<|assistant|>\n"

# ---------------------------------------------------------------------------------------
# task6_1: free text that never contains a trigger
# ---------------------------------------------------------------------------------------
# (triggers, alphabet, longest string): one trigger; one that overlaps itself ("aab" after
# "aa": the fallback must keep "aa", not restart); two that share a prefix; two that
# overlap each other ("ab" then "ba"); one that overlaps itself twice ("abab"); a short
# trigger that ends inside a longer one's prefix ("bd" after "ab"); two where the longest
# suffix belongs to the second trigger ("aa" of "aab", while "ax" offers only "a").
TRIGGER_SETS = [
    (("<t>",), "<t>x", 7),
    (("aab",), "ab", 10),
    (("<a", "<b"), "<abx", 7),
    (("ab", "ba"), "abc", 8),
    (("abab",), "ab", 11),
    (("abc", "bd"), "abcd", 7),
    (("ax", "aab"), "abx", 7),
    (("babb",), "ab", 8),  # a self-loop of two characters: `ab*` for `(ab)*` is caught here
]


def wrong_next(triggers: tuple[str, ...]) -> str | None:
    """The first prefix-and-character where `_next` answers otherwise than the page (a whole
    trigger's sink, else the state of the longest suffix that starts a trigger), in words."""
    free = FreeText.__new__(FreeText)
    prefixes = sorted({t[:i] for t in triggers for i in range(len(t))}, key=lambda p: (len(p), p))
    free.triggers, free.states = triggers, {p: i for i, p in enumerate(prefixes)}
    for p in prefixes:
        for c in sorted({c for t in triggers for c in t}):
            text = p + c
            ends = [t for t in triggers if text.endswith(t)]
            suffix = next(text[i:] for i in range(len(text) + 1) if text[i:] in free.states)
            want = ("trigger", ends[0]) if ends else free.states[suffix]
            try:
                got = free._next(text)
            except Exception as e:  # noqa: BLE001 (a message, the failure itself is raised elsewhere)
                return f"_next({text!r}) raised {type(e).__name__}: {e}"
            if got != want:
                why = (
                    f"it ends with the trigger {ends[0]!r}"
                    if ends
                    else f"its longest suffix that starts a trigger is {suffix!r}"
                )
                return f"_next({text!r}) returned {got!r}, but {why}: {want!r} (states: {free.states})"
    return None


def build_free_text(triggers) -> FreeText:
    """`FreeText(triggers)`, with a KeyError of its `__init__` (given code) explained: after
    the elimination it reads the edge from state 0 to each trigger's sink, and finds none
    when `_next` never returned that sink or `_eliminate` lost the paths into it."""
    try:
        return FreeText(tuple(triggers))
    except KeyError as e:
        wrong = wrong_next(tuple(triggers))
        if wrong:
            pytest.fail(f"triggers {tuple(triggers)}: FreeText found no edge {e.args[0]!r}; {wrong}", pytrace=False)
        pytest.fail(
            f"triggers {tuple(triggers)}: FreeText found no edge {e.args[0]!r} once the prefix states were "
            "eliminated. Either _next never returns ('trigger', t) (does it check for a whole trigger at the "
            "end of the text, for every trigger, before the suffixes?) or _eliminate dropped the paths from a "
            "removed state into the sinks (\"END\" and ('trigger', t) have no edges out, but edges into them "
            "must be rerouted like any other)",
            pytrace=False,
        )


def first_trigger_end(text: str, triggers) -> int | None:
    """Where the first trigger in `text` ends (the earliest end), or None: the oracle, a plain scan."""
    for end in range(1, len(text) + 1):
        if any(text[:end].endswith(t) for t in triggers):
            return end
    return None


def wrong_match(triggers, name: str, matched: bool, text: str, end: int | None) -> str:
    """A failure message: which regex matched or refused `text`, and why the scan says otherwise."""
    if end is None:
        scan = "holds no trigger"
    else:
        first = next(t for t in triggers if text[:end].endswith(t))
        scan = f"holds the trigger {first!r} first, at text[{end - len(first)}:{end}]"
        scan += "" if end == len(text) else f", and goes on after it ({text[end:]!r})"
    if name == "until_end":
        should = "free text that holds no trigger" if matched else "free text without a trigger, so it must match"
    else:
        should = f"free text whose first trigger is {name[14:-1]} and ends the text"
        should = should if matched else should + ", so it must match"
    verb = "accepts" if matched else "refuses"
    return f"triggers {triggers}: {name} {verb} {text!r}, which {scan}; {name} is {should}"


@pytest.mark.task6_1
@pytest.mark.parametrize("triggers, alphabet, longest", TRIGGER_SETS, ids=lambda x: None)
def test_free_text_regexes_equal_a_scan_on_every_short_string(triggers, alphabet, longest):
    """`until_end` matches exactly the texts with no trigger in them; `until_trigger[t]`
    exactly the texts whose first trigger is t and ends the text. Every string over the
    alphabet up to `longest` characters, matched with Python's `re`."""
    free = build_free_text(triggers)
    until_end = re.compile(free.until_end)
    until = {t: re.compile(free.until_trigger[t]) for t in triggers}
    for n in range(longest + 1):
        for chars in itertools.product(alphabet, repeat=n):
            text = "".join(chars)
            end = first_trigger_end(text, triggers)
            assert bool(until_end.fullmatch(text)) == (end is None), wrong_match(
                triggers, "until_end", end is not None, text, end
            )
            for t, regex in until.items():
                want = end == len(text) and text.endswith(t)
                assert bool(regex.fullmatch(text)) == want, wrong_match(
                    triggers, f"until_trigger[{t!r}]", not want, text, end
                )


@pytest.mark.task6_1
@settings(max_examples=60, deadline=None)
@given(
    st.one_of(
        st.just([TRIGGER]),
        st.lists(st.text(alphabet="ab<", min_size=1, max_size=4), min_size=1, max_size=3, unique=True),
    ),
    st.data(),
)
def test_free_text_regexes_on_random_triggers(triggers, data):
    """Random triggers (none inside another), or the chat format's own, and texts made of
    pieces of them, against the same scan."""
    assume(all(t == u or t not in u for t in triggers for u in triggers))
    pieces = st.sampled_from(
        [t[i:j] for t in triggers for i in range(len(t)) for j in range(i + 1, len(t) + 1)] + ["x"]
    )
    texts = data.draw(st.lists(st.lists(pieces, max_size=8).map("".join), min_size=1, max_size=20))
    free = build_free_text(triggers)
    for text in texts:
        end = first_trigger_end(text, triggers)
        assert bool(re.fullmatch(free.until_end, text)) == (end is None), wrong_match(
            triggers, "until_end", end is not None, text, end
        )
        for t in triggers:
            want = end == len(text) and text.endswith(t)
            assert bool(re.fullmatch(free.until_trigger[t], text)) == want, wrong_match(
                triggers, f"until_trigger[{t!r}]", not want, text, end
            )


@pytest.mark.task6_1
@pytest.mark.parametrize(
    "text, want", [("a", "a"), ("aa", "aa"), ("aaa", "aa"), ("ab", ""), ("b", ""), ("aab", ("trigger", "aab"))]
)
def test_next_is_the_longest_suffix_that_starts_the_trigger(text, want):
    """`_next` alone, on exercises/s6.md's example `aab` (its states: "" 0, "a" 1, "aa" 2)."""
    free = object.__new__(FreeText)  # no __init__: it would call _next and _eliminate
    free.triggers, free.states = ("aab",), {"": 0, "a": 1, "aa": 2}
    expected = want if isinstance(want, tuple) else free.states[want]
    got = free._next(text)
    why = (
        "it ends with the whole trigger"
        if isinstance(want, tuple)
        else f"its longest suffix that is a prefix of 'aab' is {want!r}"
    )
    assert got == expected, f"trigger 'aab': _next({text!r}) must be {expected!r} ({why}); got {got!r}"


@pytest.mark.task6_1
@pytest.mark.parametrize(
    "text, want",
    [("aa", "aa"), ("aaa", "aa"), ("xa", "a"), ("ab", ""), ("ax", ("trigger", "ax")), ("aab", ("trigger", "aab"))],
)
def test_next_takes_the_longest_suffix_over_every_trigger(text, want):
    """`_next` alone with two triggers, ("ax", "aab"): after "aa" the longest suffix that
    starts a trigger is "aa" (of "aab"), although the first trigger, "ax", offers only "a".
    A fallback that asks the triggers one by one stops at the first that fits."""
    free = object.__new__(FreeText)
    free.triggers, free.states = ("ax", "aab"), {"": 0, "a": 1, "aa": 2}
    expected = want if isinstance(want, tuple) else free.states[want]
    got = free._next(text)
    assert got == expected, (
        f"triggers ('ax', 'aab'): _next({text!r}) must be {expected!r}"
        + ("" if isinstance(want, tuple) else f" (the state of {want!r})")
        + f"; got {got!r}"
    )


@pytest.mark.task6_1
def test_eliminating_states_leaves_one_edge_from_start_to_end():
    """`_eliminate` removes every state of `order`, each with every edge into or out of it:
    a chain 0 -a-> 1 -b-> 2 -c-> END beside 0 -""-> END ends as the one edge 0 -> END whose
    label is the chain's language, and nothing else is left to count (the size check reads
    what is left: leftover edges once refused a four-trigger tool-call format)."""
    edges = {(0, 1): "a", (1, 2): "b", (2, "END"): "c", (0, "END"): ""}
    FreeText._eliminate(edges, [1, 2])
    assert list(edges) == [(0, "END")], (
        f"_eliminate(chain 0 -a-> 1 -b-> 2 -c-> END, 0 -''-> END, order [1, 2]) must leave only the edge "
        f"(0, 'END'); left {edges} (every edge into or out of a removed state goes, and each state of "
        "`order` is removed with the edges as the states before it left them)"
    )
    label = edges[0, "END"]
    matched = {t for t in ("", "abc", "ab", "a", "abcc", "c") if re.fullmatch(label, t)}
    assert matched == {"", "abc"}, (
        f"the edge (0, 'END') must match exactly '' (the old edge, the empty word: keep it as an alternative) "
        f"and 'abc' (the path through 1 and 2); its label {label!r} matches {sorted(matched)}"
    )
    loop = {(0, 1): "a", (1, 1): "x", (1, "END"): "b"}
    FreeText._eliminate(loop, [1])
    assert (
        list(loop) == [(0, "END")] and re.fullmatch(loop[0, "END"], "axxb") and not re.fullmatch(loop[0, "END"], "ab x")
    ), (
        f"_eliminate(0 -a-> 1, 1 -x-> 1, 1 -b-> END, order [1]) must leave one edge (0, 'END') matching "
        f"'a', any number of 'x', 'b'; left {loop}"
    )


@pytest.mark.task6_1
def test_the_tag_regex_keeps_the_three_promises():
    """Through `StructuralTag.to_regex`: a trigger in free text is refused unless a valid
    call follows; a call whose arguments break the schema is refused; a call cut before its
    end cannot end the output."""
    build_free_text([TRIGGER])  # the free text to_regex builds (a KeyError there explained)
    spec = parse_structural_tag(
        {
            "structures": [
                {
                    "begin": call_begin("f"),
                    "end": CALL_END,
                    "schema": {
                        "type": "object",
                        "properties": {"n": {"type": "integer"}},
                        "required": ["n"],
                        "additionalProperties": False,
                    },
                }
            ],
            "triggers": [TRIGGER],
        }
    )
    regex = re.compile(spec.to_regex(build_regex_from_schema))
    accepted = [
        "no call at all",
        "a <tool_ prefix ends it <tool_c",
        "x " + format_call("f", '{"n": 3}') + " then text " + format_call("f", '{"n": 4}'),
    ]
    refused = [
        "talking about <tool_call> in prose",  # a trigger with no valid call after it
        format_call("f", '{"n": "three"}'),
        format_call("f", '{"n": 3, "m": 1}'),  # break the schema
        format_call("f", '{"n": 3}')[:-3],  # EOS inside the end tag
        call_begin("f") + '{"n": 3',
    ]  # EOS inside the arguments
    for text in accepted:
        assert regex.fullmatch(text), f"the tag's regex must accept {text!r}; it refuses it"
    for text in refused:
        assert not regex.fullmatch(text), f"the tag's regex must refuse {text!r}; it accepts it"


CALL = re.compile(r'<tool_call>\{"name": "(\w+)", "arguments": (.*?)\}</tool_call>', re.S)


@pytest.mark.task6_1
def test_engine_tool_calls_validate_under_their_schemas():
    """The bundled model under a `required`, one-call tag: the output is exactly one call
    of a known tool, and its arguments validate (the regex of the call is this test's own).
    The fsm backend's eager automaton: it reads `FreeText`'s regexes, while the default lazy
    one writes free text with `FreeTextByDifference` and passed on a blank task 6_1."""
    schemas = {
        "get_weather": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 16}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "get_time": {
            "type": "object",
            "properties": {"zone": {"enum": ["UTC", "CET", "JST"]}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    }
    tools = [FunctionTool(n, s) for n, s in schemas.items()]
    spec = tool_constraint(tools, ToolChoice("required"), parallel_tool_calls=False).value
    engine = sgl.Engine(stage="s6", jump_forward=False, automaton="eager")
    try:
        outs = engine.generate(
            [USER.format("What is the weather in Paris?"), USER.format("What time is it in Tokyo?")],
            [{"structural_tag": spec, "max_new_tokens": 100, "temperature": 0.7, "seed": s} for s in (1, 2)],
        )
    finally:
        engine.shutdown()
    for out in outs:
        assert out["meta_info"]["finish_reason"]["type"] == "stop", (
            f"the tool-call tag must compile and its call end with EOS; got {out['meta_info']['finish_reason']} "
            f"after {out['text']!r}"
        )
        m = CALL.fullmatch(out["text"])
        assert m, out["text"]
        jsonschema.validate(json.loads(m[2]), schemas[m[1]])


# ---------------------------------------------------------------------------------------
# task6_2: reading the calls back
# ---------------------------------------------------------------------------------------
# Characters that a scanner must treat with care inside a string; the rest are plain.
TRICKY = '{}[]"\\:,' + "</>'" + "é北 \n\t"
strings = st.text(alphabet=st.sampled_from(list(TRICKY) + list("abc")), max_size=8)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(10**6), 10**6), strings)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(strings, inner, max_size=3)),
    max_leaves=8,
)
arguments = st.dictionaries(strings, values, max_size=4)
layouts = st.sampled_from([dict(), dict(separators=(",", ":")), dict(ensure_ascii=False), dict(indent=1)])
# Free text around the calls: anything but the start of a trigger.
free_text = st.lists(st.sampled_from(list('ab }{"\\]>é') + ["tool_call"]), max_size=8).map("".join)


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
@pytest.mark.parametrize(
    "args",
    [
        '{"q": "a}b"}',  # a closing brace inside a string
        '{"q": "say \\"hi\\" }"}',  # escaped quotes, then a brace, inside the string
        '{"path": "C:\\\\"}',  # a string that ends with an escaped backslash
        '{"path": "C:\\\\", "x": "}"}',  # ... and a brace in the next string
        '{"a": [1, {"b": "]"}], "c": {}}',  # nesting, and a bracket inside a string
        '{"end": "}</tool_call>"}',  # the end tag itself inside the arguments
        '{"u": "\\u007d\\\\\\""}',  # \u escapes, an escaped backslash, then an escaped quote
        '{"q": "what\'s in [it]? {x}"}',  # an apostrophe is no quote in JSON: the string goes on
        "{'city': 'Paris'}",  # Python-style, as models write unconstrained: an apostrophe opens no string
        "{}",
    ],
)
def test_tricky_arguments_are_read_back_whole(args):
    text = "Checking. " + format_call("search", args) + " Done }"
    content, calls = parse_tool_calls(text, NAMES)
    assert [(c.name, c.arguments) for c in calls] == [("search", args)], (
        f"the arguments of {text!r} read back as {[c.arguments for c in calls]}"
    )
    assert content == "Checking.  Done }", (
        f"the content of {text!r} must be the free text around the call; got {content!r}"
    )


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
    got = [(c.name, c.arguments) for c in calls]
    assert got == [(n, w) for n, w, _ in want], (
        f"the calls in {text!r}: expected {[(n, w) for n, w, _ in want]}; got {got}"
    )
    assert content == "".join(p[0] for p in parts) + tail, (
        f"the content of {text!r} must be the free text only, {''.join(p[0] for p in parts) + tail!r}; got {content!r}"
    )
    assert [json.loads(c.arguments) for c in calls] == [a for _, _, a in want], (
        f"the calls' arguments in {text!r} must load back as {[a for _, _, a in want]}"
    )


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
        events += parser.feed(text[at : at + size])
        at += size
    events += parser.finish()
    deltas = [e for e in events if isinstance(e, CallDelta)]
    assert deltas and deltas[0].name == "get_weather", (
        f"{text!r} fed in pieces of {sizes}: the first call delta names get_weather; got {deltas[:1]}"
    )
    joined = "".join(d.arguments for d in deltas)
    assert joined == written, f"{text!r} fed in pieces of {sizes}: the deltas join into {joined!r}, not {written!r}"
    content = "".join(e for e in events if isinstance(e, str))
    assert content == "Sure.  Anything else?", (
        f"{text!r} fed in pieces of {sizes}: the content must be 'Sure.  Anything else?'; got {content!r}"
    )


@pytest.mark.task6_2
def test_text_after_the_arguments_that_is_not_the_end_tag_is_content():
    """The scan must stop at the value's end: what follows is the end tag or free text."""
    text = format_call("search", '{"q": 1}')[: -len(CALL_END)] + "} and then " + TRIGGER[:4]
    content, calls = parse_tool_calls(text, NAMES)
    assert [c.arguments for c in calls] == ['{"q": 1}'], (
        f"{text!r}: one call with the arguments '{{\"q\": 1}}'; got {[c.arguments for c in calls]}"
    )
    assert content == "} and then " + TRIGGER[:4], (
        f"{text!r}: what follows the arguments and is not the end tag "
        f"is content, {'} and then ' + TRIGGER[:4]!r}; got {content!r}"
    )


@pytest.mark.task6_2
@pytest.mark.parametrize("space", [" ", "\n  ", "\t"])
def test_whitespace_before_the_arguments_is_not_their_end(space):
    """JSON allows whitespace before a value (a model may write `"arguments":  {` or a newline):
    the scan closes on the bracket that closes the value, never on the whitespace before it."""
    args = space + '{"q": [1, {"r": "}"}]}'
    text = "Checking. " + format_call("search", args) + " Done"
    content, calls = parse_tool_calls(text, NAMES)
    assert [(c.name, c.arguments) for c in calls] == [("search", args)], (
        f"the arguments of {text!r} read back as {[c.arguments for c in calls]}: whitespace before the value is "
        f"not its end (the value closes when a closing bracket brings the depth back to 0 after an opening one)"
    )
    assert content == "Checking.  Done", f"the content of {text!r} must be 'Checking.  Done'; got {content!r}"


@pytest.mark.task6_2
@pytest.mark.parametrize(
    "text,why",
    [
        ("}", "a closing bracket with nothing opened (the value has not begun)"),
        ("]", "a closing bracket with nothing opened (the value has not begun)"),
        ('"a"', "a string: only a closing bracket ends the value, and nothing was opened"),
        (
            '{\\"}',
            "a backslash outside a string is an ordinary character: the quote opens a string, the brace is in it",
        ),
    ],
)
def test_the_scan_closes_nothing_it_did_not_open(text, why):
    """Text a model may write that is not the page's JSON value (a stray bracket, a bare
    string, a backslash before a quote): the value closes only where a closing bracket
    brings back to 0 a depth something opened, outside any string."""
    scan = _JsonScan()
    closed = [i for i, ch in enumerate(text) if scan.step(ch)]
    assert not closed, f"fed {text!r}, the scan said the value closed at character {closed[0]}: {why}"


@pytest.mark.task6_2
def test_a_stray_close_before_the_value_does_not_keep_the_value_open():
    """A model may write a stray `}` before the arguments' value: the depth is then -1 when the
    value's own last bracket closes it, and the value is closed there ("back to 0, or below",
    the page). Closed only at exactly 0, the scan never closed, and the whole call, end tag
    included, came back as text (a stranger's mistake that every other test passed)."""
    scan = _JsonScan()
    text = '}{"a": 1}'
    closed = [i for i, ch in enumerate(text) if scan.step(ch)]
    assert closed[:1] == [len(text) - 1], (
        f"fed {text!r}, the scan closed at {closed}: the value's last bracket (character {len(text) - 1}) takes "
        f"the depth to -1 after something opened, which closes it"
    )
    args = '}{"city": "Paris"}'
    content, calls = parse_tool_calls("Sure. " + format_call("get_weather", args) + " Done", NAMES)
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", args)], (
        f"a call whose arguments begin with a stray '}}' read back as {calls} (content {content!r})"
    )


@pytest.mark.task6_2
def test_a_call_cut_short_leaves_nothing_for_the_next_scan():
    """An output that ends inside a call's arguments (brackets still open) is content; the
    next output's call, read by another parser, is read back whole: each scan holds its own
    state (its fields), nothing shared between scans."""
    cut = "Let me see. " + format_call("search", '{"q": [1, {"r": [')[: -len(CALL_END)]
    content, calls = parse_tool_calls(cut, NAMES)
    assert calls == [] and content == cut, f"{cut!r}: the call is cut short, so all of it is content; got {calls}"
    args = '{"q": 2}'
    text = format_call("get_weather", args)
    content, calls = parse_tool_calls(text, NAMES)
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", args)], (
        f"after an output cut inside a call's arguments, {text!r} read back as {[c.arguments for c in calls]} "
        f"(content {content!r}): a new scan must start at depth 0, whatever an earlier one was left holding"
    )
