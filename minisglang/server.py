"""`minisglang serve`: an OpenAI-compatible HTTP server (and SGLang's native /generate).

    minisglang serve --port 30000            # loopback only unless --host says otherwise

One thread owns the scheduler and runs `step()` in a loop (`EngineLoop`); HTTP handlers
validate the body (`protocol.py`), tokenize it in the web server's thread pool, put the
ready `Req` into the loop's inbox and read chunks from their own queue. So the scheduler
stays single-threaded, exactly as in the offline `Engine`, and neither a slow compile nor
a 5 MB prompt stalls anybody else's decoding.

Endpoints: GET /health, /metrics (Prometheus), /get_server_info, /v1/models;
POST /v1/completions, /v1/chat/completions (stream=true gives server-sent events), with
`response_format` {"type": "json_schema" | "json_object" | "structural_tag"} and the extra fields `regex`,
`ebnf`, `json_schema`; chat also takes OpenAI's `tools`, `tool_choice` and
`parallel_tool_calls` (the calls are a structural tag, see function_call.py; stage s6 on);
POST /generate (native).

Every error is OpenAI's body `{"error": {"message", "type", "param", "code"}}`: a bad field
is a 400 naming it, an unknown model a 404, a body over `max_body_bytes` a 413, a body that
is not JSON a 415, too many or too large headers a 431; a client value the message quotes
is shortened. If the scheduler loop itself dies, every request in flight gets an error
(a stream ends with an error event and `[DONE]`), /health turns 503 and `serve` exits
non-zero; /health is 503 as well while the loop is stuck (one step running longer than
`stall_timeout`). On SIGTERM the requests in flight get `drain_timeout` seconds, then are aborted.
"""
from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import queue
import re
import secrets
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import asdict, dataclass
from http import HTTPStatus
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from .constrained.json_schema import short_value
from .core import AbortKind, Req, SamplingParams
from .engine import Engine, stream_chunk
from .function_call import ToolCallParser, openai_deltas
from .gc_guard import GcGuard
from .metrics import CONTENT_TYPE, ServerMetrics
from .protocol import ChatCompletionRequest, CompletionRequest, GenerateRequest, RequestError, parse
from .stages import STAGE_MODULES
from .tokenizer import ChatPrompt

# How the server answers an aborted request, by whose fault it was: (HTTP status, OpenAI error
# code). A GRAMMAR abort's 400 also names the request's field the grammar came from; a BUSY
# one's 503 says when to retry where the engine knows. CANCELLED reaches a client only when
# someone else aborted its request (the server aborts a leaving client's, then stops writing).
ABORT_ANSWERS: dict[AbortKind, tuple[int, str | None]] = {
    AbortKind.CLIENT: (400, None),
    AbortKind.GRAMMAR: (400, None),
    AbortKind.BUSY: (503, "server_busy"),
    AbortKind.ENGINE: (500, None),
    AbortKind.CANCELLED: (400, None),
}

# Tool calls are structural tags, which the stages before this one do not know.
TOOLS_STAGE = "s6-function-calling"


@dataclass
class ServerOptions:
    """The server's limits (`minisglang serve --help` lists them)."""

    api_key: str | None = None          # when set, every endpoint but /health needs "Bearer <key>"
    max_body_bytes: int = 4 * 1024 * 1024
    max_compiling_per_client: int = 8   # distinct grammars a client (an IP address) may wait for at once; 429 above
    drain_timeout: float = 2.0          # on SIGTERM: seconds in-flight requests get before their abort
    body_timeout: float = 30.0          # seconds a client may take to send its body; 408 after (slow senders)
    # /health turns 503 when the scheduler loop has been stuck this many seconds (in one step,
    # or anywhere else) while requests wait; an idle loop comes round every 50 ms.
    stall_timeout: float = 5.0
    # A request's head (request line and headers) larger than this, or with more headers than
    # max_headers, is refused with a 431; OpenAI's clients send well under a kilobyte.
    max_header_bytes: int = 16 * 1024
    max_headers: int = 100
    # The proxies whose X-Forwarded-For header names the client (comma-separated addresses or
    # networks, "*" any): behind them, max_compiling_per_client counts each real client, not
    # the proxy. None (the default) trusts no proxy: the client is the socket's address, since
    # any local program could otherwise send the header and pick a fresh budget.
    forwarded_allow_ips: str | None = None

    def __post_init__(self):
        for name, low in (("max_body_bytes", 1), ("max_compiling_per_client", 1), ("drain_timeout", 0),
                          ("body_timeout", 0.001), ("stall_timeout", 0.001), ("max_header_bytes", 1024),
                          ("max_headers", 16)):
            if not getattr(self, name) >= low:
                raise ValueError(f"server option {name} must be >= {low}, got {getattr(self, name)!r}")
        if self.forwarded_allow_ips is not None and not isinstance(self.forwarded_allow_ips, str):
            raise ValueError(f"server option forwarded_allow_ips must be None or a string of addresses, got "
                             f"{self.forwarded_allow_ips!r}")


class EngineUnavailable(RuntimeError):
    """The engine cannot serve: its loop died, or the server is shutting down (HTTP 503)."""


