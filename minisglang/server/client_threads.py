"""Handler work in the thread pool, taken in turns by client (`run_for_client`), and the
request body parsed that way (`parse_body`).

A handler parses its body, renders the chat template, tokenizes and builds sampling params
in starlette's thread pool (on the event loop, that work held every stream). The pool is
first come, first served: one client's burst of 100 chats took all of its 40 threads, and
another client's one-token request waited behind the burst's renders (0.2-0.6 s on 2 CPUs).
So a client has at most THREADS_PER_CLIENT calls in the pool at once (the GIL makes more of
them no faster), and a client's large bodies are parsed one at a time.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from fastapi import Request
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from ..protocol import RequestError, parse
from .http_limits import read_body, request_client
from .state import ServerOptions

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T", bound=BaseModel)

THREADS_PER_CLIENT = 4

# A body of this many bytes or more is parsed only while no other such body of the same client
# is: pydantic's parse holds the GIL for most of its 0.3-1 s, so a client's 8 bodies of
# 90,000 messages at once (each under max_json_containers, each refused in the end as too
# long) kept the scheduler thread from it, and another client's streamed answer took 2-2.7 s.
SERIAL_PARSE_BYTES = 256 * 1024

# (event loop, client, alone) -> the semaphore its calls take turns with, while one holds or
# waits for it (weak: the entry goes with the last of them)
_turns: weakref.WeakValueDictionary[tuple[int, str, bool], asyncio.Semaphore] = weakref.WeakValueDictionary()


def _turn(request: Request, alone: bool) -> asyncio.Semaphore:
    key = (id(asyncio.get_running_loop()), request_client(request), alone)
    turn = _turns.get(key)
    if turn is None:
        turn = _turns[key] = asyncio.Semaphore(1 if alone else THREADS_PER_CLIENT)
    return turn


async def run_for_client(request: Request, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """`fn(*args, **kwargs)` in the thread pool once `request`'s client has a turn (waiting
    for one holds no thread); ClientDisconnect (answered 499) instead if the client has left
    by then. Call it once the body is read (a disconnect check would take a body message)."""
    async with _turn(request, alone=False):
        if await request.is_disconnected():
            raise ClientDisconnect()
        return await run_in_threadpool(fn, *args, **kwargs)


async def parse_body(
    model_cls: type[T], request: Request, options: ServerOptions, precheck: Callable[[object], None] | None = None
) -> T:
    """The body read and validated (in the client's turn in the thread pool: a 4 MB body
    takes a while to parse; a client's large bodies one at a time, SERIAL_PARSE_BYTES).
    `precheck` sees a large body as plain JSON first and may refuse it (RequestError):
    pydantic's parse holds the GIL from start to end (0.17 s for 20,000 messages), so the
    scheduler thread waits out each one whole."""
    body = await read_body(request, options)
    containers = body.count(b"[") + body.count(b"{")  # (C speed: ~1 ms a megabyte)
    if containers > options.max_json_containers:
        raise RequestError(
            f"the request body holds {containers:,} '[' and '{{' (JSON arrays and objects, counted with "
            f"any inside strings); the limit is {options.max_json_containers:,} (max_json_containers)"
        )
    if len(body) < SERIAL_PARSE_BYTES:
        return await run_for_client(request, parse, model_cls, body)
    async with _turn(request, alone=True):
        return await run_for_client(request, _checked_parse, model_cls, body, precheck)


def _checked_parse(model_cls: type[T], body: bytes, precheck: Callable[[object], None] | None) -> T:
    """`parse`, after `precheck` of the body's plain JSON (json's C reader: ~16 ms a megabyte,
    a tenth of pydantic's; a body that is no JSON goes on to `parse`, which says what is wrong
    with it)."""
    if precheck is not None:
        try:
            plain = json.loads(body)
        except ValueError:
            plain = None
        if plain is not None:
            precheck(plain)
    return parse(model_cls, body)
