"""The server's request models: what a client may send, checked before anything is queued.

Like vLLM's and SGLang's `protocol.py`, each endpoint's body is a pydantic model, strict
about types (`max_tokens: 5.5` and `stream: "false"` are refused, not coerced) and about
ranges, and closed: an unknown field is an error naming it. OpenAI fields we do not
implement (`logprobs`, `logit_bias`, `presence_penalty`, ...) are declared too, so that
sending one is a clear "not supported" instead of being silently ignored; their neutral
value (e.g. `presence_penalty: 0`) is accepted because it asks for nothing.

`parse(model_cls, body_bytes)` validates one body and turns pydantic's errors into
`RequestError`: one plain sentence per field, no pydantic internals.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .constrained.json_schema import repeated_key, short_value, shown_numeral, underflows
from .core import OPENAI_MAX_STOP, OPENAI_MAX_TEMPERATURE, OPENAI_SEED_LIMIT, SamplingParams
from .function_call import (
    TOOL_NAME,
    FunctionTool,
    ToolChoice,
    ToolConstraint,
    arguments_schema,
    calls_only,
    tool_constraint,
)


class RequestError(ValueError):
    """A request the server refuses; `status` is the HTTP code, `param` the field at fault."""

    def __init__(
        self,
        message: str,
        status: int = 400,
        param: str | None = None,
        code: str | None = None,
        retry_after: int | None = None,
    ):
        super().__init__(message)
        self.status, self.param, self.code, self.retry_after = status, param, code, retry_after


class _Strict(BaseModel):
    # strict: no coercion ("5" is not 5, 5.5 is not an int); forbid: unknown keys are errors.
    model_config = ConfigDict(extra="forbid", strict=True)


# OpenAI fields we do not implement -> the values that ask for nothing (accepted).
_UNSUPPORTED_COMMON: dict[str, tuple[Any, ...]] = {
    "frequency_penalty": (None, 0, 0.0),
    "presence_penalty": (None, 0, 0.0),
    "logit_bias": (None, {}),
    "top_logprobs": (None, 0),
    # (a tier is a price and a latency, never another text: each is served as the default one)
    "service_tier": (None, "auto", "default", "flex", "priority", "scale"),
    "store": (None, False),
}
_UNSUPPORTED_COMPLETION = {
    **_UNSUPPORTED_COMMON,
    "logprobs": (None,),
    "echo": (None, False),
    "best_of": (None, 1),
    "suffix": (None, ""),
}
_UNSUPPORTED_CHAT = {
    **_UNSUPPORTED_COMMON,
    "logprobs": (None, False),
    "functions": (None, []),
    "function_call": (None, "none"),
    "modalities": (None, ["text"]),
    "audio": (None,),
    "prediction": (None,),
    "reasoning_effort": (None,),
    "web_search_options": (None,),
    "verbosity": (None,),
    "moderation": (None,),
    # prompt caching's lifetime and breakpoints (the radix cache keeps prefixes in memory
    # while it has room, whatever is asked)
    "prompt_cache_retention": (None, "in_memory"),
    "prompt_cache_options": (None,),
}


def _not_neutral(value: Any, neutral: tuple[Any, ...]) -> str | None:
    """Why `value` of an unsupported parameter is refused, or None when it is one of `neutral`."""
    # Comparing types too keeps `true` from passing for 1 and `0` for false.
    if any(type(value) is type(v) and value == v for v in neutral):
        return None
    return f"not supported by minisglang (leave it out or send {' or '.join(json.dumps(v) for v in neutral)})"


def engine_field(error: Exception) -> str:
    """The engine's name of the field a SamplingParams error is about: its message starts with
    it ("stop[0] is empty" -> "stop", "structural_tag.structures[0]..." -> "structural_tag");
    "" when it starts with none."""
    found = re.match(r"\w*", str(error))  # \w* matches, if only the empty string
    return found.group() if found else ""


def _neutral_only(table: dict[str, tuple[Any, ...]]):
    """A field validator refusing an unsupported field unless it has a neutral value."""

    def check(cls, value: Any, info: ValidationInfo) -> Any:
        assert info.field_name is not None  # a field validator always knows its field
        why = _not_neutral(value, table[info.field_name])
        if why is not None:
            raise ValueError(why)
        return value

    return field_validator(*table, mode="after")(classmethod(check))


class StreamOptions(_Strict):
    include_usage: bool = False
    # OpenAI pads its stream's deltas with random `obfuscation` text (a side-channel
    # mitigation) unless this is false, as its docs advise on trusted links; ours sends no
    # padding either way, so both values are accepted (false was refused: a stranger's find).
    include_obfuscation: bool | None = None


class JsonSchemaFormat(_Strict):
    name: str = Field("output", max_length=64)
    schema_: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


class ResponseFormat(_Strict):
    """OpenAI's response_format, plus SGLang's structural tags: v2, {"type": "structural_tag",
    "format": {...}} (xgrammar's format tree, constrained/structural_tag_format.py), or the old
    {"type": "structural_tag", "structures", "triggers", "at_least_one", "stop_after_first"}
    (checked by the engine's grammar backend when it compiles)."""

    type: Literal["text", "json_object", "json_schema", "structural_tag"]
    json_schema: JsonSchemaFormat | None = None
    format: Any = None
    structures: list[Any] | None = None
    triggers: list[Any] | None = None
    at_least_one: bool | None = None
    stop_after_first: bool | None = None

    @model_validator(mode="after")
    def _fields_of_the_type(self) -> ResponseFormat:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError("json_schema (with a schema) is required exactly when type is 'json_schema'")
        tag_fields = [k for k in ("format", *_TAG_FIELDS) if getattr(self, k) is not None]
        if self.type == "structural_tag":
            if self.format is not None and len(tag_fields) > 1:
                raise ValueError(
                    f"type 'structural_tag' takes either format (v2) or structures and triggers (the old "
                    f"shape), not both: got {', '.join(tag_fields)}"
                )
            if self.format is None and not {"structures", "triggers"} <= set(tag_fields):
                raise ValueError("type 'structural_tag' needs format (v2), or structures and triggers")
        if self.type != "structural_tag" and tag_fields:
            raise ValueError(f"{', '.join(tag_fields)} belong to type 'structural_tag' only")
        return self

    def constraint(self) -> tuple[str, Any] | None:
        """The (sampling-params key, value) this format asks for; None for "text"."""
        if self.type == "structural_tag" and self.format is not None:
            return "structural_tag", {"type": "structural_tag", "format": self.format}
        if self.type == "structural_tag":
            return "structural_tag", {k: getattr(self, k) for k in _TAG_FIELDS if getattr(self, k) is not None}
        if self.type == "json_schema":
            assert self.json_schema is not None  # _fields_of_the_type checked it
            return "json_schema", self.json_schema.schema_
        return ("json_schema", {"type": "object"}) if self.type == "json_object" else None


_TAG_FIELDS = ("structures", "triggers", "at_least_one", "stop_after_first")


# OpenAI's most choices (`n`) of one request.
MAX_CHOICES = 128


class _SamplingFields(_Strict):
    """Fields shared by /v1/completions and /v1/chat/completions (OpenAI's, plus SGLang's extras)."""

    model: str | None = None  # None: the served model (vLLM does the same)
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=OPENAI_MAX_TEMPERATURE, allow_inf_nan=False)
    top_p: float | None = Field(None, ge=0, le=1, allow_inf_nan=False)  # 0: greedy (sampling_params)
    n: int = Field(1, ge=1, le=MAX_CHOICES)  # choices; the server also bounds it by its batch (prompts.py)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=0, lt=OPENAI_SEED_LIMIT)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None  # an end-user id: recorded nowhere, changes nothing
    # Key-value tags OpenAI keeps with a stored completion (at most 16, keys to 64 characters,
    # values to 512): nothing is stored here, so, like `user`, they change nothing.
    metadata: dict[str, str] | None = None
    response_format: ResponseFormat | None = None
    # SGLang's extra sampling fields.
    top_k: int | None = None
    min_p: float | None = Field(None, ge=0, le=1, allow_inf_nan=False)
    ignore_eos: bool | None = None
    regex: str | None = None
    ebnf: str | None = None
    json_schema: dict[str, Any] | str | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata_within_openais_limits(cls, metadata: dict[str, str] | None) -> dict[str, str] | None:
        if metadata is not None:
            if len(metadata) > 16:
                raise ValueError(f"at most 16 keys, got {len(metadata)}")
            for key, value in metadata.items():
                if len(key) > 64 or len(value) > 512:
                    raise ValueError(f"key {key[:64]!r}: keys are at most 64 characters, values 512")
        return metadata

    @field_validator("n", "stream", mode="before")
    @classmethod
    def _null_is_the_default(cls, value: Any, info: ValidationInfo) -> Any:
        """OpenAI documents n as "integer or null" and stream as "boolean or null"."""
        if value is None:
            assert info.field_name is not None
            return cls.model_fields[info.field_name].default
        return value

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_strings(cls, stop: Any) -> Any:
        if stop is None or isinstance(stop, str):
            return stop
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop) or len(stop) > OPENAI_MAX_STOP:
            raise ValueError(f"must be a string or a list of at most {OPENAI_MAX_STOP} strings")
        return stop

    @field_validator("top_k")
    @classmethod
    def _top_k(cls, k: int | None) -> int | None:
        if k is not None and (k == 0 or k < -1):
            raise ValueError("must be -1 (off) or >= 1")
        return k

    @field_validator("stream_options")
    @classmethod
    def _stream_options_need_stream(cls, options: StreamOptions | None, info: ValidationInfo) -> StreamOptions | None:
        # (a field validator, not the model's: the error then names the field)
        if options is not None and not info.data.get("stream"):
            raise ValueError("only allowed when stream is true")
        return options

    def sampling_params(self, max_tokens: int | None, defaults: dict[str, Any] | None = None) -> SamplingParams:
        """These fields as the engine's SamplingParams (its own checks raise RequestError);
        `defaults` fill what the request does not give (Engine.sampling_defaults)."""
        d: dict[str, Any] = {
            k: getattr(self, k)
            for k in ("temperature", "top_p", "top_k", "min_p", "seed", "ignore_eos", "regex", "ebnf", "json_schema")
            if getattr(self, k) is not None
        }
        if d.get("top_p") == 0:  # OpenAI's top_p takes 0: the nucleus of the top token alone, greedy
            d.update(top_p=1.0, temperature=0.0)
        if max_tokens is not None:
            d["max_new_tokens"] = max_tokens
        if self.stop is not None:
            d["stop"] = [self.stop] if isinstance(self.stop, str) else list(self.stop)
        fmt = self.response_format.constraint() if self.response_format is not None else None
        if fmt is not None:
            if any(k in d for k in ("regex", "ebnf", "json_schema")):
                raise RequestError(
                    "response_format: give either response_format or regex/ebnf/json_schema, not both",
                    param="response_format",
                )
            d[fmt[0]] = fmt[1]
        try:
            return SamplingParams.from_dict(d, defaults)
        except (TypeError, ValueError) as e:
            # The constraint response_format made is named as that field, the others are this
            # request's fields of the same name.
            engine_name = engine_field(e)
            if fmt is not None and engine_name == fmt[0]:
                raise RequestError(f"response_format: {e}", param="response_format") from e
            raise RequestError(str(e), param=engine_name if engine_name in type(self).model_fields else None) from e

    def grammar_field(self) -> str | None:
        """The field this request's grammar comes from (None: no grammar), for errors about it."""
        if self.response_format is not None and self.response_format.type != "text":
            return "response_format"
        return next((k for k in ("regex", "ebnf", "json_schema") if getattr(self, k) is not None), None)


