"""POST /v1/responses' body (OpenAI's Responses API), and what it is in chat's terms.

A Responses request is a chat completion said another way: `input` (a string, or a list of
messages, `function_call` and `function_call_output` items) is the chat's messages,
`instructions` a system message before them, `text.format` its response_format, `tools` its
tools (flat: `{"type": "function", "name", "parameters"}`), `max_output_tokens` its
max_completion_tokens. `ResponsesRequest.to_chat()` writes that chat (a ChatCompletionRequest,
checked as one), and the server serves it as it serves a chat: the same prompt, sampling
params, constraint and tool calls. `chat_field` names a chat field's error in this request's
terms ("messages[2].content" -> "input[1].content").

Closed and strict like protocol.py's models: an unknown field is an error naming it, an
unsupported one is refused unless neutral. Nothing is stored, so `store: true`,
`previous_response_id` and `conversation` (which need a stored response) are refused by name.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import Discriminator, Field, Tag, ValidationInfo, field_validator, model_validator

from .constrained.json_schema import short_value
from .core import OPENAI_MAX_TEMPERATURE
from .protocol import (
    _UNSUPPORTED_COMMON,
    MAX_TOOLS,
    CalledFunction,
    ChatCompletionRequest,
    FunctionDef,
    RequestError,
    ToolName,
    _neutral_only,
    _Strict,
    parse,
)

# Unsupported Responses fields -> their neutral values (accepted: they ask for nothing).
_UNSUPPORTED_RESPONSES: dict[str, tuple[Any, ...]] = {
    **{k: v for k, v in _UNSUPPORTED_COMMON.items() if k in ("service_tier", "top_logprobs")},
    "include": (None, []),
    "max_tool_calls": (None,),
    "reasoning": (None,),
    "truncation": (None, "disabled"),
    "background": (None, False),
    "prompt": (None,),
    "context_management": (None,),
    "moderation": (None,),
    "prompt_cache_retention": (None, "in_memory"),
    "prompt_cache_options": (None,),
}

# What a field that needs a stored response is refused with.
_NOTHING_STORED = "minisglang stores no response or conversation: send the whole conversation in input"


class TextPart(_Strict):
    """A message's text: input_text (what the user or system says), output_text (an earlier
    answer, sent back as the SDK gave it: its annotations and logprobs play no part)."""

    type: Literal["input_text", "output_text"]
    text: str
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None


class MessageItem(_Strict):
    """A message: the role's text, a string or a list of text parts. `id`, `status` and
    `phase` are what an earlier response's message carries, sent back (`input += output`)."""

    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[TextPart]
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    phase: Literal["commentary", "final_answer"] | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _text_only(cls, content: Any) -> Any:
        for i, part in enumerate(content if isinstance(content, list) else []):
            kind = part.get("type") if isinstance(part, dict) else None
            if isinstance(kind, str) and kind not in ("input_text", "output_text"):
                raise ValueError(
                    f'part [{i}] is {json.dumps(kind)[:40]}: only text parts ("input_text", "output_text") are '
                    "supported (images, audio and files are not)"
                )
        return content

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class FunctionCallItem(_Strict):
    """A call an earlier response made (`call_id` is what its output answers)."""

    type: Literal["function_call"]
    call_id: str = Field(min_length=1, max_length=128)
    name: ToolName
    arguments: str
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None

    @field_validator("arguments")
    @classmethod
    def _json_object(cls, arguments: str) -> str:
        return CalledFunction._json_object(arguments)  # (chat's check of a call's arguments)


class FunctionCallOutputItem(_Strict):
    """A call's result: its `output` (a string, or input_text parts)."""

    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1, max_length=128)
    output: str | list[TextPart]
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None

    def text(self) -> str:
        return self.output if isinstance(self.output, str) else "".join(p.text for p in self.output)


_ITEM_TYPES = ("message", "function_call", "function_call_output")


def _item_type(item: Any) -> str | None:
    """An input item's kind: its `type`, "message" when it has none (OpenAI's EasyInputMessage)."""
    if not isinstance(item, dict):
        return None
    kind = item.get("type", "message")
    return f"item-{kind}" if kind in _ITEM_TYPES else None


