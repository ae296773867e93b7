"""SGLang's native endpoints and the operator's: POST /generate, GET /health, /metrics
(Prometheus), /get_server_info and /get_model_info."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..core import Req
from ..metrics import CONTENT_TYPE
from ..protocol import GenerateRequest
from .client_threads import parse_body, run_for_client
from .errors import error_response
from .openai_shapes import Shape
from .prompts import make_req
from .state import ServerState, server_state
from .streaming import answer

router = APIRouter()


@router.post("/generate")
async def native(request: Request) -> Response:
    state = server_state(request)
    body = await parse_body(GenerateRequest, request, state.options)
    req = await run_for_client(request, native_req, state, body)
    # A grammar's error names the key it came from (`sampling_params.structural_tag`).
    constraint = req.sampling_params.constraint()
    field = "sampling_params" if constraint is None else f"sampling_params.{constraint[0]}"
    return await answer(state, request, [req], [text_so_far()], body.stream, False, field)


def native_req(state: ServerState, body: GenerateRequest) -> Req:
    """The request's `Req`, its sampling params made here too (in the thread pool: a 4 MB
    json_schema or structural_tag is written out and read back as JSON)."""
    given = (body.sampling_params or {}).get("max_new_tokens") is not None
    params = body.to_sampling_params(state.engine.sampling_defaults)
    return make_req(state, body.text, params, "text", "sampling_params.max_new_tokens" if given else None)


def text_so_far() -> Shape:
    """/generate's body: each streamed event holds the text so far, as SGLang's does (its
    `incremental_streaming_output` is off by default; its clients read `text[len(seen):]`).
    Ours sent each event's new text only, and an SGLang client joined the wrong pieces."""
    seen: list[str] = []

    def shape(text: str, meta: dict[str, Any], streaming: bool) -> dict[str, Any]:
        if streaming:
            seen.append(text)
            text = "".join(seen)
        return {"text": text, "meta_info": meta}

    return shape


@router.get("/health", response_model=None)
async def health(request: Request) -> dict[str, str] | Response:
    state = server_state(request)
    loop, options = state.loop, state.options
    if loop is None or not loop.healthy:
        reason = "starting" if loop is None else "shutting down" if loop.dead is None else repr(loop.dead)
        return error_response(state, f"unhealthy: {reason}", 503)
    # A thread that is alive but stuck (a step that never returns) answers nobody: not healthy.
    stalled = loop.stalled_for()
    if stalled > options.stall_timeout:
        where = "inside one engine step" if loop.step_started is not None else "outside a step"
        return error_response(
            state,
            f"unhealthy: the scheduler is stuck: it has not come round for {stalled:.1f} s "
            f"({where}) while requests wait; the limit (stall_timeout) is "
            f"{options.stall_timeout:g} s",
            503,
            code="scheduler_stalled",
        )
    return {"status": "ok"}


@router.get("/metrics")
async def prometheus_metrics(request: Request) -> Response:
    # The engine's stats wait for its lock (a step ends first): in the thread pool, in the
    # client's turn, so one client's burst of scrapes neither blocks the event loop nor takes
    # the threads other clients' requests need (stall hunt 8: 250 at once, 1-2 s for others).
    return Response(await run_for_client(request, server_state(request).metrics.render), media_type=CONTENT_TYPE)


@router.get("/get_server_info", response_model=None)
async def server_info(request: Request) -> dict[str, Any]:
    state = server_state(request)
    engine, options = state.engine, state.options
    stats = await run_for_client(request, engine.stats)  # (as /metrics: never on the event loop)
    return {
        "model": state.model_id,
        "model_path": engine.model_path,
        **engine.settings(),
        "limits": {k: v for k, v in asdict(options).items() if k != "api_key"},
        "api_key_required": options.api_key is not None,
        "scheduler": state.loop.step_timings() if state.loop is not None else None,
        # (what /metrics exports, here too: a stranger looked for the load in this answer first)
        "load": {k: getattr(stats, k) for k in _LOAD},
    }


_LOAD = ("running", "waiting_queue", "grammar_queue", "free_kv_slots", "total_kv_slots", "free_request_slots")


@router.get("/get_model_info", response_model=None)
async def model_info(request: Request) -> dict[str, Any]:
    """SGLang's model info (its client, RuntimeEndpoint, asks for it when it starts)."""
    engine = server_state(request).engine
    return {"model_path": engine.model_path, "tokenizer_path": engine.model_path, "is_generation": True}