# OpenAI's (and SGLang's) default max_tokens of a completion; a chat's is the context's room.
COMPLETION_DEFAULT_MAX_TOKENS = 16


class CompletionRequest(_SamplingFields):
    """POST /v1/completions."""

    prompt: str
    # Unsupported OpenAI fields (see _UNSUPPORTED_COMPLETION): typed loosely, refused unless neutral.
    logprobs: Any = None
    echo: Any = None
    best_of: Any = None
    suffix: Any = None
    frequency_penalty: Any = None
    presence_penalty: Any = None
    logit_bias: Any = None
    top_logprobs: Any = None
    service_tier: Any = None
    store: Any = None

    _unsupported = _neutral_only(_UNSUPPORTED_COMPLETION)

    def to_sampling_params(self, defaults: dict[str, Any] | None = None) -> SamplingParams:
        max_tokens = self.max_tokens if self.max_tokens is not None else COMPLETION_DEFAULT_MAX_TOKENS
        return self.sampling_params(max_tokens, defaults)


def _named_function(choice: dict) -> bool:
    """Whether `choice["function"]` is {"name": a string} (tool_choice's way to name a tool)."""
    function = choice.get("function")
    return isinstance(function, dict) and set(function) == {"name"} and isinstance(function["name"], str)


def _a_function(tool: Any) -> bool:
    """Whether `tool` is {"type": "function", "function": {"name": a string}} (allowed_tools' tools)."""
    if not isinstance(tool, dict) or set(tool) != {"type", "function"}:
        return False
    return tool["type"] == "function" and _named_function(tool)


