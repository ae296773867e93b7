"""OpenAI's response objects: what a finished request's text and meta_info become.

A *shape* is called as `shape(text, meta, streaming)`: with streaming False, once, with
the whole text; with streaming True, once per chunk, returning one event or a list of
them. The chat shapes remember what they sent (the role goes in the first delta only).
A request with `n` choices has one shape per choice, made with its `index`; `one_body`
joins their bodies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..function_call import ToolCallParser, openai_deltas
from ..metrics import ServerMetrics
from ..protocol import ChatCompletionRequest

Shape = Callable[[str, dict[str, Any], bool], Any]


def usage(*metas: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's usage object of the choices of one prompt: the prompt counted once, the
    completions summed. Cached tokens are prompt tokens (the scheduler counts the first
    admission's hit only), so never more than prompt_tokens: of several choices, the fewest
    (the prompt's count is that of the choice that computed it; the others hit its KV)."""
    prompt = metas[0]["prompt_tokens"]
    completion = sum(m["completion_tokens"] for m in metas)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": min(m["cached_tokens"] for m in metas)},
        "completion_tokens_wo_jump_forward": sum(m["completion_tokens_wo_jump_forward"] for m in metas),
    }


def one_body(bodies: list[dict[str, Any]], metas: list[dict[str, Any]]) -> dict[str, Any]:
    """The body of a request with n choices, from each choice's body (`shape`'s, not
    streaming) and last meta_info: the choices in order, their usage summed."""
    if len(bodies) == 1:
        return bodies[0]
    return {**bodies[0], "choices": [c for b in bodies for c in b["choices"]], "usage": usage(*metas)}


def openai_finish_reason(meta: dict[str, Any], made_calls: bool = False) -> str | None:
    """ "stop", "length" or "abort"; "tool_calls" for an output that stopped after making calls."""
    reason = meta["finish_reason"]
    if reason is None:
        return None
    return "tool_calls" if made_calls and reason["type"] == "stop" else str(reason["type"])


def ending(meta: dict[str, Any], reason: str | None) -> dict[str, Any]:
    """A choice's `finish_reason` (`reason`: None until the last chunk) and SGLang's
    `matched_stop`: the stop string or stop token id (EOS) that ended the output; None where
    the grammar ended it, or max_tokens. A constrained answer is whole when its grammar or EOS
    ends it; a client's own stop string can cut it anywhere (finish_reason is "stop" all the
    same), and a string in `matched_stop` is how the client tells."""
    matched = None if reason is None or meta["finish_reason"] is None else meta["finish_reason"].get("matched")
    return {"finish_reason": reason, "matched_stop": matched}


def completion_shape(rid: str, created: int, model_id: str, index: int = 0) -> Shape:
    """/v1/completions: a text_completion (with usage when not streaming), of choice `index`."""

    def shape(text: str, meta: dict[str, Any], streaming: bool) -> dict[str, Any]:
        out = {
            "id": rid,
            "object": "text_completion",
            "created": created,
            "model": model_id,
            "choices": [{"index": index, "text": text, "logprobs": None, **ending(meta, openai_finish_reason(meta))}],
        }
        return out if streaming else {**out, "usage": usage(meta)}

    return shape


def chat_shape(rid: str, created: int, model_id: str, index: int = 0) -> Shape:
    """/v1/chat/completions without tools: a chat.completion, or its chunks' deltas, of choice `index`."""
    sent_role = [False]

    def shape(text: str, meta: dict[str, Any], streaming: bool) -> dict[str, Any]:
        head = {"id": rid, "created": created, "model": model_id}
        if streaming:
            delta: dict[str, Any] = {"content": text} if text else {}
            if not sent_role[0]:  # OpenAI sends the role in the first delta only
                delta, sent_role[0] = {"role": "assistant", "content": text}, True
            return {
                **head,
                "object": "chat.completion.chunk",
                "choices": [
                    {"index": index, "delta": delta, "logprobs": None, **ending(meta, openai_finish_reason(meta))}
                ],
            }
        return {
            **head,
            "object": "chat.completion",
            "choices": [
                {
                    "index": index,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": None,
                    **ending(meta, openai_finish_reason(meta)),
                }
            ],
            "usage": usage(meta),
        }

    return shape


def tool_call_shape(
    rid: str, created: int, model_id: str, body: ChatCompletionRequest, metrics: ServerMetrics, index: int = 0
) -> Shape:
    """The chat `shape` of choice `index` of a request whose output may hold tool calls: the
    output is read by its own ToolCallParser; a stream's event becomes a list of chunks
    (content, then calls), empty until the answer's first delta (which carries the role)."""
    head = {"id": rid, "created": created, "model": model_id}
    parser = ToolCallParser([t.name for t in body.function_tools()])
    sent_role = [False]

    def finished(meta: dict[str, Any]) -> str | None:
        # "tool_calls" only when no call was cut: max_tokens or a stop string may end the
        # output inside one (EOS never does), and the parser gives that one back as content
        reason = openai_finish_reason(meta, made_calls=bool(parser.calls) and not parser.cut)
        if reason is not None:
            metrics.tool_calls.inc(len(parser.calls))
        return reason

    def shape(text: str, meta: dict[str, Any], streaming: bool) -> Any:
        final = meta["finish_reason"] is not None
        events = parser.feed(text) + (parser.finish() if final else [])
        if not streaming:
            calls = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in parser.calls
            ]
            message: dict[str, Any] = {"role": "assistant", "content": parser.content or (None if calls else "")}
            if calls:
                message["tool_calls"] = calls
            return {
                **head,
                "object": "chat.completion",
                "usage": usage(meta),
                "choices": [{"index": index, "message": message, "logprobs": None, **ending(meta, finished(meta))}],
            }
        deltas = openai_deltas(events)
        if not sent_role[0]:  # OpenAI sends the role in the first delta only
            if not deltas and not final:
                # ... with what the answer begins with: its content, or "content": null and
                # its first call, as the message's content is null when calls come first (a
                # role sent ahead with content "" made a client's stream of calls end with
                # content "", where the same request answered null)
                return []
            first = deltas[0] if deltas else {"content": ""}
            deltas = [{"role": "assistant", "content": first.pop("content", None), **first}, *deltas[1:]]
            sent_role[0] = True
        if final and not deltas:
            deltas = [{}]
        return [
            {
                **head,
                "object": "chat.completion.chunk",
                "choices": [
                    {
                        "index": index,
                        "delta": d,
                        "logprobs": None,
                        **ending(meta, finished(meta) if final and i == len(deltas) - 1 else None),
                    }
                ],
            }
            for i, d in enumerate(deltas)
        ]

    return shape
