"""`minisglang serve`: an OpenAI-compatible HTTP server (and SGLang's native /generate).

    minisglang serve --port 30000            # loopback only unless --host says otherwise

One thread owns the scheduler and runs `step()` in a loop (`EngineLoop`); HTTP handlers
only put requests into its inbox and read chunks from their own queue. So the scheduler
stays single-threaded, exactly as in the offline `Engine`, and a slow or failed grammar
compile never blocks the web server.

Endpoints: GET /v1/models; POST /v1/completions, /v1/chat/completions (stream=true gives
server-sent events), with `response_format` {"type": "json_schema" | "json_object"} and
the extra fields `regex`, `ebnf`, `json_schema`; POST /generate (native). Bad input
(malformed JSON, unknown parameters, an invalid regex or schema) is HTTP 400 with a
message; a client that disconnects aborts its request.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import threading
import time
import uuid
from typing import Any, AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from .core import Req, SamplingParams
from .engine import Engine, stream_chunk


class BadRequest(ValueError):
    """Input the server refuses with HTTP 400."""


class EngineLoop:
    """Runs an Engine's scheduler on its own thread; thread-safe submit/abort."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.inbox: queue.Queue = queue.Queue()
        self.active: dict[int, tuple[Req, asyncio.Queue, asyncio.AbstractEventLoop]] = {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="minisglang-scheduler", daemon=True)
        self.thread.start()

    async def generate(self, prompt: str, params: SamplingParams) -> AsyncIterator[dict[str, Any]]:
        """Chunks of one request (see engine.stream_chunk); aborts it if the consumer leaves."""
        out: asyncio.Queue = asyncio.Queue()
        rid_box: list[int] = []
        self.inbox.put(("submit", prompt, params, out, asyncio.get_running_loop(), rid_box))
        finished = False
        try:
            while True:
                chunk = await out.get()
                if isinstance(chunk, Exception):
                    raise chunk
                yield chunk
                if chunk["meta_info"]["finish_reason"] is not None and chunk.get("final"):
                    finished = True
                    return
        finally:
            if not finished:
                self.inbox.put(("abort", rid_box))

    def _run(self) -> None:
        sched = self.engine.scheduler
        while not self.stopped.is_set():
            self._drain_inbox(block=not sched.has_work())
            if sched.has_work():
                try:
                    self.engine.step()
                except Exception as e:  # a bug must not kill the server silently: fail everyone loudly
                    for req, q, loop in self.active.values():
                        loop.call_soon_threadsafe(q.put_nowait, RuntimeError(f"engine step failed: {e!r}"))
                    self.active.clear()
                    raise
            self._publish()

    def _drain_inbox(self, block: bool) -> None:
        try:
            item = self.inbox.get(timeout=0.05) if block else self.inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            if item[0] == "submit":
                _, prompt, params, q, loop, rid_box = item
                try:
                    req = self.engine.submit(prompt, params)
                    rid_box.append(req.rid)
                    self.active[req.rid] = (req, q, loop)
                except Exception as e:
                    loop.call_soon_threadsafe(q.put_nowait, BadRequest(str(e)))
            elif item[0] == "abort" and item[1]:
                self.engine.abort(item[1][0])
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                return

    def _publish(self) -> None:
        for rid, (req, q, loop) in list(self.active.items()):
            chunk = stream_chunk(req)
            if chunk is None:
                continue
            chunk["final"] = req.released
            loop.call_soon_threadsafe(q.put_nowait, chunk)
            if req.released:
                del self.active[rid]

    def shutdown(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)
        self.engine.shutdown()


# ---------------------------------------------------------------------- request parsing
_OPENAI_TO_OURS = {"max_tokens": "max_new_tokens", "max_completion_tokens": "max_new_tokens"}
_IGNORED = {"model", "n", "user", "logprobs", "echo", "presence_penalty", "frequency_penalty",
            "stream_options", "logit_bias", "best_of", "suffix"}


def parse_openai_params(body: dict[str, Any]) -> SamplingParams:
    """OpenAI request fields -> SamplingParams; unknown fields are an error naming them."""
    if body.get("n", 1) != 1:
        raise BadRequest("only n=1 is supported")
    params: dict[str, Any] = {}
    for key, value in body.items():
        if key in _IGNORED or key in ("prompt", "messages", "stream", "response_format"):
            continue
        params[_OPENAI_TO_OURS.get(key, key)] = value
    fmt = body.get("response_format")
    if fmt is not None:
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        if kind == "json_schema":
            spec = fmt.get("json_schema") or {}
            if "schema" not in spec:
                raise BadRequest("response_format json_schema needs json_schema.schema")
            params["json_schema"] = spec["schema"]
        elif kind == "json_object":
            params["json_schema"] = {"type": "object"}
        elif kind != "text":
            raise BadRequest(f"unsupported response_format type {kind!r} (json_schema, json_object, text)")
    try:
        return SamplingParams.from_dict(params)
    except (TypeError, ValueError) as e:
        raise BadRequest(str(e)) from e