# (a tag with a "-" is left out of an error's field path: "input[0].content")
InputItem = Annotated[
    Annotated[MessageItem, Tag("item-message")]
    | Annotated[FunctionCallItem, Tag("item-function_call")]
    | Annotated[FunctionCallOutputItem, Tag("item-function_call_output")],
    Discriminator(
        _item_type,
        custom_error_type="item_type",
        custom_error_message=(
            "must be a message, a function_call or a function_call_output item (other items, "
            "such as reasoning, images or built-in tools' calls, are not supported)"
        ),
    ),
]


class TextFormat(_Strict):
    """text.format: "text", "json_object", or "json_schema" with its `schema` (and `name`)."""

    type: Literal["text", "json_object", "json_schema"]
    name: str | None = Field(None, max_length=64)
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    description: str | None = None
    strict: bool | None = None

    @model_validator(mode="after")
    def _schema_of_json_schema(self) -> TextFormat:
        if (self.type == "json_schema") != (self.schema_ is not None):
            raise ValueError("schema is required exactly when type is 'json_schema'")
        if self.type != "json_schema" and (self.name, self.description, self.strict) != (None, None, None):
            raise ValueError("name, description and strict belong to type 'json_schema' only")
        return self

    def response_format(self) -> dict[str, Any] | None:
        """Chat's response_format for this format (None: plain text)."""
        if self.type == "json_schema":
            given = {"name": self.name, "description": self.description, "strict": self.strict}
            return {
                "type": "json_schema",
                "json_schema": {"schema": self.schema_, **{k: v for k, v in given.items() if v is not None}},
            }
        return {"type": "json_object"} if self.type == "json_object" else None

    def echo(self) -> dict[str, Any]:
        """This format as a response states it."""
        return self.model_dump(by_alias=True, exclude_none=True)


class TextConfig(_Strict):
    format: TextFormat | None = None
    verbosity: Literal["medium"] | None = None  # (the only one the model has)


class ResponsesStreamOptions(_Strict):
    # (the stream's deltas carry no obfuscation padding either way)
    include_obfuscation: bool | None = None


class ResponsesTool(FunctionDef):
    """A function tool, flat: {"type": "function", "name", "description", "parameters", "strict"}."""

    type: Literal["function"]


def _function_choice(choice: Any) -> bool:
    return (
        isinstance(choice, dict)
        and set(choice) == {"type", "name"}
        and choice["type"] == "function"
        and isinstance(choice["name"], str)
    )


class Origin(NamedTuple):
    """Where a chat message came from: this request's `field`, and the names there of the
    chat message's fields (".content" -> ".output"; "": the item itself)."""

    field: str
    fields: dict[str, str]