def _send(loop: asyncio.AbstractEventLoop, q: asyncio.Queue, item: Any) -> None:
    """Hand `item` to a request's queue on its event loop (from the scheduler thread)."""
    with contextlib.suppress(RuntimeError):   # that event loop is closed: nobody is listening any more
        loop.call_soon_threadsafe(q.put_nowait, item)


class EngineLoop:
    """Runs an Engine's scheduler on its own thread; thread-safe submit/abort.

    `dead` holds the exception that ended the loop, if any; `on_fatal` is called once then
    (serve() uses it to stop the process).
    """

    def __init__(self, engine: Engine, options: ServerOptions, metrics: ServerMetrics,
                 on_fatal: Callable[[], None] | None = None):
        self.engine, self.options, self.metrics, self.on_fatal = engine, options, metrics, on_fatal
        self.inbox: queue.Queue = queue.Queue()
        # rid -> (req, its chunk queue, the event loop that reads it, the client's address)
        self.active: dict[int, tuple[Req, asyncio.Queue, asyncio.AbstractEventLoop, str]] = {}
        # client -> {grammar: its compile's handle} for the compiles a client asked for (scheduler thread only)
        self.compiling: dict[str, dict[Any, Any]] = {}
        self.dead: BaseException | None = None
        self.drain_deadline: float | None = None
        # Step timing, written by the scheduler thread, read by /health and /get_server_info.
        self.beat = time.monotonic()                     # when the loop last came round
        self.step_started: float | None = None           # set while inside engine.step()
        self.last_step_end: float | None = None
        self._recent_steps: deque[tuple[float, float]] = deque()   # (end, seconds) of the last minute's steps
        self._steps_lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="minisglang-scheduler", daemon=True)
        self.thread.start()

    @property
    def healthy(self) -> bool:
        return self.dead is None and self.drain_deadline is None and self.thread.is_alive()

    async def generate(self, req: Req, client: str) -> AsyncIterator[dict[str, Any]]:
        """Chunks of one request (see engine.stream_chunk); aborts it if the consumer leaves."""
        if not self.healthy:
            raise EngineUnavailable("the server is shutting down" if self.dead is None
                                    else f"the engine loop has stopped: {self.dead!r}")
        out: asyncio.Queue = asyncio.Queue()
        self.inbox.put(("submit", req, out, asyncio.get_running_loop(), client))
        if self.dead is not None:   # the loop died after the check above: nobody else will answer
            self._fail_inbox()
        finished = False
        try:
            while True:
                chunk = await out.get()
                if isinstance(chunk, Exception):
                    finished = True
                    raise chunk
                yield chunk
                if chunk["final"]:
                    finished = True
                    return
        finally:
            if not finished:
                self.inbox.put(("abort", req.rid))

    def stalled_for(self) -> float:
        """Seconds since the loop last came round: a few hundredths when it is well, idle or not."""
        return time.monotonic() - self.beat

    def step_timings(self) -> dict[str, float | None]:
        """The age of the last completed step, the longest step of the last minute and how long
        the step now running has run (seconds; None for what has not happened)."""
        now = time.monotonic()
        with self._steps_lock:
            longest = max((d for end, d in self._recent_steps if end >= now - 60), default=None)
        started, last = self.step_started, self.last_step_end
        return {"last_step_age_seconds": None if last is None else now - last,
                "longest_step_last_minute_seconds": longest,
                "current_step_seconds": None if started is None else now - started}

    def start_draining(self) -> None:
        """Refuse new requests; abort those still running after `drain_timeout` seconds."""
        if self.drain_deadline is None:
            self.drain_deadline = time.monotonic() + self.options.drain_timeout

    # ------------------------------------------------------------------ the scheduler thread
    def _run(self) -> None:
        sched = self.engine.scheduler
        try:
            while not self.stopped.is_set():
                self._drain_inbox(block=not sched.has_work())
                if self.drain_deadline is not None and time.monotonic() > self.drain_deadline:
                    self._fail_all(EngineUnavailable("the server is shutting down"), abort=True)
                if sched.has_work():
                    self._timed_step()
                self._publish()
                self.beat = time.monotonic()
        except BaseException as e:   # noqa: BLE001 - whatever ended the loop, nobody may hang on it
            self.dead = e
            self._fail_all(EngineUnavailable(f"the engine loop has stopped: {e!r}"), abort=False)
            self._fail_inbox()
            if self.on_fatal is not None:
                self.on_fatal()
            raise

    def _timed_step(self) -> None:
        self.step_started = start = time.monotonic()
        try:
            self.engine.step()   # the scheduler survives a request's error; anything else is fatal
        finally:
            self.step_started = None
        self.last_step_end = end = time.monotonic()
        with self._steps_lock:
            self._recent_steps.append((end, end - start))
            while self._recent_steps[0][0] < end - 60:
                self._recent_steps.popleft()

    def _fail_all(self, error: Exception, abort: bool) -> None:
        for rid, (_req, q, loop, _) in list(self.active.items()):
            if abort:
                self.engine.scheduler.abort(rid, str(error))
            _send(loop, q, error)
        self.active.clear()

    def _fail_inbox(self) -> None:
        """Answer every submission still in the inbox with the loop's death (any thread may call it)."""
        while True:
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                return
            if item[0] == "submit":
                _, _, q, loop, _ = item
                _send(loop, q, EngineUnavailable(f"the engine loop has stopped: {self.dead!r}"))

    def _drain_inbox(self, block: bool) -> None:
        try:
            item = self.inbox.get(timeout=0.05) if block else self.inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            if item[0] == "submit":
                self._submit(*item[1:])
            elif item[0] == "abort" and item[1] in self.active:
                self.engine.abort(item[1])
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                return

    def _submit(self, req: Req, q: asyncio.Queue, loop: asyncio.AbstractEventLoop, client: str) -> None:
        if self.drain_deadline is not None:
            _send(loop, q, EngineUnavailable("the server is shutting down"))
            return
        engine, grammar = self.engine, req.sampling_params.constraint()
        if grammar is not None:
            # Distinct grammars this client asked for whose compile still runs, whether or not it
            # still waits: a compile goes on after its client leaves, so counting only waiters
            # let a client that leaves and asks again queue compiles without end (others' then
            # timed out). One more request for any of them shares its compile.
            for who in list(self.compiling):
                left = {g: h for g, h in self.compiling[who].items() if not engine.compile_done(h)}
                self.compiling[who] = left
                if not left:
                    del self.compiling[who]
            mine = self.compiling.get(client, {})
            # A grammar compiled (or compiling) already costs nothing more: never refused.
            if (grammar not in mine and len(mine) >= self.options.max_compiling_per_client
                    and not engine.grammar_known(grammar)):
                _send(loop, q, RequestError(
                    f"too many grammars compiling for this client ({len(mine)}; the limit is "
                    f"{self.options.max_compiling_per_client}): wait for one to finish", status=429,
                    code="rate_limit_exceeded"))
                return
        self.active[req.rid] = (req, q, loop, client)   # first, so that a failure below reaches it
        req.client = client   # compiles take turns by client (constrained/work_slices.py)
        self.engine.scheduler.add_request(req)
        handle = engine.compile_waited_on(req.rid) if grammar is not None else None
        if handle is not None:   # (stages s3 on: a compile off the scheduler thread)
            self.compiling.setdefault(client, {})[grammar] = handle

    def _publish(self) -> None:
        for rid, (req, q, loop, _) in list(self.active.items()):
            chunk = stream_chunk(req)
            if chunk is None:
                continue
            chunk["final"] = req.released
            _send(loop, q, chunk)
            if req.released:
                del self.active[rid]
                self.metrics.finished(chunk["meta_info"])

    def shutdown(self) -> None:
        """Stop the thread; abort what is left and stop the stage's workers."""
        self.stopped.set()
        self.thread.join(timeout=5)
        self._fail_all(EngineUnavailable("the server is shutting down"), abort=False)
        if self.dead is None and not self.thread.is_alive():
            self.engine.shutdown()
        else:   # the scheduler is broken or stuck: do not step it again, only stop the compile workers
            self.engine.stage.shutdown()


