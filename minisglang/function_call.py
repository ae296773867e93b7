"""OpenAI tools <-> structural tags, and tool calls parsed back out of the generated text.

The chat format (the bundled tokenizer's chat template) writes a call to tool `f` as

    <tool_call>{"name": "f", "arguments": {...}}</tool_call>

so a call is a structural tag (see constrained/structural_tag.py): the trigger `<tool_call>`,
the begin `<tool_call>{"name": "f", "arguments": `, a JSON value under f's `parameters`
schema, the end `}</tool_call>`. `tool_constraint` turns a request's `tools`, `tool_choice`
and `parallel_tool_calls` into that constraint (the idea of SGLang's
`FunctionCallParser.get_structure_constraint`, which also says which kind it returns):

    tool_choice "none"      no constraint; the output is content, never a call
    tool_choice "auto"      one structure per tool; free text until the trigger
    tool_choice "required"  the same with at_least_one: no end of output before a call
    a named function        only that tool, at_least_one and stop_after_first
    allowed_tools           "auto" or "required" over the allowed tools only

For a named function SGLang may instead use a JSON-schema constraint with the begin forced;
we use the structural tag with one structure, at_least_one and stop_after_first, because it
is the same language (the begin, arguments under the schema, the end, then only EOS) built
by the one mechanism the other choices use. `parallel_tool_calls: false` adds
stop_after_first (one call, then only EOS).

`ToolCallParser` reads the output back, as text deltas arrive: free text becomes content
deltas (a possible start of a call is held back until it is known not to be one, so a
partial trigger is never sent as content); a call is held back too, until its arguments
are whole, and then becomes one OpenAI tool-call delta (index, id, type, name, arguments).
The parser reads exactly the form the constraint writes: a call starts at a complete begin
of a known tool; its arguments run until their JSON value closes; then `}</tool_call>` is
expected (text that departs from it is content again). `parse_tool_calls(text)` is the same
parser fed all the text at once, so a stream's deltas always reassemble into the
non-streamed parse.

A call the output ends inside (max_tokens, a stop string, an abort can end it anywhere) is
not a call: its arguments are not JSON, and `json.loads` in the client would fail. So it is
given back as content, its text as generated, and `cut` holds that text (the server's finish_reason
is then "length" or "stop", never "tool_calls"). That is why a call is held until whole: a
stream cannot take back arguments it has sent. Content rather than nothing, as vLLM's and
SGLang's parsers do with a call that does not parse: the client sees all that was generated.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .constrained.json_pointer import resolve_pointer
from .constrained.structural_tag_format import (
    JSONSchemaFormat,
    StructuralTagFormat,
    TagFormat,
    TagsWithSeparatorFormat,
)

TRIGGER = "<tool_call>"
CALL_END = "}</tool_call>"  # closes the {"name": ..., "arguments": ...} object, then the tag
# OpenAI's rule for function names; it also keeps a name from containing the trigger.
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def call_begin(name: str) -> str:
    """The text that opens a call to `name`, up to its arguments."""
    return TRIGGER + '{"name": ' + json.dumps(name) + ', "arguments": '


def format_call(name: str, arguments: str) -> str:
    """A whole call as the chat format writes it (`arguments` is JSON text)."""
    return call_begin(name) + arguments + CALL_END


def new_call_id() -> str:
    """An id for one tool call, in OpenAI's style."""
    return "call_" + secrets.token_hex(12)


# ---------------------------------------------------------------------- tools -> constraint
@dataclass(frozen=True)
class FunctionTool:
    """One tool of a request: its name and the JSON Schema its arguments follow."""

    name: str
    parameters: dict  # an object schema (see arguments_schema)

    def __post_init__(self) -> None:
        if not TOOL_NAME.fullmatch(self.name):
            raise ValueError(f"a tool name must match [A-Za-z0-9_-]{{1,64}}, got {self.name!r}")


def arguments_schema(parameters: dict | None) -> dict:
    """OpenAI's `parameters` as the schema of the arguments: always a JSON object.

    No parameters means a function without arguments (`{}`); a schema without "type" gets
    "type": "object", because OpenAI's arguments are always an object (adding it
    intersects the schema with "is an object", it drops nothing else). Except a root
    `$ref` to an object schema ({"$ref": "#/$defs/M", "$defs": ...}, as zod-to-json-schema
    and others write a model): it is an object already, and the xgrammar backend refuses a
    `$ref` beside another keyword, so the added "type" got the tool refused."""
    if parameters is None:
        return {"type": "object", "properties": {}, "additionalProperties": False}
    if "type" not in parameters and not _refers_to_an_object(parameters):
        return {**parameters, "type": "object"}
    return parameters


