"""OpenAI's endpoints: GET /v1/models (and one model), POST /v1/completions and
/v1/chat/completions (stream=true gives server-sent events). Chat also takes `tools`,
`tool_choice` and `parallel_tool_calls`: the calls are a structural tag (function_call.py),
which stage TOOLS_STAGE and later know."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..core import Req, SamplingParams
from ..protocol import ChatCompletionRequest, CompletionRequest, RequestError
from ..stages import STAGE_MODULES
from ..tokenizer import ChatPrompt, PromptTooLong
from .client_threads import parse_body, run_for_client
from .openai_shapes import Shape, chat_shape, completion_shape, tool_call_shape
from .prompts import CONTEXT_LENGTH_EXCEEDED, check_model, choice_reqs, make_req, prompt_too_long
from .state import ServerState, server_state
from .streaming import answer

# Tool calls are structural tags, which the stages before this one do not know.
TOOLS_STAGE = "s6-function-calling"

router = APIRouter()


def stage_serves_tools(tag: str) -> bool:
    """Whether the stage `tag` is TOOLS_STAGE or later (it knows structural tags)."""
    order = list(STAGE_MODULES)
    return TOOLS_STAGE in order and order.index(tag) >= order.index(TOOLS_STAGE)


@router.get("/v1/models", response_model=None)
async def models(request: Request) -> dict[str, Any]:
    return {"object": "list", "data": [server_state(request).model_card]}


@router.get("/v1/models/{name:path}", response_model=None)
async def one_model(request: Request, name: str) -> dict[str, Any]:  # what the openai client's models.retrieve() asks
    state = server_state(request)
    check_model(state, name)
    return state.model_card


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    state = server_state(request)
    body = await parse_body(CompletionRequest, request, state.options)
    check_model(state, body.model)
    req = await run_for_client(request, completion_req, state, body)
    reqs = choice_reqs(state, req, body.n)
    rid, created = f"cmpl-{uuid.uuid4().hex[:12]}", int(time.time())
    shapes = [completion_shape(rid, created, state.model_id, i) for i in range(body.n)]
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    return await answer(state, request, reqs, shapes, body.stream, include_usage, body.grammar_field())


def completion_req(state: ServerState, body: CompletionRequest) -> Req:
    """The completion's `Req` (in the thread pool, its sampling params too: see serve_chat)."""
    params = body.to_sampling_params(state.engine.sampling_defaults)
    return make_req(state, body.prompt, params, "prompt", "max_tokens" if body.max_tokens is not None else None)


@router.post("/v1/chat/completions")
async def chat(request: Request) -> Response:
    state = server_state(request)
    body = await parse_body(ChatCompletionRequest, request, state.options, lambda plain: check_messages(state, plain))
    return await serve_chat(state, request, body)


def same_shape(shape: Shape) -> Shape:
    return shape


async def serve_chat(
    state: ServerState, request: Request, body: ChatCompletionRequest, wrap: Callable[[Shape], Shape] = same_shape
) -> Response:
    """Answer the chat `body`: its prompt, sampling params, constraint and tool calls, each
    choice's output shaped as a chat completion, or by `wrap` of that shape (the Responses
    route's, routes_responses.py)."""
    check_model(state, body.model)
    # (in the thread pool: 128 tools' schemas are written into one structural tag and read
    # back, 0.3-0.6 s for a 3 MB body; on the event loop 8 such requests, each refused in the
    # end, held every client's stream for 1.3-2.9 s)
    params = await run_for_client(request, body.to_sampling_params, state.engine.sampling_defaults)
    calls_possible = body.tool_constraint() is not None
    if calls_possible and not stage_serves_tools(state.engine.stage_tag):
        raise RequestError(
            f"tools: tool calls need stage {TOOLS_STAGE} or later; this server runs stage {state.engine.stage_tag}",
            param="tools",
        )
    req = await run_for_client(request, render_and_tokenize, state, body, params)
    reqs = choice_reqs(state, req, body.n)
    rid, created = f"chatcmpl-{uuid.uuid4().hex[:12]}", int(time.time())
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    if calls_possible:  # read each choice's output for calls, on its own
        shapes = [wrap(tool_call_shape(rid, created, state.model_id, body, state.metrics, i)) for i in range(body.n)]
        try:
            return await answer(state, request, reqs, shapes, body.stream, include_usage)
        except RequestError as e:
            raise tool_refusal(e, body) from None
    shapes = [wrap(chat_shape(rid, created, state.model_id, i)) for i in range(body.n)]
    return await answer(state, request, reqs, shapes, body.stream, include_usage, body.grammar_field())


