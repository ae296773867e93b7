"""Answering one queued request, or one per choice (`n`): a JSON body when they are done,
or server-sent events as their text arrives; either way a client that leaves is noticed and
its requests aborted, and an error in one choice is the whole request's.

An abort before anything was sent is an error response (its status from ABORT_ANSWERS);
one after the stream began ends the stream with an error event and `[DONE]`, not a cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..core import Req
from ..protocol import RequestError
from .engine_loop import EngineUnavailable
from .errors import client_left, error_body, refuse_abort
from .http_limits import request_client
from .openai_shapes import Shape, one_body, usage
from .state import ServerState

# A request's chunks, as EngineLoop.generate yields them; closing it aborts the request.
Chunks = AsyncGenerator[dict[str, Any], None]
# Several requests' chunks as they come, each with its choice's index (`arrivals`).
Arrivals = AsyncGenerator[tuple[int, dict[str, Any]], None]
T = TypeVar("T")


async def first_chunk(gen: Chunks, grammar_field: str | None) -> dict[str, Any]:
    """The first chunk; an abort before anything was sent becomes an error response, not a stream."""
    chunk = await gen.__anext__()
    if chunk["final"]:
        refuse_abort(chunk["meta_info"], grammar_field)
    return chunk


async def until_disconnected(request: Request) -> None:
    while not await request.is_disconnected():
        await asyncio.sleep(0.1)


async def unless_disconnected(request: Request, wait: Awaitable[Any]) -> asyncio.Future:
    """Run `wait` (a coroutine reading chunks, see `all_or_abort`) while watching the client:
    if it leaves first, `wait` is cancelled (which aborts its requests). Returns the finished
    or cancelled task."""
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
    return work


async def abort_all(gens: list[Chunks], reading: Iterable[asyncio.Future]) -> None:
    """Cancel the tasks `reading` the chunks, then close every one of `gens`: each request
    not finished is aborted."""
    reading = list(reading)
    for task in reading:
        task.cancel()
    await asyncio.gather(*reading, return_exceptions=True)
    for gen in gens:
        await gen.aclose()


async def all_or_abort(gens: list[Chunks], read: Callable[[Chunks], Awaitable[T]]) -> list[T]:
    """`read` of each choice's chunks, side by side. The first error (or a cancel: the client
    left) is the whole request's, as with one choice: the others are cancelled and every
    request aborted."""
    reading = [asyncio.ensure_future(read(gen)) for gen in gens]
    try:
        return list(await asyncio.gather(*reading))
    except BaseException:
        await abort_all(gens, reading)
        raise


async def first_arrivals(
    gens: list[Chunks], grammar_field: str | None
) -> tuple[list[tuple[int, dict[str, Any]]], dict[asyncio.Future, int]]:
    """The first chunks of the choices that begin first (one at least), each with its index,
    and the reads of the others' first chunks (choice index by read). An abort among those
    first chunks, an error, or a cancel (the client left) is the whole request's: the reads
    are cancelled and every request aborted, as `all_or_abort` does.

    Not every choice's first chunk: choices that do not all fit in the KV cache at once
    run a few at a time, and a stream that waited for the last one to begin sent nothing
    while the first ones ran to their end (a stranger's n=40: 43 s of silence)."""
    reading: dict[asyncio.Future, int] = {asyncio.ensure_future(gen.__anext__()): i for i, gen in enumerate(gens)}
    firsts: list[tuple[int, dict[str, Any]]] = []
    try:
        done, _ = await asyncio.wait(reading, return_when=asyncio.FIRST_COMPLETED)
        for task in sorted(done, key=reading.__getitem__):
            i = reading.pop(task)
            chunk = task.result()
            if chunk["final"]:
                refuse_abort(chunk["meta_info"], grammar_field)
            firsts.append((i, chunk))
    except BaseException:
        await abort_all(gens, reading)
        raise
    return firsts, reading


async def arrivals(
    gens: list[Chunks], firsts: list[tuple[int, dict[str, Any]]], reading: dict[asyncio.Future, int]
) -> Arrivals:
    """(choice index, chunk) for every choice's chunks as they come: first the chunks of
    `firsts`, then those of the reads under way (`reading`, by choice index) and the next;
    ends after every choice's final chunk (`first_arrivals` gives the two). Closing it
    aborts the requests of the choices not finished."""
    try:
        for i, chunk in firsts:
            yield i, chunk
            if not chunk["final"]:
                reading[asyncio.ensure_future(gens[i].__anext__())] = i
        while reading:
            done, _ = await asyncio.wait(reading, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=reading.__getitem__):
                i = reading.pop(task)
                chunk = task.result()
                yield i, chunk
                if not chunk["final"]:
                    reading[asyncio.ensure_future(gens[i].__anext__())] = i
    finally:
        await abort_all(gens, reading)


async def collect(gen: Chunks, grammar_field: str | None) -> tuple[str, dict[str, Any]]:
    """The whole text and the last meta_info of a request's chunks; an abort is an error."""
    chunk = await first_chunk(gen, grammar_field)
    text, meta = chunk["text"], chunk["meta_info"]
    async for chunk in gen:
        text, meta = text + chunk["text"], chunk["meta_info"]
    refuse_abort(meta, grammar_field)
    return text, meta


# Line breaks to Python's and JavaScript's line readers (str.splitlines, httpx's and requests'
# iter_lines): written raw in a `data:` line they cut an event in half (a stranger's find).
_BREAKS = "\u0085\u2028\u2029"
_LINE_BREAKS = str.maketrans({c: f"\\u{ord(c):04x}" for c in _BREAKS})


def sse(obj: Any) -> str:
    """One server-sent event carrying `obj` as JSON, on one line for every line reader; a
    Responses event (`"type": "response..."`) is named in an `event:` line too, as OpenAI
    names it (clients that dispatch on the event's name read nothing else)."""
    text = json.dumps(obj, ensure_ascii=False)
    if any(c in text for c in _BREAKS):  # (rare: translate costs ~6 us a chunk)
        text = text.translate(_LINE_BREAKS)
    data = f"data: {text}\n\n"
    return f"event: {obj['type']}\n{data}" if is_responses_event(obj) else data


def is_responses_event(obj: Any) -> bool:
    """Whether `obj` is an event of a /v1/responses stream (which ends without `[DONE]`)."""
    return isinstance(obj, dict) and isinstance(obj.get("type"), str) and obj["type"].startswith("response.")


async def events(
    chunks: Arrivals,
    shapes: list[Shape],
    include_usage: bool,
    grammar_field: str | None,
    left: Callable[[], None],
) -> AsyncIterator[str]:
    """The stream's events from the choices' `chunks` (`arrivals`), each shaped by its
    choice's shape, then `[DONE]`; an abort of any choice or the loop's death on the way ends
    it with an error event. Closing it aborts the requests; a client that closes it before
    its end is counted by `left` (as `client_left` counts one that leaves before the first
    event)."""
    try:
        sent: dict[str, Any] | None = None  # the last event sent
        last: dict[int, dict[str, Any]] = {}  # each finished choice's last meta_info
        # Choices begin in index order: the openai client's stream accumulator (`chat.
        # completions.stream()`) takes the stream's first choice for choice 0 and each new
        # index for the next one, so a choice whose first event comes before a lower one's
        # waits until every lower choice has begun (a tool call's or a stop string's possible
        # start is held back, so choice 1 may have text first).
        begun = 0  # the first choice not begun
        held: dict[int, list[str]] = {}  # the events of choices waiting for a lower one, by index
        async for i, chunk in chunks:
            if chunk["final"]:
                refuse_abort(chunk["meta_info"], grammar_field)
                last[i] = chunk["meta_info"]
            # The request may finish a chunk before its last: the reason goes with the last only.
            meta = chunk["meta_info"] if chunk["final"] else {**chunk["meta_info"], "finish_reason": None}
            out = shapes[i](chunk["text"], meta, True)  # one event, or a list of them (tools)
            for sent in out if isinstance(out, list) else [out]:
                # OpenAI's: with include_usage every chunk has `usage`, null until the last
                event = sse({**sent, "usage": None} if include_usage else sent)
                if i < begun:
                    yield event
                    continue
                held.setdefault(i, []).append(event)
                while begun in held:
                    for event in held.pop(begun):
                        yield event
                    begun += 1
        for i in sorted(held):  # (every choice sends an event at its end: nothing is left here)
            for event in held.pop(i):
                yield event
        if include_usage and sent is not None:
            yield sse({**sent, "choices": [], "usage": usage(*(last[i] for i in sorted(last)))})
    except (RequestError, EngineUnavailable) as e:  # the stream ends with a reason, not a cut
        status, param = (e.status, e.param) if isinstance(e, RequestError) else (503, None)
        yield sse(error_body(str(e), status, param))
    except (GeneratorExit, asyncio.CancelledError):  # the client closed the stream (the server cancels it)
        left()
        raise
    finally:
        await chunks.aclose()  # a client that left aborts its requests
    if not is_responses_event(sent):  # (OpenAI ends a Responses stream with its last event)
        yield "data: [DONE]\n\n"


async def answer(
    state: ServerState,
    request: Request,
    reqs: list[Req],
    shapes: list[Shape],
    stream: bool,
    include_usage: bool,
    grammar_field: str | None = None,
) -> Response:
    """Queue `reqs`, one per choice (`shapes[i]` shapes choice i); answer with one JSON body,
    or with server-sent events when streaming, which begin once a choice has begun.
    `grammar_field`: the request's field its grammar came from (errors about it name it)."""
    if state.loop is None:
        raise EngineUnavailable("the server is starting")
    client = request_client(request)
    gens = [state.loop.generate(req, client) for req in reqs]
    if not stream:
        # A client that leaves is noticed while we wait, and its requests aborted.
        work = await unless_disconnected(request, all_or_abort(gens, lambda gen: collect(gen, grammar_field)))
        if work.cancelled():
            return client_left(state)
        done = work.result()
        bodies = [shape(text, meta, False) for shape, (text, meta) in zip(shapes, done)]
        return JSONResponse(one_body(bodies, [meta for _, meta in done]))

    # Until a first chunk, nothing is sent, so a client that leaves is noticed only by
    # watching: its requests may wait in a queue, or their text be held back (a long stop
    # string's possible start) until the end. The stream begins with the first choice that
    # begins; an abort of a choice that begins later is an error event.
    work = await unless_disconnected(request, first_arrivals(gens, grammar_field))
    if work.cancelled():
        return client_left(state)
    firsts, reading = work.result()  # (an error has aborted every request already)
    return StreamingResponse(
        events(arrivals(gens, firsts, reading), shapes, include_usage, grammar_field, state.metrics.disconnects.inc),
        media_type="text/event-stream",
    )
