"""POST /v1/responses (OpenAI's Responses API) through the real `openai` client: create and
parse(text_format=...) against the bundled model, the answer the chat route gives for the same
conversation (the route serves a Responses request as that chat), tool calls and a tool
loop (`input += response.output`), max_output_tokens' incomplete response, the stream's
events, and the errors, each naming the Responses field at fault.

Tests of minisglang/protocol_responses.py, server/routes_responses.py and server/responses_shapes.py.
"""

import json

import httpx
import jsonschema
import openai
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_server_protocol import on_the_event_loop

import minisglang as sgl
from minisglang.protocol import ChatCompletionRequest, RequestError, parse
from minisglang.protocol_responses import ResponsesRequest, chat_field
from minisglang.server import create_app, serving_in_thread

MODEL = "tiny-json-llama"
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS = [{"type": "function", "name": "get_weather", "description": "Current weather of a city", "parameters": WEATHER}]
CHAT_TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Current weather of a city", "parameters": WEATHER},
    }
]


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=20)
    age: int


@pytest.fixture(scope="module")
def server():
    engine = sgl.Engine(max_total_tokens=6000, max_running_requests=8)
    with serving_in_thread(create_app(engine)) as url:
        yield url


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="none")


def chat_text(client, messages, **kwargs) -> str:
    answer = client.chat.completions.create(model=MODEL, messages=messages, temperature=0, **kwargs)
    return answer.choices[0].message.content


# ---------------------------------------------------------------------- answers
def test_a_string_input_is_answered_as_the_chat_of_one_user_message(client):
    response = client.responses.create(model=MODEL, input="Hello, who are you?", temperature=0, max_output_tokens=20)
    assert response.object == "response" and response.id.startswith("resp_")
    assert response.status == "completed" and response.incomplete_details is None
    (item,) = response.output
    assert item.type == "message" and item.role == "assistant" and item.status == "completed"
    assert response.output_text == chat_text(
        client, [{"role": "user", "content": "Hello, who are you?"}], max_completion_tokens=20
    )
    usage = response.usage
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens and usage.output_tokens >= 1


def test_instructions_are_a_system_message_before_the_input_items(client):
    items = [
        {
            "role": "user",
            "content": [{"type": "input_text", "text": "Name a "}, {"type": "input_text", "text": "city"}],
        },
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Paris"}]},
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "Another"},
    ]
    response = client.responses.create(
        model=MODEL, instructions="You are terse.", input=items, temperature=0, max_output_tokens=16
    )
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name a city"},
        {"role": "assistant", "content": "Paris"},
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "Another"},
    ]
    assert response.output_text == chat_text(client, messages, max_completion_tokens=16)
    assert response.instructions == "You are terse." and response.max_output_tokens == 16


def test_an_earlier_responses_message_sent_back_is_the_assistants_turn(client):
    first = client.responses.create(model=MODEL, input="Name a city", temperature=0, max_output_tokens=8)
    ask = [{"role": "user", "content": "Name a city"}]
    again = client.responses.create(
        model=MODEL,
        input=ask + list(first.output) + [{"role": "user", "content": "Another"}],
        temperature=0,
        max_output_tokens=8,
    )
    assert again.output_text == chat_text(
        client,
        ask + [{"role": "assistant", "content": first.output_text}, {"role": "user", "content": "Another"}],
        max_completion_tokens=8,
    )


def test_max_output_tokens_cuts_the_answer_into_an_incomplete_response(client):
    response = client.responses.create(model=MODEL, input="Tell me a long story.", max_output_tokens=3)
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage.output_tokens == 3 and response.output[0].status == "incomplete"


def test_parse_with_a_text_format_answers_the_model_it_names(client):
    response = client.responses.parse(
        model=MODEL, input="Give me a person as JSON.", text_format=Person, temperature=0, max_output_tokens=120
    )
    assert response.status == "completed"
    assert isinstance(response.output_parsed, Person)
    assert Person.model_validate_json(response.output_text) == response.output_parsed
    assert response.text.format.type == "json_schema" and response.text.format.name == "Person"


