"""Regression tests for what a hostile or careless client broke (issue 13, the attack pass).

Each test is one input that once gave a 5xx, a hang, or hurt another client's request; it
now gets a clear answer for that request alone while everyone else is served and nothing
leaks (`Engine.stats().pools_full`).
"""

import asyncio
import decimal
import json
import logging
import re
import socket
import struct
import threading
import time

import httpx
import numpy as np
import openai
import pytest
import torch
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

import minisglang as sgl
from minisglang.core import MAX_STOP_STRINGS, AbortKind
from minisglang.protocol import ChatCompletionRequest, CompletionRequest, GenerateRequest, RequestError, parse
from minisglang.server import ServerOptions, create_app, serving_in_thread

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def engine():
    # s5 with the fsm backend builds its automaton lazily while decoding; a small state
    # limit lets a test reach it in a few steps.
    eng = sgl.Engine(stage="s5", max_total_tokens=2000, max_running_requests=8, max_lazy_states=300)
    yield eng
    eng.shutdown()


GREEDY = {"temperature": 0, "max_new_tokens": 12, "ignore_eos": True}
# One state per character: the automaton grows past any small limit while decoding (the
# compile is lazy, so it is accepted up front).
RUNAWAY = "a{1000000}"


def run_all(eng, reqs):
    while not all(r.released for r in reqs):
        eng.step()


def test_a_top_p_below_float32_range_samples_the_top_token(engine):
    """top_p=1e-300 rounds to 0 in float32, which once kept no token at all and made
    torch.multinomial raise (a 500): the most likely token always stays."""
    greedy = engine.generate("Hello", GREEDY)
    tiny = engine.generate("Hello", dict(GREEDY, temperature=1.0, top_p=1e-300, seed=7))
    assert tiny["meta_info"]["finish_reason"] == {"type": "length", "length": 12}
    assert tiny["output_ids"] == greedy["output_ids"]  # only the top token can be drawn
    assert engine.stats().pools_full


def test_a_grammar_that_grows_past_its_limit_aborts_only_its_own_request(engine, caplog):
    """A lazy automaton that hits its state limit while looking for a jump (hook 3) or
    masking (hook 4) once aborted the whole decode batch: a bystander with no grammar lost
    its request. Now only the grammar's request ends, with a message naming the limit; the
    log gets one line for it, no traceback (a client sending such grammars filled 2.4 MB of
    log in 25 minutes), and it counts as a grammar error, not an engine error."""
    before = engine.stats()
    alone = engine.generate("The weather", GREEDY)["text"]
    bystander = engine.submit("The weather", GREEDY)
    engine.step()  # the bystander is prefilled first, so both share the next decode batch
    runaway = engine.submit("x", {"regex": RUNAWAY, "max_new_tokens": 40})
    run_all(engine, [bystander, runaway])
    assert bystander.output_text == alone
    assert bystander.finished_reason == {"type": "length", "length": 12}
    reason = runaway.finished_reason
    assert reason["type"] == "abort"
    assert reason["message"].startswith("the grammar failed while ")  # the request's fault, not the engine's
    assert reason["kind"] == AbortKind.GRAMMAR  # so the server answers 400, not 500
    assert "max_lazy_states" in reason["message"]
    assert "hook" not in reason["message"]  # the stage's hook numbers are our names: the log keeps them
    after = engine.stats()
    assert after.pools_full and after.errors == before.errors and after.grammar_errors == before.grammar_errors + 1
    logged = [r for r in caplog.records if "max_lazy_states" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is None and logged[0].levelname == "WARNING"
    assert "(hook " in logged[0].getMessage()


def test_over_http_a_grammar_past_its_limit_is_a_400_and_others_are_served(engine):
    with TestClient(create_app(engine)) as client:
        results = {}

        def bystander():
            results["ok"] = client.post(
                "/v1/completions",
                json={"prompt": "The weather", "max_tokens": 30, "temperature": 0, "ignore_eos": True},
            )

        thread = threading.Thread(target=bystander)
        thread.start()
        bad = client.post("/v1/completions", json={"prompt": "x", "max_tokens": 40, "regex": RUNAWAY})
        thread.join(120)
        assert bad.status_code == 400
        error = bad.json()["error"]
        assert error["type"] == "invalid_request_error" and "max_lazy_states" in error["message"]
        assert results["ok"].status_code == 200
        assert results["ok"].json()["choices"][0]["finish_reason"] == "length"
        tiny_top_p = client.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 3, "top_p": 1e-300})
        assert tiny_top_p.status_code == 200
        assert client.get("/health").status_code == 200
    assert engine.stats().pools_full


# ---------------------------------------------------------------------- the body and the transport
@pytest.fixture(scope="module")
def client():
    """A loopback server on its own engine (s1: no compile workers to start)."""
    eng = sgl.Engine(stage="s1", max_total_tokens=2000, max_running_requests=8)
    with serving_in_thread(create_app(eng, ServerOptions(body_timeout=1.0, header_timeout=1.0))) as url:
        with httpx.Client(base_url=url, timeout=60) as c:
            yield c
    assert eng.stats().pools_full


JSON = {"content-type": "application/json"}


@pytest.mark.parametrize(
    "raw,needle",
    [
        # Parsers disagree on which copy of a key counts (first, last, error): refuse the ambiguity.
        (b'{"prompt": "hi", "max_tokens": "x", "max_tokens": 2}', 'the key "max_tokens" appears twice'),
        (
            b'{"prompt": "hi", "max_tokens": 2, "json_schema": {"type": "string", "type": "integer"}}',
            'the key "type" appears twice',
        ),
        (
            b'{"text": "hi", "sampling_params": {"max_new_tokens": 2, "max_new_tokens": 3}}',
            'the key "max_new_tokens" appears twice',
        ),
        (b'\xef\xbb\xbf{"prompt": "hi", "max_tokens": 2}', "byte-order mark"),
        (b'{"prompt": "\\ud800", "max_tokens": 2}', "surrogate pair"),
        (b'{"prompt": "hi", "user": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", "nested too deeply"),
    ],
)
def test_ambiguous_or_unreadable_json_is_a_400_that_says_why(client, raw, needle):
    path = "/generate" if raw.startswith(b'{"text"') else "/v1/completions"
    r = client.post(path, content=raw, headers=JSON)
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]
    assert client.get("/health").status_code == 200


