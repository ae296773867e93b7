"""OpenAI's Responses objects, made from chat's: `response_shape(chat)` wraps a chat `Shape`
(openai_shapes.py: chat_shape or tool_call_shape, which read the output for tool calls) and
turns what it says into a `response` object, or, streaming, into the Responses events.

A chat completion's message becomes a `message` output item with one `output_text` part,
each of its tool calls a `function_call` item; finish_reason "length" makes the response
"incomplete" (reason "max_output_tokens"). Streaming, a chat chunk's content delta is a
`response.output_text.delta`, a call's first delta opens a `function_call` item and its
arguments' deltas are `response.function_call_arguments.delta`; the stream begins with
response.created and response.in_progress, and ends with each open item closed and
response.completed (or response.incomplete) carrying the whole response.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from ..protocol_responses import ResponsesRequest
from .openai_shapes import Shape, usage


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def responses_usage(chat_usage: dict[str, Any]) -> dict[str, Any]:
    """Chat's usage object in Responses' names."""
    return {
        "input_tokens": chat_usage["prompt_tokens"],
        "input_tokens_details": {
            "cached_tokens": chat_usage["prompt_tokens_details"]["cached_tokens"],
            "cache_write_tokens": 0,
        },
        "output_tokens": chat_usage["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": chat_usage["total_tokens"],
    }


def message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": [part]}


def call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


class ResponseHead:
    """What every state of one response says: its id, creation time, model and settings."""

    def __init__(self, body: ResponsesRequest, model_id: str):
        self.id, self.created_at, self.model, self.echo = new_id("resp"), int(time.time()), model_id, body.echo()

    def response(
        self, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "completed_at": int(time.time()) if status == "completed" else None,
            "error": None,
            "incomplete_details": incomplete,
            "model": self.model,
            "output": output,
            "usage": usage,
            **self.echo,
        }


def finished_status(finish_reason: str | None) -> str:
    return "incomplete" if finish_reason == "length" else "completed"


def response_body(head: ResponseHead, chat_body: dict[str, Any]) -> dict[str, Any]:
    """A chat.completion (one choice) as a response."""
    choice = chat_body["choices"][0]
    message, status = choice["message"], finished_status(choice["finish_reason"])
    calls = message.get("tool_calls") or []
    output = []
    if message["content"] or not calls:
        output.append(message_item(new_id("msg"), message["content"] or "", status))
    for call in calls:
        function = call["function"]
        output.append(call_item(new_id("fc"), call["id"], function["name"], function["arguments"], "completed"))
    return head.response(status, output, responses_usage(chat_body["usage"]))


class ResponseEvents:
    """The Responses events of one streamed response, from its chat chunks (`feed`)."""

    def __init__(self, head: ResponseHead):
        self.head = head
        self.output: list[dict[str, Any]] = []  # the items so far (the open one last)
        self.open: dict[str, Any] | None = None  # the item being written
        self.calls: dict[int, dict[str, Any]] = {}  # chat's call index -> its item
        self.sequence = 0
        self.began = False

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.sequence += 1
        return {"type": kind, "sequence_number": self.sequence - 1, **fields}

    def feed(self, chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if not self.began:
            self.began = True
            out.append(self.event("response.created", response=self.head.response("in_progress", [])))
            out.append(self.event("response.in_progress", response=self.head.response("in_progress", [])))
        for chunk in chunks:
            choice = chunk["choices"][0]
            delta = choice["delta"]
            if delta.get("content"):
                out += self.text(delta["content"])
            for call in delta.get("tool_calls") or []:
                out += self.call(call)
            if choice["finish_reason"] is not None:
                out += self.finish(choice["finish_reason"], chunk)
        return out

    def where(self, item: dict[str, Any]) -> dict[str, Any]:
        return {"item_id": item["id"], "output_index": self.output.index(item)}

    def text(self, delta: str) -> list[dict[str, Any]]:
        out = []
        if self.open is None or self.open["type"] != "message":
            out += self.close()
            self.open = message_item(new_id("msg"), "", "in_progress")
            self.output.append(self.open)
            added = {**self.open, "content": []}
            out.append(self.event("response.output_item.added", item=added, output_index=len(self.output) - 1))
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            out.append(self.event("response.content_part.added", **self.where(self.open), content_index=0, part=part))
        self.open["content"][0]["text"] += delta
        out.append(
            self.event("response.output_text.delta", **self.where(self.open), content_index=0, delta=delta, logprobs=[])
        )
        return out

    def call(self, delta: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        arguments = (delta.get("function") or {}).get("arguments") or ""
        if delta["index"] not in self.calls:
            out += self.close()
            name = delta["function"]["name"]
            self.open = self.calls[delta["index"]] = call_item(new_id("fc"), delta["id"], name, "", "in_progress")
            self.output.append(self.open)
            out.append(
                self.event("response.output_item.added", item=dict(self.open), output_index=len(self.output) - 1)
            )
        item = self.calls[delta["index"]]
        if arguments:
            item["arguments"] += arguments
            out.append(self.event("response.function_call_arguments.delta", **self.where(item), delta=arguments))
        return out

    def close(self, status: str = "completed") -> list[dict[str, Any]]:
        """The events that close the open item (none when none is open)."""
        item, self.open = self.open, None
        if item is None:
            return []
        out = []
        if item["type"] == "message":
            part = item["content"][0]
            out.append(
                self.event(
                    "response.output_text.done", **self.where(item), content_index=0, text=part["text"], logprobs=[]
                )
            )
            out.append(self.event("response.content_part.done", **self.where(item), content_index=0, part=part))
            item["status"] = status
        else:
            out.append(
                self.event(
                    "response.function_call_arguments.done",
                    **self.where(item),
                    name=item["name"],
                    arguments=item["arguments"],
                )
            )
            item["status"] = "completed"
        out.append(self.event("response.output_item.done", item=item, output_index=self.output.index(item)))
        return out

    def finish(self, finish_reason: str, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        status = finished_status(finish_reason)
        out = []
        if not self.output:  # an empty answer is an empty message, as when not streaming
            out += self.text("")[:-1]
        out += self.close(status)
        usage = responses_usage(chunk["usage"]) if chunk.get("usage") else None
        response = self.head.response(status, self.output, usage)
        out.append(self.event(f"response.{status}", response=response))
        return out


def response_shape(chat: Shape, body: ResponsesRequest, model_id: str) -> Shape:
    """The Responses shape around the chat shape `chat` of the same output."""
    head = ResponseHead(body, model_id)
    stream = ResponseEvents(head)

    def shape(text: str, meta: dict[str, Any], streaming: bool) -> Any:
        said = chat(text, meta, streaming)
        if not streaming:
            return response_body(head, said)
        chunks = said if isinstance(said, list) else [said]
        if meta["finish_reason"] is not None and chunks:  # (the chat chunk carries no usage: its meta does)
            chunks[-1] = {**chunks[-1], "usage": usage(meta)}
        return stream.feed(chunks)

    return shape