def test_a_json_object_format_answers_a_json_object(client):
    response = client.responses.create(
        model=MODEL,
        input="Give me a person as JSON.",
        text={"format": {"type": "json_object"}},
        max_output_tokens=200,
        temperature=0,
    )
    assert response.status == "completed"
    assert isinstance(json.loads(response.output_text), dict)


def test_a_required_tool_is_called_and_the_loop_goes_on_with_its_output(client):
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    response = client.responses.create(
        model=MODEL, input=ask, tools=TOOLS, tool_choice="required", temperature=0, max_output_tokens=100
    )
    calls = [item for item in response.output if item.type == "function_call"]
    assert calls and all(c.name == "get_weather" and c.call_id.startswith("call_") for c in calls)
    for call in calls:
        jsonschema.validate(json.loads(call.arguments), WEATHER)
    assert response.tools[0].name == "get_weather" and response.tool_choice == "required"
    # The loop: the response's items sent back, each call answered by its output.
    following = ask + list(response.output)
    following += [{"type": "function_call_output", "call_id": c.call_id, "output": "sunny"} for c in calls]
    second = client.responses.create(model=MODEL, input=following, tools=TOOLS, temperature=0, max_output_tokens=20)
    assert second.status in ("completed", "incomplete")
    messages = ask + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in calls
            ],
        }
    ]
    messages += [{"role": "tool", "tool_call_id": c.call_id, "content": "sunny"} for c in calls]
    chat = client.chat.completions.create(
        model=MODEL, messages=messages, tools=CHAT_TOOLS, temperature=0, max_completion_tokens=20
    )
    assert second.output_text == (chat.choices[0].message.content or "")
    assert len([i for i in second.output if i.type == "function_call"]) == len(chat.choices[0].message.tool_calls or [])


def test_a_named_tool_choice_calls_that_tool(client):
    response = client.responses.create(
        model=MODEL,
        input="Hi",
        tools=TOOLS,
        tool_choice={"type": "function", "name": "get_weather"},
        temperature=0,
        max_output_tokens=100,
    )
    assert [i.name for i in response.output if i.type == "function_call"][:1] == ["get_weather"]


# ---------------------------------------------------------------------- streaming
def test_the_stream_sends_the_sdks_event_sequence_and_the_same_text(client):
    kwargs = dict(model=MODEL, input="Hello, who are you?", temperature=0, max_output_tokens=20)
    with client.responses.stream(**kwargs) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    head = ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    tail = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    assert kinds[:4] == head and kinds[-4:-1] == tail
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert final.output_text == client.responses.create(**kwargs).output_text
    assert final.usage is not None and final.usage.output_tokens >= 1


def test_each_streamed_event_is_named_and_the_stream_ends_without_done(server):
    """As OpenAI streams a response: an `event:` line with each event's type before its data
    (clients that dispatch on it, as browsers' EventSource does, saw unnamed events), and no
    `[DONE]` after the last (that is the chat stream's end)."""
    body = {"model": MODEL, "input": "Hello", "temperature": 0, "max_output_tokens": 5, "stream": True}
    with httpx.Client(timeout=60) as http:
        blocks = http.post(server + "/v1/responses", json=body).text.strip().split("\n\n")
    names = [block.split("\n")[0].removeprefix("event: ") for block in blocks]
    kinds = [json.loads(block.split("\n")[1].removeprefix("data: "))["type"] for block in blocks]
    assert (
        names == kinds and kinds[0] == "response.created" and kinds[-1] in ("response.completed", "response.incomplete")
    )


