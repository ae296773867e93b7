"""OpenAI's Responses objects, made from chat's: `response_shape(chat)` wraps a chat `Shape`
(openai_shapes.py: chat_shape or tool_call_shape, which read the output for tool calls) and
turns what it says into a `response` object.

A chat completion's message becomes a `message` output item with one `output_text` part,
each of its tool calls a `function_call` item; finish_reason "length" makes the response
"incomplete" (reason "max_output_tokens").
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from ..protocol_responses import ResponsesRequest
from .openai_shapes import Shape


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


def response_shape(chat: Shape, body: ResponsesRequest, model_id: str) -> Shape:
    """The Responses shape around the chat shape `chat` of the same output."""
    head = ResponseHead(body, model_id)

    def shape(text: str, meta: dict[str, Any], streaming: bool) -> Any:
        assert not streaming  # (the request refuses stream: true)
        return response_body(head, chat(text, meta, streaming))

    return shape