def _refers_to_an_object(schema: dict) -> bool:
    """Whether `schema` is a `$ref` (a "#/..." pointer into itself, through at most a few
    more such refs) to a schema of "type": "object"."""
    node: object = schema
    for _ in range(8):  # (a loop of refs is the compiler's to refuse)
        ref = node.get("$ref") if isinstance(node, dict) else None
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return False
        node = resolve_pointer(schema, ref)
        if isinstance(node, dict) and node.get("type") == "object":
            return True
    return False


@dataclass(frozen=True)
class ToolChoice:
    """OpenAI's tool_choice: "none", "auto", "required", or one named function; or
    {"type": "allowed_tools", ...}: "auto" or "required" among `allowed` only (the prompt
    still lists every tool, which is what OpenAI's form is for: a prefix the cache keeps)."""

    mode: Literal["none", "auto", "required", "function"]
    name: str | None = None  # the function's name when mode is "function"
    allowed: tuple[str, ...] | None = None  # the tools it may call (allowed_tools); None: all


@dataclass(frozen=True)
class ToolConstraint:
    """The constraint a tool request adds to the sampling params: its kind and value
    (always a structural tag here; the kind is said, as SGLang's parser does)."""

    kind: Literal["structural_tag"]
    value: dict


def tool_constraint(
    tools: list[FunctionTool], choice: ToolChoice, parallel_tool_calls: bool = True
) -> ToolConstraint | None:
    """The structural tag for `tools` under `choice` (None for "none": no constraint)."""
    if choice.mode == "none" or not tools:
        return None
    if choice.mode == "function":
        chosen = [t for t in tools if t.name == choice.name]
        if not chosen:
            raise ValueError(f"tool_choice names the function {choice.name!r}, which is not in tools")
        tools = chosen
    if choice.allowed is not None:
        missing = [n for n in choice.allowed if n not in {t.name for t in tools}]
        if missing:
            raise ValueError(f"tool_choice allows the function {missing[0]!r}, which is not in tools")
        tools = [t for t in tools if t.name in choice.allowed]
    structures = [{"begin": call_begin(t.name), "schema": t.parameters, "end": CALL_END} for t in tools]
    return ToolConstraint(
        "structural_tag",
        {
            "structures": structures,
            "triggers": [TRIGGER],
            "at_least_one": choice.mode in ("required", "function"),
            "stop_after_first": choice.mode == "function" or not parallel_tool_calls,
        },
    )


def calls_only(constraint: ToolConstraint) -> ToolConstraint:
    """`constraint` (a tag with at_least_one) allowing tool calls and nothing else: one call or
    several back to back, no free text between or after them. What "required" allows beside
    a response_format: its text would have to be in the format, which the libraries' tags
    cannot carry (no content_schema), so there is none. A v2 tag (tags_with_separator, an
    empty separator), which every backend that compiles tags reads."""
    value = constraint.value
    if value["stop_after_first"]:
        return constraint  # exactly one call already
    tags = tuple(TagFormat(s["begin"], JSONSchemaFormat(s["schema"]), s["end"]) for s in value["structures"])
    spec = StructuralTagFormat(TagsWithSeparatorFormat(tags, "", at_least_one=True))
    return ToolConstraint("structural_tag", spec.to_dict())


# ---------------------------------------------------------------------- text -> calls
@dataclass
class ToolCall:
    """One parsed call; `arguments` is the JSON text as generated (OpenAI sends a string)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class CallDelta:
    """One OpenAI tool-call delta: `id` and `name` on a call's first delta only (the parser
    sends each call whole, in one delta; `openai_deltas` also joins a call sent in pieces)."""

    index: int
    arguments: str
    id: str | None = None
    name: str | None = None

    def to_openai(self) -> dict:
        out: dict = {"index": self.index}
        function: dict = {"arguments": self.arguments}
        if self.name is not None:
            out.update(id=self.id, type="function")
            function = {"name": self.name, **function}
        out["function"] = function
        return out


Event = str | CallDelta  # a content delta, or a tool-call delta


@dataclass
class _JsonScan:
    """Where a JSON value's text stands: string/escape state and bracket depth."""

    depth: int = 0
    opened: bool = False  # an opening bracket was seen
    in_string: bool = False
    escaped: bool = False

    def step(self, ch: str) -> bool:
        """Advance over `ch`; True when the value just closed."""
        # BEGIN SOLUTION task6_2
        if self.in_string:
            if self.escaped:
                self.escaped = False
            elif ch == "\\":
                self.escaped = True
            elif ch == '"':
                self.in_string = False
        elif ch == '"':
            self.in_string = True
        elif ch in "{[":
            self.depth += 1
            self.opened = True
        elif ch in "}]":
            self.depth -= 1
            return self.opened and self.depth <= 0
        return False
        # END SOLUTION