def test_a_client_that_hangs_up_inside_its_body_is_no_server_error(client):
    """The connection closed before the declared body arrived: the client's doing, so no 500
    is counted (a client repeating it made the server's error count meaningless)."""

    def refused_500() -> float:
        for line in client.get("/metrics").text.splitlines():
            if line.startswith('minisglang_refused_requests_total{status="500"}'):
                return float(line.split()[-1])
        return 0.0

    before = refused_500()
    with socket.create_connection((client.base_url.host, client.base_url.port)) as s:
        s.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\n\r\n{"prompt":'
        )
        time.sleep(0.3)
    time.sleep(0.5)
    assert refused_500() == before
    assert client.get("/health").status_code == 200


def test_clients_that_leave_their_streams_write_no_lines_to_the_log(client):
    """Each client reads its stream's first chunk and resets the connection: asyncio logged
    `socket.send() raised exception.` for each chunk written after (hundreds of lines from a
    few such clients, a stranger's stall hunt); the server counts them instead."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    keep = Keep()
    logging.getLogger("asyncio").addHandler(keep)
    body = json.dumps(
        {
            "prompt": "Alice is 30.",
            "max_tokens": 60,
            "n": 8,
            "stream": True,
            "temperature": 1.0,
            "regex": "[a-z ]{1,60}",
        }
    ).encode()
    try:
        for _ in range(12):
            with socket.create_connection((client.base_url.host, client.base_url.port), timeout=30) as s:
                s.sendall(
                    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n" % len(body) + body
                )
                assert s.recv(4096).startswith(b"HTTP/1.1 200")
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset, not a FIN
        time.sleep(0.5)
    finally:
        logging.getLogger("asyncio").removeHandler(keep)
    assert not lines, lines[:3]
    assert client.get("/health").status_code == 200


def test_a_body_sent_too_slowly_is_a_408(client):
    """A slow sender (slowloris) once held its connection and handler for as long as it liked."""
    host, port = client.base_url.host, client.base_url.port
    body = b'{"prompt": "hi", "max_tokens": 2}'
    with socket.create_connection((host, port), timeout=30) as s:
        s.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body[:10]
        )  # and nothing more
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 408")
    assert (
        json.loads(reply.partition(b"\r\n\r\n")[2])["error"]["message"]
        == "the request body took longer than 1 s to arrive"
    )
    assert client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2}).status_code == 200


def read_until_closed(sock: socket.socket) -> tuple[bytes, float]:
    """Everything the server sends on `sock` until it closes the connection, and how long that took."""
    start, reply = time.monotonic(), b""
    while chunk := sock.recv(4096):
        reply += chunk
    return reply, time.monotonic() - start


@pytest.mark.parametrize("sent", [b"", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n", b"G"])
def test_a_request_head_that_never_arrives_ends_its_connection(client, sent):
    """The body had a deadline (body_timeout) but the head before it had none: a connection
    that sent nothing, or part of a request line and headers, stayed open for ever, and 1020
    of them took every file descriptor of a server under `ulimit -n 1024`: every other client
    then timed out. Now the head has header_timeout seconds: an unfinished head gets a 408,
    a connection that sent nothing is closed as an idle keep-alive one is."""
    with socket.create_connection((client.base_url.host, client.base_url.port), timeout=30) as s:
        s.sendall(sent)
        reply, took = read_until_closed(s)
    assert 0.5 < took < 10
    if not sent:
        assert reply == b""
    else:
        assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
        error = json.loads(reply.partition(b"\r\n\r\n")[2])["error"]
        assert error["message"] == "the request's line and headers took longer than 1 s to arrive"
    assert client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2}).status_code == 200


def test_a_client_may_hold_only_so_many_connections_and_a_trusted_proxy_any():
    """A stranger's find: the head deadline closes idle connections, but a client reconnecting
    faster (~34 a second against 30 s) still filled every file descriptor of a server under
    `ulimit -n 1024`. One client address may hold max_connections_per_client connections; one
    more is a 503 and closed, the others keep serving, and a closed one frees its place. The
    proxies forwarded_allow_ips trusts carry many clients, and are not counted."""
    eng = sgl.Engine(stage="s1", max_total_tokens=2000, max_running_requests=8)
    for proxies, capped in ((None, True), ("127.0.0.1", False)):
        options = ServerOptions(max_connections_per_client=3, header_timeout=30.0, forwarded_allow_ips=proxies)
        with serving_in_thread(create_app(eng, options)) as url:
            host, port = httpx.URL(url).host, httpx.URL(url).port
            held = [socket.create_connection((host, port), timeout=30) for _ in range(3)]
            try:
                with socket.create_connection((host, port), timeout=30) as extra:
                    extra.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                    reply, _ = read_until_closed(extra)
                if capped:
                    assert reply.startswith(b"HTTP/1.1 503"), reply[:200]
                    error = json.loads(reply.partition(b"\r\n\r\n")[2])["error"]
                    assert "more than 3 connections open (limit max_connections_per_client)" in error["message"]
                else:
                    assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
                held[0].sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                assert read_until_closed(held[0])[0].startswith(b"HTTP/1.1 200")  # the held ones still serve
                held[0].close()
                time.sleep(0.2)
                with httpx.Client(base_url=url, timeout=30) as c:  # its place is free again
                    assert c.get("/health").status_code == 200
            finally:
                for s in held:
                    s.close()
    eng.shutdown()


def test_a_client_starting_requests_faster_than_its_rate_is_refused_and_others_are_not():
    """A stranger's CancelLoop: ~500 connections a second from one client, each a prompt too
    long for the context, hung up after 30 ms, kept the event loop busy with reading and
    routing them: another client's 8-token answer took 0.6-0.7 s (53 ms alone). A client may
    start request_burst_per_client requests at once and max_requests_per_second_per_client a
    second: past that, a request on an open connection is a 429 with Retry-After, and a new
    connection is answered 429 before it sends anything; another client is served all the
    while, and the first again once a token has come back. Behind a trusted proxy each
    forwarded client has its own."""
    eng = sgl.Engine(stage="s1", max_total_tokens=2000, max_running_requests=8)
    for proxies in (None, "127.0.0.1"):
        options = ServerOptions(
            max_requests_per_second_per_client=2.0, request_burst_per_client=3, forwarded_allow_ips=proxies
        )
        app = create_app(eng, options)
        now = [0.0]
        app.state.server.request_rate.clock = lambda: now[0]  # (no token comes back unless the test says)
        first = {"X-Forwarded-For": "10.0.0.1"} if proxies else {}
        other = {"X-Forwarded-For": "10.0.0.2"} if proxies else {}
        with serving_in_thread(app) as url:
            with (
                httpx.Client(base_url=url, timeout=30, headers=first) as a,
                httpx.Client(
                    base_url=url, timeout=30, headers=other, transport=httpx.HTTPTransport(local_address="127.0.0.2")
                ) as b,
            ):
                assert [a.get("/health").status_code for _ in range(3)] == [200] * 3
                refused = a.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2})
                assert refused.status_code == 429 and refused.headers["retry-after"] == "1"  # a token in 0.5 s
                error = refused.json()["error"]
                assert error["type"] == "rate_limit_error"
                assert error["message"] == (
                    "this client starts requests faster than 2 a second (limit max_requests_per_second_per_client, "
                    "bursts of 3); retry in 0.50 s"
                )
                if proxies is None:  # a new connection of that client: refused before its head
                    with socket.create_connection((httpx.URL(url).host, httpx.URL(url).port), timeout=30) as s:
                        reply, _ = read_until_closed(s)
                    assert reply.startswith(b"HTTP/1.1 429") and b"retry-after: 1\r\n" in reply, reply[:300]
                    assert json.loads(reply.partition(b"\r\n\r\n")[2])["error"]["message"] == error["message"]
                    metrics = b.get("/metrics").text  # both refusals counted, the raw one too
                    assert 'minisglang_refused_requests_total{status="429"} 2.0' in metrics
                assert b.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2}).status_code == 200
                now[0] += 0.5  # one token back
                assert a.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2}).status_code == 200
                assert a.get("/health").status_code == 429
    eng.shutdown()


def test_a_body_sent_a_byte_a_packet_is_read_a_few_pieces_at_a_time(monkeypatch):
    """A stranger's trickle: 200 connections each sending a body a byte a packet cost the one
    event loop a callback per byte (h11's event, the app's receive), and another client's
    8-token answer took 0.3-1.2 s (as bad from 50 addresses: no per-client limit bounds it).
    After SMALL_PIECES_READ_AT_ONCE small pieces, a connection's body is read once every
    PIECE_REST seconds, all that arrived meanwhile in one piece: here ~300 one-byte packets
    over ~0.5 s are read in a dozen or so reads, not ~300, and the request is answered."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    reads = []
    original = H11Protocol.data_received
    monkeypatch.setattr(
        H11Protocol, "data_received", lambda self, data: reads.append(len(data)) or original(self, data)
    )
    eng = sgl.Engine(stage="s1", max_total_tokens=2000, max_running_requests=8)
    with serving_in_thread(create_app(eng, ServerOptions(body_timeout=30.0))) as url:
        body = b'{"prompt": "hi", "max_tokens": 1' + b" " * 300 + b"}"
        head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        head += b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body)
        with socket.create_connection((httpx.URL(url).host, httpx.URL(url).port), timeout=30) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sendall(head)
            time.sleep(0.1)
            reads.clear()  # (the head's)
            for i in range(len(body)):
                s.sendall(body[i : i + 1])
                time.sleep(0.0015)
            reply, _ = read_until_closed(s)
    eng.shutdown()
    assert reply.startswith(b"HTTP/1.1 200"), reply[:300]
    assert sum(reads) == len(body) and len(reads) < 60, f"{len(reads)} reads of the body: {reads[:40]}"


