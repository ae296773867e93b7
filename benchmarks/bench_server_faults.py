"""What faults cost the good requests: a mixed load on loopback, with and without faults.

One `minisglang serve` app (the bundled model, stage s5, `compile_timeout=5`) runs on a
background thread. Each run sends the same `--requests` good requests, at most
`--concurrency` at a time, through httpx (the faults come from other clients, ungated):

* good: a date regex (checked with re.fullmatch), a JSON Schema chat completion (parsed
  and validated), a plain sampled completion, and a streamed date regex;
* faults (the "faulty" run only), mixed in between: clients that leave a stream after two
  events, clients that stop waiting for a non-streamed answer after 0.3 s, a regex whose
  eager DFA has 2^21 states (a runaway compile, stopped by the timeout, for an eager
  automaton; s5's lazy one builds only what it visits), requests whose grammar step raises
  (the stage is wrapped to raise for prompts containing BOOM), and malformed bodies. What
  each fault client saw is listed under the table.

For the good requests of each run it reports requests/s (good requests over the run's wall
time), p50 and p99 latency, and how many were valid; the two kinds of run alternate
`--repeats` times so that a busy machine slows both alike, and the ratio compares their
medians. The target (issue 13): the faulty run keeps >= 80% of the clean run's throughput.

    python benchmarks/bench_server_faults.py [--requests 64] [--concurrency 16] [--repeats 3]

Prints the table; writes benchmarks/results/server_faults.md.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import re
import statistics
import time
from pathlib import Path

import httpx
import jsonschema
import torch
from _results import machine_line, write_results  # benchmarks/_results.py (scripts run from benchmarks/)

import minisglang as sgl
from minisglang.server import create_app, serving_in_thread

RESULTS = Path(__file__).parent / "results" / "server_faults.md"
DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
RUNAWAY = r"(a|b)*a(a|b){20}"
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


async def good_request(http: httpx.AsyncClient, url: str, i: int) -> tuple[float, bool]:
    """One good request of kind i % 4; (latency in s, output valid)."""
    t0 = time.perf_counter()
    kind = i % 4
    if kind == 0:
        r = await http.post(url + "/v1/completions", json={"prompt": "Date:", "max_tokens": 16, "regex": DATE})
        ok = r.status_code == 200 and re.fullmatch(DATE, r.json()["choices"][0]["text"]) is not None
    elif kind == 1:
        r = await http.post(
            url + "/v1/chat/completions",
            json={
                "messages": [{"role": "user", "content": f"Li Lei is {20 + i % 50} years old. JSON:"}],
                "max_tokens": 60,
                "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}},
            },
        )
        try:
            jsonschema.validate(json.loads(r.json()["choices"][0]["message"]["content"]), PERSON)
            ok = r.status_code == 200
        except (ValueError, KeyError, jsonschema.ValidationError):
            ok = False
    elif kind == 2:
        r = await http.post(
            url + "/v1/completions", json={"prompt": f"Numbers: {i},", "max_tokens": 24, "temperature": 0.8, "seed": i}
        )
        ok = r.status_code == 200 and r.json()["choices"][0]["finish_reason"] in ("stop", "length")
    else:
        text, done = "", False
        async with http.stream(
            "POST", url + "/v1/completions", json={"prompt": "Born on", "max_tokens": 16, "regex": DATE, "stream": True}
        ) as r:
            async for line in r.aiter_lines():
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: "):
                    text += json.loads(line[6:])["choices"][0]["text"]
        ok = done and re.fullmatch(DATE, text) is not None
    return time.perf_counter() - t0, ok


FAULT_KINDS = ("stream leaver", "waiting leaver", "runaway regex", "raising step", "malformed body")


async def fault(http: httpx.AsyncClient, url: str, i: int) -> str:
    """One fault of kind i % 5; returns "<kind>: <what the client saw>" (the server must simply survive)."""
    kind = i % 5
    try:
        if kind == 0:
            async with http.stream(
                "POST",
                url + "/v1/completions",
                json={"prompt": "Tell me", "max_tokens": 300, "ignore_eos": True, "stream": True},
            ) as r:
                n = 0
                async for line in r.aiter_lines():
                    n += line.startswith("data: ")
                    if n >= 2:
                        break
            seen = "left"
        elif kind == 1:
            r = await http.post(
                url + "/v1/completions", timeout=0.3, json={"prompt": "Tell me", "max_tokens": 300, "ignore_eos": True}
            )
            seen = str(r.status_code)
        elif kind == 2:
            r = await http.post(url + "/v1/completions", json={"prompt": "ab", "regex": RUNAWAY, "max_tokens": 20})
            seen = str(r.status_code)
        elif kind == 3:
            r = await http.post(url + "/v1/completions", json={"prompt": f"BOOM {i}", "max_tokens": 8})
            seen = str(r.status_code)
        else:
            r = await http.post(
                url + "/v1/completions",
                content=b'{"prompt": 5, "max_tokens": 5.5, "n": [}',
                headers={"content-type": "application/json"},
            )
            seen = str(r.status_code)
    except httpx.TimeoutException:
        seen = "left"  # a client that leaves on purpose
    return f"{FAULT_KINDS[kind]}: {seen}"


async def one_run(url: str, n_good: int, n_faults: int, concurrency: int) -> dict:
    gate = asyncio.Semaphore(concurrency)

    async def gated(coro):
        async with gate:
            return await coro

    async with httpx.AsyncClient(timeout=300) as http:
        t0 = time.perf_counter()
        good = [asyncio.ensure_future(gated(good_request(http, url, i))) for i in range(n_good)]
        # Faults come from other clients: they do not take the good clients' concurrency slots.
        faults = [asyncio.ensure_future(fault(http, url, i)) for i in range(n_faults)]
        results = await asyncio.gather(*good)
        wall = time.perf_counter() - t0
        fault_outcomes = await asyncio.gather(*faults)
        health = (await http.get(url + "/health")).status_code
    lat = sorted(r[0] for r in results)
    return {
        "rps": n_good / wall,
        "p50": statistics.median(lat),
        "p99": lat[min(len(lat) - 1, int(0.99 * len(lat)))],
        "valid": sum(r[1] for r in results),
        "n": n_good,
        "health": health,
        "faults": fault_outcomes,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=64, help="good requests per run")
    ap.add_argument("--faults", type=int, default=20, help="fault requests in a faulty run")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()

    engine = sgl.Engine(max_total_tokens=16384, max_running_requests=64, compile_timeout=5)
    advance = engine.stage.advance

    def advance_or_fail(req, token_id):  # the injected fault: this request's grammar step raises
        if "BOOM" in req.prompt:
            raise RuntimeError("injected fault")
        return advance(req, token_id)

    engine.stage.advance = advance_or_fail
    runs: dict[str, list[dict]] = {"clean": [], "faulty": []}
    with serving_in_thread(create_app(engine)) as url:
        # Warm up until the good grammars are compiled and cached: on a busy machine the compile
        # workers' start can take longer than compile_timeout, and a timed-out compile is not cached.
        for _ in range(6):
            if asyncio.run(one_run(url, 8, 0, args.concurrency))["valid"] == 8:
                break
        for _ in range(args.repeats):
            for name, n_faults in (("clean", 0), ("faulty", args.faults)):
                runs[name].append(asyncio.run(one_run(url, args.requests, n_faults, args.concurrency)))
                print(name, {k: v for k, v in runs[name][-1].items() if k != "faults"}, flush=True)
        deadline = time.monotonic() + 60  # let the leavers' aborts land before reading the pools
        while not engine.stats().idle and time.monotonic() < deadline:
            time.sleep(0.1)
        stats = engine.stats()

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name])

    ratio = med("faulty", "rps") / med("clean", "rps")
    per_run = {name: ", ".join(f"{r['rps']:.2f}" for r in runs[name]) for name in runs}
    lines = [
        "# Server under faults (issue 13)",
        "",
        f"Written by `benchmarks/bench_server_faults.py`: {args.requests} good requests per run (date regex, "
        f"JSON Schema chat, plain sampled, streamed regex), at most {args.concurrency} at a time; a faulty run "
        f"adds {args.faults} faults from other clients (stream leavers, non-stream leavers after 0.3 s, the "
        f"regex `{RUNAWAY}` whose eager DFA never finishes compiling (s5's lazy automaton serves it; an eager "
        "one is stopped by `compile_timeout=5`), a grammar step that raises, malformed bodies). Clean and "
        "faulty runs "
        f"alternate, {args.repeats} of each; medians over the runs.",
        "",
        "| run | good requests/s | p50 latency (s) | p99 latency (s) | valid good outputs | /health after |",
        "|---|---|---|---|---|---|",
    ]
    for name in ("clean", "faulty"):
        valid = sum(r["valid"] for r in runs[name])
        total = sum(r["n"] for r in runs[name])
        health = sorted({r["health"] for r in runs[name]})
        lines.append(
            f"| {name} | {med(name, 'rps'):.2f} | {med(name, 'p50'):.2f} | {med(name, 'p99'):.2f} | "
            f"{valid}/{total} | {', '.join(map(str, health))} |"
        )
    lines += [
        "",
        f"Faulty / clean throughput of the good requests: **{ratio:.2f}x** (target >= 0.80). "
        f"Per run (requests/s): clean {per_run['clean']}; faulty {per_run['faulty']}.",
        "",
        "What the fault clients saw (all faulty runs): "
        + ", ".join(
            f"{k} x{n}" for k, n in sorted(collections.Counter(o for r in runs["faulty"] for o in r["faults"]).items())
        )
        + ".",
        "",
        f"After all runs: pools full {stats.pools_full}, idle {stats.idle}, finished by reason "
        f"{dict(sorted(stats.finished_by_reason.items()))}, step errors caught {stats.errors}.",
        "",
        machine_line(f"whole run {(time.perf_counter() - started) / 60:.1f} min"),
    ]
    write_results("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
