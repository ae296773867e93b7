"""OpenAI tools through the server, driven by the real `openai` client: the calls the
structural tag forces (every call's arguments validate against its tool's schema), each
tool_choice, streamed tool-call deltas, a two-turn conversation, the failure modes users
hit, and the 400s for bad tools.

The bundled model may or may not choose to call a tool on its own: the assertions hold for
whatever it chooses, except where the constraint forces the choice (required, a named tool)."""

import json
import re

import httpx
import jsonschema
import openai
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.lib.streaming.chat import ChatCompletionStreamState

import minisglang as sgl
from minisglang.server import create_app, serving_in_thread

MODEL = "tiny-json-llama"
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"zone": {"type": "string", "maxLength": 12}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Current weather of a city", "parameters": WEATHER},
    },
    {"type": "function", "function": {"name": "get_time", "description": "Local time", "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]
PROMPTS = [
    ASK,
    [{"role": "user", "content": "What time is it in Tokyo?"}],
    [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "李雷在北京，天气怎么样？"}],
]


@pytest.fixture(scope="module")
def server():
    engine = sgl.Engine(max_total_tokens=6000, max_running_requests=32)
    with serving_in_thread(create_app(engine)) as url:
        yield url


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="none")


def chat(client, **kwargs):
    return client.chat.completions.create(
        model=MODEL, **{"messages": ASK, "tools": TOOLS, "max_tokens": 120, "temperature": 0, **kwargs}
    )


def check_calls(choice) -> list:
    """Every call has an id, a known tool and arguments valid under that tool's schema."""
    calls = choice.message.tool_calls or []
    for call in calls:
        assert call.id.startswith("call_") and call.type == "function"
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    assert len({c.id for c in calls}) == len(calls)
    return calls


@pytest.mark.parametrize("messages", PROMPTS)
@pytest.mark.parametrize("seed", [0, 1])
def test_required_always_calls_and_the_arguments_validate(client, messages, seed):
    # Hot sampling: the model's own choice is as wild as it gets; the constraint still holds.
    resp = chat(
        client, messages=messages, tool_choice="required", parallel_tool_calls=False, temperature=1.5, seed=seed
    )
    choice = resp.choices[0]
    assert len(check_calls(choice)) == 1 and choice.finish_reason == "tool_calls"
    assert choice.message.content is None  # at_least_one: the answer starts with the call


def test_a_named_tool_is_the_one_called(client):
    for seed in range(3):
        resp = chat(
            client, tool_choice={"type": "function", "function": {"name": "get_time"}}, temperature=1.0, seed=seed
        )  # the question is about the weather: the choice forces get_time
        calls = check_calls(resp.choices[0])
        assert [c.function.name for c in calls] == ["get_time"] and resp.choices[0].finish_reason == "tool_calls"


def test_none_never_calls(client):
    for messages in PROMPTS:
        for seed in range(2):
            resp = chat(client, messages=messages, tool_choice="none", temperature=1.0, seed=seed, max_tokens=40)
            choice = resp.choices[0]
            assert choice.message.tool_calls is None and choice.finish_reason in ("stop", "length")
            assert isinstance(choice.message.content, str)


def test_auto_calls_only_valid_tools_and_says_so(client):
    for messages in PROMPTS:
        for seed in range(2):
            resp = chat(client, messages=messages, tool_choice="auto", temperature=1.0, seed=seed)
            choice = resp.choices[0]
            calls = check_calls(choice)
            if calls and choice.finish_reason != "length":
                assert choice.finish_reason == "tool_calls"
            if not calls:
                assert choice.finish_reason in ("stop", "length") and "<tool_call>" not in choice.message.content


PROPERTY_SCHEMAS = [
    {"type": "string", "maxLength": 8},
    {"type": "integer", "minimum": -5, "maximum": 500},
    {"enum": ["red", "green", 3, None]},
    {"type": "boolean"},
    {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 2},
    {"type": "number", "minimum": 0, "maximum": 1},
]