def test_the_connection_cap_reads_the_proxy_list_as_uvicorn_does():
    """forwarded_allow_ips is read twice, by uvicorn (whose X-Forwarded-For to believe) and by
    the connection cap (whose connections count against no client): the same entries the same
    way. A name that is no address is a literal (uvicorn's reading), not a crash at start."""
    from minisglang.server.http_limits import trusted_proxies

    assert not trusted_proxies(None)("127.0.0.1")
    assert trusted_proxies("*")("10.9.8.7")
    trusted = trusted_proxies("127.0.0.1, 10.0.0.0/8, ::1, proxy.local")
    assert all(trusted(a) for a in ("127.0.0.1", "10.1.2.3", "::1", "proxy.local"))
    assert not any(trusted(a) for a in ("127.0.0.2", "11.0.0.1", "::2", "other.local"))


def test_the_next_head_on_a_kept_alive_connection_has_its_deadline_too(client):
    """After an answer, the connection waits for the next head: one begun and never finished
    is a 408 after header_timeout, like the first."""
    with socket.create_connection((client.base_url.host, client.base_url.port), timeout=30) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        first = b""
        while not first.endswith(b'{"status":"ok"}'):  # the whole first answer
            first += s.recv(4096)
        assert first.startswith(b"HTTP/1.1 200"), first
        s.sendall(b"GET /health HTTP/1.1\r\n")
        reply, took = read_until_closed(s)
    assert reply.startswith(b"HTTP/1.1 408") and 0.5 < took < 10, (reply[:200], took)


