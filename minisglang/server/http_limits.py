"""What the HTTP layer refuses before a handler parses anything: a client starting requests
faster than its rate (429, `h11_protocol` at a new connection and `RateLimits` per request;
request_rate.py), a request head with too many or too large headers (431, `HeaderLimits`
and `h11_protocol`), and a body that is not uncompressed UTF-8 JSON (415), too large (413)
or too slow to arrive (408) (`read_body`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import re
from collections.abc import Callable
from http import HTTPStatus

from fastapi import Request
from fastapi.responses import Response

from ..constrained.json_schema import short_value
from ..protocol import RequestError
from .errors import error_body
from .request_rate import RequestRate, retry_after
from .state import ServerOptions


async def read_body(request: Request, options: ServerOptions) -> bytes:
    """The raw body, refused (415/413/408) before any of it is parsed."""
    ctype, _, ctype_params = request.headers.get("content-type", "").partition(";")
    ctype = ctype.strip().lower()
    if ctype != "application/json":
        raise RequestError(
            f"Content-Type must be application/json, got {short_value(ctype) if ctype else 'none'}", status=415
        )
    # The body is read as UTF-8 JSON bytes: a compressed body or another charset would only
    # fail later as "not valid JSON", which hides the cause.
    charset = re.search(r"charset\s*=\s*\"?([^\s;\"]*)", ctype_params, re.IGNORECASE)
    if charset and charset.group(1).lower() not in ("utf-8", "utf8"):
        raise RequestError(
            f"the body must be UTF-8 JSON; Content-Type says charset={short_value(charset.group(1))}", status=415
        )
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise RequestError(
            f"Content-Encoding {short_value(encoding)} is not supported: send the body uncompressed", status=415
        )
    limit = options.max_body_bytes
    declared = request.headers.get("content-length", "")
    too_big = RequestError(f"the request body is larger than the limit of {limit} bytes", status=413)
    if declared.isdigit() and int(declared) > limit:
        raise too_big

    async def collect() -> list[bytes]:
        parts, size = [], 0
        async for part in request.stream():  # also counts a chunked body that declares no length
            size += len(part)
            if size > limit:
                raise too_big
            parts.append(part)
        return parts

    try:
        # A client that sends a byte now and then would otherwise hold its connection for ever.
        parts = await asyncio.wait_for(collect(), options.body_timeout)
    except asyncio.TimeoutError:  # the builtin TimeoutError from Python 3.11 on
        raise RequestError(
            f"the request body took longer than {options.body_timeout:g} s to arrive", status=408
        ) from None
    return b"".join(parts)


class HeaderLimits:
    """ASGI middleware: a request with more headers than `max_headers`, or a head (request
    line and headers) over `max_header_bytes`, gets `refuse(message)`, a 431 response."""

    def __init__(self, app, options: ServerOptions, refuse: Callable[[str], Response]):
        self.app, self.options, self.refuse = app, options, refuse

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            headers = scope["headers"]
            # "METHOD /path?query HTTP/1.1\r\n", then "name: value\r\n" per header
            size = (
                len(scope["method"])
                + len(scope.get("raw_path") or b"")
                + len(scope["query_string"])
                + 12
                + sum(len(name) + len(value) + 4 for name, value in headers)
            )
            message = None
            if len(headers) > self.options.max_headers:
                message = f"the request has {len(headers)} headers; the limit is {self.options.max_headers}"
            elif size > self.options.max_header_bytes:
                message = f"the request's headers are larger than the limit of {self.options.max_header_bytes} bytes"
            if message is not None:
                await self.refuse(message)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def too_fast(options: ServerOptions, wait: float) -> str:
    """The 429's message for a client that may start its next request in `wait` seconds."""
    return (
        f"this client starts requests faster than {options.max_requests_per_second_per_client:g} a second "
        f"(limit max_requests_per_second_per_client, bursts of {options.request_burst_per_client}); "
        f"retry in {wait:.2f} s"
    )


class RateLimits:
    """ASGI middleware: a request whose client has no token left in `rate` gets
    `refuse(message, retry_after)`, a 429 response, before any other middleware or the
    router sees it (the cheapest refusal once a request's head has been read)."""

    def __init__(self, app, options: ServerOptions, rate: RequestRate, refuse: Callable[[str, int], Response]):
        self.app, self.options, self.rate, self.refuse = app, options, rate, refuse

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            wait = self.rate.take(scope_client(scope))
            if wait > 0:
                await self.refuse(too_fast(self.options, wait), retry_after(wait))(scope, receive, send)
                return
        await self.app(scope, receive, send)


# A body that keeps arriving in pieces under SMALL_PIECE bytes (after its first
# SMALL_PIECES_READ_AT_ONCE of them) is read at most once every PIECE_REST seconds: each piece
# costs the one event loop a callback, h11's event and the app's receive, and 200 connections
# sending a body a byte a packet held another client's 8-token answer at ~0.3-1.2 s (a
# stranger's trickle; as bad from 50 addresses, so no per-client limit bounds it).
SMALL_PIECE = 1024
SMALL_PIECES_READ_AT_ONCE = 8
PIECE_REST = 0.2