@st.composite
def tool_lists(draw) -> list[dict]:
    """1-3 tools with distinct names, each with up to 3 properties and some of them required."""
    names = draw(st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True), min_size=1, max_size=3, unique=True))
    tools = []
    for name in names:
        props = draw(
            st.dictionaries(
                st.sampled_from(["city", "n", "ok", "tags", "x"]), st.sampled_from(PROPERTY_SCHEMAS), max_size=3
            )
        )
        required = draw(st.lists(st.sampled_from(sorted(props)), unique=True)) if props else []
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "parameters": {
                        "type": "object",
                        "properties": props,
                        "required": required,
                        "additionalProperties": False,
                    },
                },
            }
        )
    return tools


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tools=tool_lists(), data=st.data())
def test_any_tools_calls_validate_under_their_schema(client, tools, data):
    names = [t["function"]["name"] for t in tools]
    choice = data.draw(st.sampled_from(["required", "auto", *names]))
    tool_choice = choice if choice in ("required", "auto") else {"type": "function", "function": {"name": choice}}
    resp = chat(
        client,
        tools=tools,
        tool_choice=tool_choice,
        temperature=1.0,
        seed=data.draw(st.integers(0, 99)),
        max_tokens=200,
        parallel_tool_calls=data.draw(st.booleans()),
    )
    out = resp.choices[0]
    calls = out.message.tool_calls or []
    for call in calls:  # max_tokens may cut the last one: then it is content, not a call
        schema = next(t["function"]["parameters"] for t in tools if t["function"]["name"] == call.function.name)
        jsonschema.validate(json.loads(call.function.arguments), schema)
    if choice != "auto" and out.finish_reason != "length":
        assert calls, "required and a named tool always call"
    if choice not in ("required", "auto"):
        assert [c.function.name for c in calls] == [choice]


def reassemble(stream) -> tuple[str, list[tuple[str, str]], str]:
    """A stream's content, (name, arguments) per call index, and finish reason, as a client builds them."""
    content, calls, finish = "", {}, None
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk" and len(chunk.choices) == 1
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for tc in delta.tool_calls or []:
            if tc.id is not None:  # a call's first delta: id, type and name
                assert tc.index == len(calls) and tc.type == "function" and tc.id.startswith("call_")
                calls[tc.index] = [tc.function.name, ""]
            else:
                assert tc.function.name is None
            calls[tc.index][1] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    return content, [tuple(c) for c in calls.values()], finish


@pytest.mark.parametrize(
    "kwargs",
    [
        {"tool_choice": "required"},
        {"tool_choice": "required", "parallel_tool_calls": False},
        {"tool_choice": "auto", "messages": PROMPTS[2]},
        {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        {"tool_choice": "none", "max_tokens": 30},
    ],
)
def test_streamed_deltas_reassemble_into_the_response(client, kwargs):
    full = chat(client, **kwargs).choices[0]
    chunks = list(chat(client, stream=True, **kwargs))
    content, calls, finish = reassemble(chunks)
    assert content == (full.message.content or "")
    assert calls == [(c.function.name, c.function.arguments) for c in full.message.tool_calls or []]
    assert finish == full.finish_reason
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].delta.role for c in chunks[1:]] == [None] * (len(chunks) - 1)
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"tool_choice": "required"},
        {"tool_choice": "auto", "messages": PROMPTS[2]},
        {"tool_choice": "required", "max_tokens": 3},
        {"tool_choice": "none", "max_tokens": 10},
    ],
)
def test_the_openai_clients_stream_accumulator_builds_the_response_message(client, kwargs):
    """A stranger's streaming app (`client.chat.completions.stream`) got content "" for an
    answer of calls only, where the same request answered content null: the role was sent
    ahead of the answer with content "". It now comes with the answer's first delta:
    content null and the first call, or the first content."""
    full = chat(client, **kwargs).choices[0].message
    state = ChatCompletionStreamState()  # what `client.chat.completions.stream` accumulates with
    for chunk in chat(client, stream=True, **kwargs):
        state.handle_chunk(chunk)
    streamed = state.current_completion_snapshot.choices[0].message
    assert streamed.content == full.content
    assert [(c.id[:5], c.function.name, c.function.arguments) for c in streamed.tool_calls or []] == [
        (c.id[:5], c.function.name, c.function.arguments) for c in full.tool_calls or []
    ]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tools=tool_lists(), data=st.data())