def test_a_stream_nobody_reads_is_ended_after_write_timeout():
    """A client that opened a stream and never read it held its connection, and every chunk the
    engine made for it, for as long as it stayed connected (32 choices of 1000 tokens unread:
    85 MB of the server's memory, kept until the client closed). Now a connection whose
    answer has waited write_timeout seconds in a full send buffer is closed, and its requests
    aborted as a client's that left."""
    import uvicorn

    from minisglang.server.app import _uvicorn_config

    eng = sgl.Engine(stage="s1", max_total_tokens=8000, max_running_requests=8)
    body = {"prompt": "Tell me", "n": 8, "max_tokens": 600, "ignore_eos": True, "stream": True}
    data = json.dumps(body).encode()
    # Small kernel buffers on both sides (accepted sockets inherit the listener's): the
    # server's send buffer is full after a few hundred events, not after megabytes.
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    server = uvicorn.Server(_uvicorn_config(create_app(eng, ServerOptions(write_timeout=1.0)), "127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.02)
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # and nothing read
            s.connect(listener.getsockname())
            s.sendall(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(data) + data
            )
            deadline = time.monotonic() + 60
            while not (eng.stats().idle and eng.stats().finished_by_reason) and time.monotonic() < deadline:
                time.sleep(0.05)
            reasons = [e["reason"]["type"] for e in eng.trace if e["event"] == "finish"]
        assert reasons == ["abort"] * 8, reasons  # not ["length"] * 8: 4800 tokens nobody read
        url = "http://{}:{}".format(*listener.getsockname())
        assert httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 3}).status_code == 200
    finally:
        server.should_exit = True
        thread.join(30)
        listener.close()
    assert eng.stats().pools_full


def test_one_model_can_be_retrieved_as_the_openai_client_does(client):
    listed = client.get("/v1/models").json()["data"][0]
    assert set(listed) == {"id", "object", "created", "owned_by"} and isinstance(listed["created"], int)
    assert client.get(f"/v1/models/{listed['id']}").json() == listed
    missing = client.get("/v1/models/gpt-4")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


def test_engine_generate_refuses_a_stream_flag_that_is_not_a_bool(engine):
    with pytest.raises(ValueError, match="stream must be True or False, got 'no'"):
        engine.generate("hi", {"max_new_tokens": 2}, stream="no")
    assert engine.stats().pools_full


def test_native_generate_bounds_the_number_of_stop_strings(client):
    """Each stop string is searched for at every step on the scheduler thread, so a list of
    300,000 slowed every other request: /generate takes at most MAX_STOP_STRINGS."""
    stops = [f"s{i}" for i in range(MAX_STOP_STRINGS + 1)]
    many = {"text": "hi", "sampling_params": {"max_new_tokens": 2, "stop": stops}}
    r = client.post("/generate", json=many)
    assert r.status_code == 400 and r.json()["error"]["param"] == "sampling_params.stop"
    assert (
        f"stop has {MAX_STOP_STRINGS + 1} strings; the limit MAX_STOP_STRINGS is {MAX_STOP_STRINGS}"
        in r.json()["error"]["message"]
    )
    many["sampling_params"]["stop"].pop()
    assert client.post("/generate", json=many).status_code == 200


def test_nothing_but_health_answers_without_the_api_key():
    """FastAPI's /docs, /redoc and /openapi.json once answered without the key."""
    eng = sgl.Engine(stage="s1", max_total_tokens=2000, max_running_requests=4)
    with TestClient(create_app(eng, ServerOptions(api_key="sekret"))) as c:
        assert c.get("/health").status_code == 200
        for path in (
            "/docs",
            "/docs/oauth2-redirect",
            "/redoc",
            "/openapi.json",
            "/metrics",
            "/get_server_info",
            "/v1/models",
            "/v1/models/tiny-json-llama",
        ):
            r = c.get(path)
            assert r.status_code in (401, 404), path  # refused, or no such endpoint: either way nothing leaks
            assert r.json()["error"]["message"], path
        assert c.get("/v1/models", headers={"authorization": "Bearer sekret"}).status_code == 200


# ---------------------------------------------------------------------- bytes, not just values
VALID_BODIES = [
    b'{"prompt": "hi", "max_tokens": 2, "stop": ["\\n"], "temperature": 0.5, "seed": 3}',
    b'{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}}',
    b'{"text": "hi", "sampling_params": {"max_new_tokens": 2, "regex": "[0-9]+"}, "stream": false}',
]
PIECES = [
    b"\xff",
    b"\xef\xbb\xbf",
    b"\\ud800",
    b"\\udc00\\ud800",
    b"NaN",
    b"-Infinity",
    b"1e999",
    b"9" * 5000,
    b'"max_tokens": 1,',
    b'"prompt": "x",',
    b"[" * 300,
    b"{",
    b"}",
    b"]",
    b",",
    b":",
    b'"',
    b"\\",
    b"\x00",
    b"null",
    b"true",
    b'"\\u0000"',
    "é🎉".encode(),
    b" " * 10,
]


@st.composite
def mutated_bodies(draw) -> bytes:
    """A valid body with a few pieces of trouble spliced in, or a few bytes cut out."""
    body = draw(st.sampled_from(VALID_BODIES))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(body)))
        if draw(st.booleans()):
            body = body[:at] + draw(st.sampled_from(PIECES) | st.binary(max_size=4)) + body[at:]
        else:
            body = body[:at] + body[at + draw(st.integers(1, 4)) :]
    return body


@settings(max_examples=400, deadline=None)
@given(body=mutated_bodies(), model=st.sampled_from([CompletionRequest, ChatCompletionRequest, GenerateRequest]))
def test_mutated_bytes_are_a_request_or_a_400_sentence(body, model):
    """Whatever bytes arrive, parsing them gives a request or a RequestError (a 4xx) whose
    message is a sentence, never another exception (a 500) or pydantic's own words."""
    try:
        parse(model, body).to_sampling_params()
    except RequestError as e:
        assert 400 <= e.status < 500
        for noise in ("pydantic", "Input should", "Traceback", "<class"):
            assert noise not in str(e)