class ResponsesRequest(_Strict):
    """POST /v1/responses."""

    model: str | None = None
    input: list[InputItem] = Field(min_length=1)
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=OPENAI_MAX_TEMPERATURE, allow_inf_nan=False)
    top_p: float | None = Field(None, ge=0, le=1, allow_inf_nan=False)
    text: TextConfig | None = None
    tools: list[ResponsesTool] | None = Field(None, max_length=MAX_TOOLS)
    # "none", "auto", "required", {"type": "function", "name"} or {"type": "allowed_tools", "mode", "tools"}
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    stream: bool = False
    stream_options: ResponsesStreamOptions | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    store: bool | None = None
    previous_response_id: str | None = None
    conversation: Any = None
    # Unsupported (see _UNSUPPORTED_RESPONSES): typed loosely, refused unless neutral.
    service_tier: Any = None
    top_logprobs: Any = None
    include: Any = None
    max_tool_calls: Any = None
    reasoning: Any = None
    truncation: Any = None
    background: Any = None
    prompt: Any = None
    context_management: Any = None
    moderation: Any = None
    prompt_cache_retention: Any = None
    prompt_cache_options: Any = None

    _unsupported = _neutral_only(_UNSUPPORTED_RESPONSES)

    @field_validator("input", mode="before")
    @classmethod
    def _a_string_is_a_user_message(cls, value: Any) -> Any:
        return [{"role": "user", "content": value}] if isinstance(value, str) else value

    @field_validator("stream", mode="before")
    @classmethod
    def _null_stream(cls, value: Any) -> Any:
        return False if value is None else value

    @field_validator("stream_options")
    @classmethod
    def _stream_options_need_stream(
        cls, options: ResponsesStreamOptions | None, info: ValidationInfo
    ) -> ResponsesStreamOptions | None:
        if options is not None and not info.data.get("stream"):
            raise ValueError("only allowed when stream is true")
        return options

    @field_validator("store")
    @classmethod
    def _nothing_stored(cls, store: bool | None) -> bool | None:
        if store:
            raise ValueError(f"true is not supported ({_NOTHING_STORED}); send false or leave it out")
        return store

    @field_validator("previous_response_id", "conversation")
    @classmethod
    def _no_stored_state(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError(f"not supported: {_NOTHING_STORED}")
        return value

    @field_validator("tool_choice")
    @classmethod
    def _tool_choice(cls, choice: Any) -> Any:
        if choice is None or choice in ("none", "auto", "required") or _function_choice(choice):
            return choice
        if (
            isinstance(choice, dict)
            and set(choice) == {"type", "mode", "tools"}
            and choice["type"] == "allowed_tools"
            and choice["mode"] in ("auto", "required")
            and isinstance(choice["tools"], list)
            and choice["tools"]
            and all(_function_choice(t) for t in choice["tools"])
        ):
            return choice
        raise ValueError(
            'must be "none", "auto", "required", {"type": "function", "name": NAME} or {"type": '
            '"allowed_tools", "mode": "auto" or "required", "tools": [{"type": "function", "name": NAME}, ...]}, '
            f"got {json.dumps(choice)[:80]}"
        )

    # ------------------------------------------------------------------ as a chat
    def format(self) -> TextFormat | None:
        return self.text.format if self.text is not None else None

    def chat_dict(self) -> tuple[dict[str, Any], list[Origin]]:
        """The chat completion this request is, and where each of its messages came from
        (messages[i] -> `Origin`: "instructions" or "input[j]", and its fields' names)."""
        messages: list[dict[str, Any]] = []
        origin: list[Origin] = []
        if self.instructions is not None:
            messages.append({"role": "system", "content": self.instructions})
            origin.append(Origin("instructions", {".content": ""}))
        for j, item in enumerate(self.input):
            if isinstance(item, MessageItem):
                messages.append({"role": item.role, "content": item.text()})
                origin.append(Origin(f"input[{j}]", {".content": ".content"}))
                continue
            if isinstance(item, FunctionCallOutputItem):
                messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text()})
                origin.append(Origin(f"input[{j}]", {".content": ".output", ".tool_call_id": ".call_id"}))
                continue
            # a call joins the assistant message before it (its text, or the calls before it)
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
                continue
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            origin.append(Origin(f"input[{j}]", {".tool_calls": ""}))
        chat: dict[str, Any] = {"messages": messages, "stream": self.stream}
        if self.max_output_tokens is not None:
            chat["max_completion_tokens"] = self.max_output_tokens
        fmt = self.format()
        if fmt is not None and fmt.response_format() is not None:
            chat["response_format"] = fmt.response_format()
        if self.tools is not None:
            chat["tools"] = [
                {"type": "function", "function": t.model_dump(exclude={"type"}, exclude_none=True)} for t in self.tools
            ]
        if self.tool_choice is not None:
            chat["tool_choice"] = _chat_tool_choice(self.tool_choice)
        if self.stream_options is not None:
            chat["stream_options"] = self.stream_options.model_dump(exclude_none=True)
        for k in ("temperature", "top_p", "parallel_tool_calls", "metadata", "user", "safety_identifier"):
            if getattr(self, k) is not None:
                chat[k] = getattr(self, k)
        return chat, origin

    def check_calls(self) -> None:
        """Each function_call_output answers a function_call before it, and each call is
        answered before the next message (OpenAI refuses a call left without its output);
        said here in this request's terms, before chat's same check would say it in its own."""
        called: set[str] = set()
        waiting: dict[str, int] = {}  # call id -> its item, while no output answered it
        for j, item in enumerate(self.input):
            if isinstance(item, FunctionCallItem):
                if item.call_id in called:
                    raise RequestError(
                        f"input[{j}].call_id: {short_value(item.call_id)} is the call_id of an earlier call",
                        param=f"input[{j}].call_id",
                    )
                called.add(item.call_id)
                waiting[item.call_id] = j
            elif isinstance(item, FunctionCallOutputItem):
                if item.call_id not in called:
                    raise RequestError(
                        f"input[{j}].call_id: {short_value(item.call_id)} is the call_id of no function_call "
                        "item before it",
                        param=f"input[{j}].call_id",
                    )
                waiting.pop(item.call_id, None)
            elif waiting:
                _unanswered(waiting, f"before input[{j}]")
        if waiting:
            _unanswered(waiting, "at the end of input")

    def to_chat(self) -> tuple[ChatCompletionRequest, list[Origin]]:
        """This request as a ChatCompletionRequest (checked as one: an error names chat's
        field, which `chat_field` renames), and its messages' origins (`chat_dict`)."""
        self.check_calls()
        chat, origin = self.chat_dict()
        return parse(ChatCompletionRequest, json.dumps(chat).encode()), origin

    def echo(self) -> dict[str, Any]:
        """The settings a response states (the SDK's Response type expects them)."""
        fmt = self.format()
        return {
            "instructions": self.instructions,
            "max_output_tokens": self.max_output_tokens,
            "metadata": self.metadata or {},
            "parallel_tool_calls": self.parallel_tool_calls is not False,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "tool_choice": self.tool_choice or ("auto" if self.tools else "none"),
            "tools": [t.model_dump(exclude_none=True) for t in self.tools or []],
            "text": {"format": fmt.echo() if fmt is not None else {"type": "text"}},
            "store": False,
            "truncation": "disabled",
            "previous_response_id": None,
            "reasoning": None,
            "user": self.user,
            "safety_identifier": self.safety_identifier,
            "prompt_cache_key": self.prompt_cache_key,
        }