def test_any_tools_stream_as_they_answer(client, tools, data):
    choice = data.draw(
        st.sampled_from(["required", "auto", {"type": "function", "function": {"name": tools[-1]["function"]["name"]}}])
    )
    kwargs = dict(tools=tools, tool_choice=choice, max_tokens=120, parallel_tool_calls=data.draw(st.booleans()))
    full = chat(client, **kwargs).choices[0]
    content, calls, finish = reassemble(chat(client, stream=True, **kwargs))
    assert (content, calls, finish) == (
        full.message.content or "",
        [(c.function.name, c.function.arguments) for c in full.message.tool_calls or []],
        full.finish_reason,
    )


def test_a_stream_with_usage_ends_with_the_usage_chunk(client):
    chunks = list(
        chat(
            client,
            stream=True,
            stream_options={"include_usage": True},
            tool_choice="required",
            parallel_tool_calls=False,
        )
    )
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    assert reassemble(chunks[:-1])[2] == "tool_calls"


def test_tool_choice_none_leaves_the_tools_out_of_the_prompt(client):
    """ "none" asks for a message: the template is not shown the tools (a model shown them
    wrote call markup as the answer's text, a stranger's find), as SGLang's does not."""
    with_tools = chat(client, tool_choice="auto", max_tokens=1).usage.prompt_tokens
    without = chat(client, tool_choice="none", max_tokens=1).usage.prompt_tokens
    plain = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=1)
    assert without == plain.usage.prompt_tokens < with_tools


def test_two_turn_conversation_with_a_tool_result(client):
    first = chat(client, tool_choice={"type": "function", "function": {"name": "get_weather"}}).choices[0]
    call = first.message.tool_calls[0]
    messages = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.function.name, "arguments": call.function.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21, "sky": "sunny"})},
    ]
    second = chat(client, messages=messages, tool_choice="none", max_tokens=40)
    choice = second.choices[0]
    assert choice.finish_reason in ("stop", "length") and choice.message.tool_calls is None
    assert isinstance(choice.message.content, str)
    # The second prompt holds the first turn, its call and the result: longer than the question alone.
    assert second.usage.prompt_tokens > chat(client, tool_choice="none", max_tokens=1).usage.prompt_tokens
    # The same history through the other tool choices: still a valid call (or an answer) each time.
    again = chat(client, messages=messages, tool_choice="required", parallel_tool_calls=False).choices[0]
    assert len(check_calls(again)) == 1


def test_looping_under_required_is_stopped_by_stop_after_first_or_max_tokens(client):
    # required + parallel: after the first call the model may call again and again; only
    # max_tokens ends that ("length"), and every call returned is whole and valid (one cut
    # inside its arguments is content).
    for seed in range(3):
        resp = chat(client, tool_choice="required", temperature=1.2, seed=seed, max_tokens=60)
        choice = resp.choices[0]
        if choice.finish_reason == "length":
            assert resp.usage.completion_tokens == 60
            check_calls(choice)
        else:
            assert choice.finish_reason == "tool_calls" and check_calls(choice)
        # stop_after_first: one call, then the end of the output
        once = chat(
            client, tool_choice="required", parallel_tool_calls=False, temperature=1.2, seed=seed, max_tokens=60
        ).choices[0]
        assert len(check_calls(once)) == 1 and once.finish_reason == "tool_calls"


NAMED = {"type": "function", "function": {"name": "get_weather"}}


def test_a_call_cut_by_max_tokens_is_length_and_comes_back_as_content(client):
    resp = chat(client, tool_choice=NAMED, max_tokens=3)
    choice = resp.choices[0]
    assert choice.finish_reason == "length" and resp.usage.completion_tokens == 3
    # No call with arguments that are not JSON: the cut call is content, its text as generated.
    assert choice.message.tool_calls is None
    assert choice.message.content.startswith("<tool_call>") or "<tool_call>".startswith(choice.message.content)
    assert reassemble(chat(client, stream=True, tool_choice=NAMED, max_tokens=3)) == (
        choice.message.content,
        [],
        "length",
    )


