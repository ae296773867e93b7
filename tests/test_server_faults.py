"""Faults on loopback: clients that leave (streaming or not), a runaway regex compile, a step
that raises for some requests, the scheduler loop itself dying, and SIGTERM on a real
`minisglang serve` process. Every good request still gets valid output, /health stays 200
(or turns 503 and the process exits when the loop dies), and nothing leaks."""

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import httpx
import jsonschema
import pytest
from fastapi.testclient import TestClient

import minisglang as sgl
from minisglang.server import ServerOptions, create_app, serving_in_thread

DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
RUNAWAY = r"(a|b)*a(a|b){20}"  # its DFA has 2^21 states: the compile cannot finish in time
SMALL = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def wait_idle(engine, seconds: float = 60):
    deadline = time.monotonic() + seconds
    while not engine.stats().idle and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # the loop publishes the last finish after its step
    return engine.stats()


@pytest.fixture(scope="module")
def faulty():
    """A server whose stage raises while advancing a request whose prompt says BOOM (at its
    first token) or FAIL3 (at its fourth)."""
    engine = sgl.Engine(max_total_tokens=8000, max_running_requests=32, compile_timeout=2)
    advance = engine.stage.advance

    def advance_or_fail(req, token_id):
        if "BOOM" in req.prompt or "FAIL3" in req.prompt and len(req.output_ids) > 3:
            raise RuntimeError("injected fault in advance")
        return advance(req, token_id)

    engine.stage.advance = advance_or_fail
    with serving_in_thread(create_app(engine)) as url:
        yield url, engine


async def sse_lines(http, url, body, leave_after: int | None = None) -> list[str]:
    """The `data:` payloads of a stream; with leave_after, disconnect after that many."""
    lines = []
    async with http.stream("POST", url, json=body) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                lines.append(line[6:])
                if leave_after is not None and len(lines) >= leave_after:
                    return lines
    return lines


async def mixed_request(http, url: str, i: int) -> str:
    """One request of the mix; returns its kind after checking what it got."""
    kind = ["date", "json", "plain", "stream", "leave_stream", "leave_wait", "boom", "date"][i % 8]
    if i in (6, 30):  # two runaway compiles among the faults
        r = await http.post(url + "/v1/completions", json={"prompt": "ab", "regex": RUNAWAY, "max_tokens": 30})
        if r.status_code == 400:  # stopped by compile_timeout (an eager DFA) or a size limit
            assert re.search("longer than|limit|too large|too many", r.json()["error"]["message"]), r.text
            return "runaway"
        # s5's lazy automaton builds only the states it visits: no runaway there, a normal answer.
        assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] in ("stop", "length"), r.text
        return "runaway served"
    if kind == "date":
        r = await http.post(url + "/v1/completions", json={"prompt": "Date:", "max_tokens": 16, "regex": DATE})
        assert r.status_code == 200, r.text
        assert re.fullmatch(DATE, r.json()["choices"][0]["text"])
    elif kind == "json":
        r = await http.post(
            url + "/v1/chat/completions",
            json={
                "messages": [{"role": "user", "content": f"Li Lei is {20 + i} years old. JSON:"}],
                "max_tokens": 60,
                "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SMALL}},
            },
        )
        assert r.status_code == 200, r.text
        jsonschema.validate(json.loads(r.json()["choices"][0]["message"]["content"]), SMALL)
    elif kind == "plain":
        r = await http.post(
            url + "/v1/completions", json={"prompt": f"Numbers: {i},", "max_tokens": 12, "temperature": 0.7, "seed": i}
        )
        assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] in ("stop", "length")
    elif kind == "stream":
        lines = await sse_lines(
            http, url + "/v1/completions", {"prompt": "Date:", "max_tokens": 16, "regex": DATE, "stream": True}
        )
        assert lines[-1] == "[DONE]"
        assert re.fullmatch(DATE, "".join(json.loads(x)["choices"][0]["text"] for x in lines[:-1]))
    elif kind == "leave_stream":
        await sse_lines(
            http,
            url + "/v1/completions",
            {"prompt": "Tell me", "max_tokens": 400, "ignore_eos": True, "stream": True},
            leave_after=2,
        )
    elif kind == "leave_wait":
        with pytest.raises(httpx.TimeoutException):
            await http.post(
                url + "/v1/completions", timeout=0.4, json={"prompt": "Tell me", "max_tokens": 400, "ignore_eos": True}
            )
    elif kind == "boom":
        r = await http.post(url + "/v1/completions", json={"prompt": f"BOOM {i}", "max_tokens": 8})
        assert r.status_code == 500 and "injected fault" in r.json()["error"]["message"], r.text
    return kind