# ---------------------------------------------------------------------- grammars that are hostile
def test_a_forced_text_too_long_for_the_request_is_not_searched_at_every_step():
    """`a{400}` forces 400 bytes from the start: more than 8 tokens can hold (the longest
    token has 45 bytes), so the jump is refused. It was found and re-encoded again at every step (xgrammar took
    5 s a step for `"a"{1000000}`, stalling every request); now once per request."""
    eng = sgl.Engine(stage="s4", max_total_tokens=2000, max_running_requests=4)
    calls = []
    find_jump = eng.stage.jump.find_jump
    eng.stage.jump.find_jump = lambda req: calls.append(req.rid) or find_jump(req)
    out = eng.generate("x", {"regex": "a{400}", "max_new_tokens": 8, "temperature": 0})
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 8}
    assert re.fullmatch("a+", out["text"])  # a prefix of the only string the regex allows
    assert len(calls) == 1
    short = eng.generate("x", {"regex": "abcdefgh[0-9]", "max_new_tokens": 8, "temperature": 0})
    assert re.fullmatch("abcdefgh[0-9]", short["text"]) and eng.stage.jump.jumps >= 1  # short jumps still taken
    assert eng.stats().pools_full
    eng.shutdown()


@pytest.mark.parametrize(
    "constraint, expected",
    [
        # our regex reader (python_regex, shared by every backend) refuses an empty class first
        ({"regex": "[^\\s\\S]"}, ("regex rejected by the 'llguidance' backend", "matches no string at all")),
        # llguidance compiles these; the compile's own first mask finds them empty (refused)
        ({"ebnf": "root ::= root"}, ("ebnf rejected by the 'llguidance' backend", "allows no text at all")),
        ({"json_schema": {"$ref": "#"}}, ("json_schema rejected by the 'llguidance' backend", "allows no text at all")),
        # empty after its first token: the error state is met while decoding
        ({"ebnf": 'root ::= "a" x\nx ::= x "b"'}, ("the grammar failed while masking its logits", "no text from here")),
    ],
)
def test_llguidance_in_its_error_state_aborts_instead_of_stopping_with_text_it_never_accepted(constraint, expected):
    """An empty language compiles, but llguidance's matcher then falls into its error state,
    where it still allows EOS: the request ended as a "stop" with "" (not a match of the
    grammar). Now the mask refuses the error state and the request is aborted, alone (or the
    compile is refused, when its first mask already finds the error state)."""
    eng = sgl.Engine(stage="s5", grammar_backend="llguidance", max_total_tokens=2000, max_running_requests=4)
    bystander = eng.submit("The weather", GREEDY)
    bad = eng.submit("hi", dict(constraint, max_new_tokens=8))
    run_all(eng, [bystander, bad])
    assert bad.finished_reason["type"] == "abort"
    assert bad.finished_reason["message"].startswith(expected[0]), bad.finished_reason
    assert expected[1] in bad.finished_reason["message"]
    assert bystander.finished_reason == {"type": "length", "length": 12}
    assert eng.stats().pools_full
    eng.shutdown()


@pytest.mark.parametrize(
    "path,body,field",
    [
        ("/v1/completions", {"prompt": "x " * 5000, "max_tokens": 2}, "prompt"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}] * 3000, "max_tokens": 2}, "messages"),
        ("/generate", {"text": "x " * 5000}, "text"),
    ],
)
def test_a_prompt_too_long_names_the_field_it_came_from(client, path, body, field):
    """A chat request's prompt comes from `messages`, /generate's from `text`: the 400 says so."""
    r = client.post(path, json=body)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == field
    assert r.json()["error"]["message"].startswith(f"{field}: ")


def test_a_chat_of_more_messages_than_the_context_holds_is_refused_before_its_render(client, monkeypatch):
    """20,000 two-character messages rendered for ~0.2 s each before the length check refused
    them, and a client's four at once held another client's answer up to 7.7 s (a stranger's
    stall hunt). Each message takes at least one token, so more messages than the context
    holds are refused unrendered; as many as it holds are rendered (and judged by length)."""
    from minisglang.tokenizer import Tokenizer

    def no_render(*args, **kwargs):
        raise AssertionError("rendered")

    context = client.get("/get_server_info").json()["max_context_len"]
    with monkeypatch.context() as m:
        m.setattr(Tokenizer, "apply_chat_template", no_render)
        r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}] * (context + 1)})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "messages" and error["code"] == "context_length_exceeded"
    assert (
        error["message"]
        == f"messages: {context + 1:,} messages cannot fit the model's context of {context} tokens (each takes at least one)"
    )
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}] * context})
    assert r.status_code == 400 and "messages cannot fit" not in r.json()["error"]["message"]  # rendered, too long
    # A large body (parsed in turn, SERIAL_PARSE_BYTES) is refused before pydantic parses it.
    from minisglang.server import client_threads

    def no_parse(*args, **kwargs):
        raise AssertionError("parsed")

    many = {"messages": [{"role": "user", "content": "hi"}] * 20_000}
    assert len(json.dumps(many)) > client_threads.SERIAL_PARSE_BYTES
    with monkeypatch.context() as m:
        m.setattr(client_threads, "parse", no_parse)
        r = client.post("/v1/chat/completions", json=many)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"].startswith("messages: 20,000 messages cannot fit")


def test_the_openai_client_sees_error_objects_for_hostile_input(client):
    """What the attacks above get, as the `openai` client reports it: typed exceptions whose
    body is OpenAI's error object, and retrieve() of the served model."""
    oa = openai.OpenAI(base_url=str(client.base_url) + "/v1", api_key="none", max_retries=0)
    model = oa.models.list().data[0].id
    assert oa.models.retrieve(model).id == model
    with pytest.raises(openai.NotFoundError) as missing:
        oa.models.retrieve("gpt-4")
    assert missing.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as long_prompt:
        oa.completions.create(model=model, prompt="x " * 5000, max_tokens=2)
    assert long_prompt.value.body["param"] == "prompt"
    with pytest.raises(openai.BadRequestError) as too_many_stops:
        oa.completions.create(model=model, prompt="hi", max_tokens=2, stop=["a", "b", "c", "d", "e"])
    assert too_many_stops.value.body["param"] == "stop"
    with pytest.raises(openai.BadRequestError) as bad_regex:  # s1 compiles on arrival: before any chunk
        list(oa.completions.create(model=model, prompt="hi", max_tokens=2, stream=True, extra_body={"regex": "(a"}))
    assert "regex" in bad_regex.value.body["message"]
    assert client.get("/health").status_code == 200