def test_a_stop_string_that_cuts_a_call_is_stop_and_the_call_is_content(client):
    kwargs = dict(tool_choice=NAMED, stop=["city"])
    choice = chat(client, **kwargs).choices[0]
    assert choice.finish_reason == "stop" and choice.message.tool_calls is None
    # After `{` (and the one optional space the JSON whitespace policy allows, the model's
    # choice) `"city": "` is forced, so it arrives in one jump: the stop string is cut from it,
    # and what is left of the call comes back as content, streamed or not.
    assert re.fullmatch(r'<tool_call>\{"name": "get_weather", "arguments": \{ ?"', choice.message.content)
    assert reassemble(chat(client, stream=True, **kwargs)) == (choice.message.content, [], "stop")


def test_a_stop_string_in_the_end_tag_leaves_the_call_whole(client):
    """The arguments closed before the stop string: the call is whole, and `tool_calls`."""
    kwargs = dict(tool_choice=NAMED, stop=["</tool_call>"])
    choice = chat(client, **kwargs).choices[0]
    assert len(check_calls(choice)) == 1 and choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert reassemble(chat(client, stream=True, **kwargs)) == (
        "",
        [("get_weather", choice.message.tool_calls[0].function.arguments)],
        "tool_calls",
    )


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_wherever_a_stop_string_or_max_tokens_cuts_the_calls_parse_and_validate(client, data):
    """Cut the output at any point of its calls, by a stop string taken from the calls' own
    text or by max_tokens: every call returned, streamed or not, json.loads and validates
    under its tool's schema, "tool_calls" comes only with whole calls, and the stream holds
    exactly what the response does."""
    kwargs = dict(
        tool_choice=data.draw(st.sampled_from(["required", NAMED])),
        temperature=1.0,
        seed=data.draw(st.integers(0, 9)),
        max_tokens=60,
    )
    whole = chat(client, **kwargs).choices[0]
    written = "".join(
        f'<tool_call>{{"name": "{c.function.name}", "arguments": {c.function.arguments}}}</tool_call>'
        for c in whole.message.tool_calls or []
    )
    if data.draw(st.booleans()) and written:
        start = data.draw(st.integers(0, len(written) - 1))
        kwargs["stop"] = [written[start : start + data.draw(st.integers(1, 6))]]
    else:
        kwargs["max_tokens"] = data.draw(st.integers(1, 40))
    resp = chat(client, **kwargs)
    choice = resp.choices[0]
    calls = check_calls(choice)
    if choice.finish_reason == "tool_calls":
        assert calls
    content, streamed, finish = reassemble(chat(client, stream=True, **kwargs))
    assert (content, streamed, finish) == (
        choice.message.content or "",
        [(c.function.name, c.function.arguments) for c in calls],
        choice.finish_reason,
    )


def test_tool_calls_are_counted_in_metrics(client, server):
    import httpx

    def count() -> float:
        text = httpx.get(server + "/metrics").text
        return sum(
            float(line.split()[1]) for line in text.splitlines() if line.startswith("minisglang_tool_calls_total")
        )

    before = count()
    chat(client, tool_choice="required", parallel_tool_calls=False)
    assert count() == before + 1


@pytest.mark.parametrize("stream", [False, True])
def test_response_format_structural_tag(client, stream):
    # SGLang's response_format {"type": "structural_tag"}: here one tag first, then only EOS.
    fmt = {
        "type": "structural_tag",
        "triggers": ["<answer>"],
        "at_least_one": True,
        "stop_after_first": True,
        "structures": [
            {"begin": "<answer>", "schema": {"type": "integer", "minimum": 0, "maximum": 99}, "end": "</answer>"}
        ],
    }
    kwargs = dict(model=MODEL, messages=ASK, max_tokens=30, temperature=1.0, seed=4, response_format=fmt)
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **kwargs))
    else:
        text = client.chat.completions.create(**kwargs).choices[0].message.content
    m = re.fullmatch(r"<answer>(.*)</answer>", text, re.S)
    assert m and 0 <= json.loads(m.group(1)) <= 99


