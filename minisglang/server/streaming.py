"""Answering one queued request: a JSON body when it is done, or server-sent events as its
text arrives; either way a client that leaves is noticed and its request aborted.

An abort before anything was sent is an error response (its status from ABORT_ANSWERS);
one after the stream began ends the stream with an error event and `[DONE]`, not a cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..core import Req
from ..protocol import RequestError
from .engine_loop import EngineUnavailable
from .errors import client_left, error_body, refuse_abort
from .openai_shapes import Shape, usage
from .state import ServerState

# A request's chunks, as EngineLoop.generate yields them; closing it aborts the request.
Chunks = AsyncGenerator[dict[str, Any], None]


async def first_chunk(gen: Chunks, grammar_field: str | None) -> dict[str, Any]:
    """The first chunk; an abort before anything was sent becomes an error response, not a stream."""
    chunk = await gen.__anext__()
    if chunk["final"]:
        refuse_abort(chunk["meta_info"], grammar_field)
    return chunk


async def until_disconnected(request: Request) -> None:
    while not await request.is_disconnected():
        await asyncio.sleep(0.1)


async def unless_disconnected(request: Request, gen: Chunks, wait: Awaitable[Any]) -> asyncio.Future:
    """Run `wait` (a coroutine reading `gen`) while watching the client: if it leaves
    first, `wait` is cancelled and `gen` closed (which aborts its request). Returns the
    finished or cancelled task."""
    work = asyncio.ensure_future(wait)
    watch = asyncio.ensure_future(until_disconnected(request))
    try:
        await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
            await gen.aclose()
    return work


async def collect(gen: Chunks, grammar_field: str | None) -> tuple[str, dict[str, Any]]:
    """The whole text and the last meta_info of a request's chunks; an abort is an error."""
    chunk = await first_chunk(gen, grammar_field)
    text, meta = chunk["text"], chunk["meta_info"]
    async for chunk in gen:
        text, meta = text + chunk["text"], chunk["meta_info"]
    refuse_abort(meta, grammar_field)
    return text, meta


def sse(obj: Any) -> str:
    """One server-sent event carrying `obj` as JSON."""
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


async def events(
    gen: Chunks,
    first: dict[str, Any],
    shape: Shape,
    include_usage: bool,
    grammar_field: str | None,
    left: Callable[[], None],
) -> AsyncIterator[str]:
    """The stream's events from its first chunk on, then `[DONE]`; an abort or the loop's
    death on the way ends it with an error event. Closing it aborts the request; a client
    that closes it before its end is counted by `left` (as `client_left` counts one that
    leaves before the first event)."""
    try:
        chunk, sent = first, None
        while True:
            if chunk["final"]:
                refuse_abort(chunk["meta_info"], grammar_field)
            # The request may finish a chunk before its last: the reason goes with the last only.
            meta = chunk["meta_info"] if chunk["final"] else {**chunk["meta_info"], "finish_reason": None}
            out = shape(chunk["text"], meta, True)  # one event, or a list of them (tools)
            for sent in out if isinstance(out, list) else [out]:
                yield sse(sent)
            if chunk["final"]:
                break
            chunk = await gen.__anext__()
        if include_usage and sent is not None:
            yield sse({**sent, "choices": [], "usage": usage(chunk["meta_info"])})
    except (RequestError, EngineUnavailable) as e:  # the stream ends with a reason, not a cut
        status, param = (e.status, e.param) if isinstance(e, RequestError) else (503, None)
        yield sse(error_body(str(e), status, param))
    except (GeneratorExit, asyncio.CancelledError):  # the client closed the stream (the server cancels it)
        left()
        raise
    finally:
        await gen.aclose()  # a client that left aborts its request
    yield "data: [DONE]\n\n"


async def answer(
    state: ServerState,
    request: Request,
    req: Req,
    shape: Shape,
    stream: bool,
    include_usage: bool,
    grammar_field: str | None = None,
) -> Response:
    """Queue `req`; answer with one JSON body, or with server-sent events when streaming.
    `grammar_field`: the request's field its grammar came from (errors about it name it)."""
    if state.loop is None:
        raise EngineUnavailable("the server is starting")
    client = request.client.host if request.client else "unknown"
    gen = state.loop.generate(req, client)
    if not stream:
        # A client that leaves is noticed while we wait, and its request aborted.
        work = await unless_disconnected(request, gen, collect(gen, grammar_field))
        if work.cancelled():
            return client_left(state)
        text, meta = work.result()
        return JSONResponse(shape(text, meta, False))

    # Until the first chunk, nothing is sent, so a client that leaves is noticed only by
    # watching: its request may wait in a queue, or its text be held back (a long stop
    # string's possible start) until the end.
    work = await unless_disconnected(request, gen, first_chunk(gen, grammar_field))
    if work.cancelled():
        return client_left(state)
    try:
        first = work.result()
    except Exception:
        await gen.aclose()
        raise
    return StreamingResponse(
        events(gen, first, shape, include_usage, grammar_field, state.metrics.disconnects.inc),
        media_type="text/event-stream",
    )