class WritesToALeftConnection(logging.Filter):
    """Drops asyncio's `socket.send() raised exception.`: a socket transport logs it for each
    write past the fifth after its connection failed, and uvicorn learns of the loss only a
    loop turn later, so a stream's burst of chunks to a client that had just left wrote
    that many lines (clients leaving their streams filled the server's log with hundreds, a
    stranger's stall hunt). The server counts those clients (minisglang_client_disconnects_total)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != "socket.send() raised exception."


WRITES_TO_A_LEFT_CONNECTION = WritesToALeftConnection()


def h11_protocol(options: ServerOptions, rate: RequestRate, refused: Callable[[int], None] = lambda status: None):
    """uvicorn's h11 protocol, answering a request head it cannot read in OpenAI's error shape,
    and one that does not arrive within `header_timeout` seconds; closing a connection whose
    client leaves its answer unread for `write_timeout` seconds.

    h11 stops reading a head that grows past `h11_max_incomplete_event_size` while it
    arrives (a head that arrives whole is measured by HeaderLimits). uvicorn then answers
    a plain-text 400 and closes at once, and closing while the client still sends resets
    the connection: the client sees a dropped connection, not the answer. Here the answer
    is a 431 (or a 400 for malformed HTTP) with OpenAI's body, and what the client still
    sends is read and dropped for a moment before the connection closes.

    uvicorn gives a head no deadline (its keep-alive timeout starts only after an answer, and
    ends at the first byte of the next head): a connection that sent nothing, or a few bytes of
    a head, stayed open for ever, and a thousand of them took every file descriptor of a server
    under `ulimit -n 1024` (a stranger's find: every other client timed out). Here the head has
    `header_timeout` seconds from the connection's opening or the answer before; one begun and
    not finished is a 408, a connection that sent nothing is closed.

    Each answer it writes itself is counted by `refused(status)` (the metrics' refused
    requests, as every other error answer is).

    A client with no token left in `rate` (request_rate.py) has its new connection answered
    429 before its head is read: a flood of connections that each send one request is refused
    for a fraction of what reading and routing each request costs. (Requests on a connection
    already open take their tokens in `RateLimits`.)

    Nor has uvicorn a deadline for writing: a client that opened a stream and read none of it
    kept its connection and every chunk the engine made for it (queued while the send waited)
    for as long as it stayed connected. Here a send buffer that stays full (the transport's
    pause_writing, with no resume_writing) for `write_timeout` seconds closes the connection:
    the app then sees the client leave, and aborts its requests.

    asyncio's own warning for each write to a connection its client has left is dropped
    (`WritesToALeftConnection`)."""
    logging.getLogger("asyncio").addFilter(WRITES_TO_A_LEFT_CONNECTION)  # (once: a filter is added once)
    header_timeout, write_timeout = options.header_timeout, options.write_timeout
    trusted = trusted_proxies(options.forwarded_allow_ips)
    open_by_client: dict[str, int] = {}  # client address -> its connections open now
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
            # uvicorn types self.conn as h11's class; ours is kept beside it for its `error`.
            self.reader = Connection(h11.SERVER, config.h11_max_incomplete_event_size)
            self.conn = self.reader
            self.limit, self.draining = config.h11_max_incomplete_event_size, False
            self.head_deadline: asyncio.TimerHandle | None = None
            self.write_deadline: asyncio.TimerHandle | None = None
            self.counted: str | None = None  # the client address this connection counts against
            self.small_pieces = 0  # pieces of this request's body under SMALL_PIECE bytes so far
            self.resting = False  # reading paused for PIECE_REST (a body coming in small pieces)

        def send_400_response(self, msg: str) -> None:  # uvicorn's hook for a head h11 refused
            e = self.reader.error
            status = 431 if e is not None and e.error_status_hint == 431 else 400
            refused(status)
            message = (
                f"the request's headers are larger than the limit of {self.limit} bytes"
                if status == 431
                else f"the request is not valid HTTP/1.1 ({e or msg})"
            )
            body = json.dumps(error_body(message, status)).encode()
            for event in (
                h11.Response(
                    status_code=status,
                    reason=HTTPStatus(status).phrase.encode(),
                    headers=[
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"connection", b"close"),
                    ],
                ),
                h11.Data(data=body),
                h11.EndOfMessage(),
            ):
                self.transport.write(self.conn.send(event))
            self.close_soon()

        def close_soon(self) -> None:
            """Close after a second in which what the client still sends is read and dropped
            (closing at once while it sends resets the connection, and the answer is lost)."""
            self.draining = True
            self.loop.call_later(1.0, self.transport.close)  # the client has a second to finish sending

        def data_received(self, data: bytes) -> None:
            if self.draining:
                return
            super().data_received(data)
            if self.conn.their_state is not h11.SEND_BODY:
                self.small_pieces = 0  # (a head, or a body complete)
            elif len(data) < SMALL_PIECE:
                self.small_pieces += 1
                if self.small_pieces > SMALL_PIECES_READ_AT_ONCE and not self.resting:
                    self.resting = True
                    self.transport.pause_reading()  # what arrives meanwhile is read in one piece
                    self.loop.call_later(PIECE_REST, self.read_on)

        def read_on(self) -> None:
            self.resting = False
            if not self.transport.is_closing() and not self.flow.read_paused:  # (uvicorn's own pause stays)
                self.transport.resume_reading()

        # -- the connections a client may hold, and the head's deadline
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            peer = transport.get_extra_info("peername")
            self.counted = client_of(peer[0]) if peer and not trusted(peer[0]) else None
            if self.counted is not None:
                open_by_client[self.counted] = open_by_client.get(self.counted, 0) + 1
                if open_by_client[self.counted] > options.max_connections_per_client:
                    message = (
                        f"this client has more than {options.max_connections_per_client} connections open "
                        "(limit max_connections_per_client)"
                    )
                    self.write_raw(503, message)
                    return
                wait = rate.wait(self.counted)
                if wait > 0:
                    self.write_raw(429, too_fast(options, wait), retry_after(wait))
                    return
            self.await_head()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self.await_head()  # the next request's

        def connection_lost(self, exc: Exception | None) -> None:
            for deadline in (self.head_deadline, self.write_deadline):
                if deadline is not None:
                    deadline.cancel()
            if self.counted is not None:
                left = open_by_client[self.counted] = open_by_client[self.counted] - 1
                if not left:
                    del open_by_client[self.counted]
                self.counted = None
            super().connection_lost(exc)

        def await_head(self) -> None:
            if self.head_deadline is not None:
                self.head_deadline.cancel()
            self.head_deadline = self.loop.call_later(header_timeout, self.head_too_slow)

        def head_too_slow(self) -> None:
            self.head_deadline = None
            if self.conn.their_state is not h11.IDLE or self.draining or self.transport.is_closing():
                return  # the head arrived (its body has body_timeout), or the connection is ending
            if not self.conn.trailing_data[0]:  # nothing of a head: an idle connection
                self.transport.close()
                return
            self.write_raw(408, f"the request's line and headers took longer than {header_timeout:g} s to arrive")

        def write_raw(self, status: int, message: str, retry: int | None = None) -> None:
            """Answer `status` in OpenAI's error shape (with Retry-After: `retry` seconds) and
            close (written raw: h11 sends no response before it has read a request)."""
            refused(status)
            body = json.dumps(error_body(message, status)).encode()
            head = f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
            if retry is not None:
                head += f"retry-after: {retry}\r\n"
            head += f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
            self.transport.write(head.encode() + body)
            self.close_soon()

        # -- the answer's deadline
        def pause_writing(self) -> None:  # the send buffer is full: the client is not reading
            super().pause_writing()
            if self.write_deadline is None:
                self.write_deadline = self.loop.call_later(write_timeout, self.answer_unread)

        def resume_writing(self) -> None:
            if self.write_deadline is not None:
                self.write_deadline.cancel()
                self.write_deadline = None
            super().resume_writing()

        def answer_unread(self) -> None:
            self.write_deadline = None
            if not self.transport.is_closing():
                self.transport.abort()  # (close() would wait for the unread buffer to drain)

    return Protocol


def client_of(address: str) -> str:
    """Who an address is, for every per-client limit and turn (connections, compiles, rows):
    an IPv4 address itself, an IPv6 address's /64 network. One IPv6 host is given a whole /64
    and may send each request from a fresh address in it, and each was a newcomer to the
    compile pool's turns (a stranger's leftover); an IPv4-mapped IPv6 address is its IPv4."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:  # a unix socket's path, a name: itself
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return address