# Structural tag v2 (xgrammar's and SGLang's format tree): a short thought, then one answer.
V2_FORMAT = {
    "type": "sequence",
    "elements": [
        {"type": "tag", "begin": "<think>", "content": {"type": "any_text", "max_chars": 30}, "end": "</think>"},
        {
            "type": "tag",
            "begin": "<answer>",
            "content": {"type": "json_schema", "json_schema": {"type": "integer", "minimum": 0, "maximum": 99}},
            "end": "</answer>",
        },
    ],
}
V2_TEXT = re.compile(r"<think>((?:(?!</think>)[\s\S]){0,30})</think><answer>(\d+)</answer>")


@pytest.mark.parametrize("stream", [False, True])
def test_response_format_structural_tag_v2(client, stream):
    """response_format {"type": "structural_tag", "format": {...}} as SGLang takes it (it was a 400)."""
    fmt = {"type": "structural_tag", "format": V2_FORMAT}
    kwargs = dict(model=MODEL, messages=ASK, max_tokens=60, temperature=1.0, seed=4, response_format=fmt)
    if stream:
        chunks = client.chat.completions.create(stream=True, **kwargs)
        text = "".join(c.choices[0].delta.content or "" for c in chunks)
    else:
        text = client.chat.completions.create(**kwargs).choices[0].message.content
    m = V2_TEXT.fullmatch(text)
    assert m and 0 <= int(m.group(2)) <= 99, text


def test_native_generate_takes_a_v2_structural_tag_as_json_text_or_object(server):
    for tag in ({"type": "structural_tag", "format": V2_FORMAT}, json.dumps({"format": V2_FORMAT})):
        params = {"max_new_tokens": 60, "temperature": 1.0, "seed": 3, "structural_tag": tag}
        r = httpx.post(server + "/generate", timeout=60, json={"text": "Think:", "sampling_params": params})
        assert r.status_code == 200, r.text
        assert V2_TEXT.fullmatch(r.json()["text"]), r.json()


def test_a_bad_v2_structural_tag_is_a_400_naming_its_path(client):
    fmt = {"type": "structural_tag", "format": {"type": "sequence", "elements": [{"type": "tag", "begin": "<a>"}]}}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=5, response_format=fmt)
    assert "structural_tag.format.elements[0].content is missing" in info.value.body["message"]


ANSWER = {"type": "object", "properties": {"answer": {"type": "string"}, "n": {"type": "integer"}}, "required": ["n"]}


@pytest.mark.parametrize("choice", ["auto", "required", {"type": "function", "function": {"name": "get_weather"}}])
@pytest.mark.parametrize("fmt", ["json_schema", "json_object"])
def test_tools_beside_response_format_answer_with_calls_or_a_message_in_the_format(client, choice, fmt):
    """OpenAI's semantics, which the OpenAI Agents SDK sends on every turn (a stranger's
    find: it was a 400): the answer is tool calls or content in the response format; under
    "required" or a named tool, calls only. Hot sampling over questions that invite either."""
    schema = ANSWER if fmt == "json_schema" else {"type": "object"}
    response_format = (
        {"type": fmt} if fmt == "json_object" else {"type": fmt, "json_schema": {"name": "a", "schema": schema}}
    )
    kinds = set()
    for seed, question in enumerate(["What is the weather in Paris?", "Give me a number as JSON.", "Hello there"] * 2):
        messages = [{"role": "user", "content": question}]
        choice_ = chat(
            client, messages=messages, tool_choice=choice, response_format=response_format, temperature=1.2, seed=seed
        ).choices[0]
        if choice_.message.tool_calls:
            assert check_calls(choice_) and not choice_.message.content and choice_.finish_reason == "tool_calls"
            kinds.add("calls")
        elif choice_.finish_reason == "stop":
            assert choice == "auto", choice_
            jsonschema.validate(json.loads(choice_.message.content), schema)
            kinds.add("message")
    assert kinds == ({"calls", "message"} if choice == "auto" else {"calls"}), kinds