@pytest.mark.parametrize(
    "params,message",
    [
        ({"ignore_eos": np.bool_(True)}, "ignore_eos must be true or false, got a numpy.bool"),  # was "got a bool"
        ({"max_new_tokens": torch.tensor(3)}, "max_new_tokens must be an integer, got a torch.Tensor"),
        ({"temperature": decimal.Decimal("0.5")}, "temperature must be a finite number, got a decimal.Decimal"),
        ({"stop": ("a",)}, "stop must be a string or a list of strings, got a tuple"),
    ],
)
def test_engine_errors_name_a_library_type_by_its_full_name(engine, params, message):
    with pytest.raises(ValueError) as info:
        engine.generate("hi", dict(params, max_new_tokens=params.get("max_new_tokens", 2)))
    assert str(info.value) == message
    assert engine.stats().pools_full


# ---------------------------------------------------------------------- the output's length
def prompt_of(tokenizer, n: int) -> str:
    """A prompt of exactly `n` tokens."""
    text = tokenizer.decode(tokenizer.encode("x " * (2 * n))[:n])
    assert len(tokenizer.encode(text)) == n
    return text


def test_a_length_left_unset_is_what_the_context_has_room_for():
    """A 1000-token prompt without max_tokens was a 400 'prompt (1000 tokens) + max_new_tokens
    (128) exceeds the model's context', naming a field the client never sent (OpenAI's
    max_tokens defaults to the room left). Now an unset length is a chat's room, a
    completion's 16 or /generate's 128 cut to the room; a length the client did give and
    that cannot fit is a 400 naming its field."""
    eng = sgl.Engine(stage="s1", max_total_tokens=3000, max_running_requests=4)
    context = eng.scheduler.max_context_len
    long = prompt_of(eng.tokenizer, context - 8)
    with TestClient(create_app(eng)) as c:
        r = c.post("/v1/completions", json={"prompt": long, "ignore_eos": True})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 8 and r.json()["choices"][0]["finish_reason"] == "length"
        r = c.post("/generate", json={"text": long, "sampling_params": {"ignore_eos": True}})
        assert r.status_code == 200 and r.json()["meta_info"]["completion_tokens"] == 8
        short = c.post("/v1/completions", json={"prompt": "hi", "ignore_eos": True})
        assert short.json()["usage"]["completion_tokens"] == 16  # OpenAI's (and SGLang's) default
        r = c.post("/generate", json={"text": "hi", "sampling_params": {"ignore_eos": True}})
        assert r.json()["meta_info"]["completion_tokens"] == 128  # the engine's default, where it fits
        # A chat runs until the model stops or the context is full (OpenAI's), not 128.
        chat = {"messages": [{"role": "user", "content": "hi"}], "ignore_eos": True}
        r = c.post("/v1/chat/completions", json=chat)
        assert r.json()["usage"]["completion_tokens"] == context - r.json()["usage"]["prompt_tokens"] > 128

        for path, body, field in [
            ("/v1/completions", {"prompt": long, "max_tokens": 9}, "max_tokens"),
            (
                "/v1/chat/completions",
                {"messages": [{"role": "user", "content": long}], "max_completion_tokens": 500},
                "max_completion_tokens",
            ),
            (
                "/v1/chat/completions",
                {"messages": [{"role": "user", "content": long}], "max_tokens": 500},
                "max_tokens",
            ),
            ("/generate", {"text": long, "sampling_params": {"max_new_tokens": 9}}, "sampling_params.max_new_tokens"),
        ]:
            error = c.post(path, json=body).json()["error"]
            assert error["param"] == field, (path, error)
            assert error["message"].startswith(f"{field}: the prompt has ")
            assert "at most" in error["message"] and f"context of {context}" in error["message"]
        assert c.post("/v1/completions", json={"prompt": long, "max_tokens": 8}).status_code == 200

        empty = c.post("/v1/completions", json={"prompt": "", "max_tokens": 2}).json()["error"]
        assert empty["param"] == "prompt" and empty["message"] == "prompt: the prompt is empty (no tokens)"
    assert eng.stats().pools_full


def test_a_streaming_client_that_leaves_before_its_first_chunk_is_aborted():
    """Nothing is sent before a stream's first chunk, and leaving was noticed only when a send
    failed: a client that left while its text was held back (every 'x' may start the stop
    string) or its request queued kept it running to its max_tokens. Now the first chunk is
    awaited while watching the client, as a non-streamed request is."""
    eng = sgl.Engine(stage="s1", max_total_tokens=3000, max_running_requests=4)
    body = {"prompt": "x", "max_tokens": 1000, "ignore_eos": True, "stream": True, "stop": "x" * 2000}
    with serving_in_thread(create_app(eng)) as url:
        with pytest.raises(httpx.TimeoutException):
            with httpx.stream("POST", url + "/v1/completions", json=body, timeout=0.3) as r:
                r.read()
        for _ in range(600):
            if eng.stats().idle:
                break
            threading.Event().wait(0.05)
        finishes = [e["reason"] for e in eng.trace if e["event"] == "finish"]
        assert finishes == [
            {"type": "abort", "kind": AbortKind.CANCELLED, "message": "aborted by the client"}
        ]  # not {"type": "length", ...}
        assert httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 3}).status_code == 200
    assert eng.stats().pools_full