def test_mixed_load_with_faults_keeps_serving_and_leaks_nothing(faulty):
    url, engine = faulty

    async def round_(n: int) -> tuple[list[str], list[int]]:
        health: list[int] = []
        done = asyncio.Event()

        async def probe(http):
            while not done.is_set():
                health.append((await http.get(url + "/health")).status_code)
                await asyncio.sleep(0.1)

        async with httpx.AsyncClient(timeout=120) as http:
            prober = asyncio.ensure_future(probe(http))
            kinds = await asyncio.gather(*[mixed_request(http, url, i) for i in range(n)])
            done.set()
            await prober
        return kinds, health

    asyncio.run(round_(8))  # warm up: compiles, caches, allocator
    wait_idle(engine)
    baseline = rss_mb()
    before = engine.stats().finished_by_reason.get("abort", 0)
    kinds, health = asyncio.run(round_(48))
    stats = wait_idle(engine)
    assert kinds.count("runaway") + kinds.count("runaway served") == 2 and kinds.count("boom") == 4
    assert health and set(health) == {200}
    assert httpx.get(url + "/health").status_code == 200
    assert stats.idle and stats.pools_full, stats
    assert engine.scheduler.tree_cache.protected_size() == 0
    faults = sum(kinds.count(k) for k in ("leave_stream", "leave_wait", "boom", "runaway"))
    # Every leaver that reached the engine was aborted: none ran to its 400 tokens. (On a loaded
    # machine a leaver may disconnect before its prompt was even queued: then there is nothing to
    # abort, so the count of aborts is bounded, not exact.)
    assert not [e for e in engine.trace if e["event"] == "finish" and e["reason"].get("length") == 400]
    aborted = stats.finished_by_reason.get("abort", 0) - before
    assert kinds.count("boom") + kinds.count("runaway") <= aborted <= faults, (aborted, faults)
    assert rss_mb() - baseline < 200, (baseline, rss_mb())
    # A client that left is counted as one, not as a refused request (it was never answered).
    counts = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in httpx.get(url + "/metrics").text.splitlines()
        if line.startswith(("minisglang_refused_requests_total", "minisglang_client_disconnects_total"))
    }
    assert counts.get('minisglang_refused_requests_total{status="400"}', 0) <= kinds.count("runaway") + 1, counts
    assert counts["minisglang_client_disconnects_total"] >= 1, counts


def test_a_runaway_compile_is_stopped_while_others_are_served():
    """s3 builds the whole DFA up front, so this regex really compiles for ever: its request
    gets a 400 at compile_timeout, and simple grammars are served meanwhile."""
    engine = sgl.Engine(
        stage="s3", max_total_tokens=2000, max_running_requests=8, compile_timeout=3, max_fsm_states=10**8
    )  # (no state limit: the runaway compiles until the timeout)
    with serving_in_thread(create_app(engine)) as url:
        assert (
            httpx.post(
                url + "/v1/completions",
                timeout=60,  # workers started, DATE cached
                json={"prompt": "Date:", "max_tokens": 16, "regex": DATE},
            ).status_code
            == 200
        )

        async def main():
            async with httpx.AsyncClient(timeout=60) as http:
                runaway = asyncio.ensure_future(
                    http.post(url + "/v1/completions", json={"prompt": "ab", "regex": RUNAWAY, "max_tokens": 30})
                )
                await asyncio.sleep(0.3)
                dates = await asyncio.gather(
                    *[
                        http.post(
                            url + "/v1/completions", json={"prompt": f"Day {i}:", "max_tokens": 16, "regex": DATE}
                        )
                        for i in range(4)
                    ]
                )
                behind = runaway.done()  # True would mean the dates waited for the runaway
                health = (await http.get(url + "/health")).status_code
                return await runaway, dates, behind, health

        runaway, dates, behind, health = asyncio.run(main())
        assert not behind
        assert runaway.status_code == 400 and "longer than 3" in runaway.json()["error"]["message"]
        assert all(r.status_code == 200 and re.fullmatch(DATE, r.json()["choices"][0]["text"]) for r in dates)
        assert health == 200
        stats = wait_idle(engine)
        assert stats.idle and stats.pools_full