# ---------------------------------------------------------------------- OpenAI shapes
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "invalid_request_error",
                405: "invalid_request_error", 408: "invalid_request_error", 413: "invalid_request_error",
                415: "invalid_request_error", 431: "invalid_request_error",
                422: "invalid_request_error", 429: "rate_limit_error", 500: "server_error", 503: "server_error"}


# Every client value an error message quotes is shortened where it is quoted (short_value);
# a message longer than this is cut all the same, in case one was quoted elsewhere whole.
MAX_ERROR_MESSAGE = 1000


def error_body(message: str, status: int, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error object."""
    if len(message) > MAX_ERROR_MESSAGE:
        message = f"{message[:MAX_ERROR_MESSAGE - 200]} ... {message[-150:]} (message cut: {len(message):,} characters)"
    if param is not None and len(param) > 200:
        param = param[:197] + "..."
    return {"error": {"message": message, "type": _ERROR_TYPES.get(status, "server_error"),
                      "param": param, "code": code}}


def usage(meta: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's usage object; cached tokens are prompt tokens (the scheduler counts the first
    admission's hit only), so never more than prompt_tokens."""
    prompt = meta["prompt_tokens"]
    return {"prompt_tokens": prompt, "completion_tokens": meta["completion_tokens"],
            "total_tokens": prompt + meta["completion_tokens"],
            "prompt_tokens_details": {"cached_tokens": meta["cached_tokens"]},
            "completion_tokens_wo_jump_forward": meta["completion_tokens_wo_jump_forward"]}


def openai_finish_reason(meta: dict[str, Any], made_calls: bool = False) -> str | None:
    """"stop", "length" or "abort"; "tool_calls" for an output that stopped after making calls."""
    reason = meta["finish_reason"]
    if reason is None:
        return None
    return "tool_calls" if made_calls and reason["type"] == "stop" else reason["type"]


def stage_serves_tools(tag: str) -> bool:
    """Whether the stage `tag` is TOOLS_STAGE or later (it knows structural tags)."""
    order = list(STAGE_MODULES)
    return TOOLS_STAGE in order and order.index(tag) >= order.index(TOOLS_STAGE)


def _max_bytes_per_token(tokenizer) -> int:
    """The most prompt bytes one token can stand for (special tokens' text included)."""
    lengths = [len(b) for b in tokenizer.token_bytes if b]
    for i in tokenizer.special_token_ids:
        text = tokenizer.hf.id_to_token(i)
        if text:
            lengths.append(len(text.encode()))
    return max(lengths, default=1)


# ---------------------------------------------------------------------- the app
def create_app(engine: Engine, options: ServerOptions | None = None,
               on_fatal: Callable[[], None] | None = None) -> FastAPI:
    """The FastAPI app around one engine. `on_fatal` is called if the scheduler loop dies.

    The app owns the engine while it runs: one app per engine, and the app's shutdown
    shuts the engine down (its compile workers included)."""
    options = options or ServerOptions()
    metrics = ServerMetrics(engine, lambda: holder["loop"].step_timings() if "loop" in holder else {})
    holder: dict[str, EngineLoop] = {}
    model_id = engine.model_path.rstrip("/").rsplit("/", 1)[-1]
    # A prompt of more bytes than this has more tokens than the context holds, whatever they are;
    # x2 leaves room for a normalizer that shortens text before tokenizing.
    max_context = engine.scheduler.max_context_len
    max_prompt_bytes = 2 * max_context * _max_bytes_per_token(engine.tokenizer)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        holder["loop"] = EngineLoop(engine, options, metrics, on_fatal)   # lives as long as the app
        app.state.engine_loop = holder["loop"]
        yield
        holder["loop"].shutdown()

    def check_api_key(request: Request) -> None:
        if options.api_key is None or request.url.path == "/health":
            return
        auth = request.headers.get("authorization", "")
        scheme, _, key = auth.partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(key.strip().encode(), options.api_key.encode()):
            raise RequestError("invalid or missing API key: send the header 'Authorization: Bearer <key>'",
                               status=401, code="invalid_api_key")

    # No /docs, /redoc or /openapi.json: FastAPI serves them outside the API-key check, and the
    # handlers read raw bodies, so the generated schema would describe nothing but paths.
    app = FastAPI(title="minisglang", lifespan=lifespan, dependencies=[Depends(check_api_key)],
                  docs_url=None, redoc_url=None, openapi_url=None)
    app.state.options = options   # (_uvicorn_config reads its proxy setting)

    def error(message: str, status: int, param: str | None = None, code: str | None = None,
              retry_after: int | None = None) -> JSONResponse:
        metrics.refused.labels(status=str(status)).inc()
        headers = None if retry_after is None else {"Retry-After": str(retry_after)}
        return JSONResponse(error_body(message, status, param, code), status_code=status, headers=headers)

    @app.exception_handler(RequestError)
    async def _request_error(request, exc: RequestError):
        return error(str(exc), exc.status, exc.param, exc.code, exc.retry_after)

    @app.exception_handler(EngineUnavailable)
    async def _unavailable(request, exc: EngineUnavailable):
        return error(str(exc), 503)

    app.add_middleware(_HeaderLimits, options=options, refuse=lambda message: error(message, 431))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request, exc: StarletteHTTPException):
        path = short_value(request.url.path)
        messages = {404: f"no such endpoint: {short_value(request.method)} {path}",
                    405: f"method {short_value(request.method)} is not allowed on {path}"}
        return error(messages.get(exc.status_code, str(exc.detail)), exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request, exc: RequestValidationError):
        return error("the request is malformed", 400)

    @app.exception_handler(Exception)
    async def _internal(request, exc: Exception):
        return error(f"internal server error ({type(exc).__name__})", 500)

    # ------------------------------------------------------------------ request plumbing
    async def read_body(request: Request) -> bytes:
        """The raw body, refused (415/413/408) before any of it is parsed."""
        ctype, _, ctype_params = request.headers.get("content-type", "").partition(";")
        ctype = ctype.strip().lower()
        if ctype != "application/json":
            raise RequestError(f"Content-Type must be application/json, got {short_value(ctype) if ctype else 'none'}",
                               status=415)
        # The body is read as UTF-8 JSON bytes: a compressed body or another charset would only
        # fail later as "not valid JSON", which hides the cause.
        charset = re.search(r"charset\s*=\s*\"?([^\s;\"]*)", ctype_params, re.IGNORECASE)
        if charset and charset.group(1).lower() not in ("utf-8", "utf8"):
            raise RequestError("the body must be UTF-8 JSON; Content-Type says "
                               f"charset={short_value(charset.group(1))}", status=415)
        encoding = request.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise RequestError(f"Content-Encoding {short_value(encoding)} is not supported: send the body uncompressed",
                               status=415)
        limit = options.max_body_bytes
        declared = request.headers.get("content-length", "")
        too_big = RequestError(f"the request body is larger than the limit of {limit} bytes", status=413)
        if declared.isdigit() and int(declared) > limit:
            raise too_big
        parts, size = [], 0
        try:
            # A client that sends a byte now and then would otherwise hold its connection for ever.
            async with asyncio.timeout(options.body_timeout):
                async for part in request.stream():   # also counts a chunked body that declares no length
                    size += len(part)
                    if size > limit:
                        raise too_big
                    parts.append(part)
        except TimeoutError:
            raise RequestError(f"the request body took longer than {options.body_timeout:g} s to arrive",
                               status=408) from None
        except ClientDisconnect:   # the client's doing, not a server error: no 500, no traceback
            raise RequestError("the client closed the connection before its request body arrived") from None
        return b"".join(parts)

    async def parse_body(model_cls, request: Request):
        """The body read and validated (in the thread pool: a 4 MB body takes a while to parse)."""
        return await run_in_threadpool(parse, model_cls, await read_body(request))

    def check_model(name: str | None) -> None:
        if name is not None and name != model_id:
            raise RequestError(f"the model {short_value(name)} does not exist; this server serves {model_id!r}",
                               status=404, param="model", code="model_not_found")

    def make_req(prompt: str | ChatPrompt, params: SamplingParams, field: str = "prompt",
                 length_field: str | None = None) -> Req:
        """Tokenize (in the thread pool, never on the scheduler or event-loop thread); errors
        name `field`, the request's field the prompt came from. A chat comes encoded already.

        `length_field` names the field the client set the output's length with (None: it set
        none). An unset length is the engine's default cut to what the context has room for,
        as in OpenAI's API: a long prompt is not refused for a limit the client never gave."""
        text = prompt.text if isinstance(prompt, ChatPrompt) else prompt
        if len(text.encode("utf-8", "surrogatepass")) > max_prompt_bytes:
            raise RequestError(f"{field}: the prompt is longer than the model's context of {max_context} tokens",
                               param=field)
        try:
            req = engine.make_request(prompt, params)
        except ValueError as e:   # e.g. a lone surrogate in the prompt
            raise RequestError(f"{field}: {e}", param=field) from e
        prompt_len = len(req.origin_input_ids)
        if prompt_len == 0:
            raise RequestError(f"{field}: the prompt is empty (no tokens)", param=field)
        if prompt_len >= max_context:
            raise RequestError(f"{field}: the prompt has {prompt_len} tokens, the model's context "
                               f"{max_context} (and at least one new token must fit)", param=field)
        room = max_context - prompt_len
        if params.max_new_tokens > room:
            if length_field is not None:
                raise RequestError(f"{length_field}: the prompt has {prompt_len} tokens, so at most {room} new "
                                   f"tokens fit in the model's context of {max_context}; got {params.max_new_tokens}",
                                   param=length_field)
            params.max_new_tokens = room   # this request's own params (built from its body)
        return req

    def refuse_abort(meta: dict[str, Any], grammar_field: str | None = None) -> None:
        """An aborted request is an error for its client, with the status of its kind
        (ABORT_ANSWERS). A grammar's own fault names `grammar_field`, the request's field the
        grammar came from."""
        reason = meta["finish_reason"]
        if reason and reason["type"] == "abort":
            message, kind = reason["message"], reason["kind"]
            status, code = ABORT_ANSWERS[kind]
            if kind == AbortKind.GRAMMAR and grammar_field is not None:
                raise RequestError(f"{grammar_field}: {message}", status=status, param=grammar_field, code=code)
            raise RequestError(message, status=status, code=code, retry_after=reason.get("retry_after"))

    async def first_chunk(gen: AsyncIterator[dict[str, Any]], grammar_field: str | None) -> dict[str, Any]:
        """The first chunk; an abort before anything was sent becomes an error response, not a stream."""
        chunk = await gen.__anext__()
        if chunk["final"]:
            refuse_abort(chunk["meta_info"], grammar_field)
        return chunk

    async def until_disconnected(request: Request) -> None:
        while not await request.is_disconnected():
            await asyncio.sleep(0.1)

    async def unless_disconnected(request: Request, gen: AsyncIterator[dict[str, Any]], wait) -> asyncio.Future:
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

    async def run(request: Request, req: Req, shape, stream: bool, include_usage: bool,
                  grammar_field: str | None = None):
        """Queue `req`; answer with one JSON body, or with server-sent events when streaming.
        `grammar_field`: the request's field its grammar came from (errors about it name it)."""
        client = request.client.host if request.client else "unknown"
        gen = holder["loop"].generate(req, client)
        if not stream:
            async def collect() -> tuple[str, dict[str, Any]]:
                chunk = await first_chunk(gen, grammar_field)
                text, meta = chunk["text"], chunk["meta_info"]
                async for chunk in gen:
                    text, meta = text + chunk["text"], chunk["meta_info"]
                refuse_abort(meta, grammar_field)
                return text, meta

            # A client that leaves is noticed while we wait, and its request aborted.
            work = await unless_disconnected(request, gen, collect())
            if work.cancelled():
                return error("the client disconnected", 400)
            text, meta = work.result()
            return JSONResponse(shape(text, meta, False))

        # Until the first chunk, nothing is sent, so a client that leaves is noticed only by
        # watching: its request may wait in a queue, or its text be held back (a long stop
        # string's possible start) until the end.
        work = await unless_disconnected(request, gen, first_chunk(gen, grammar_field))
        if work.cancelled():
            return error("the client disconnected", 400)
        try:
            first = work.result()
        except Exception:
            await gen.aclose()
            raise

        def sse(obj: Any) -> str:
            return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"

        async def events():
            try:
                chunk, sent = first, None
                while True:
                    if chunk["final"]:
                        refuse_abort(chunk["meta_info"], grammar_field)
                    # The request may finish a chunk before its last: the reason goes with the last only.
                    meta = chunk["meta_info"] if chunk["final"] else {**chunk["meta_info"], "finish_reason": None}
                    out = shape(chunk["text"], meta, True)   # one event, or a list of them (tools)
                    for sent in out if isinstance(out, list) else [out]:
                        yield sse(sent)
                    if chunk["final"]:
                        break
                    chunk = await gen.__anext__()
                if include_usage:
                    yield sse({**sent, "choices": [], "usage": usage(chunk["meta_info"])})
            except (RequestError, EngineUnavailable) as e:   # the stream ends with a reason, not a cut
                status, param = (e.status, e.param) if isinstance(e, RequestError) else (503, None)
                yield sse(error_body(str(e), status, param))
            finally:
                await gen.aclose()   # a client that left aborts its request
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    # ------------------------------------------------------------------ endpoints
    @app.get("/health")
    async def health():
        loop = holder.get("loop")
        if loop is None or not loop.healthy:
            reason = "starting" if loop is None else "shutting down" if loop.dead is None else repr(loop.dead)
            return error(f"unhealthy: {reason}", 503)
        # A thread that is alive but stuck (a step that never returns) answers nobody: not healthy.
        stalled = loop.stalled_for()
        if stalled > options.stall_timeout:
            where = "inside one engine step" if loop.step_started is not None else "outside a step"
            return error(f"unhealthy: the scheduler is stuck: it has not come round for {stalled:.1f} s ({where}) "
                         f"while requests wait; the limit (stall_timeout) is {options.stall_timeout:g} s", 503,
                         code="scheduler_stalled")
        return {"status": "ok"}

    @app.get("/metrics")
    def prometheus_metrics():   # sync: it waits for the engine's lock in the thread pool, not on the event loop
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/get_server_info")
    async def server_info():
        s = engine.scheduler
        return {"model": model_id, "model_path": engine.model_path, "stage": engine.stage.tag,
                "stage_options": {k: v for k, v in engine.stage.ctx.options.items()
                                  if isinstance(v, (str, int, float, bool, type(None)))},
                "max_context_len": s.max_context_len, "max_total_tokens": s.config.max_total_tokens,
                "max_running_requests": s.config.max_running_requests,
                "limits": {k: v for k, v in asdict(options).items() if k != "api_key"},
                "api_key_required": options.api_key is not None,
                "scheduler": holder["loop"].step_timings() if "loop" in holder else None}

    # OpenAI's model object; `created` is when this server started serving it.
    model_card = {"id": model_id, "object": "model", "created": int(time.time()), "owned_by": "minisglang"}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [model_card]}

    @app.get("/v1/models/{name:path}")
    async def one_model(name: str):   # what the openai client's models.retrieve() asks
        check_model(name)
        return model_card

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await parse_body(CompletionRequest, request)
        check_model(body.model)
        req = await run_in_threadpool(make_req, body.prompt, body.to_sampling_params(), "prompt",
                                      "max_tokens" if body.max_tokens is not None else None)
        rid, created = f"cmpl-{uuid.uuid4().hex[:12]}", int(time.time())

        def shape(text, meta, streaming):
            out = {"id": rid, "object": "text_completion", "created": created, "model": model_id,
                   "choices": [{"index": 0, "text": text, "logprobs": None,
                                "finish_reason": openai_finish_reason(meta)}]}
            return out if streaming else {**out, "usage": usage(meta)}

        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return await run(request, req, shape, body.stream, include_usage, body.grammar_field())

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await parse_body(ChatCompletionRequest, request)
        check_model(body.model)
        params = body.to_sampling_params()
        tools, calls_possible = body.tool_dicts(), body.tool_constraint() is not None
        if calls_possible and not stage_serves_tools(engine.stage.tag):
            raise RequestError(f"tools: tool calls need stage {TOOLS_STAGE} or later; this server runs "
                               f"stage {engine.stage.tag}", param="tools")

        length_field = next((k for k in ("max_completion_tokens", "max_tokens") if getattr(body, k) is not None), None)

        def render(with_tools) -> ChatPrompt:
            try:   # special tokens come from the template only, never from a message's text
                return engine.tokenizer.encode_chat(body.message_dicts(), tools=with_tools)
            except ValueError as e:   # a lone surrogate, or special-token text the template changed
                raise RequestError(f"messages: {e}", param="messages") from e
            except Exception as e:   # the template's own raise_exception (e.g. roles out of order)
                raise RequestError(f"messages: the chat template refused them: {e}", param="messages") from e

        def render_and_tokenize() -> Req:
            prompt = render(tools)
            try:
                return make_req(prompt, params, "messages", length_field)
            except RequestError as e:
                if not tools or e.param != "messages" or "context" not in str(e):
                    raise
                # The template writes each tool's description into the prompt: when the messages
                # alone fit, the tools are what does not (128 tools once blamed a one-word message).
                without = render(None)
                if len(without.text.encode("utf-8", "surrogatepass")) > max_prompt_bytes:
                    raise
                alone = len(without.ids)
                if alone >= max_context:
                    raise
                raise RequestError(f"tools: the {len(tools)} tools' descriptions, which the chat template writes into "
                                   f"the prompt, make it longer than the model's context of {max_context} tokens "
                                   f"(the messages alone take {alone}; at least one new token must fit): send fewer "
                                   "or shorter tools", param="tools") from None

        req = await run_in_threadpool(render_and_tokenize)
        rid, created = f"chatcmpl-{uuid.uuid4().hex[:12]}", int(time.time())
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        if calls_possible:   # read the output for calls
            try:
                return await run(request, req, tool_call_shape(rid, created, body), body.stream, include_usage)
            except RequestError as e:
                raise tool_refusal(e, body) from None
        sent_role = [False]

        def shape(text, meta, streaming):
            head = {"id": rid, "created": created, "model": model_id}
            if streaming:
                delta: dict[str, Any] = {"content": text} if text else {}
                if not sent_role[0]:   # OpenAI sends the role in the first delta only
                    delta, sent_role[0] = {"role": "assistant", "content": text}, True
                return {**head, "object": "chat.completion.chunk",
                        "choices": [{"index": 0, "delta": delta, "finish_reason": openai_finish_reason(meta)}]}
            return {**head, "object": "chat.completion",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": openai_finish_reason(meta)}], "usage": usage(meta)}

        return await run(request, req, shape, body.stream, include_usage, body.grammar_field())

    def tool_refusal(e: RequestError, body: ChatCompletionRequest) -> RequestError:
        """The engine's refusal of a tool request's grammar (an unsupported schema keyword) in the
        request's terms: param "tools", or the tool's parameters when the message names its structure."""
        if e.status != 400 or "structural_tag" not in str(e):
            return e
        choice = body.tool_choice_value()
        names = [choice.name] if choice.mode == "function" else [t.name for t in body.function_tools()]
        param = "tools"
        if (m := re.search(r"structures\[(\d+)\]", str(e))) and int(m.group(1)) < len(names):
            tool_index = [t.name for t in body.function_tools()].index(names[int(m.group(1))])
            param = f"tools[{tool_index}].function.parameters"
        return RequestError(f"{param}: {e}", param=param)

    def tool_call_shape(rid: str, created: int, body: ChatCompletionRequest):
        """The chat `shape` of a request whose output may hold tool calls: the output is read
        by a ToolCallParser; a stream's event becomes a list of chunks (content, then calls)."""
        head = {"id": rid, "created": created, "model": model_id}
        parser = ToolCallParser([t.name for t in body.function_tools()])
        sent_role = [False]

        def finished(meta) -> str | None:
            # "tool_calls" only when no call was cut: max_tokens or a stop string may end the
            # output inside one (EOS never does), and the parser gives that one back as content
            reason = openai_finish_reason(meta, made_calls=bool(parser.calls) and not parser.cut)
            if reason is not None:
                metrics.tool_calls.inc(len(parser.calls))
            return reason

        def shape(text, meta, streaming):
            final = meta["finish_reason"] is not None
            events = parser.feed(text) + (parser.finish() if final else [])
            if not streaming:
                calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                         for c in parser.calls]
                message: dict[str, Any] = {"role": "assistant", "content": parser.content or (None if calls else "")}
                if calls:
                    message["tool_calls"] = calls
                return {**head, "object": "chat.completion", "usage": usage(meta),
                        "choices": [{"index": 0, "message": message, "finish_reason": finished(meta)}]}
            deltas = openai_deltas(events)
            if not sent_role[0]:   # OpenAI sends the role in the first delta only
                deltas = [{"role": "assistant", **(deltas[0] if deltas else {"content": ""})}, *deltas[1:]]
                sent_role[0] = True
            if final and not deltas:
                deltas = [{}]
            return [{**head, "object": "chat.completion.chunk",
                     "choices": [{"index": 0, "delta": d,
                                  "finish_reason": finished(meta) if final and i == len(deltas) - 1 else None}]}
                    for i, d in enumerate(deltas)]

        return shape

    @app.post("/generate")
    async def native(request: Request):
        body = await parse_body(GenerateRequest, request)
        given = (body.sampling_params or {}).get("max_new_tokens") is not None
        req = await run_in_threadpool(make_req, body.text, body.to_sampling_params(), "text",
                                      "sampling_params.max_new_tokens" if given else None)
        return await run(request, req, lambda text, meta, streaming: {"text": text, "meta_info": meta},
                         body.stream, False, "sampling_params")

    return app