def test_a_streamed_parse_answers_the_model_it_names(client):
    with client.responses.stream(
        model=MODEL, input="Give me a person as JSON.", text_format=Person, temperature=0, max_output_tokens=120
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert isinstance(final.output_parsed, Person)
    assert (
        final.output_text
        == client.responses.parse(
            model=MODEL, input="Give me a person as JSON.", text_format=Person, temperature=0, max_output_tokens=120
        ).output_text
    )


def test_a_strict_tools_arguments_are_parsed(client):
    strict = [{**TOOLS[0], "strict": True}]
    response = client.responses.parse(
        model=MODEL, input="Weather in Paris?", tools=strict, tool_choice="required", max_output_tokens=100
    )
    calls = [item for item in response.output if item.type == "function_call"]
    assert calls and all(c.parsed_arguments == json.loads(c.arguments) for c in calls)


def test_a_stream_cut_by_max_output_tokens_ends_with_response_incomplete(client):
    with client.responses.stream(model=MODEL, input="Tell me a long story.", max_output_tokens=3) as stream:
        events = list(stream)
    last = events[-1]  # (OpenAI's event: the SDK's get_final_response waits for response.completed only)
    assert last.type == "response.incomplete" and last.response.status == "incomplete"
    assert last.response.incomplete_details.reason == "max_output_tokens" and last.response.usage.output_tokens == 3
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_a_streamed_tool_call_is_a_function_call_item(client):
    with client.responses.stream(
        model=MODEL, input="Weather in Paris?", tools=TOOLS, tool_choice="required", max_output_tokens=100
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
    calls = [i for i in final.output if i.type == "function_call"]
    assert calls and all(c.status == "completed" for c in calls)
    for call in calls:
        jsonschema.validate(json.loads(call.arguments), WEATHER)


@pytest.mark.parametrize(
    "fields, param",
    [
        ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "nonsense"}}}}, "text.format"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
        ({"max_output_tokens": 100_000}, "max_output_tokens"),
    ],
)
def test_a_stream_refused_before_it_begins_names_the_responses_field(client, fields, param):
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input="Hi", stream=True, **fields)
    assert info.value.body["param"] == param


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "fields, param, needle",
    [
        ({"store": True}, "store", "stores no response"),
        ({"previous_response_id": "resp_1"}, "previous_response_id", "stores no response"),
        ({"conversation": "conv_1"}, "conversation", "stores no response"),
        ({"reasoning": {"effort": "high"}}, "reasoning", "not supported"),
        ({"extra_body": {"temprature": 1}}, "temprature", "not a known field"),
        ({"max_output_tokens": 0}, "max_output_tokens", ">= 1"),
        ({"input": [{"type": "reasoning", "summary": []}]}, "input[0]", "function_call_output"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content",
            "only text parts",
        ),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format", "schema is required"),
        ({"tool_choice": "required"}, "tool_choice", "only allowed when tools"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice", "not in tools"),
        (
            {"tools": [{"type": "function", "name": "f", "parameters": {"type": "string"}}]},
            "tools[0].parameters",
            "object",
        ),
        ({"tools": [{"type": "function", "name": "bad name"}]}, "tools[0].name", "letters"),
        (
            {
                "input": [
                    {"role": "user", "content": "x"},
                    {"type": "function_call_output", "call_id": "c", "output": "y"},
                ]
            },
            "input[1].call_id",
            "no function_call item",
        ),
        ({"max_output_tokens": 100_000}, "max_output_tokens", "new tokens fit"),
        (
            {"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "nonsense"}}}},
            "text.format",
            "nonsense",
        ),
        (
            {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"}]},
            "input[0].arguments",
            "JSON text of an object",
        ),
        ({"model": "gpt-5"}, "model", "does not exist"),
    ],
)
def test_an_error_names_the_responses_field(client, fields, param, needle):
    with pytest.raises(openai.APIStatusError) as info:
        client.responses.create(**{"model": MODEL, "input": "Hi", **fields})
    error = info.value.body
    assert error["param"] == param and needle in error["message"], error
    assert error["message"].startswith(param) or param == "model"
    # ... and for that request only
    assert client.responses.create(model=MODEL, input="Hi", max_output_tokens=2).status == "incomplete"


def test_neutral_values_of_unsupported_fields_are_accepted(client):
    response = client.responses.create(
        model=MODEL,
        input="Hi",
        max_output_tokens=2,
        store=False,
        truncation="disabled",
        include=[],
        metadata={"k": "v"},
        user="u",
        safety_identifier="s",
        parallel_tool_calls=True,
        tools=TOOLS,
        tool_choice="none",
    )
    assert response.metadata == {"k": "v"} and response.store is False and response.output_text


def test_the_request_is_written_as_a_chat_off_the_event_loop(client, monkeypatch):
    """to_chat ran on the event loop: a 4 MB input of 27,000 calls and their outputs took
    2-3 s there to write and check as a chat, and every client's stream waited that long.
    It runs in the thread pool now, as parse_body's parse does."""
    on_loop, real = [], ResponsesRequest.to_chat

    def to_chat(self):
        on_loop.append(on_the_event_loop())
        return real(self)

    monkeypatch.setattr(ResponsesRequest, "to_chat", to_chat)
    assert client.responses.create(model=MODEL, input="Hi", max_output_tokens=2).status == "incomplete"
    assert on_loop == [False]


def test_a_chat_field_is_named_as_the_responses_field_it_came_from():
    body = parse(
        ResponsesRequest,
        json.dumps(
            {
                "instructions": "be kind",
                "input": [
                    {"role": "user", "content": "x"},
                    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                    {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "c1", "output": "y"},
                ],
            }
        ).encode(),
    )
    chat, origin = body.chat_dict()
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant", "tool"]
    assert len(chat["messages"][2]["tool_calls"]) == 2  # the calls of one turn are one assistant message
    assert chat_field("messages[0].content", origin) == "instructions"
    assert chat_field("messages[1].content", origin) == "input[0].content"
    assert chat_field("messages[2].tool_calls", origin) == "input[1]"
    assert chat_field("messages[3].tool_call_id", origin) == "input[3].call_id"
    assert chat_field("messages[3].content", origin) == "input[3].output"
    assert chat_field("response_format", origin) == "text.format"
    assert chat_field("tools[2].function.parameters", origin) == "tools[2].parameters"
    assert chat_field("tool_choice.allowed_tools.tools[0].function.name", origin) == "tool_choice.tools[0].name"
    with pytest.raises(RequestError) as info:  # c2 is never answered: chat says so in its terms
        parse(ChatCompletionRequest, json.dumps(chat).encode()).tool_constraint()
    assert info.value.param == "messages[2].tool_calls"
    with pytest.raises(RequestError) as info:  # ... which Responses' own check says first
        body.to_chat()
    assert info.value.param == "input[2]" and '["c2"]' in str(info.value)


# ---------------------------------------------------------------------- junk
JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(), st.text(max_size=8))
JSON_ANY = st.recursive(
    JSON_LEAF,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8,
)
ITEMS = st.sampled_from(
    [
        {"role": "user", "content": "x"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "y"}]},
        {"type": "function_call", "call_id": "c", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "z"},
    ]
)
FIELDS = sorted(set(ResponsesRequest.model_fields) - {"stream"})