@pytest.mark.parametrize("stream", [False, True])
def test_each_of_n_choices_reads_its_own_calls(client, stream):
    """n=3 under "required": every choice makes its own valid calls, streamed under its own
    index; choice 0 is the n=1 answer with the seed."""
    kwargs = dict(tool_choice="required", temperature=1.2, seed=5)
    full = chat(client, n=3, **kwargs)
    assert [c.index for c in full.choices] == [0, 1, 2]
    assert all(check_calls(c) and c.finish_reason == "tool_calls" for c in full.choices)
    calls = [[(t.function.name, t.function.arguments) for t in c.message.tool_calls] for c in full.choices]
    alone = chat(client, **kwargs).choices[0].message.tool_calls
    assert calls[0] == [(t.function.name, t.function.arguments) for t in alone]
    if stream:
        chunks = list(chat(client, n=3, stream=True, **kwargs))
        for i in range(3):
            mine = [c for c in chunks if c.choices[0].index == i]
            assert reassemble(mine) == ("", calls[i], "tool_calls")


def test_each_of_n_choices_validates_under_the_response_format(client):
    fmt = {"type": "json_schema", "json_schema": {"name": "weather", "schema": WEATHER}}
    resp = client.chat.completions.create(
        model=MODEL, messages=ASK, n=4, temperature=1.2, seed=2, max_tokens=80, response_format=fmt
    )
    assert [c.index for c in resp.choices] == [0, 1, 2, 3]
    for c in resp.choices:
        assert c.finish_reason == "stop"
        jsonschema.validate(json.loads(c.message.content), WEATHER)
    assert len({c.message.content for c in resp.choices}) > 1


def test_a_bad_structural_tag_is_a_400_naming_its_field(client):
    fmt = {
        "type": "structural_tag",
        "triggers": ["<a>"],
        "structures": [{"begin": "<b>", "schema": {"type": "integer"}, "end": "</b>"}],
    }
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=5, response_format=fmt)
    assert "structures[0].begin" in info.value.body["message"]


def allowed(mode: str, *names: str) -> dict:
    tools = [{"type": "function", "function": {"name": n}} for n in names]
    return {"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": tools}}


def test_allowed_tools_restricts_the_calls_to_its_tools(client):
    """OpenAI's tool_choice {"type": "allowed_tools", ...} (mode "auto" or "required" among
    some of the tools, every tool still in the prompt) was refused with a 400: a stranger's
    client program that keeps its tool list whole for the prompt cache could not use it."""
    for seed in range(3):
        only_time = chat(client, tool_choice=allowed("required", "get_time"), temperature=1.0, seed=seed)
        calls = check_calls(only_time.choices[0])
        assert calls and {c.function.name for c in calls} == {"get_time"}
        auto = chat(client, tool_choice=allowed("auto", "get_time"), temperature=1.0, seed=seed).choices[0]
        assert {c.function.name for c in check_calls(auto)} <= {"get_time"}
    # the prompt lists every tool, as under "auto"
    assert (
        chat(client, tool_choice=allowed("auto", "get_time"), max_tokens=1).usage.prompt_tokens
        == chat(client, tool_choice="auto", max_tokens=1).usage.prompt_tokens
    )
    err = refused(client, tool_choice=allowed("required", "get_time", "get_news"))
    assert err.body["param"] == "tool_choice.allowed_tools.tools[1].function.name" and "get_news" in err.message
    for bad in (allowed("none", "get_time"), allowed("auto"), {"type": "allowed_tools", "allowed_tools": {}}):
        assert refused(client, tool_choice=bad).body["param"] == "tool_choice"


# ---------------------------------------------------------------------- refusals
def refused(client, **kwargs) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as info:
        chat(client, **kwargs)
    assert info.value.status_code == 400
    return info.value


