"""The app around one engine (`create_app`), and running it: `serve` until SIGTERM, or
`serving_in_thread` for tests, benchmarks and notebooks."""

from __future__ import annotations

import collections
import contextlib
import gc
import os
import secrets
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from fastapi import Depends, FastAPI, Request

from ..engine import Engine
from ..gc_guard import GcGuard
from ..protocol import RequestError
from . import routes_native, routes_openai, routes_responses
from .engine_loop import EngineLoop
from .errors import add_error_handlers, error_response
from .http_limits import HeaderLimits, RateLimits, h11_protocol
from .state import ServerOptions, ServerState, server_state


def create_app(
    engine: Engine, options: ServerOptions | None = None, on_fatal: Callable[[], None] | None = None
) -> FastAPI:
    """The FastAPI app around one engine. `on_fatal` is called if the scheduler loop dies.

    The app owns the engine while it runs: one app per engine, and the app's shutdown
    shuts the engine down (its compile workers included)."""
    state = ServerState(engine, options or ServerOptions(), on_fatal)
    # No /docs, /redoc or /openapi.json: FastAPI serves them outside the API-key check, and the
    # handlers read raw bodies, so the generated schema would describe nothing but paths.
    app = FastAPI(
        title="minisglang",
        lifespan=lifespan,
        dependencies=[Depends(check_api_key)],
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.server = state  # what every route reads (state.server_state)
    add_error_handlers(app)
    app.add_middleware(HeaderLimits, options=state.options, refuse=lambda message: error_response(state, message, 431))
    # (added last: the outermost, so a client over its rate costs no other middleware's work)
    app.add_middleware(
        RateLimits,
        options=state.options,
        rate=state.request_rate,
        refuse=lambda message, retry: error_response(state, message, 429, retry_after=retry),
    )
    app.include_router(routes_native.router)
    app.include_router(routes_openai.router)
    app.include_router(routes_responses.router)
    return app


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The scheduler's thread lives as long as the app; its end shuts the engine down."""
    state: ServerState = app.state.server
    state.loop = EngineLoop(state.engine, state.options, state.metrics, state.on_fatal, state.gc_guard)
    yield
    state.loop.shutdown()


def check_api_key(request: Request) -> None:
    """With an api_key set, every endpoint but /health needs "Authorization: Bearer <key>" (401)."""
    api_key = server_state(request).options.api_key
    if api_key is None or request.url.path == "/health":
        return
    auth = request.headers.get("authorization", "")
    scheme, _, key = auth.partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(key.strip().encode(), api_key.encode()):
        raise RequestError(
            "invalid or missing API key: send the header 'Authorization: Bearer <key>'",
            status=401,
            code="invalid_api_key",
        )


SERVER_TRACE_EVENTS = 1_000  # the scheduler events a server keeps (for a look in a debugger)


def serve(engine: Engine, host: str = "127.0.0.1", port: int = 30000, options: ServerOptions | None = None) -> int:
    """Serve until SIGTERM/SIGINT (returns 0) or until the engine loop dies (returns 1)."""
    import uvicorn

    options = options or ServerOptions()
    holder: dict[str, Any] = {}  # the uvicorn server, made after the app that on_fatal belongs to

    def on_fatal() -> None:
        holder["server"].should_exit = True
        # A stuck shutdown must not keep a dead server up: exit hard if we are still here in 10 s.
        threading.Timer(10, os._exit, args=(1,)).start()

    app = create_app(engine, options, on_fatal)
    # The server reads no trace (notebooks and tests do): 100,000 event dicts turning over made
    # every full collection walk them, and each slow one freezes what is in flight for good
    # (gc_guard.py; a soak: 17 freezes in 10 minutes and collections of 85-136 ms with the
    # notebooks' trace, 6 and 41 ms with 1,000 events).
    engine.scheduler.trace = collections.deque(maxlen=SERVER_TRACE_EVENTS)

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:  # SIGTERM / SIGINT: drain, then abort
            loop = app.state.server.loop
            if loop is not None:
                loop.start_draining()
            super().handle_exit(sig, frame)

    config = _uvicorn_config(app, host, port, timeout_graceful_shutdown=int(options.drain_timeout) + 1)
    server = holder["server"] = Server(config)
    # The model, tokenizer and imported libraries are ~10^5-10^6 objects that live as long as the
    # process; frozen, Python's full collections stop rescanning them (100-200 ms a pass, landing
    # in a decode step or a compile: measured by benchmarks/bench_compile.py's gc.freeze note).
    gc.collect()
    gc.freeze()
    # What the server makes later (a hostile grammar's million nodes) is frozen after any full
    # collection that found it slow to walk, so no later one walks it again (gc_guard.py).
    guard = app.state.server.gc_guard = GcGuard().install()
    # Three kinds of threads share the GIL here: uvicorn's event loop, the engine loop and the
    # compile threads (in the windows the engine lends them, constrained/work_slices.py). A
    # thread that wants the GIL waits up to the switch interval, and a request crosses
    # threads several times: at CPython's 5 ms a bystander paid it at each crossing while a
    # compile ran (benchmarks/bench_server_stalls.py).
    sys.setswitchinterval(0.001)
    try:
        server.run()
    finally:
        guard.uninstall()
    loop = app.state.server.loop
    return 1 if loop is not None and loop.dead is not None else 0


def _uvicorn_config(app: FastAPI, host: str, port: int, **more: Any):
    """uvicorn's settings for an app of `create_app`: X-Forwarded-For believed from the
    proxies its ServerOptions name, and from nobody when it names none."""
    import uvicorn

    state = app.state.server
    options = state.options
    proxies = options.forwarded_allow_ips
    # uvicorn reads X-Forwarded-For by default, and its forwarded_allow_ips=None means
    # $FORWARDED_ALLOW_IPS or 127.0.0.1: trusting no proxy takes proxy_headers=False.
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        proxy_headers=bool(proxies),
        forwarded_allow_ips=proxies or None,
        http=h11_protocol(
            options, state.request_rate, lambda status: state.metrics.refused.labels(status=str(status)).inc()
        ),
        h11_max_incomplete_event_size=options.max_header_bytes,
        **more,
    )


@contextlib.contextmanager
def serving_in_thread(app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Run `app` on a background thread (tests, benchmarks, notebooks); yields its base URL.

    Port 0 picks a free port. Leaving the block stops the server and, with it, the engine.
    """
    import uvicorn

    server = uvicorn.Server(_uvicorn_config(app, host, port))
    thread = threading.Thread(target=server.run, name="minisglang-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the server did not start on {host}:{port}")
        time.sleep(0.02)
    bound_port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound_port}"
    finally:
        server.should_exit = True
        thread.join(30)