@pytest.mark.parametrize(
    "headers,needle",
    [
        ({"content-type": "application/json", "content-encoding": "gzip"}, 'Content-Encoding "gzip" is not supported'),
        ({"content-type": "application/json; charset=utf-16"}, 'charset="utf-16"'),
        ({"content-type": 'application/json; charset="latin-1"'}, 'charset="latin-1"'),
    ],
)
def test_a_compressed_or_non_utf8_body_is_a_415_that_says_so(client, headers, needle):
    """A gzip body or a UTF-16 one was a 400 "not valid JSON: expected value at line 1 column 1",
    which hides the cause: the header that announces it is refused, naming it."""
    import gzip

    raw = json.dumps({"prompt": "hi", "max_tokens": 2})
    body = (
        gzip.compress(raw.encode())
        if "content-encoding" in headers
        else raw.encode(headers["content-type"].split("=")[1].strip('"'))
    )
    r = client.post("/v1/completions", content=body, headers=headers)
    assert r.status_code == 415 and needle in r.json()["error"]["message"], r.text
    for fine in ("application/json; charset=utf-8", "application/json;charset=UTF-8", "Application/JSON"):
        assert client.post("/v1/completions", content=raw.encode(), headers={"content-type": fine}).status_code == 200
    assert (
        client.post(
            "/v1/completions",
            content=raw.encode(),
            headers={"content-type": "application/json", "content-encoding": "identity"},
        ).status_code
        == 200
    )


LONG = "x" * 100_000  # a client value no error message may echo whole


@pytest.mark.parametrize(
    "method,path,kwargs,status",
    [
        ("POST", "/v1/completions", {"json": {"model": LONG, "prompt": "hi"}}, 404),
        ("GET", "/v1/models/" + LONG[:10_000], {}, 404),
        ("GET", "/v1/" + LONG[:10_000], {}, 404),
        ("POST", "/v1/completions", {"json": {LONG: 1, "prompt": "hi"}}, 400),
        ("POST", "/v1/completions", {"json": {**{f"{LONG[:100]}{i}": i for i in range(1000)}, "prompt": "hi"}}, 400),
        ("POST", "/v1/completions", {"content": b"{}", "headers": {"content-type": LONG[:10_000]}}, 415),
        (
            "POST",
            "/v1/completions",
            {"content": b"{}", "headers": {"content-type": "application/json", "content-encoding": LONG[:10_000]}},
            415,
        ),
        (
            "POST",
            "/v1/chat/completions",
            {
                "json": {
                    "messages": [{"role": "user", "content": "hi"}],
                    "tools": [{"type": "function", "function": {"name": "f"}}],
                    "tool_choice": {"type": "function", "function": {"name": LONG}},
                }
            },
            400,
        ),
        (
            "POST",
            "/v1/chat/completions",
            {
                "json": {
                    "messages": [
                        {"role": "user", "content": "hi"},
                        {"role": "tool", "tool_call_id": LONG, "content": "21"},
                    ]
                }
            },
            400,
        ),
        (
            "POST",
            "/generate",
            {"json": {"text": "hi", "sampling_params": {f"{LONG[:1000]}{i}": 1 for i in range(100)}}},
            400,
        ),
    ],
)
def test_an_error_quotes_no_client_value_whole(client, method, path, kwargs, status):
    """A 100 KB model name came back whole in the 404; every client value an error quotes
    (a name, a field, a header, a path, an id) is shortened, and a message is at most
    about a kilobyte however many wrong fields a body holds."""
    r = client.request(method, path, **kwargs)
    err = r.json()["error"]
    assert r.status_code == status, r.text[:500]
    assert len(err["message"]) <= 1000 and "x" * 200 not in err["message"], err["message"][:300]
    assert err["param"] is None or len(err["param"]) <= 200


def raw_request(url: str, head: bytes) -> bytes:
    """Send `head` on a raw socket (as fast as the server reads it) and return all of the reply."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    return reply


@pytest.mark.parametrize(
    "headers",
    [
        [("X-Many-" + str(i), "v") for i in range(500)],  # many small headers: a small head
        [("X-Big", "v" * 40_000)],  # one large header
        [("X-H" + str(i), "v" * 100) for i in range(10_000)],  # a 1 MB head: arrives in pieces
    ],
)
def test_too_many_or_too_large_headers_are_a_431_not_a_dropped_connection(client, headers):
    """A request with a large head was answered by closing the connection while the client
    still sent it: a reset, not an answer. Now it is a 431 with OpenAI's error body."""
    head = ("GET /health HTTP/1.1\r\nHost: x\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n").encode()
    reply = raw_request(str(client.base_url), head)
    status_line, _, rest = reply.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 431"), reply[:300]
    err = json.loads(rest.partition(b"\r\n\r\n")[2])["error"]
    assert err["type"] == "invalid_request_error" and re.search(r"headers|limit", err["message"]), err
    assert client.get("/health").status_code == 200


def test_header_limits_are_options():
    engine = sgl.Engine(stage="s1", max_total_tokens=2000, max_running_requests=4)
    with TestClient(create_app(engine, ServerOptions(max_headers=20, max_header_bytes=4096))) as c:
        assert c.get("/health", headers={f"x-{i}": "v" for i in range(10)}).status_code == 200
        r = c.get("/health", headers={f"x-{i}": "v" for i in range(30)})
        assert r.status_code == 431 and "limit is 20" in r.json()["error"]["message"]
        r = c.get("/health", headers={"x-big": "v" * 5000})
        assert r.status_code == 431 and "4096 bytes" in r.json()["error"]["message"]
    with pytest.raises(ValueError, match="max_headers"):
        ServerOptions(max_headers=0)