@st.composite
def junk_bodies(draw) -> dict:
    """A valid-looking request with fields of junk, or its items in any order and one of
    their fields junk."""
    body: dict = {"input": draw(st.lists(ITEMS, min_size=1, max_size=4)), "max_output_tokens": 2}
    if draw(st.booleans()):
        item = json.loads(json.dumps(draw(st.sampled_from(body["input"]))))
        item[draw(st.sampled_from(sorted(item)))] = draw(JSON_ANY)
        body["input"].append(item)
    body.update(draw(st.dictionaries(st.sampled_from(FIELDS), JSON_ANY | st.just(TOOLS), max_size=3)))
    return body


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=junk_bodies())
def test_junk_is_a_400_naming_a_responses_field_or_an_answer(server, body):
    headers = {"content-type": "application/json"}  # (json.dumps writes inf and NaN, which the server refuses)
    r = httpx.post(server + "/v1/responses", content=json.dumps(body), headers=headers, timeout=30)
    assert r.status_code in (200, 400, 404), r.text
    if r.status_code != 200:
        error = r.json()["error"]
        assert error["message"] and "messages" not in error["message"] and "response_format" not in error["message"]
        assert error["param"] is None or not error["param"].startswith(
            ("messages", "max_completion", "response_format")
        )
    else:
        assert r.json()["object"] == "response"