def request_client(request: Request) -> str:
    """The client a request counts against (`client_of` its address, after trusted proxies'
    X-Forwarded-For)."""
    return scope_client(request.scope)


def scope_client(scope) -> str:
    """`request_client` of the request whose ASGI scope is `scope` (what a middleware has)."""
    client = scope.get("client")
    return client_of(client[0]) if client else "unknown"


def trusted_proxies(spec: str | None) -> Callable[[str], bool]:
    """Whether an address is one of the proxies `spec` (ServerOptions.forwarded_allow_ips:
    comma-separated addresses or networks, "*" any) names: their connections carry many
    clients, and count against none. Read as uvicorn reads the same option for X-Forwarded-For
    (an entry that is no address or network is a literal, a unix socket's name), so the two
    never disagree on who is a proxy; parsed as networks only, a host name in it stopped the
    server at start."""
    parts = [part.strip() for part in (spec or "").split(",") if part.strip()]
    if "*" in parts:
        return lambda address: True
    literals: set[str] = set()
    networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for part in parts:
        try:
            networks.append(ipaddress.ip_network(part))
        except ValueError:
            literals.add(part)

    def trusted(address: str) -> bool:
        if address in literals:
            return True
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:  # a unix socket's path, a name
            return False
        return any(ip in network for network in networks)

    return trusted