def _unanswered(waiting: dict[str, int], where: str) -> None:
    first = min(waiting.values())
    ids = [call for call, at in waiting.items() if at >= first]
    raise RequestError(
        f"input[{first}]: no function_call_output item answers the call(s) {short_value(ids)} {where} "
        "(each call's output follows it, before the next message)",
        param=f"input[{first}]",
    )


def _chat_tool_choice(choice: Any) -> Any:
    """A Responses tool_choice in chat's shape (the function's name nested under "function")."""
    if isinstance(choice, str):
        return choice
    if choice["type"] == "function":
        return {"type": "function", "function": {"name": choice["name"]}}
    tools = [{"type": "function", "function": {"name": t["name"]}} for t in choice["tools"]]
    return {"type": "allowed_tools", "allowed_tools": {"mode": choice["mode"], "tools": tools}}


# Chat's fields -> this request's (a prefix of the chat field's path).
_RENAMED = {
    "max_completion_tokens": "max_output_tokens",
    "response_format": "text.format",
    "json_schema": "text.format",
}


def chat_field(field: str | None, origin: list[Origin]) -> str | None:
    """The Responses field a chat field's error is about: messages[i] is where its message
    came from (`origin`), tools[i].function.x is tools[i].x, response_format is text.format,
    tool_choice.allowed_tools.x is tool_choice.x."""
    if field is None:
        return None
    m = re.match(r"messages\[(\d+)\](.*)", field)
    if m is not None:
        i, rest = int(m.group(1)), m.group(2)
        if i >= len(origin):
            return "input"
        sub = re.match(r"\.\w+", rest)
        where = origin[i]
        name = where.fields.get(sub.group(), "") if sub else ""  # (a field it has no name for: the item)
        return where.field + name
    if field == "messages":
        return "input"
    m = re.match(r"tools\[(\d+)\]\.function(.*)", field)
    if m is not None:
        return f"tools[{m.group(1)}]{m.group(2)}"
    if field.startswith("tool_choice.allowed_tools."):
        return "tool_choice." + field.removeprefix("tool_choice.allowed_tools.").replace(".function", "")
    first, dot, tail = field.partition(".")
    return _RENAMED[first] + dot + tail if first in _RENAMED else field


def renamed(e: RequestError, origin: list[Origin]) -> RequestError:
    """A chat error in Responses' terms: its param renamed (`chat_field`), and the message's
    leading "param:" with it."""
    param = chat_field(e.param, origin)
    message = str(e)
    if e.param is not None and param != e.param and message.startswith(f"{e.param}:"):
        message = f"{param}:{message[len(e.param) + 1 :]}"
    return RequestError(message, status=e.status, param=param, code=e.code, retry_after=e.retry_after)