def serve(engine: Engine, host: str = "127.0.0.1", port: int = 30000,
          options: ServerOptions | None = None) -> int:
    """Serve until SIGTERM/SIGINT (returns 0) or until the engine loop dies (returns 1)."""
    import uvicorn

    options = options or ServerOptions()
    state: dict[str, Any] = {}

    def on_fatal() -> None:
        state["server"].should_exit = True
        # A stuck shutdown must not keep a dead server up: exit hard if we are still here in 10 s.
        threading.Timer(10, os._exit, args=(1,)).start()

    app = create_app(engine, options, on_fatal)

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:   # SIGTERM / SIGINT: drain, then abort
            loop = getattr(app.state, "engine_loop", None)
            if loop is not None:
                loop.start_draining()
            super().handle_exit(sig, frame)

    config = _uvicorn_config(app, host, port, timeout_graceful_shutdown=int(options.drain_timeout) + 1)
    server = state["server"] = Server(config)
    # The model, tokenizer and imported libraries are ~10^5-10^6 objects that live as long as the
    # process; frozen, Python's full collections stop rescanning them (100-200 ms a pass, landing
    # in a decode step or a compile: measured by benchmarks/bench_compile.py's gc.freeze note).
    gc.collect()
    gc.freeze()
    # What the server makes later (a hostile grammar's million nodes) is frozen after any full
    # collection that found it slow to walk, so no later one walks it again (gc_guard.py).
    guard = GcGuard().install()
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
    loop = getattr(app.state, "engine_loop", None)
    return 1 if loop is not None and loop.dead is not None else 0