# OpenAI's limit on the tools of one request; each is a schema to compile.
MAX_TOOLS = 128


def _tool_name(name: str) -> str:
    if not TOOL_NAME.fullmatch(name):
        raise ValueError(f"must be 1 to 64 ASCII letters, digits, '_' or '-', got {short_value(name)}")
    return name


ToolName = Annotated[str, AfterValidator(_tool_name)]


class FunctionDef(_Strict):
    """A tool's function: `parameters` is the JSON Schema of its arguments (an object)."""

    name: ToolName
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None  # accepted either way: the arguments always follow the schema

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, parameters: dict[str, Any] | None) -> dict[str, Any] | None:
        if parameters is not None and parameters.get("type", "object") != "object":
            raise ValueError(
                f'must be a JSON Schema of an object (the arguments are one): its "type" '
                f'is {short_value(parameters["type"])}, not "object"'
            )
        return parameters


class ToolDef(_Strict):
    type: Literal["function"]
    function: FunctionDef


class CalledFunction(_Strict):
    name: ToolName
    arguments: str  # JSON text of an object, as OpenAI sends it
    # What the openai client's `chat.completions.parse()` adds (the arguments as its strict
    # tool's model): sent back with the message it parsed; `arguments` is what counts.
    parsed_arguments: Any = None

    @field_validator("arguments")
    @classmethod
    def _json_object(cls, arguments: str) -> str:
        try:
            value = json.loads(arguments)
        except (json.JSONDecodeError, RecursionError):
            value = None
        if not isinstance(value, dict):
            raise ValueError(f"must be the JSON text of an object, got {short_value(arguments)}")
        return arguments