def as_a_client_allowed_one_compile(script, **options):
    """`await script(post)` (post(regex, client=None) -> the response; `client`: the address
    an X-Forwarded-For header gives) against an s3 server that lets a client wait for one
    compile at a time (and has `options`); its result, once the engine is idle and whole."""
    engine = sgl.Engine(
        stage="s3", max_total_tokens=2000, max_running_requests=8, compile_timeout=3, max_fsm_states=10**8
    )  # (no state limit: the runaway compiles until the timeout)
    with serving_in_thread(create_app(engine, ServerOptions(max_compiling_per_client=1, **options))) as url:

        async def main():
            async with httpx.AsyncClient(timeout=60) as http:

                def post(regex, client=None):
                    return http.post(
                        url + "/v1/completions",
                        json={"prompt": "ab", "regex": regex, "max_tokens": 30},
                        headers={"X-Forwarded-For": client} if client else {},
                    )

                return await script(post)

        out = asyncio.run(main())
        assert wait_idle(engine).pools_full
    return out


def test_a_client_waits_for_a_bounded_number_of_distinct_grammars():
    async def script(post):
        first = asyncio.ensure_future(post(RUNAWAY))
        await asyncio.sleep(0.5)
        same = asyncio.ensure_future(post(RUNAWAY))  # shares the compile: allowed
        other = await post(r"(a|b)*b(a|b){20}")  # a second grammar: refused
        return await first, await same, other

    first, same, other = as_a_client_allowed_one_compile(script)
    assert other.status_code == 429
    assert other.json()["error"]["type"] == "rate_limit_error" and "limit is 1" in other.json()["error"]["message"]
    assert other.headers["Retry-After"] == "1"  # (the openai client waits that long before it retries)
    assert first.status_code == same.status_code == 400  # both stopped at compile_timeout


@pytest.mark.parametrize("proxies", [None, "127.0.0.1", "192.0.2.7"])
def test_clients_behind_a_trusted_proxy_have_a_budget_each_and_others_cannot_pick_one(proxies):
    """Behind a reverse proxy every request comes from the proxy's address: the budget would
    be one for all its clients. A proxy in forwarded_allow_ips (here the test client itself,
    127.0.0.1) names the client in X-Forwarded-For. By default no proxy is trusted, and a
    proxy that is not the test client (192.0.2.7) is not either: the header is ignored, and a
    local client cannot pick a fresh budget by sending it."""

    async def script(post):
        runaway = asyncio.ensure_future(post(RUNAWAY, client="10.0.0.1"))  # client 1's one compile
        await asyncio.sleep(0.5)
        other_client = await post(r"[0-9]{3}", client="10.0.0.2")
        same_client = await post(r"[a-c]{4}", client="10.0.0.1")
        return await runaway, other_client, same_client

    options = {} if proxies is None else {"forwarded_allow_ips": proxies}
    runaway, other_client, same_client = as_a_client_allowed_one_compile(script, **options)
    assert runaway.status_code == 400 and same_client.status_code == 429
    if proxies == "127.0.0.1":
        assert other_client.status_code == 200 and re.fullmatch(r"[0-9]{3}", other_client.json()["choices"][0]["text"])
    else:  # the header is not believed: all three are one client, the socket's address
        assert other_client.status_code == 429, other_client.text


