"""What every route reads: the server's options and `ServerState`, one per app."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from ..engine import Engine
from ..metrics import ServerMetrics
from ..tokenizer import Tokenizer
from .request_rate import RequestRate

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

    from ..gc_guard import GcGuard
    from .engine_loop import EngineLoop


@dataclass
class ServerOptions:
    """The server's limits (`minisglang serve --help` lists them)."""

    api_key: str | None = None  # when set, every endpoint but /health needs "Bearer <key>"
    max_body_bytes: int = 4 * 1024 * 1024
    # A body with more JSON arrays and objects than this is refused (400) before it is parsed:
    # parsing builds a Python object for each while holding the GIL, and 570,000 nested empty
    # lists in 2.9 MB took 1.1 s of every client's time (a stranger's attack). Counted as the
    # body's '[' and '{' bytes, strings included: no real request comes near it.
    max_json_containers: int = 100_000
    # Distinct grammars a client (an IPv4 address, an IPv6 /64: http_limits.client_of) may wait
    # for at once; 429 above.
    max_compiling_per_client: int = 8
    drain_timeout: float = 2.0  # on SIGTERM: seconds in-flight requests get before their abort
    body_timeout: float = 30.0  # seconds a client may take to send its body; 408 after (slow senders)
    # Seconds a connection may take to send a request's line and headers, from its opening or
    # from the answer before: 408 after (a connection that sent nothing is closed). Without it
    # a connection that never finished its head held a file descriptor for ever.
    header_timeout: float = 30.0
    # Seconds an answer may wait in a full send buffer (the client reads none of it) before the
    # connection is closed and its requests aborted: a stream nobody read held its connection
    # and every chunk made for it for as long as the client stayed connected.
    write_timeout: float = 60.0
    # Connections one client address may hold open at once (the proxies forwarded_allow_ips
    # trusts are not counted): a client reconnecting faster than header_timeout closed its idle
    # connections still filled every file descriptor (a stranger's find: ~34 a second filled a
    # server under `ulimit -n 1024`). One more is answered 503 and closed.
    max_connections_per_client: int = 256
    # Requests one client may start a second, and at once after a quiet spell; 429 above
    # (server/request_rate.py). Each costs the one event loop every client shares ~1 ms before
    # any handler runs, refused or not: ~500 a second from one client made another's 8-token
    # answer 12x slower (a stranger's CancelLoop). Far above what this engine answers a second.
    # Behind a proxy, name it in forwarded_allow_ips: otherwise every client it carries shares
    # the proxy's one rate (its health checks included).
    max_requests_per_second_per_client: float = 50.0
    # (a request on each of the max_connections_per_client connections it may hold, at once)
    request_burst_per_client: int = 256
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
    # any local program could otherwise send the header and pick a fresh budget (with "*", any
    # client can: each made-up X-Forwarded-For address gets its own rate and burst).
    forwarded_allow_ips: str | None = None
    # Seconds the scheduler must have had nothing to do before the garbage collector's freezes
    # give back what they kept (gc_guard.py: a freeze under load keeps the reference cycles then
    # in flight for good; the reclaim is one full collection, ~0.2 s, while nobody waits). 0: never.
    gc_reclaim_idle_seconds: float = 2.0
    # Freezes after which the reclaim happens between two steps even while requests run (a server
    # that is never idle kept ~270 objects a freeze for good, without bound). 0: only when idle.
    gc_reclaim_after_freezes: int = 16

    def __post_init__(self):
        for name, low in (
            ("max_body_bytes", 1),
            ("max_json_containers", 1),
            ("max_compiling_per_client", 1),
            ("drain_timeout", 0),
            ("body_timeout", 0.001),
            ("header_timeout", 0.001),
            ("write_timeout", 0.001),
            ("max_connections_per_client", 1),
            ("max_requests_per_second_per_client", 0.001),
            ("request_burst_per_client", 1),
            ("stall_timeout", 0.001),
            ("max_header_bytes", 1024),
            ("max_headers", 16),
            ("gc_reclaim_idle_seconds", 0),
            ("gc_reclaim_after_freezes", 0),
        ):
            if not getattr(self, name) >= low:
                raise ValueError(f"server option {name} must be >= {low}, got {getattr(self, name)!r}")
        if self.forwarded_allow_ips is not None and not isinstance(self.forwarded_allow_ips, str):
            raise ValueError(
                f"server option forwarded_allow_ips must be None or a string of addresses, got "
                f"{self.forwarded_allow_ips!r}"
            )


@dataclass
class ServerState:
    """One app's engine, options and metrics, and what follows from them once (the model's
    name, the longest prompt worth tokenizing). `loop` is the scheduler's thread while the
    app runs (its lifespan starts and stops it)."""

    engine: Engine
    options: ServerOptions
    on_fatal: Callable[[], None] | None = None  # called once if the scheduler loop dies
    loop: EngineLoop | None = None
    gc_guard: GcGuard | None = None  # serve()'s (the EngineLoop reclaims through it when idle)
    metrics: ServerMetrics = field(init=False)
    request_rate: RequestRate = field(init=False)  # each client's requests a second (http_limits.py)
    model_id: str = field(init=False)
    max_context: int = field(init=False)
    max_prompt_bytes: int = field(init=False)
    model_card: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.metrics = ServerMetrics(self.engine, self.step_timings, lambda: self.gc_guard)
        self.request_rate = RequestRate(
            self.options.max_requests_per_second_per_client, self.options.request_burst_per_client
        )
        self.model_id = self.engine.model_path.rstrip("/").rsplit("/", 1)[-1]
        self.max_context = self.engine.max_context_len
        # A prompt of more bytes than this has more tokens than the context holds, whatever they
        # are; x2 leaves room for a normalizer that shortens text before tokenizing.
        self.max_prompt_bytes = 2 * self.max_context * max_bytes_per_token(self.engine.tokenizer)
        # OpenAI's model object; `created` is when this server started serving it.
        self.model_card = {
            "id": self.model_id,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "minisglang",
        }

    def step_timings(self) -> dict[str, float | None]:
        """The scheduler loop's step times (EngineLoop.step_timings); none before it starts."""
        return self.loop.step_timings() if self.loop is not None else {}


def server_state(request: Request) -> ServerState:
    """The state of the app serving `request` (create_app puts it in `app.state.server`)."""
    state: ServerState = request.app.state.server
    return state


def max_bytes_per_token(tokenizer: Tokenizer) -> int:
    """The most prompt bytes one token can stand for (special tokens' text included)."""
    lengths = [len(b) for b in tokenizer.token_bytes if b]
    for i in tokenizer.special_token_ids:
        text = tokenizer.hf.id_to_token(i)
        if text:
            lengths.append(len(text.encode()))
    return max(lengths, default=1)