class ToolCallMessage(_Strict):
    """One call in an earlier assistant message (the second turn of a conversation)."""

    id: str = Field(min_length=1, max_length=128)
    type: Literal["function"]
    function: CalledFunction
    # The call's place in the delta stream: the openai client's stream accumulator
    # (`chat.completions.stream()`, ChatCompletionStreamState) keeps it in the message it
    # builds, and sends it back with that message; it plays no part in the prompt.
    index: int | None = None


class ChatMessage(_Strict):
    # "developer": OpenAI's newer name for system instructions (the template gets "system").
    role: Literal["developer", "system", "user", "assistant", "tool"]
    # A string, or OpenAI's list of text parts [{"type": "text", "text": ...}] (joined here);
    # null only for an assistant message that makes tool calls.
    content: Any = None
    name: str | None = None
    tool_calls: list[ToolCallMessage] | None = None  # role assistant
    tool_call_id: str | None = None  # role tool: the call this answers
    # Fields of an assistant message OpenAI answers with, sent back as they came
    # (`message.model_dump()`): accepted when null, or for a refusal its text (as content).
    refusal: str | None = None
    annotations: list[Any] | None = None
    audio: None = None
    function_call: None = None
    # What `chat.completions.parse()` adds: the content as the response_format's model, sent
    # back with the message (`messages.append(completion.choices[0].message)`); ignored.
    parsed: Any = None

    @model_validator(mode="after")
    def _fields_of_the_role(self) -> ChatMessage:
        if (self.refusal is not None or self.annotations or self.parsed is not None) and self.role != "assistant":
            raise ValueError(f"refusal, annotations and parsed belong to assistant messages, not to role {self.role!r}")
        if self.content is None and self.refusal is not None:
            self.content = self.refusal  # (what the model said, for the template)
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError("content is required (it may be null only in an assistant message with tool_calls)")
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError(f"tool_calls belong to assistant messages, not to role {self.role!r}")
        if (self.tool_call_id is not None) != (self.role == "tool"):
            raise ValueError(
                "a tool message needs tool_call_id (the id of the call it answers), and only a tool message has one"
            )
        return self

    @field_validator("content")
    @classmethod
    def _text_content(cls, content: Any) -> str | None:
        if content is None or isinstance(content, str):
            return content
        if isinstance(content, list) and all(
            isinstance(p, dict) and set(p) == {"type", "text"} and p["type"] == "text" and isinstance(p["text"], str)
            for p in content
        ):
            return "".join(p["text"] for p in content)
        for i, p in enumerate(content if isinstance(content, list) else []):
            if isinstance(p, dict) and p.get("type") == "text" and set(p) != {"type", "text"}:
                extra = sorted(set(p) - {"type", "text"})
                raise ValueError(
                    f'part [{i}]: a text part is {{"type": "text", "text": string}}; '
                    f"{short_value(extra) if extra else 'its text'} {'is not known' if extra else 'is missing'}"
                )
        raise ValueError(
            'must be a string or a list of {"type": "text", "text": string} parts '
            "(images, audio and files are not supported)"
        )