def usage(meta: dict[str, Any]) -> dict[str, int]:
    return {"prompt_tokens": meta["prompt_tokens"], "completion_tokens": meta["completion_tokens"],
            "total_tokens": meta["prompt_tokens"] + meta["completion_tokens"],
            "completion_tokens_wo_jump_forward": meta["completion_tokens_wo_jump_forward"],
            "cached_tokens": meta["cached_tokens"]}


def create_app(engine: Engine):
    """The FastAPI app around one engine."""
    loop_holder: dict[str, EngineLoop] = {}
    model_id = engine.model_path.rstrip("/").rsplit("/", 1)[-1]

    @contextlib.asynccontextmanager
    async def lifespan(app):
        loop_holder["loop"] = EngineLoop(engine)   # the scheduler thread lives as long as the app
        yield
        loop_holder["loop"].shutdown()

    app = FastAPI(title="minisglang", lifespan=lifespan)

    def error(message: str, status: int = 400):
        return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": status}},
                            status_code=status)

    async def body_of(request: Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError as e:
            raise BadRequest(f"the request body is not valid JSON: {e}") from e
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        return body

    async def first_chunk(gen: AsyncIterator[dict[str, Any]]) -> dict[str, Any]:
        """The first chunk; an abort before any output (a bad grammar) becomes a 400."""
        chunk = await gen.__anext__()
        reason = chunk["meta_info"]["finish_reason"]
        if reason and reason["type"] == "abort" and chunk["meta_info"]["completion_tokens"] == 0:
            raise BadRequest(reason.get("message", "request aborted"))
        return chunk

    async def run(prompt: str, params: SamplingParams, shape, stream: bool):
        gen = loop_holder["loop"].generate(prompt, params)
        try:
            first = await first_chunk(gen)
        except BadRequest:
            await gen.aclose()
            raise
        if not stream:
            text, meta = first["text"], first["meta_info"]
            async for chunk in gen:
                text += chunk["text"]
                meta = chunk["meta_info"]
            return JSONResponse(shape(text, meta, False))

        async def events():
            try:
                chunk = first
                while True:
                    yield f"data: {json.dumps(shape(chunk['text'], chunk['meta_info'], True), ensure_ascii=False)}\n\n"
                    if chunk.get("final"):
                        break
                    chunk = await gen.__anext__()
                yield "data: [DONE]\n\n"
            finally:
                await gen.aclose()   # a client that left aborts its request

        return StreamingResponse(events(), media_type="text/event-stream")

    def openai_reason(meta):
        r = meta["finish_reason"]
        return None if r is None else ("stop" if r["type"] == "stop" else "length" if r["type"] == "length" else "abort")

    @app.exception_handler(BadRequest)
    async def _bad(request, exc: BadRequest):
        return error(str(exc))

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_id, "object": "model", "owned_by": "minisglang"}]}

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await body_of(request)
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise BadRequest("prompt must be a string")
        rid, created = f"cmpl-{uuid.uuid4().hex[:12]}", int(time.time())

        def shape(text, meta, streaming):
            return {"id": rid, "object": "text_completion", "created": created, "model": model_id,
                    "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": openai_reason(meta)}],
                    **({} if streaming and meta["finish_reason"] is None else {"usage": usage(meta)})}

        return await run(prompt, parse_openai_params(body), shape, bool(body.get("stream")))

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await body_of(request)
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
            raise BadRequest("messages must be a list of {role, content} objects")
        try:
            prompt = engine.tokenizer.apply_chat_template(messages)
        except Exception as e:
            raise BadRequest(f"cannot apply the chat template: {e}") from e
        rid, created = f"chatcmpl-{uuid.uuid4().hex[:12]}", int(time.time())

        def shape(text, meta, streaming):
            if streaming:
                choice = {"index": 0, "delta": {"role": "assistant", "content": text},
                          "finish_reason": openai_reason(meta)}
                out = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model_id,
                       "choices": [choice]}
                return out if meta["finish_reason"] is None else {**out, "usage": usage(meta)}
            return {"id": rid, "object": "chat.completion", "created": created, "model": model_id,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": openai_reason(meta)}], "usage": usage(meta)}

        return await run(prompt, parse_openai_params(body), shape, bool(body.get("stream")))

    @app.post("/generate")
    async def native(request: Request):
        body = await body_of(request)
        if not isinstance(body.get("text"), str):
            raise BadRequest("text must be a string")
        try:
            params = SamplingParams.from_dict(body.get("sampling_params"))
        except (TypeError, ValueError) as e:
            raise BadRequest(str(e)) from e
        return await run(body["text"], params, lambda text, meta, streaming: {"text": text, "meta_info": meta},
                         bool(body.get("stream")))

    return app


def serve(engine: Engine, host: str = "127.0.0.1", port: int = 30000) -> None:
    import uvicorn

    uvicorn.run(create_app(engine), host=host, port=port, log_level="warning")