def test_forwarded_allow_ips_must_be_a_string():
    assert ServerOptions().forwarded_allow_ips is None  # trust no proxy unless told
    with pytest.raises(ValueError, match="forwarded_allow_ips"):
        ServerOptions(forwarded_allow_ips=["127.0.0.1"])


def test_a_grammar_compiled_already_is_served_while_the_clients_budget_is_full():
    """The budget counts compiles a request would start: a regex in the cache costs none, so
    it is served while the same client's one allowed compile runs (it was refused with a 429)."""

    async def script(post):
        warm = await post(DATE)  # compiled and cached
        runaway = asyncio.ensure_future(post(RUNAWAY))  # the budget's one compile
        await asyncio.sleep(0.5)
        cached = await post(DATE)
        other = await post(r"(a|b)*b(a|b){20}")  # would start a compile: refused
        return warm, await runaway, cached, other

    warm, runaway, cached, other = as_a_client_allowed_one_compile(script)
    assert warm.status_code == cached.status_code == 200, cached.text
    assert re.fullmatch(DATE, cached.json()["choices"][0]["text"])
    assert other.status_code == 429 and runaway.status_code == 400


def test_a_client_that_leaves_its_compile_still_has_it_counted_until_it_ends():
    """A compile goes on after its client leaves, and the per-client budget counted only the
    requests still waiting: a client could ask for a grammar, leave, and ask for another, again
    and again, queueing compiles without end (another client's regex then timed out waiting
    behind them). Now a compile counts against its client until it ends."""
    engine = sgl.Engine(
        stage="s3", max_total_tokens=2000, max_running_requests=8, compile_timeout=3, max_fsm_states=10**8
    )  # (no state limit: the runaway compiles until the timeout)
    with serving_in_thread(create_app(engine, ServerOptions(max_compiling_per_client=1))) as url:

        def post(regex, **kwargs):
            return httpx.post(
                url + "/v1/completions", json={"prompt": "ab", "regex": regex, "max_tokens": 30}, **kwargs
            )

        with pytest.raises(httpx.TimeoutException):
            # asks for a compile that runs to compile_timeout, and leaves (after 1 s: with 0.3 s, on a
            # loaded machine, it left before its request reached the engine)
            post(RUNAWAY, timeout=1.0)
        time.sleep(0.3)  # its request is aborted; its compile runs on
        other = post(r"(a|b)*b(a|b){20}", timeout=60)
        assert other.status_code == 429, other.text
        assert "limit is 1" in other.json()["error"]["message"]
        time.sleep(3.5)  # the first compile has ended (stopped at 3 s)
        assert post(DATE, timeout=60).status_code == 200
        assert wait_idle(engine).pools_full


