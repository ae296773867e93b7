"""POST /v1/responses (OpenAI's Responses API): the request is a chat completion said another
way (protocol_responses.py writes it as one), served by the chat route's own `serve_chat`
(the same prompt, sampling params, constraint and tool calls), and its answer shaped as a
response (responses_shapes.py). An error names this request's field, not chat's."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..protocol import RequestError
from ..protocol_responses import Origin, ResponsesRequest, renamed
from .client_threads import parse_body, run_for_client
from .prompts import check_model
from .responses_shapes import response_shape
from .routes_openai import serve_chat
from .state import server_state

router = APIRouter()


@router.post("/v1/responses")
async def responses(request: Request) -> Response:
    state = server_state(request)
    body = await parse_body(ResponsesRequest, request, state.options)
    check_model(state, body.model)
    origin: list[Origin] = []  # (where each chat message came from: errors name that)
    try:
        # (in the thread pool, as parse_body's parse: a 4 MB input of calls and outputs
        # takes seconds to write and check as a chat, which on the event loop held every stream)
        chat, origin = await run_for_client(request, body.to_chat)
        return await serve_chat(state, request, chat, lambda shape: response_shape(shape, body, state.model_id))
    except RequestError as e:
        raise renamed(e, origin) from None