@pytest.mark.parametrize(
    "kwargs,param,needle",
    [
        ({"tools": [{"type": "function", "function": {"parameters": WEATHER}}]}, "tools[0].function.name", "required"),
        ({"tools": [{"type": "function", "function": {"name": "get weather"}}]}, "tools[0].function.name", "letters"),
        # (é is a letter: the rule is ASCII's, and says so; a stranger's hunt)
        ({"tools": [{"type": "function", "function": {"name": "café"}}]}, "tools[0].function.name", "ASCII letters"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]},
            "tools[0].function.parameters",
            "object",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": "{}"}}]},
            "tools[0].function.parameters",
            "JSON object",
        ),
        ({"tools": [{"type": "retrieval"}]}, "tools[0].type", "function"),
        ({"tool_choice": {"type": "function", "function": {"name": "get_news"}}}, "tool_choice", "get_news"),
        ({"tool_choice": "always"}, "tool_choice", "required"),
        ({"tools": None, "tool_choice": "auto"}, "tool_choice", "only allowed when tools"),
        ({"tools": TOOLS + TOOLS[:1]}, "tools[2].function.name", "twice"),
        ({"extra_body": {"regex": "[0-9]+"}}, "tools", "cannot also give regex"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}},
            "response_format",
            "content_schema",
        ),
        (
            {"messages": ASK + [{"role": "tool", "tool_call_id": "call_x", "content": "21"}]},
            "messages[1].tool_call_id",
            "call_x",
        ),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {"id": "c", "type": "function", "function": {"name": "get_time", "arguments": "not json"}}
                        ],
                    }
                ]
            },
            "messages[0].tool_calls[0].function.arguments",
            "JSON",
        ),
    ],
)
def test_bad_tools_are_a_400_naming_the_field(client, kwargs, param, needle):
    err = refused(client, **kwargs)
    assert err.body["param"] == param and needle in err.body["message"], err.body


@pytest.mark.parametrize("stream", [False, True])
def test_an_unsupported_schema_keyword_is_a_400_naming_it(client, stream):
    tags = {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": {"type": "object"}, "uniqueItems": True}},
    }
    tools = [*TOOLS, {"type": "function", "function": {"name": "tag", "parameters": tags}}]
    err = refused(client, tools=tools, tool_choice="auto", stream=stream)
    assert "uniqueItems" in err.body["message"]
    # The tool is named where the engine's message says which structure it is, and where it
    # says which tag of the calls-only tag ("required" beside a response_format) it is.
    assert err.body["param"] == "tools[2].function.parameters"
    assert err.body["message"].startswith(err.body["param"] + ": ")
    fmt = {"type": "json_schema", "json_schema": {"name": "out", "schema": {"type": "object"}}}
    err = refused(client, tools=tools, tool_choice="required", response_format=fmt, stream=stream)
    assert "uniqueItems" in err.body["message"] and err.body["param"] == "tools[2].function.parameters", err.body
    # A named tool_choice leaves one structure in the tag (its structures[0]): the message names
    # the tool, so the only index it shows is the tool's own.
    named = {"type": "function", "function": {"name": "tag"}}
    for choice, extra in [(named, {}), ("auto", {}), ("required", {"response_format": fmt})]:
        err = refused(client, tools=tools, tool_choice=choice, stream=stream, **extra)
        assert err.body["param"] == "tools[2].function.parameters", err.body
        assert "the parameters of tool 'tag'" in err.body["message"], err.body
        assert not re.search(r"structures\[|tags\[", err.body["message"]), err.body
    # The server keeps serving: the next request with good tools is answered.
    assert check_calls(chat(client, tool_choice="required", parallel_tool_calls=False).choices[0])


def test_a_stage_before_s6_refuses_tools_naming_the_stage():
    engine = sgl.Engine(stage="s5", max_total_tokens=2000)
    with TestClient(create_app(engine)) as http:
        resp = http.post("/v1/chat/completions", json={"messages": ASK, "tools": TOOLS, "max_tokens": 5})
        assert resp.status_code == 400
        err = resp.json()["error"]
        assert err["param"] == "tools" and "s6-function-calling" in err["message"] and "s5-backends" in err["message"]
        # tool_choice "none" asks for no constraint: the tools are only shown to the model.
        ok = http.post(
            "/v1/chat/completions", json={"messages": ASK, "tools": TOOLS, "tool_choice": "none", "max_tokens": 5}
        )
        assert ok.status_code == 200 and "tool_calls" not in ok.json()["choices"][0]["message"]