class ToolCallParser:
    """Streaming parser: `feed(delta)` and `finish()` return events in output order.

    `content` and `calls` accumulate what was parsed so far; `calls` holds whole calls only."""

    def __init__(self, tool_names: list[str], new_id: Callable[[], str] = new_call_id):
        for name in tool_names:
            FunctionTool(name, {})  # the name check: a name never contains the trigger
        self.begins = {call_begin(n): n for n in tool_names}
        self.new_id = new_id
        self.content = ""
        self.calls: list[ToolCall] = []
        self._mode: Literal["text", "arguments", "end"] = "text"
        self._held = ""  # text whose meaning the next deltas decide
        self._scan = _JsonScan()
        self._begin, self._arguments_so_far = "", ""  # the open call (mode "arguments"): held until whole
        self.cut = ""  # set by finish(): the text of a call the output ended inside (now content)

    def feed(self, text: str) -> list[Event]:
        events: list[Event] = []
        text, self._held = self._held + text, ""
        while text:
            if self._mode == "text":
                text = self._text(text, events)
            elif self._mode == "arguments":
                text = self._arguments(text, events)
            else:
                text = self._end(text, events)
        return events

    def finish(self) -> list[Event]:
        """The end of the output: held text is content, and so is a call cut short (its
        opening, or its arguments before their JSON value closed), whose text `cut` keeps. A
        call whose arguments are whole stays a call even if its end tag was cut (that is markup)."""
        events: list[Event] = []
        if self._mode == "text" and self._held:
            if self._held.startswith(TRIGGER):  # a call's opening cut short
                self.cut = self._held
            self._say(self._held, events)
        elif self._mode == "arguments":
            self.cut = self._begin + self._arguments_so_far
            self._say(self.cut, events)
        self._held, self._mode = "", "text"
        return events

    # ------------------------------------------------------------------ one mode each
    def _say(self, text: str, events: list[Event]) -> None:
        if text:
            self.content += text
            events.append(text)

    def _text(self, text: str, events: list[Event]) -> str:
        at = text.find(TRIGGER)
        if at < 0:  # hold the longest end of the text that may grow into the trigger
            keep = next((k for k in range(min(len(TRIGGER) - 1, len(text)), 0, -1) if TRIGGER.startswith(text[-k:])), 0)
            self._say(text[: len(text) - keep], events)
            self._held = text[len(text) - keep :]
            return ""
        self._say(text[:at], events)
        rest = text[at:]
        for begin in self.begins:
            if rest.startswith(begin):
                self._mode, self._scan = "arguments", _JsonScan()
                self._begin, self._arguments_so_far = begin, ""
                return rest[len(begin) :]
        if any(begin.startswith(rest) for begin in self.begins):
            self._held = rest  # may still become a call
            return ""
        self._say(rest[:1], events)  # a trigger that starts no call is plain text
        return rest[1:]

    def _arguments(self, text: str, events: list[Event]) -> str:
        for i, ch in enumerate(text):
            if self._scan.step(ch):  # the value closed: the call is whole, and sent as one delta
                arguments, name = self._arguments_so_far + text[: i + 1], self.begins[self._begin]
                self.calls.append(ToolCall(self.new_id(), name, arguments))
                events.append(CallDelta(len(self.calls) - 1, arguments, self.calls[-1].id, name))
                self._mode = "end"
                return text[i + 1 :]
        self._arguments_so_far += text
        return ""

    def _end(self, text: str, events: list[Event]) -> str:
        if text.startswith(CALL_END):
            self._mode = "text"
            return text[len(CALL_END) :]
        if CALL_END.startswith(text):
            self._held = text
            return ""
        self._mode = "text"  # not the end tag: what follows is read as free text again
        return text


def parse_tool_calls(
    text: str, tool_names: list[str], new_id: Callable[[], str] = new_call_id
) -> tuple[str, list[ToolCall]]:
    """A whole output -> (content, calls): the streaming parser fed all of it at once."""
    parser = ToolCallParser(tool_names, new_id)
    parser.feed(text)
    parser.finish()
    return parser.content, parser.calls


def openai_deltas(events: list[Event]) -> list[dict]:
    """Events merged into OpenAI delta dicts, in order: a run of content is one
    {"content"}, a run of one call's deltas one {"tool_calls": [...]} (fragments joined)."""
    out: list[dict] = []
    for e in events:
        last = out[-1] if out else None
        if isinstance(e, str):
            if last is not None and "content" in last:
                last["content"] += e
            else:
                out.append({"content": e})
        elif last is not None and "tool_calls" in last and last["tool_calls"][0]["index"] == e.index:
            last["tool_calls"][0]["function"]["arguments"] += e.arguments
        else:
            out.append({"tool_calls": [e.to_openai()]})
    return out