def test_a_stream_whose_step_raises_ends_with_an_error_event_and_done(faulty):
    url, engine = faulty
    body = {"messages": [{"role": "user", "content": "FAIL3"}], "max_tokens": 12, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", url + "/v1/chat/completions", timeout=60, json=body) as r:
        assert r.status_code == 200  # tokens were out before the fault
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["type"] == "server_error" and "injected fault" in error["message"]
    assert json.loads(events[0])["choices"][0]["delta"]["role"] == "assistant"
    # A fault before anything was streamed is a plain 500 response instead.
    r = httpx.post(
        url + "/v1/chat/completions", timeout=60, json={**body, "messages": [{"role": "user", "content": "BOOM"}]}
    )
    assert r.status_code == 500 and "injected fault" in r.json()["error"]["message"]


def disconnects(url: str) -> float:
    metrics = httpx.get(url + "/metrics").text.splitlines()
    return float(next(line for line in metrics if line.startswith("minisglang_client_disconnects_total")).split()[-1])


def test_a_client_that_closes_its_stream_midway_is_counted_as_one_that_left(faulty):
    """The counter counted clients that left before the first event only (a stranger's
    find): one that closes the stream after some events is a departure too."""
    url, engine = faulty
    before = disconnects(url)
    body = {"prompt": "Once", "max_tokens": 300, "ignore_eos": True, "stream": True}
    lines = asyncio.run(left_after(url + "/v1/completions", body, 3))
    assert len(lines) == 3 and wait_idle(engine).pools_full
    deadline = time.time() + 10
    while disconnects(url) < before + 1 and time.time() < deadline:
        time.sleep(0.05)
    assert disconnects(url) == before + 1
    assert not [e for e in engine.trace if e["event"] == "finish" and e["reason"].get("length") == 300]


def refused_400(url: str) -> float:
    metrics = httpx.get(url + "/metrics").text.splitlines()
    line = next((ln for ln in metrics if ln.startswith('minisglang_refused_requests_total{status="400"}')), None)
    return 0.0 if line is None else float(line.split()[-1])


def test_a_client_that_closes_before_its_body_arrives_is_a_departure_not_a_refusal(faulty):
    """It was answered as a refused 400 (a stranger's find): it is a client that left."""
    import socket
    from urllib.parse import urlparse

    url, engine = faulty
    before, refused = disconnects(url), refused_400(url)
    where = urlparse(url)
    with socket.create_connection((where.hostname, where.port)) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\n\r\n{"prompt": "Once'
        )
    deadline = time.time() + 10
    while disconnects(url) < before + 1 and time.time() < deadline:
        time.sleep(0.05)
    assert disconnects(url) == before + 1 and refused_400(url) == refused
    assert httpx.get(url + "/health").status_code == 200


async def left_after(url: str, body: dict, n: int) -> list[str]:
    async with httpx.AsyncClient(timeout=60) as http:
        return await sse_lines(http, url, body, leave_after=n)


def test_server_options_are_checked():
    with pytest.raises(ValueError, match="max_body_bytes must be >= 1"):
        ServerOptions(max_body_bytes=0, api_key="secret")
    with pytest.raises(TypeError):
        ServerOptions(max_bodybytes=10)  # a typo is refused, not ignored


def test_a_non_streaming_client_that_leaves_is_aborted(faulty):
    url, engine = faulty
    with pytest.raises(httpx.TimeoutException):
        httpx.post(
            url + "/v1/completions", timeout=0.5, json={"prompt": "LEAVER", "max_tokens": 600, "ignore_eos": True}
        )
    wait_idle(engine)
    finish = [
        e
        for e in engine.trace
        if e["event"] == "finish" and e["reason"]["type"] == "abort" and "client" in e["reason"].get("message", "")
    ]
    assert finish, "the request was not aborted"
    assert engine.stats().pools_full


def test_a_chunked_upload_over_the_limit_is_413_on_loopback():
    engine = sgl.Engine(max_total_tokens=2000, max_running_requests=4)
    with serving_in_thread(create_app(engine, ServerOptions(max_body_bytes=50_000))) as url:

        def body():
            for _ in range(50):
                yield b" " * 10_000

        r = httpx.post(url + "/v1/completions", content=body(), headers={"content-type": "application/json"})
        assert r.status_code == 413 and "50000" in r.json()["error"]["message"]
        assert httpx.get(url + "/health").status_code == 200


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the loop re-raises, on purpose
def test_when_the_loop_dies_health_is_503_and_everyone_gets_an_error():
    engine = sgl.Engine(max_total_tokens=2000, max_running_requests=4)
    fatal = threading.Event()
    real_step = engine.step

    def step():
        if any("DIE" in r.prompt for r in engine.scheduler.running):
            raise SystemError("injected: the loop itself fails")
        return real_step()

    engine.step = step
    with TestClient(create_app(engine, on_fatal=fatal.set), raise_server_exceptions=False) as c:
        assert c.get("/health").status_code == 200
        results = {}

        def long_stream():
            with c.stream(
                "POST",
                "/v1/completions",
                json={"prompt": "Tell me", "max_tokens": 900, "ignore_eos": True, "stream": True},
            ) as r:
                results["lines"] = [x for x in r.iter_lines() if x.startswith("data: ")]

        t = threading.Thread(target=long_stream)
        t.start()
        time.sleep(0.5)
        r = c.post("/v1/completions", json={"prompt": "DIE", "max_tokens": 5, "ignore_eos": True})
        t.join(30)
        assert not t.is_alive()
        assert r.status_code == 503 and "stopped" in r.json()["error"]["message"]
        lines = results["lines"]
        assert lines[-1] == "data: [DONE]" and "error" in json.loads(lines[-2][6:])  # not a cut
        # on_fatal runs on the dying loop thread right after it has answered everyone: wait for it
        assert fatal.wait(10), "the server's on_fatal was not called after the loop died"
        stats = engine.stats()  # Engine.fail ran before on_fatal: the requests left, their memory is back
        assert stats.idle and stats.pools_full, stats
        assert c.get("/health").status_code == 503
        assert c.post("/v1/completions", json={"prompt": "x", "max_tokens": 2}).status_code == 503


def test_health_is_503_while_a_step_hangs_and_200_again_when_it_returns():
    """A scheduler thread that is alive but stuck in one step serves nobody: /health says so
    (503, OpenAI's error shape, how long and the limit), and recovers when the step returns.
    An idle loop, with nothing to step, stays healthy however long it waits."""
    engine = sgl.Engine(max_total_tokens=2000, max_running_requests=4)
    release, real_step = threading.Event(), engine.step

    def step():
        if any("HANG" in r.prompt for r in engine.scheduler.running):
            release.wait(60)  # a step that blocks until the test lets it go
        return real_step()

    engine.step = step

    def health_until(status: int) -> httpx.Response:
        deadline = time.monotonic() + 30
        while (r := c.get("/health")).status_code != status and time.monotonic() < deadline:
            time.sleep(0.05)
        return r

    with TestClient(create_app(engine, ServerOptions(stall_timeout=0.3))) as c:
        time.sleep(0.6)  # idle for twice the limit
        assert c.get("/health").json() == {"status": "ok"}
        answer = {}
        t = threading.Thread(
            target=lambda: answer.update(
                r=c.post("/v1/completions", json={"prompt": "HANG", "max_tokens": 3, "ignore_eos": True})
            )
        )
        t.start()
        r = health_until(503)
        err = r.json()["error"]
        assert r.status_code == 503 and err["type"] == "server_error" and err["code"] == "scheduler_stalled"
        assert "stuck" in err["message"] and "inside one engine step" in err["message"] and "0.3 s" in err["message"]
        seconds = float(re.search(r"for ([\d.]+) s", err["message"]).group(1))
        assert seconds >= 0.3  # shown to a tenth of a second
        assert c.get("/get_server_info").json()["scheduler"]["current_step_seconds"] > 0.3
        release.set()
        assert health_until(200).json() == {"status": "ok"}
        t.join(30)
        assert answer["r"].status_code == 200
        timing = c.get("/get_server_info").json()["scheduler"]
        assert timing["longest_step_last_minute_seconds"] > 0.3 and timing["current_step_seconds"] is None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("the server did not become healthy")


def stream_in_thread(url: str, body: dict) -> tuple[threading.Thread, list[str], threading.Event]:
    lines: list[str] = []
    started = threading.Event()

    def run():
        try:
            with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        lines.append(line[6:])
                        started.set()
        except httpx.HTTPError as e:
            lines.append(f"cut: {e!r}")
        started.set()

    t = threading.Thread(target=run)
    t.start()
    return t, lines, started


@pytest.mark.slow
def test_sigterm_aborts_in_flight_requests_and_exits_within_5s():
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "minisglang.cli", "serve", "--port", str(port), "--drain-timeout", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_healthy(url, proc)
        t, lines, started = stream_in_thread(
            url, {"prompt": "Tell me", "max_tokens": 900, "ignore_eos": True, "stream": True}
        )
        assert started.wait(30)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=10)
        elapsed = time.monotonic() - t0
        t.join(10)
        # uvicorn re-raises the signal once its graceful shutdown is done: "ended by SIGTERM".
        assert rc in (0, -signal.SIGTERM) and elapsed < 5, (rc, elapsed, proc.stdout.read())
        assert lines[-1] == "[DONE]", lines[-3:]
        assert "shutting down" in json.loads(lines[-2])["error"]["message"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


LOOP_DIES = textwrap.dedent("""
    import sys
    import minisglang as sgl
    from minisglang.server import serve

    if __name__ == "__main__":
        engine = sgl.Engine()
        real_step = engine.step

        def step():
            if any("DIE" in r.prompt for r in engine.scheduler.running):
                raise SystemError("injected: the loop itself fails")
            return real_step()

        engine.step = step
        sys.exit(serve(engine, port=int(sys.argv[1])))
""")


@pytest.mark.slow
def test_a_server_whose_loop_dies_exits_non_zero(tmp_path):
    script = tmp_path / "dies.py"
    script.write_text(LOOP_DIES)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        wait_healthy(url, proc)
        t, lines, started = stream_in_thread(
            url, {"prompt": "Tell me", "max_tokens": 900, "ignore_eos": True, "stream": True}
        )
        assert started.wait(30)
        r = httpx.post(url + "/v1/completions", json={"prompt": "DIE", "max_tokens": 5, "ignore_eos": True}, timeout=30)
        assert r.status_code == 503
        rc = proc.wait(timeout=15)
        t.join(10)
        assert rc == 1
        assert lines[-1] == "[DONE]" and "error" in json.loads(lines[-2])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def gated_compiles(engine):
    """Hold every compile of a text with "slow" in it until the returned gate is set."""
    backend, gate = engine.stage.backend, threading.Event()
    real = backend.compile

    def compile(kind, text):
        if "slow" in text:
            gate.wait(30)
        return real(kind, text)

    backend.compile = compile
    return gate


def test_compiles_take_turns_by_client_and_one_that_waited_behind_others_is_a_503():
    """Two compile threads, so each client runs at most one compile at a time. Client A's two
    slow compiles (held at a gate) take one thread; client B's trivial regex gets the other at
    once and is answered. A's second compile waits behind A's first past half the timeout:
    the server was busy, not the grammar slow, so it is a 503 with Retry-After, while A's
    first, which had its thread all along, is a 400."""
    engine = sgl.Engine(stage="s5", compile_timeout=2, compile_workers=2)
    gate = gated_compiles(engine)

    async def post(http, url, regex, client):
        return await http.post(
            url + "/v1/completions",
            headers={"X-Forwarded-For": client},
            json={"prompt": "Say:", "max_tokens": 8, "regex": regex, "temperature": 0},
        )

    async def script(url):
        async with httpx.AsyncClient(timeout=60) as http:
            first = asyncio.ensure_future(post(http, url, "slow1[0-9]", "10.0.0.1"))
            await asyncio.sleep(0.3)
            second = asyncio.ensure_future(post(http, url, "slow2[0-9]", "10.0.0.1"))
            await asyncio.sleep(0.3)
            other = await post(http, url, r"A0[0-9]{3}", "10.0.0.2")
            a_still_waits = not first.done()
            return await first, await second, other, a_still_waits

    try:
        with serving_in_thread(create_app(engine, ServerOptions(forwarded_allow_ips="127.0.0.1"))) as url:
            first, second, other, a_still_waits = asyncio.run(script(url))
    finally:
        gate.set()
        engine.shutdown()
    assert other.status_code == 200 and re.fullmatch(r"A0[0-9]{3}", other.json()["choices"][0]["text"]), other.text
    assert a_still_waits, "client B was answered only after client A's compile ended: it waited behind it"
    assert first.status_code == 400 and "took longer than 2 s" in first.text, first.text
    assert second.status_code == 503 and second.headers.get("retry-after") == "1", (second.status_code, second.text)
    assert "too busy" in second.json()["error"]["message"]
    # (a stranger's next grammar, behind its own runaway compile, was told to retry later:
    # it never helped; the message says whose compiles it waited for)
    assert "behind this client's own earlier compiles" in second.json()["error"]["message"], second.text