def check_messages(state: ServerState, chat: object) -> None:
    """Every message takes at least one token of the prompt (its role's markers), so a chat of
    more messages than the context holds is refused unrendered, and a large body unparsed by
    pydantic (`parse_body`'s precheck): 20,000 messages of two characters (0.9 MB) were parsed
    (0.17 s, the GIL held throughout) and rendered (~0.2 s) before the length check refused
    them, and four at once from one client held another client's 8-token answer up to 7.7 s."""
    messages = chat.get("messages") if isinstance(chat, dict) else chat
    if isinstance(messages, list) and len(messages) > state.max_context:
        raise RequestError(
            f"messages: {len(messages):,} messages cannot fit the model's context of "
            f"{state.max_context} tokens (each takes at least one)",
            param="messages",
            code=CONTEXT_LENGTH_EXCEEDED,
        )


def render(state: ServerState, body: ChatCompletionRequest, tools: list[dict[str, Any]] | None) -> ChatPrompt:
    """The chat's prompt through the model's template, with `tools` described in it."""
    check_messages(state, body.messages)  # (a small body's, parsed already)
    try:  # special tokens come from the template only, never from a message's text
        return state.engine.tokenizer.encode_chat(body.message_dicts(), tools=tools, max_bytes=state.max_prompt_bytes)
    except PromptTooLong:  # (make_req's check, made on the text before it is tokenized)
        raise prompt_too_long(state, "messages") from None
    except ValueError as e:  # a lone surrogate, or special-token text the template changed
        raise RequestError(f"messages: {e}", param="messages") from e
    except Exception as e:  # the template's own raise_exception (e.g. roles out of order)
        raise RequestError(f"messages: the chat template refused them: {e}", param="messages") from e


def render_and_tokenize(state: ServerState, body: ChatCompletionRequest, params: SamplingParams) -> Req:
    """The chat's `Req` (in the thread pool); a prompt too long for the context blames the
    tools when the messages alone would fit."""
    tools = body.tool_dicts()
    length_field = next((k for k in ("max_completion_tokens", "max_tokens") if getattr(body, k) is not None), None)
    try:
        return make_req(state, render(state, body, tools), params, "messages", length_field, fill_room=True)
    except RequestError as e:
        if not tools or e.param != "messages" or "context" not in str(e):
            raise
        # The template writes each tool's description into the prompt: when the messages
        # alone fit, the tools are what does not (128 tools once blamed a one-word message).
        try:
            alone = len(render(state, body, None).ids)
        except RequestError:
            raise e from None
        if alone >= state.max_context:
            raise
        raise RequestError(
            f"tools: the {len(tools)} tools' descriptions, which the chat template writes into "
            f"the prompt, make it longer than the model's context of {state.max_context} tokens "
            f"(the messages alone take {alone}; at least one new token must fit): send fewer "
            "or shorter tools",
            param="tools",
            code=CONTEXT_LENGTH_EXCEEDED,
        ) from None


def tool_refusal(e: RequestError, body: ChatCompletionRequest) -> RequestError:
    """The engine's refusal of a tool request's grammar (an unsupported schema keyword) in the
    request's terms: param "tools", or the tool's parameters when the message names its structure."""
    if e.status != 400 or "structural_tag" not in str(e):
        return e
    if "structural_tag.content_schema" in str(e):  # the message's format, beside the tools
        field = body.grammar_field() or "response_format"
        return RequestError(f"{field}: {e}", param=field)
    choice = body.tool_choice_value()
    names = [t.name for t in body.function_tools()]  # the tools the tag has a structure for, in order
    names = [choice.name] if choice.mode == "function" and choice.name else names
    names = [n for n in names if choice.allowed is None or n in choice.allowed]
    param, message = "tools", str(e)
    # (a v1 tag's structure i, or tag i of the calls-only v2 tag: function_call.calls_only; i
    # counts the tools the tag holds, which a named tool_choice filters, so the message names
    # the tool instead: one index in the message, the param's)
    m = re.search(r"structural_tag\.(?:structures\[(\d+)\]|format\.tags\[(\d+)\])[\w.]*", message)
    if m and (i := int(m.group(1) or m.group(2))) < len(names):
        tool_index = [t.name for t in body.function_tools()].index(names[i])
        param = f"tools[{tool_index}].function.parameters"
        message = message[: m.start()] + f"the parameters of tool {names[i]!r}" + message[m.end() :]
    return RequestError(f"{param}: {message}", param=param)
