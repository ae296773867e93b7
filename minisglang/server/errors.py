"""How the server says no: OpenAI's error body, the HTTP status of each abort kind
(`ABORT_ANSWERS`), and the app's exception handlers.

Every error is `{"error": {"message", "type", "param", "code"}}`; a client value the message
quotes is shortened where it is quoted (`short_value`), and a message is cut all the same
past `MAX_ERROR_MESSAGE` characters.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from ..constrained.json_schema import short_value
from ..core import AbortKind
from ..protocol import RequestError
from .engine_loop import EngineUnavailable
from .state import ServerState, server_state

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

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    431: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
}


# Every client value an error message quotes is shortened where it is quoted (short_value);
# a message longer than this is cut all the same, in case one was quoted elsewhere whole.
MAX_ERROR_MESSAGE = 1000


def error_body(message: str, status: int, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error object."""
    if len(message) > MAX_ERROR_MESSAGE:
        message = (
            f"{message[: MAX_ERROR_MESSAGE - 200]} ... {message[-150:]} (message cut: {len(message):,} characters)"
        )
    if param is not None and len(param) > 200:
        param = param[:197] + "..."
    return {
        "error": {"message": message, "type": _ERROR_TYPES.get(status, "server_error"), "param": param, "code": code}
    }


def error_response(
    state: ServerState,
    message: str,
    status: int,
    param: str | None = None,
    code: str | None = None,
    retry_after: int | None = None,
) -> JSONResponse:
    """An error answer, counted in the metrics' refused requests."""
    state.metrics.refused.labels(status=str(status)).inc()
    headers = None if retry_after is None else {"Retry-After": str(retry_after)}
    return JSONResponse(error_body(message, status, param, code), status_code=status, headers=headers)


# nginx's status for a client that closed its request before the answer (no standard one)
CLIENT_CLOSED_REQUEST = 499


def client_left(state: ServerState) -> Response:
    """The answer to a client that disconnected before it: nobody reads it. Counted as a
    departure, not a refusal (`minisglang_client_disconnects`), with nginx's status 499."""
    state.metrics.disconnects.inc()
    return Response(status_code=CLIENT_CLOSED_REQUEST)


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


async def _request_error(request: Request, exc: RequestError) -> JSONResponse:
    return error_response(server_state(request), str(exc), exc.status, exc.param, exc.code, exc.retry_after)


async def _unavailable(request: Request, exc: EngineUnavailable) -> JSONResponse:
    return error_response(server_state(request), str(exc), 503)


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    path = short_value(request.url.path)
    messages = {
        404: f"no such endpoint: {short_value(request.method)} {path}",
        405: f"method {short_value(request.method)} is not allowed on {path}",
    }
    return error_response(server_state(request), messages.get(exc.status_code, str(exc.detail)), exc.status_code)


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    return error_response(server_state(request), "the request is malformed", 400)


async def _client_gone(request: Request, exc: ClientDisconnect) -> Response:
    # (before its body arrived: counted as a departure, not as a 400 refusal, a stranger found)
    return client_left(server_state(request))


async def _internal(request: Request, exc: Exception) -> JSONResponse:
    return error_response(server_state(request), f"internal server error ({type(exc).__name__})", 500)


def add_error_handlers(app: FastAPI) -> None:
    """Answer every exception a handler raises with OpenAI's error body: a RequestError with
    its own status, EngineUnavailable 503, FastAPI's own 404/405/validation errors, a client
    gone before its body arrived 499 (`client_left`), and anything else 500 (naming only the exception's type)."""
    handlers: list[tuple[type[Exception], Any]] = [
        (RequestError, _request_error),
        (EngineUnavailable, _unavailable),
        (StarletteHTTPException, _http_error),
        (RequestValidationError, _validation_error),
        (ClientDisconnect, _client_gone),
        (Exception, _internal),
    ]
    for exc_class, handler in handlers:
        app.add_exception_handler(exc_class, handler)