class ChatCompletionRequest(_SamplingFields):
    """POST /v1/chat/completions."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: Any = None
    top_logprobs: Any = None
    tools: list[ToolDef] | None = Field(None, max_length=MAX_TOOLS)
    # "none", "auto", "required" or {"type": "function", "function": {"name": ...}}
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    functions: Any = None
    function_call: Any = None
    modalities: Any = None
    audio: Any = None
    prediction: Any = None
    reasoning_effort: Any = None
    web_search_options: Any = None
    verbosity: Any = None
    moderation: Any = None
    prompt_cache_retention: Any = None
    prompt_cache_options: Any = None
    frequency_penalty: Any = None
    presence_penalty: Any = None
    logit_bias: Any = None
    service_tier: Any = None
    store: Any = None
    # OpenAI's replacements for `user` (an end user's id for abuse detection; a key that
    # groups requests for its prompt cache): like `user`, recorded nowhere, change nothing
    # (the radix cache shares any common prefix, keyed or not)
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None

    _unsupported = _neutral_only(_UNSUPPORTED_CHAT)

    @field_validator("max_completion_tokens")
    @classmethod
    def _one_length_limit(cls, limit: int | None, info: ValidationInfo) -> int | None:
        if limit is not None and info.data.get("max_tokens") is not None:
            raise ValueError("give max_tokens or max_completion_tokens, not both")
        return limit

    @field_validator("tool_choice")
    @classmethod
    def _tool_choice(cls, choice: Any) -> Any:
        if choice is None or choice in ("none", "auto", "required"):
            return choice
        if (
            isinstance(choice, dict)
            and set(choice) == {"type", "function"}
            and choice["type"] == "function"
            and _named_function(choice)
        ):
            return choice
        allowed = choice.get("allowed_tools") if isinstance(choice, dict) else None
        if (
            isinstance(choice, dict)
            and set(choice) == {"type", "allowed_tools"}
            and choice["type"] == "allowed_tools"
            and isinstance(allowed, dict)
            and set(allowed) == {"mode", "tools"}
            and allowed["mode"] in ("auto", "required")
            and isinstance(allowed["tools"], list)
            and allowed["tools"]
            and all(_a_function(t) for t in allowed["tools"])
        ):
            return choice
        raise ValueError(
            'must be "none", "auto", "required", {"type": "function", "function": {"name": '
            'NAME}} or {"type": "allowed_tools", "allowed_tools": {"mode": "auto" or "required", '
            f'"tools": [{{"type": "function", "function": {{"name": NAME}}}}, ...]}}}}, got {short_value(choice)}'
        )

    def to_sampling_params(self, defaults: dict[str, Any] | None = None) -> SamplingParams:
        params = self.sampling_params(self.max_completion_tokens or self.max_tokens, defaults)
        constraint = self.tool_constraint()
        if constraint is None:
            return params
        d = params.to_dict()
        given = params.constraint()
        if given is not None:
            # OpenAI's response_format beside tools: the answer is a tool call or a message in
            # that format (the tag's content_schema; under "required" or a named tool, calls only).
            if given[0] != "json_schema":
                raise RequestError(
                    f"tools: a request with tools cannot also give {given[0]} (a JSON Schema, as "
                    "response_format or json_schema, can: the answer is then calls or that message)",
                    param="tools",
                )
            del d["json_schema"]
            if constraint.value["at_least_one"]:
                # Under "required" or a named tool the answer is calls only (text after a call
                # would have to be in the format): no content_schema, so xgrammar and
                # llguidance, which read none, serve it too.
                constraint = calls_only(constraint)
            else:
                constraint.value["content_schema"] = json.loads(given[1])
        try:
            return SamplingParams.from_dict({**d, constraint.kind: constraint.value})
        except (TypeError, ValueError) as e:
            raise RequestError(f"tools: {e}", param="tools") from e

    # ------------------------------------------------------------------ tools
    def function_tools(self) -> list[FunctionTool]:
        return [FunctionTool(t.function.name, arguments_schema(t.function.parameters)) for t in self.tools or []]

    def tool_choice_value(self) -> ToolChoice:
        """tool_choice as function_call's ToolChoice; OpenAI's default is "auto" with tools."""
        choice = self.tool_choice
        if isinstance(choice, dict) and choice["type"] == "allowed_tools":
            allowed = choice["allowed_tools"]
            return ToolChoice(allowed["mode"], allowed=tuple(t["function"]["name"] for t in allowed["tools"]))
        if isinstance(choice, dict):
            return ToolChoice("function", choice["function"]["name"])
        return ToolChoice(choice or ("auto" if self.tools else "none"))

    def tool_constraint(self) -> ToolConstraint | None:
        """The constraint the tools add (None without tools or with tool_choice "none").

        Checks what one field cannot: tool_choice and parallel_tool_calls need tools (as in
        OpenAI's API), tool names are distinct, a named tool_choice is one of the tools, a
        tool message answers a call of an earlier assistant message."""
        if not self.tools:
            for name in ("tool_choice", "parallel_tool_calls"):
                if getattr(self, name) is not None:
                    raise RequestError(f"{name}: only allowed when tools are given", param=name)
        names = [t.function.name for t in self.tools or []]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise RequestError(
                    f"tools[{i}].function.name: the name {name!r} is given twice", param=f"tools[{i}].function.name"
                )
        choice = self.tool_choice_value()
        if choice.mode == "function" and choice.name not in names:
            raise RequestError(
                f"tool_choice: the function {short_value(choice.name)} is not in tools ({short_value(names)})",
                param="tool_choice",
            )
        for i, name in enumerate(choice.allowed or ()):
            if name not in names:
                field = f"tool_choice.allowed_tools.tools[{i}].function.name"
                raise RequestError(
                    f"{field}: the function {short_value(name)} is not in tools ({short_value(names)})", param=field
                )
        called: set[str] = set()
        waiting: dict[str, int] = {}  # call id -> its assistant message, while no tool message answered it
        for i, m in enumerate(self.messages):
            if waiting and m.role != "tool":
                _unanswered(waiting, f"before messages[{i}]")
            called.update(c.id for c in m.tool_calls or [])
            waiting.update((c.id, i) for c in m.tool_calls or [])
            if m.role == "tool":
                if m.tool_call_id not in called:
                    raise RequestError(
                        f"messages[{i}].tool_call_id: {short_value(m.tool_call_id)} is the id of no "
                        "tool call of an earlier assistant message",
                        param=f"messages[{i}].tool_call_id",
                    )
                waiting.pop(m.tool_call_id, None)
        if waiting:
            _unanswered(waiting, "at the end of messages")
        return tool_constraint(self.function_tools(), choice, self.parallel_tool_calls is not False)

    def tool_dicts(self) -> list[dict[str, Any]] | None:
        """The tools as the chat template lists them (OpenAI's shape, unset fields left out);
        none under tool_choice "none", which asks for a message (as SGLang's template call
        does: a model shown tools writes call markup, as plain text, all the same)."""
        if not self.tools or self.tool_choice == "none":
            return None
        return [t.model_dump(exclude_none=True) for t in self.tools]

    def message_dicts(self) -> list[dict[str, Any]]:
        """The messages as the chat template takes them ({"role", "content"}, plus
        "tool_calls" in assistant messages that made calls, "tool_call_id" in tool results)."""
        out = []
        for m in self.messages:
            d: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role, "content": m.content}
            if m.tool_calls:
                d["tool_calls"] = [
                    c.model_dump(exclude={"index": True, "function": {"parsed_arguments"}}) for c in m.tool_calls
                ]
            if m.tool_call_id is not None:
                d["tool_call_id"] = m.tool_call_id
            out.append(d)
        return out


def _unanswered(waiting: dict[str, int], where: str) -> None:
    """Refuse a chat whose assistant tool calls are not each answered by a tool message right
    after them (OpenAI refuses it: a stranger's agent sent one result for two calls)."""
    first = min(waiting.values())
    ids = [call for call, at in waiting.items() if at == first]
    raise RequestError(
        f"messages[{first}].tool_calls: no tool message answers the call(s) {short_value(ids)} {where} "
        "(each call's result is a tool message right after its assistant message)",
        param=f"messages[{first}].tool_calls",
    )


# SGLang's sampling parameters minisglang does not implement, accepted at a neutral value
# (SGLang's own client, RuntimeEndpoint, sends several on every request: a stranger's find);
# any other value is refused by name. A null anywhere in sampling_params means "the default".
_SGLANG_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "n": (1,),
    "min_p": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "presence_penalty": (0, 0.0),
    "repetition_penalty": (1, 1.0),
    "min_new_tokens": (0,),
    "skip_special_tokens": (True,),
    "spaces_between_special_tokens": (True,),
    "no_stop_trim": (False,),
    "stop_token_ids": ([],),
    "stop_regex": ([],),
    "logit_bias": ({},),
    "custom_params": ({},),
}
_SGLANG_ALIASES = {"sampling_seed": "seed"}  # SGLang's newer name for the seed
_UNSUPPORTED_GENERATE = {
    "return_logprob": (None, False),
    "logprob_start_len": (None, -1),
    "top_logprobs_num": (None, 0),
    "return_text_in_logprobs": (None, False),
    "input_ids": (None,),
}


class GenerateRequest(_Strict):
    """POST /generate (SGLang's native API): the Engine's own sampling-params dict."""

    text: str
    sampling_params: dict[str, Any] | None = None
    stream: bool = False
    # SGLang's fields minisglang does not implement, refused unless neutral (_UNSUPPORTED_GENERATE).
    return_logprob: Any = None
    logprob_start_len: Any = None
    top_logprobs_num: Any = None
    return_text_in_logprobs: Any = None
    input_ids: Any = None

    _unsupported = _neutral_only(_UNSUPPORTED_GENERATE)

    @field_validator("text", mode="before")
    @classmethod
    def _one_text(cls, value: Any) -> Any:
        if isinstance(value, list):  # (pydantic would say only "must be a string")
            raise ValueError("a list of prompts (a batch) is not supported here: send one request per prompt")
        return value

    def given_sampling_params(self) -> dict[str, Any]:
        """The client's sampling_params without nulls (a default), SGLang's aliases read as
        ours, and SGLang's unimplemented parameters dropped where neutral (refused if not)."""
        given = {k: v for k, v in (self.sampling_params or {}).items() if v is not None}
        for alias, name in _SGLANG_ALIASES.items():
            if alias in given:
                if name in given:
                    raise RequestError(
                        f"sampling_params.{alias}: the same parameter as sampling_params.{name}: send one",
                        param=f"sampling_params.{alias}",
                    )
                given[name] = given.pop(alias)
        for key, neutral in _SGLANG_NEUTRAL.items():
            why = _not_neutral(given.pop(key), neutral) if key in given else None
            if why is not None:
                raise RequestError(f"sampling_params.{key}: {why}", param=f"sampling_params.{key}")
        return given

    def to_sampling_params(self, defaults: dict[str, Any] | None = None) -> SamplingParams:
        given = self.given_sampling_params()
        # The keys are the client's: named here shortened (SamplingParams.from_dict quotes them whole).
        known = {f.name for f in dataclasses.fields(SamplingParams)}
        unknown = [k for k in given if k not in known]
        if unknown:
            raise RequestError(
                f"sampling_params: unknown sampling parameter(s) {short_value(unknown)}; known: {sorted(known)}",
                param="sampling_params",
            )
        try:
            params = SamplingParams.from_dict(given, defaults)
        except (TypeError, ValueError) as e:  # (the number and size of stop strings included: core.py)
            field = engine_field(e)
            if field in known:
                raise RequestError(f"sampling_params.{e}", param=f"sampling_params.{field}") from e
            raise RequestError(f"sampling_params: {e}", param="sampling_params") from e
        return params


# ---------------------------------------------------------------------- errors -> sentences
_M = TypeVar("_M", bound=BaseModel)

_TYPE_WORDS = {
    "int_type": "an integer",
    "int_from_float": "an integer",
    "int_parsing": "an integer",
    "bool_type": "true or false",
    "string_type": "a string",
    "float_type": "a number",
    "list_type": "a list",
    "dict_type": "a JSON object",
    "model_type": "a JSON object",
    "model_attributes_type": "a JSON object",
}


def _field_path(loc: tuple) -> str:
    """('messages', 0, 'role') -> 'messages[0].role'; union-member tags ('str', ...) are dropped.
    A key is the client's (an unknown field's name): a long one is shortened."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "[" in part or part in ("str", "int", "float", "bool", "list", "dict") or "-" in part:
            continue  # pydantic names the union member it tried ('list[ContentPart]', 'function-after[...]')
        else:
            part = shown_numeral(part)
            out += f".{part}" if out else part
    return out


# A body may hold thousands of wrong fields; the message names this many (and counts the rest).
MAX_FIELDS_NAMED = 5


def _sentence(err: Mapping[str, Any]) -> str:
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind in _TYPE_WORDS:
        return f"must be {_TYPE_WORDS[kind]}, got {short_value(err.get('input'))}"
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a known field"
    if kind == "finite_number":
        return "must be a finite number"
    if kind == "none_required":
        return f"not supported by minisglang (leave it out or send null), got {short_value(err.get('input'))}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}, got {short_value(err.get('input'))}"
    bounds = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
    if kind in bounds:
        bound = next(iter(ctx.values()))
        return f"must be {bounds[kind]} {bound}, got {short_value(err.get('input'))}"
    if kind == "too_short":
        return f"must have at least {ctx.get('min_length')} item(s)"
    if kind in ("too_long", "string_too_long"):
        return f"must have at most {ctx.get('max_length')} item(s)/characters"
    msg = str(err.get("msg", kind))
    return msg.removeprefix("Value error, ")


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json.loads' object hook: a key given twice is an error, not "the last one wins"."""
    twice = repeated_key(pairs)
    if twice is not None:
        raise RequestError(f"the key {short_value(twice)} appears twice in one JSON object; give each key once")
    return dict(pairs)


# pydantic's JSON parser (jiter) refuses a body nested deeper than this (arrays and objects,
# the body's own object included; an empty innermost one may go one deeper): test_server_protocol
# checks the number.
MAX_BODY_NESTING = 200


def _json_error(body: bytes, error: str) -> str:
    """The parser's complaint, with the likely cause where it reads obscurely. Two are
    limits of ours, not broken JSON: nesting and a number's size."""
    if body.startswith(b"\xef\xbb\xbf"):
        return "the request body starts with a byte-order mark (BOM); send plain UTF-8 JSON"
    where = re.search(r" at line \d+ column \d+$", error)
    at = where.group() if where else ""
    if "recursion limit" in error:
        return (
            f"the request body is nested too deeply: more than {MAX_BODY_NESTING} levels of arrays and "
            f"objects{at} (valid JSON, but past the parser's limit)"
        )
    if "number out of range" in error:
        number = _numeral_at(body, at)
        return (
            f"the request body holds a number out of range{at}{f': {number}' if number else ''} "
            f"(an integer of at most {sys.get_int_max_str_digits()} digits is read)"
        )
    hint = ""
    if "hex escape" in error or "surrogate" in error:
        hint = " (a \\uD800-\\uDFFF escape must be half of a surrogate pair: a lone one is not text)"
    return f"the request body is not valid JSON: {error}{hint}"


def _numeral_at(body: bytes, at: str) -> str | None:
    """The numeral around the parser's " at line L column C" in `body`, shortened; None if none."""
    m = re.search(r"line (\d+) column (\d+)", at)
    if m is None:
        return None
    lines = body.split(b"\n")
    line, column = int(m.group(1)) - 1, int(m.group(2)) - 1
    if line >= len(lines):
        return None
    text = lines[line]
    start = end = min(column, len(text))
    while start > 0 and text[start - 1 : start] in b"-+.eE0123456789":
        start -= 1
    while end < len(text) and text[end : end + 1] in b"-+.eE0123456789":
        end += 1
    numeral = text[start:end].decode("ascii", "replace")
    if not numeral:
        return None
    return numeral if len(numeral) <= 40 else f"{numeral[:20]}... ({len(numeral)} characters)"


def _refuse_non_finite(text: str) -> float:
    """json.loads' parse_float (and parse_constant): a number that reads as infinity (1e999),
    or NaN/Infinity (not JSON at all), is an error naming it; pydantic takes them as floats."""
    value = float(text)
    if underflows(text, value):  # a bound that would silently become 0 (`minimum: 1e-400` allowing 0)
        raise RequestError(
            f"the request body holds the number {shown_numeral(text)}, which is below the smallest "
            f"double ({5e-324}) and reads as 0; write 0 or a larger number"
        )
    if not math.isfinite(value):
        shown = shown_numeral(text)
        if text in ("NaN", "Infinity", "-Infinity"):
            raise RequestError(f"the request body holds {text}, which is not JSON (JSON numbers are finite)")
        raise RequestError(
            f"the request body holds the number {shown}, which is out of range: beyond the largest "
            f"double ({sys.float_info.max:.17g}) it reads as infinity"
        )
    return value


def _non_finite_field(parsed: BaseModel) -> str | None:
    """The first field of a parsed body that holds a non-finite number, at any depth."""

    def holds(value: Any) -> bool:
        if isinstance(value, float):
            return not math.isfinite(value)
        if isinstance(value, BaseModel):
            return any(holds(getattr(value, k)) for k in type(value).model_fields)
        if isinstance(value, dict):
            return any(holds(v) for v in value.values())
        return isinstance(value, list) and any(holds(v) for v in value)

    return next((k for k in type(parsed).model_fields if holds(getattr(parsed, k))), None)


def parse(model_cls: type[_M], body: bytes) -> _M:
    """Validate one JSON body; RequestError with one sentence per field on any problem.

    Besides the model's own checks: a key given twice in any object is refused (parsers
    disagree on which copy counts, so a proxy and this server could read different requests).
    """
    try:
        parsed = model_cls.model_validate_json(body)
        # Valid JSON by now: only a key given twice or a non-finite number raises.
        try:
            json.loads(
                body,
                object_pairs_hook=_refuse_duplicate_keys,
                parse_float=_refuse_non_finite,
                parse_constant=_refuse_non_finite,
            )
        except RequestError as e:
            field = _non_finite_field(parsed) if "out of range" in str(e) or "not JSON" in str(e) else None
            if field is None:
                raise
            raise RequestError(f"{field}: {e}", param=field) from None
        return parsed
    except ValidationError as e:
        errors = e.errors(include_url=False)
        if errors and errors[0]["type"] == "json_invalid":
            raise RequestError(_json_error(body, str(errors[0].get("ctx", {}).get("error")))) from None
        if errors and errors[0]["loc"] == () and errors[0]["type"] in ("model_type", "model_attributes_type"):
            raise RequestError("the request body must be a JSON object") from None
        by_field: dict[str, str] = {}
        for err in errors:
            path = _field_path(err["loc"])
            by_field.setdefault(path, _sentence(err))  # the first (most specific) reason per field
        first = next(iter(by_field))
        named = "; ".join(f"{p}: {s}" if p else s for p, s in list(by_field.items())[:MAX_FIELDS_NAMED])
        more = len(by_field) - MAX_FIELDS_NAMED
        raise RequestError(named + (f"; and {more} more field(s)" if more > 0 else ""), param=first or None) from None
    except RequestError:
        raise