def test_an_ipv6_client_is_its_64_network_for_every_per_client_limit(monkeypatch):
    """One IPv6 host holds a whole /64 and may send each request from a fresh address in it:
    each was a newcomer to the compile pool's turns, with connections and compiles of its own.
    A client is an IPv4 address or an IPv6 /64 (an IPv4-mapped address is its IPv4)."""
    from minisglang.server.engine_loop import EngineLoop
    from minisglang.server.http_limits import client_of

    assert client_of("10.1.2.3") == "10.1.2.3"
    assert client_of("2001:db8:0:7::1") == client_of("2001:db8:0:7:ffff::9") == "2001:db8:0:7::/64"
    assert client_of("2001:db8:0:8::1") != client_of("2001:db8:0:7::1")
    assert client_of("::ffff:192.0.2.5") == "192.0.2.5" and client_of("/tmp/s.sock") == "/tmp/s.sock"
    seen = []
    generate = EngineLoop.generate
    monkeypatch.setattr(
        EngineLoop, "generate", lambda self, req, client: seen.append(client) or generate(self, req, client)
    )
    eng = sgl.Engine(stage="s1", max_total_tokens=2000, max_running_requests=8)
    with serving_in_thread(create_app(eng, ServerOptions(forwarded_allow_ips="127.0.0.1"))) as url:
        for address in ("2001:db8:0:7::1", "2001:db8:0:7::2", "192.0.2.5"):
            r = httpx.post(
                url + "/generate",
                json={"text": "Hi", "sampling_params": {"max_new_tokens": 2}},
                headers={"X-Forwarded-For": address},
                timeout=60,
            )
            assert r.status_code == 200, r.text
    assert seen == ["2001:db8:0:7::/64", "2001:db8:0:7::/64", "192.0.2.5"]


def _body_request(who: str, host: str, size: int, left: bool = False):
    """A starlette Request from `host` whose JSON body's text starts with `who`, padded to
    `size`; `left`: its client hung up after sending it."""
    from starlette.requests import Request

    body = json.dumps({"text": who.ljust(size, ".")}).encode()
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/generate",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": (host, 1234),
    }
    sent = []

    async def receive():
        if sent and left:
            return {"type": "http.disconnect"}
        if sent:  # as uvicorn's: nothing more arrives while the client stays
            await asyncio.Event().wait()
        sent.append(1)
        return {"type": "http.request", "body": body, "more_body": False}

    return Request(scope, receive)


def _watched_parse(monkeypatch, seconds: float):
    """client_threads.parse slowed by `seconds`; returns (the order parses began in, by the
    first 8 characters of each body's text, and the most of each that ran at once)."""
    from minisglang.server import client_threads

    began: list[str] = []
    active: dict[str, int] = {}
    most: dict[str, int] = {}
    lock = threading.Lock()

    def slow_parse(model_cls, body):
        who = json.loads(body)["text"][:8]
        with lock:
            began.append(who)
            active[who] = active.get(who, 0) + 1
            most[who] = max(most.get(who, 0), active[who])
        time.sleep(seconds)
        with lock:
            active[who] -= 1
        return parse(model_cls, body)

    monkeypatch.setattr(client_threads, "parse", slow_parse)
    return began, most


def test_a_clients_large_bodies_are_parsed_one_at_a_time(monkeypatch):
    """A client's 8 bodies of 90,000 messages at once (each under max_json_containers) were
    parsed side by side, each holding the GIL for most of its 0.3-1 s, and another client's
    streamed answer took 2-2.7 s. A client's bodies of SERIAL_PARSE_BYTES or more now take
    turns (small ones and other clients' do not wait), and nothing is kept after."""
    from minisglang.server import client_threads

    _, most = _watched_parse(monkeypatch, 0.05)
    big = client_threads.SERIAL_PARSE_BYTES

    async def main():
        reqs = [_body_request("client-a", "10.0.0.1", big) for _ in range(3)]
        reqs += [_body_request("client-b", "10.0.0.2", big), _body_request("client-b", "10.0.0.2", big)]
        reqs += [_body_request("small-aa", "10.0.0.1", 100) for _ in range(3)]
        parsed = await asyncio.gather(*(client_threads.parse_body(GenerateRequest, r, ServerOptions()) for r in reqs))
        assert len(parsed) == 8

    asyncio.run(main())
    assert most["client-a"] == most["client-b"] == 1  # each client's large bodies in turn
    assert most["small-aa"] >= 2  # small ones side by side
    assert dict(client_threads._turns) == {}


def test_a_request_whose_client_left_before_its_turn_is_not_parsed(monkeypatch):
    """In the same CancelLoop, the server went on parsing and tokenizing the requests of a
    client that had hung up, in its turns of the thread pool, for seconds after the flood
    ended (another client's answers stayed ~0.5 s slow until they were done). A call in a
    client's turn now first looks whether the client is still there: one that left is a
    ClientDisconnect (answered 499), its body unparsed."""
    from starlette.requests import ClientDisconnect

    from minisglang.server import client_threads

    began, _ = _watched_parse(monkeypatch, 0.0)

    async def main():
        with pytest.raises(ClientDisconnect):
            await client_threads.parse_body(
                GenerateRequest, _body_request("gone-aa", "10.0.0.1", 100, True), ServerOptions()
            )
        stays = await client_threads.parse_body(
            GenerateRequest, _body_request("stays-bb", "10.0.0.1", 100), ServerOptions()
        )
        assert stays.text.startswith("stays-bb")

    asyncio.run(main())
    assert began == ["stays-bb"]


def test_a_clients_burst_leaves_the_thread_pool_to_others(monkeypatch):
    """One client's burst of 100 chats took all 40 threads of the pool, and another client's
    request waited behind the burst's renders (0.2-0.6 s on 2 CPUs). A client now has at most
    THREADS_PER_CLIENT calls in the pool: a second client's body, sent after 60 of the first's,
    is parsed among the first few."""
    from minisglang.server import client_threads

    # 50 ms a parse: at 10 ms, on a loaded machine a burst parse ended (and the next began)
    # before the event loop had reached the other client's body, the last of the 61 started.
    began, most = _watched_parse(monkeypatch, 0.05)

    async def main():
        reqs = [_body_request("burst-aa", "10.0.0.1", 100) for _ in range(60)] + [
            _body_request("other-bb", "10.0.0.2", 100)
        ]
        await asyncio.gather(*(client_threads.parse_body(GenerateRequest, r, ServerOptions()) for r in reqs))

    asyncio.run(main())
    assert most["burst-aa"] == client_threads.THREADS_PER_CLIENT
    assert began.index("other-bb") <= client_threads.THREADS_PER_CLIENT + 1
    assert dict(client_threads._turns) == {}