def _uvicorn_config(app: FastAPI, host: str, port: int, **more: Any):
    """uvicorn's settings for an app of `create_app`: X-Forwarded-For believed from the
    proxies its ServerOptions name, and from nobody when it names none."""
    import uvicorn

    proxies = app.state.options.forwarded_allow_ips
    # uvicorn reads X-Forwarded-For by default, and its forwarded_allow_ips=None means
    # $FORWARDED_ALLOW_IPS or 127.0.0.1: trusting no proxy takes proxy_headers=False.
    options = app.state.options
    return uvicorn.Config(app, host=host, port=port, log_level="warning", proxy_headers=bool(proxies),
                          forwarded_allow_ips=proxies or None, http=_h11_protocol(),
                          h11_max_incomplete_event_size=options.max_header_bytes, **more)


class _HeaderLimits:
    """ASGI middleware: a request with more headers than `max_headers`, or a head (request
    line and headers) over `max_header_bytes`, gets `refuse(message)`, a 431 response."""

    def __init__(self, app, options: ServerOptions, refuse: Callable[[str], Response]):
        self.app, self.options, self.refuse = app, options, refuse

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            headers = scope["headers"]
            # "METHOD /path?query HTTP/1.1\r\n", then "name: value\r\n" per header
            size = (len(scope["method"]) + len(scope.get("raw_path") or b"") + len(scope["query_string"]) + 12
                    + sum(len(name) + len(value) + 4 for name, value in headers))
            message = None
            if len(headers) > self.options.max_headers:
                message = f"the request has {len(headers)} headers; the limit is {self.options.max_headers}"
            elif size > self.options.max_header_bytes:
                message = f"the request's headers are larger than the limit of {self.options.max_header_bytes} bytes"
            if message is not None:
                await self.refuse(message)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _h11_protocol():
    """uvicorn's h11 protocol, answering a request head it cannot read in OpenAI's error shape.

    h11 stops reading a head that grows past `h11_max_incomplete_event_size` while it
    arrives (a head that arrives whole is measured by _HeaderLimits). uvicorn then answers
    a plain-text 400 and closes at once, and closing while the client still sends resets
    the connection: the client sees a dropped connection, not the answer. Here the answer
    is a 431 (or a 400 for malformed HTTP) with OpenAI's body, and what the client still
    sends is read and dropped for a moment before the connection closes."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Connection(h11.Connection):
        """h11's connection, remembering the protocol error it raised (its hint: 431 or 400)."""

        error: h11.RemoteProtocolError | None = None

        def next_event(self):
            try:
                return super().next_event()
            except h11.RemoteProtocolError as e:
                self.error = e
                raise

    class Protocol(H11Protocol):
        def __init__(self, config, *args, **kwargs):
            super().__init__(config, *args, **kwargs)
            self.conn = Connection(h11.SERVER, config.h11_max_incomplete_event_size)
            self.limit, self.draining = config.h11_max_incomplete_event_size, False

        def send_400_response(self, msg: str) -> None:   # uvicorn's hook for a head h11 refused
            e = self.conn.error
            status = 431 if e is not None and e.error_status_hint == 431 else 400
            message = (f"the request's headers are larger than the limit of {self.limit} bytes" if status == 431
                       else f"the request is not valid HTTP/1.1 ({e or msg})")
            body = json.dumps(error_body(message, status)).encode()
            for event in (h11.Response(status_code=status, reason=HTTPStatus(status).phrase.encode(), headers=[
                    (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close")]), h11.Data(data=body), h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
            self.draining = True
            self.loop.call_later(1.0, self.transport.close)   # the client has a second to finish sending

        def data_received(self, data: bytes) -> None:
            if not self.draining:
                super().data_received(data)

    return Protocol


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
