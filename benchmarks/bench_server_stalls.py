"""No client stalls another: a bystander's latency while one client sends expensive grammars.

A `minisglang serve` (the default stage and backend, `--forwarded-allow-ips 127.0.0.1` so
each client of this script names itself with X-Forwarded-For) runs as a subprocess. A
bystander sends 1-token completions one after another; first alone (the baseline), then
while an attacker sends one class of expensive requests at a time:

* pattern: a ~200-byte json_schema whose string has `pattern: ^(x|y)*x(x|y){14}$` and a
  min/maxLength (a language whose DFA has ~2^15 states, intersected with the length);
* cjk_triggers: a structural tag with 6 triggers of 8 CJK characters;
* vowels: four `([\\s\\S]*[aeiou][\\s\\S]{N}){6}` regexes at temperature 2;
* slow_then_trivial: two slow schemas from one client, then another client's trivial fresh
  regex (its latency is the attacker column: the compile pool serves clients in turn);
* runaway_compiles (stop 51): two clients each send a 25-character regex whose outlines-core
  DFA takes minutes and a 1.2 MB nested anyOf whose xgrammar compile does, then another
  client's trivial fresh regex (with `--grammar-backend outlines` or `xgrammar`: the
  libraries' compiles run in kept children, killed at compile_timeout, and the waiting
  threads step out of the pool; on threads they held both compile threads for minutes);
* huge_think_end: a 3.6 MB think_end (refused before any work);
* big_schemas: four ~3.9 MB schemas;
* generated classes: nested quantifiers over alternations, a long bounded repeat after a
  star, 16 long triggers, a big enum in a pattern;
* a stranger's classes (stop 49), each refused with a 400 and each once a stall of seconds:
  long_chat (two 3.8 MB chat messages: tokenized whole before the size check),
  nested_lists (two 2.9 MB bodies of 570,000 empty lists: parsed under the GIL),
  forged_specials (four chats of 8,000 messages spelling `<|user|>`: a quadratic scan),
  ambiguous_ebnf (an EBNF whose library masks grow to seconds a token; with
  `--grammar-backend xgrammar` or `llguidance`, as our fsm backend refuses EBNF), and
  ambiguous_ebnf_n64 (that grammar's 64 choices of one completion, each mask a few ms);
* a stranger's classes (stop 70): null_object (16 choices of 3,000 required nulls: the
  libraries' forced-text searches, `--grammar-backend xgrammar` or `llguidance`) and
  retracted_backlog (4 x n=32 of 400 tokens, three times the KV pool: no grammar);
* a stranger's classes (stop 71): doubling_ebnf and nested_repeats_tag (a few hundred bytes
  that force megabytes: xgrammar's uncuttable jump search, `--grammar-backend xgrammar`);
* a stranger's classes (stop 72): oneof_consts (a oneOf of 3,000 consts: every pair of
  branches compared, `--grammar-backend outlines` or `xgrammar`) and optional_refs (2.8 KB
  whose outlines-core regex is 331 million characters, `--grammar-backend outlines`).

With `--hogs` it runs the hog cases instead, each on servers of its own (one at a time),
the same load beside each server so the columns compare (the hogs in a process of their own:
a client reading 250 streams in the bystander's process delayed the bystander's answers by
seconds the server did not cause; `--only bursts,rows,jumps,arrivals,backlog,chunks,fresh,longs,cancels,trickles,compiles`
picks cases, into a section of their own):

* burst_hog: one client sends HOG_BURST streamed chats at once, and again when all are
  answered; the bystander starts 0.3 s after the first burst (on a fresh server each chat
  of it compiled the chat template once);

* row_hog: one client keeps HOG_STREAMS streams of HOG_STREAM_TOKENS tokens going (more
  than the 128 rows); a bystander's plain 1-token requests, on the default server and on one with
  `--reserved-for-new-clients 0`;
* jump_hog: one client keeps HOG_JUMPERS greedy requests going whose regex forces most of
  their text; the bystander's plain 1-token requests beside s6 (each jump a re-admission
  through the radix tree) and beside `--stage s7` (the forced text drafted instead);
* compile_hog on 1, 3 and 6 addresses: each keeps 8 json_schemas of 2,000 properties
  compiling (each refused over max_regex_chars after a few tenths of a second of work);
  the bystander is a client that sends 1-token requests each with a fresh regex, so each
  waits for a compile thread. On the default server (clients that used the compile threads
  least recently go first) and with `--compile-usage-half-life 0` (plain turns, the old way);
* a stranger's scheduling stalls (stop 62), the bystander asking 8 tokens (a decode it must
  be given, not a prefill): arrival_hog, one client's HOG_ARRIVERS connections sending
  300-token 1-token requests back to back (prefill first kept every running request at its
  first token); backlog_hog, HOG_BACKLOG_CONNECTIONS x n=HOG_BACKLOG_N queued choices of one
  client (each step ranked the whole queue); chunk_hog, HOG_CHUNKERS connections sending
  300-600-token prompts to `--stage s7 --chunked-prefill-size 128`, and the same with
  `--mixed-prefill` (a cut prompt ran to its last chunk before any decode);
* long_hog (stop 65): one client's HOG_LONGS connections send ~900-token prompts for 1 token
  each, back to back (s6 put them in one forward when nobody else was in the engine, and a
  client arriving meanwhile waited for all of it);
* trickle_hog (stop 65): one client's HOG_TRICKLERS connections each send a body a byte a
  packet (every byte was an event-loop callback);
* cancel_hog (stop 65): one client's HOG_CANCELERS connections each connect, send a prompt
  too long for its max_tokens and hang up after 30 ms, over and over, ~500 connections a
  second; beside the default server and one with no request rate per client.

For each class it reports the bystander's p50 / p99 / max latency and their ratio to the
baseline, what the attacker got (status, finish reason or error, seconds), and the
server's RSS before, at its peak and after. Targets (issue 30): bystander p99 <= 3x and
max <= 0.5 s over the baseline; the expensive request finishes or gets a 400 naming a
limit; RSS back within 25% of its start.

    python benchmarks/bench_server_stalls.py [--seconds 8] [--only pattern,vowels] [--grammar-backend B]
    python benchmarks/bench_server_stalls.py --hogs [--bystander-requests 15]

Prints the table; writes its section of benchmarks/results/server_faults.md (a run with
--only or another backend writes a section of its own, named after them; --hogs writes
HOG_SECTION).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import shlex
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
from _results import machine_line, write_section  # benchmarks/_results.py (scripts run from benchmarks/)

RESULTS = Path(__file__).parent / "results" / "server_faults.md"
CLIENTS = {"attacker": "10.0.1.1", "attacker2": "10.0.1.3", "other": "10.0.1.2"}  # (the bystander is 10.0.0.2)
SECTION = "## Expensive grammars beside a bystander (issue 30)"
HOG_SECTION = "## Hogs beside a newcomer: one client's rows, several clients' compiles"
ROOT = Path(__file__).resolve().parent.parent
CJK = "的是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该"


def structural_tag(triggers: list[str]) -> dict:
    return {
        "type": "structural_tag",
        "triggers": triggers,
        "structures": [{"begin": t + ">", "schema": {"type": "object"}, "end": "</x>"} for t in triggers],
    }


def string_schema(pattern: str, lo: int, hi: int) -> dict:
    return {
        "type": "object",
        "properties": {"s": {"type": "string", "pattern": pattern, "minLength": lo, "maxLength": hi}},
        "required": ["s"],
    }


def big_schema(i: int) -> dict:
    """About 3.9 MB: an object with 20,000 optional properties, each an enum of strings."""
    words = [f"w{i}_{k}_" + "x" * 40 for k in range(20)]
    return {"type": "object", "properties": {f"p{i}_{k}": {"enum": words} for k in range(3000)}}


def nested_anyof(depth: int) -> dict:
    """A ~1.2 MB schema (13 levels) whose subschema appears twice at every level: xgrammar's
    compile doubles per level (minutes)."""
    schema: dict = {"type": "string", "maxLength": 10}
    for i in range(depth):
        obj = {"type": "object", "properties": {f"a{i}": schema, f"b{i}": {"type": "integer"}}, "required": [f"a{i}"]}
        schema = {"anyOf": [obj, {"type": "array", "items": schema}]}
    return schema


def attacks() -> dict[str, list[tuple[str, dict]]]:
    """class -> the (client, body) requests the attacker sends at once; a body with "messages"
    goes to /v1/chat/completions, any other to /generate."""

    def gen(sp: dict, text: str = "Write.", n: int = 64) -> dict:
        return {"text": f"<|user|>\n{text}\n<|assistant|>\n", "sampling_params": {"max_new_tokens": n, **sp}}

    words = "|".join(f"{w}{k}" for k in range(40) for w in ("alpha", "beta", "gamma", "delta", "epsilon"))
    return {
        "pattern": [("attacker", gen({"json_schema": json.dumps(string_schema("^(x|y)*x(x|y){14}$", 16, 60))}))],
        "cjk_triggers": [
            (
                "attacker",
                gen({"structural_tag": json.dumps(structural_tag(["<" + CJK[8 * k : 8 * k + 8] for k in range(6)]))}),
            )
        ],
        "vowels": [
            ("attacker", gen({"regex": rf"([\s\S]*[aeiou][\s\S]{{{n}}}){{6}}", "temperature": 2.0}))
            for n in (8, 10, 12, 14)
        ],
        "slow_then_trivial": [
            ("attacker", gen({"json_schema": json.dumps(string_schema(f"^(a|b)*a(a|b){{{n}}}$", 1, 40))}))
            for n in (13, 14)
        ]
        + [("other", gen({"regex": "A0[0-9]{3}"}, n=8))],
        "huge_think_end": [
            ("attacker", gen({"json_schema": json.dumps({"type": "object"}), "think_end": "x" * 3_600_000}))
        ],
        "big_schemas": [("attacker", gen({"json_schema": json.dumps(big_schema(i))})) for i in range(4)],
        "nested_quantifiers": [("attacker", gen({"regex": "((a|b|c)*(a|b)){3}x(a|b){12}"}))],
        "bounded_after_star": [("attacker", gen({"regex": "[a-z ]*q[a-z ]{16}"}))],
        "many_triggers": [
            (
                "attacker",
                gen(
                    {
                        "structural_tag": json.dumps(
                            structural_tag([f"<tool_{k:02d}_" + "abcdefghij" for k in range(16)])
                        )
                    }
                ),
            )
        ],
        # a patternProperties pattern that Python's `re` backtracks on for a listed name (2^27 steps:
        # ~8 s in one C call holding the GIL, before regex_search.py; a stranger's stall hunt)
        "backtracking_key": [
            (
                "attacker",
                gen(
                    {
                        "json_schema": json.dumps(
                            {
                                "type": "object",
                                "properties": {"a" * 27 + "!": {"type": "string"}},
                                "patternProperties": {"^(a+)+$": {"type": "string"}},
                            }
                        )
                    }
                ),
            )
        ],
        "enum_in_pattern": [("attacker", gen({"json_schema": json.dumps(string_schema(f"^({words})+$", 5, 80))}))],
        # two clients' compiles that outlive compile_timeout in a library (outlines-core's DFA of
        # the regex, xgrammar's of the schema; each client's second waits behind its first),
        # then another client's trivial fresh regex (its latency is the attacker column)
        "runaway_compiles": [
            (client, gen(sp))
            for client in ("attacker", "attacker2")
            for sp in ({"regex": "[a-z]{0,800}x[a-z]{300}"}, {"json_schema": json.dumps(nested_anyof(13))})
        ]
        + [("other", gen({"regex": "B0[0-9]{3}"}, n=8))],
        # one client's backlog of long requests that fill the KV pool: the one waiting first
        # does not fit, and FCFS admission held every other client's request behind it
        "long_backlog": [("attacker", gen({"ignore_eos": True}, " ".join(words.split("|")[:100]), 500))] * 48,
        "long_chat": [("attacker", {"messages": [{"role": "user", "content": "hello world " * 320_000}]})] * 2,
        "nested_lists": [("attacker", gen({"json_schema": {"x": [[[]]] * 570_000}}))] * 2,
        "forged_specials": [("attacker", {"messages": [{"role": "user", "content": "<|user|>"}] * 8_000})] * 4,
        "ambiguous_ebnf": [
            (
                "attacker",
                {
                    "text": "x",  # (a bare prompt: the model writes on; after a chat turn it stops at once)
                    "sampling_params": {
                        "ebnf": 'root ::= a\na ::= a a a | a a | "x" | "y" | "xy" | "yx" | ""',
                        "temperature": 1.0,
                        "seed": 3,
                        "max_new_tokens": 300,
                    },
                },
            )
        ],
        # the same grammar, 64 choices of one request on llguidance: each mask a few ms, under a
        # step's budget alone, 0.2-0.3 s a step together (`--grammar-backend llguidance`)
        "ambiguous_ebnf_n64": [
            (
                "attacker",
                {
                    "model": "tiny-json-llama",
                    "prompt": "x",
                    "n": 64,
                    "max_tokens": 100,
                    "temperature": 1.0,
                    "seed": 3,
                    "ignore_eos": True,
                    "ebnf": 'root ::= a\na ::= a a a | a a | "x" | "y" | "xy" | "yx" | ""',
                },
            )
        ],
        # 128 choices under a tag of 2,000 structures sharing a 120-character begin: each choice's
        # jump search kept one ~15 ms derivative a step, past the step's budget (a stranger's hunt)
        "tag_choices": [
            (
                "attacker",
                {
                    "model": "tiny-json-llama",
                    "prompt": "x",
                    "n": 128,
                    "max_tokens": 16,
                    "temperature": 1.0,
                    "response_format": {
                        "type": "structural_tag",
                        "at_least_one": True,
                        "triggers": ["<tool_call>"],
                        "structures": [
                            {
                                "begin": f"<tool_call>{'p' * 120}{i:05d}",
                                "schema": {"type": "integer"},
                                "end": "</tool_call>",
                            }
                            for i in range(2000)
                        ],
                    },
                },
            )
        ],
        # 16 choices of an object of 3,000 required nulls (a 40 KB forced text): xgrammar's jump
        # search kept ~250 MB a matcher and took 0.1-0.3 s a call, llguidance tokenized the whole
        # forced text at every mask (`--grammar-backend xgrammar` / `llguidance`; a stranger's hunt)
        "null_object": [
            (
                "attacker",
                {
                    "model": "tiny-json-llama",
                    "prompt": "Data:",
                    "n": 16,
                    "max_tokens": 200,
                    "temperature": 1.0,
                    "response_format": {
                        "type": "json_schema",
                        "json_schema": {"name": "x", "schema": null_object(3000)},
                    },
                },
            )
        ],
        # Short grammars that force megabytes: GBNF rules that double twenty times (321 bytes, 8 MB
        # forced) and a v2 tag of three nested repeats of 1,000; xgrammar's jump search ran on
        # them once per choice, 7-20 s for everyone (`--grammar-backend xgrammar`; a stranger's hunt)
        "doubling_ebnf": [
            (
                "attacker",
                {"model": "tiny-json-llama", "prompt": "Say:", "n": 4, "max_tokens": 50, "ebnf": doubling_ebnf(20)},
            )
        ],
        "nested_repeats_tag": [
            (
                "attacker",
                {
                    "model": "tiny-json-llama",
                    "prompt": "Say:",
                    "max_tokens": 50,
                    "response_format": {"type": "structural_tag", "format": nested_repeats(3, 1000)},
                },
            )
        ],
        # A oneOf of 3,000 consts: the adapters compared every pair of branches (a JSON dump per
        # branch per pair) on a compile thread, with no checkpoint: 30 s past the request's
        # timeout, every client 2 s slower on outlines (`--grammar-backend outlines` or
        # `xgrammar`; a stranger's hunt, stop 72)
        "oneof_consts": [
            (
                "attacker",
                {
                    "model": "tiny-json-llama",
                    "prompt": "Pick:",
                    "max_tokens": 8,
                    "response_format": {
                        "type": "json_schema",
                        "json_schema": {"name": "x", "schema": {"oneOf": [{"const": i} for i in range(3000)]}},
                    },
                },
            )
        ],
        # 2.8 KB of optional properties four `$ref`s deep: outlines-core wrote a 331-million-character
        # regex in the server's process (seconds of GIL; at 3.8 KB it ended the server;
        # `--grammar-backend outlines`; the same hunt)
        "optional_refs": [
            (
                "attacker",
                {
                    "model": "tiny-json-llama",
                    "prompt": "Give JSON:",
                    "max_tokens": 16,
                    "response_format": {
                        "type": "json_schema",
                        "json_schema": {"name": "x", "schema": optional_refs(20)},
                    },
                },
            )
        ],
        # four requests of 32 choices of 400 tokens (51k tokens against the pool's 16k): retracted
        # again and again, their kept room held a newcomer's request 45-60 s (a stranger's hunt)
        "retracted_backlog": [
            (
                "attacker",
                {
                    "model": "tiny-json-llama",
                    "prompt": "Write a long story:",
                    "n": 32,
                    "max_tokens": 400,
                    "temperature": 1.0,
                    "ignore_eos": True,
                },
            )
        ]
        * 4,
    }


def null_object(n: int) -> dict:
    """An object of `n` required properties of type null: its whole text is forced."""
    return {
        "type": "object",
        "properties": {f"k{i}": {"type": "null"} for i in range(n)},
        "required": [f"k{i}" for i in range(n)],
    }


def optional_refs(n: int, levels: int = 4) -> dict:
    """Objects of `n` optional properties, each level a `$ref` to the next: outlines-core's
    regex of it grows like n ** levels."""
    defs: dict = {f"L{levels}": {"type": "integer"}}
    for level in range(levels - 1, -1, -1):
        defs[f"L{level}"] = {
            "type": "object",
            "properties": {f"p{i}": {"$ref": f"#/$defs/L{level + 1}"} for i in range(n)},
        }
    return {"$defs": defs, "$ref": "#/$defs/L0"}


def doubling_ebnf(k: int) -> str:
    """GBNF whose rule `rK` is `rK-1` twice: 8 * 2**k forced characters from ~16 bytes a rule."""
    rules = ['r0 ::= "abcdefgh"', *(f"r{i} ::= r{i - 1} r{i - 1}" for i in range(1, k + 1))]
    return "\n".join([*rules, f"root ::= r{k}"])


def nested_repeats(depth: int, times: int) -> dict:
    """A v2 structural tag format: `depth` repeats of exactly `times`, around an 8-character const."""
    fmt: dict = {"type": "const_string", "value": "abcdefgh"}
    for _ in range(depth):
        fmt = {"type": "repeat", "min": times, "max": times, "content": fmt}
    return fmt


# Classes whose last request waits this long more: until the slow ones are compiling.
LATE_LAST = {"runaway_compiles": 5.0}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def bystander(http: httpx.AsyncClient, url: str, stop: asyncio.Event, out: list[float]) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        r = await http.post(
            url + "/v1/completions",
            json={"prompt": "Hi", "max_tokens": 1, "temperature": 0},
            headers={"X-Forwarded-For": "10.0.0.2"},
        )
        r.raise_for_status()
        out.append(time.perf_counter() - t0)


async def attack(http: httpx.AsyncClient, url: str, client: str, body: dict) -> str:
    t0 = time.perf_counter()
    try:
        path = "/v1/chat/completions" if "messages" in body else "/v1/completions" if "prompt" in body else "/generate"
        r = await http.post(url + path, json=body, headers={"X-Forwarded-For": CLIENTS[client]}, timeout=300)
    except httpx.HTTPError as e:
        return f"{type(e).__name__} after {time.perf_counter() - t0:.1f} s"
    took = time.perf_counter() - t0
    if r.status_code != 200:
        message = r.json().get("error", {}).get("message", r.text)[:90]
        return f"{r.status_code} {message!r} after {took:.1f} s"
    if "choices" in r.json():
        return f"200 {r.json()['choices'][0]['finish_reason']!r} after {took:.1f} s"
    reason = r.json()["meta_info"]["finish_reason"]
    text = reason.get("message", reason["type"])[:90] if isinstance(reason, dict) else str(reason)
    return f"200 {text!r} after {took:.1f} s"


def stats(lat: list[float]) -> tuple[float, float, float]:
    lat = sorted(lat)
    return statistics.median(lat), lat[min(len(lat) - 1, int(len(lat) * 0.99))], lat[-1]


async def run(url: str, pid: int, seconds: float, only: list[str] | None) -> list[str]:
    rows = []
    async with httpx.AsyncClient(timeout=120) as http:
        stop, base = asyncio.Event(), []
        task = asyncio.create_task(bystander(http, url, stop, base))
        await asyncio.sleep(seconds)
        stop.set()
        await task
        b50, b99, bmax = stats(base)
        rows.append(
            f"| baseline (alone) | {b50 * 1e3:.0f} / {b99 * 1e3:.0f} / {bmax * 1e3:.0f} | 1.0 / 1.0 | "
            f"+0 | - | {rss_mb(pid):.0f} |"
        )
        for name, reqs in attacks().items():
            if only and name not in only:
                continue
            start_rss, peak = rss_mb(pid), 0.0
            stop, lat = asyncio.Event(), []
            task = asyncio.create_task(bystander(http, url, stop, lat))
            jobs = []
            for i, (client, body) in enumerate(reqs):
                if i == len(reqs) - 1 and name in LATE_LAST:
                    await asyncio.sleep(LATE_LAST[name])
                jobs.append(asyncio.create_task(attack(http, url, client, body)))
                await asyncio.sleep(0.2)  # (in order: the trivial request comes after the slow ones)
            t0 = time.perf_counter()
            while not all(j.done() for j in jobs) or time.perf_counter() - t0 < seconds:
                peak = max(peak, rss_mb(pid))
                await asyncio.sleep(0.1)
                if time.perf_counter() - t0 > 240:
                    break
            stop.set()
            await task
            outcomes = [j.result() if j.done() else "still running after 240 s" for j in jobs]
            p50, p99, mx = stats(lat)
            shown = "; ".join(sorted(set(outcomes)))
            if name in ("slow_then_trivial", "runaway_compiles"):  # (the last client's, then the others')
                shown = f"{outcomes[-1]} (before it: {'; '.join(sorted(set(outcomes[:-1])))})"
            rows.append(
                f"| {name} | {p50 * 1e3:.0f} / {p99 * 1e3:.0f} / {mx * 1e3:.0f} | {p99 / b99:.1f} / "
                f"{mx / bmax:.1f} | +{(mx - bmax) * 1e3:.0f} | {shown} | {start_rss:.0f} / {peak:.0f} / "
                f"{rss_mb(pid):.0f} |"
            )
            print(rows[-1], flush=True)
    return rows


# -- hogs: many requests of one client, or many compiles of several, beside a newcomer ------------
HOG_STREAMS = 250  # (under the 256 connections one client may hold: max_connections_per_client)
HOG_STREAM_TOKENS = 100  # (128 rows of them fit the 16,384-token KV pool: the rows run out first)
HOG_COMPILES = 8  # per hog address: max_compiling_per_client
HOG_ADDRESSES = (1, 3, 6)
HOG_WARMUP = 3.0  # seconds the hogs run before the bystander starts (bursts: 0.3, to meet the first)
HOG_BYSTANDER_SECONDS = 40.0  # the bystander starts no request after this long
# jumps: one client's greedy requests whose regex forces most of their text (s4-s6 jump it,
# each jump a re-admission through the radix tree; s7 drafts it instead)
HOG_JUMPERS = 40
HOG_JUMP_TOKENS = 600
# bursts: one client sends HOG_BURST chats at once, and again when all are answered (on a
# fresh server the first burst's chats each compiled the chat template, and every burst's
# renders took the web server's thread pool from other clients: 1.3-2 s for the bystander)
HOG_BURST = 100
HOG_BURST_TOKENS = 100
JUMPY = r'\[(\{"name": "[a-z]", "value": [0-9]\}, )+\]'
# the scheduling hogs: the bystander asks HOG_DECODE_TOKENS greedy tokens (a decode to be given)
HOG_DECODE_TOKENS = 8
HOG_ARRIVERS = 8  # arrivals: connections sending 1-token requests of ~300 prompt tokens back to back
HOG_BACKLOG_CONNECTIONS, HOG_BACKLOG_N = 64, 128  # backlog: queued choices of one client
HOG_CHUNKERS = 4  # chunks: connections sending 300-600-token prompts, 1 token each
HOG_FRESH = 32  # fresh: connections sending ~300-token 1-token prompts, each from an address never seen
HOG_LONGS = 4  # longs: one client's connections sending ~900-token 1-token prompts at once, back to back
# cancels: connections of one client that each connect, send a prompt too long for max_tokens and
# hang up after HOG_CANCEL_AFTER s, over and over (a stranger's CancelLoop: ~500 connections a second)
HOG_CANCELERS, HOG_CANCEL_AFTER = 16, 0.03
HOG_CANCEL_ADDRESS = "127.0.0.3"  # its own socket address: the proxy the server trusts is 127.0.0.1
HOG_TRICKLERS = 200  # trickles: one client's connections each sending a 3 MB body a byte a packet
NO_RATE_LIMIT = ["--max-requests-per-second-per-client", "1000000", "--request-burst-per-client", "1000000"]
CHUNK_SERVER = ["--stage", "s7", "--chunked-prefill-size", "128"]


def random_words(rng: random.Random, n: int) -> str:
    """`n` made-up lowercase words (a prompt no other shares: no radix hit shortens its prefill)."""
    return " ".join(
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 6))) for _ in range(n)
    )


def scheduling_hog_body(case: str, i: int, rng: random.Random) -> str:
    """One request of a scheduling hog (arrivals, backlog, chunks), as JSON text."""
    if case == "backlog":
        return json.dumps(
            {
                "text": f"Once upon a time {i}",
                "sampling_params": {"n": HOG_BACKLOG_N, "max_new_tokens": 300, "temperature": 1.0, "ignore_eos": True},
            }
        )
    words = {"arrivals": 100, "fresh": 100, "longs": 210}.get(case) or rng.randint(100, 200)  # ~3-4 tokens a word
    return json.dumps({"text": random_words(rng, words), "sampling_params": {"max_new_tokens": 1, "temperature": 0}})


def hog_schema_body() -> str:
    """A /generate body whose json_schema has 2,000 string properties with patterns: refused
    over max_regex_chars (100,000) after a few tenths of a second of compiling. Its "QQIDQQ"
    is replaced by each request's own number (so no compile is a cache hit): a text replace,
    not 2,000 dicts made and dumped per request, which took this script's event loop from
    the bystander it times."""
    props = {f"p{j}": {"type": "string", "pattern": f"^[a-z]{{{j % 7 + 1},{j % 11 + 9}}}xQQIDQQ$"} for j in range(2000)}
    schema = {"type": "object", "properties": props, "required": list(props)[:50]}
    return json.dumps({"text": "N", "sampling_params": {"max_new_tokens": 1, "json_schema": json.dumps(schema)}})


async def hog(
    http: httpx.AsyncClient, url: str, client: str | Callable[[int], str], body: Callable[[int], str]
) -> None:
    """One of a hog's connections: a request (`body(i)`, JSON text, from `client`, or from
    `client(i)`), then the next as soon as it ends (a response is read whole: a stream to its
    end), until its process is ended."""
    i = 0
    while True:
        i += 1
        headers = {"X-Forwarded-For": client(i) if callable(client) else client, "Content-Type": "application/json"}
        try:
            async with http.stream("POST", url + "/generate", content=body(i), headers=headers, timeout=300) as r:
                async for _ in r.aiter_bytes():
                    pass
        except httpx.HTTPError:
            await asyncio.sleep(0.1)


async def cancel_loop(url: str, i: int) -> None:
    """One of the cancels hog's connections, from HOG_CANCEL_ADDRESS: connect, send a completion
    of ~950 random characters for 500 tokens (a 400 once tokenized: it does not fit the
    context), hang up after HOG_CANCEL_AFTER s without reading, again."""
    rng = random.Random(i)
    u = httpx.URL(url)
    while True:
        text = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(950))
        body = json.dumps({"prompt": text, "max_tokens": 500, "ignore_eos": True}).encode()
        head = f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        try:
            _, writer = await asyncio.open_connection(u.host, u.port, local_addr=(HOG_CANCEL_ADDRESS, 0))
        except OSError:
            await asyncio.sleep(0.01)
            continue
        writer.write(head.encode() + body)
        await asyncio.sleep(HOG_CANCEL_AFTER)
        writer.close()


async def trickle(url: str) -> None:
    """One of the trickles hog's connections, from HOG_CANCEL_ADDRESS: a completion's head
    declaring a 3 MB body, then the body a byte a packet (TCP_NODELAY) for 25 s (under
    body_timeout), again."""
    u = httpx.URL(url)
    body = b'{"prompt": "x", "max_tokens": 1' + b" " * 3_000_000 + b"}"
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    head += b"Content-Length: %d\r\n\r\n" % len(body)
    while True:
        try:
            _, writer = await asyncio.open_connection(u.host, u.port, local_addr=(HOG_CANCEL_ADDRESS, 0))
        except OSError:
            await asyncio.sleep(0.01)
            continue
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        writer.write(head)
        end = time.monotonic() + 25
        with contextlib.suppress(OSError):
            for i in range(len(body)):
                if time.monotonic() > end:
                    break
                writer.write(body[i : i + 1])
                await writer.drain()
                await asyncio.sleep(0)
        writer.close()


async def burst_chat(http: httpx.AsyncClient, url: str, i: int) -> None:
    """One chat of a burst, streamed and read to its end (an error is let go: the next burst comes)."""
    body = {
        "model": "tiny-json-llama",
        "messages": [{"role": "user", "content": f"Tell me about the number {i}."}],
        "max_tokens": HOG_BURST_TOKENS,
        "stream": True,
    }
    headers = {"X-Forwarded-For": "10.0.2.1"}
    with contextlib.suppress(httpx.HTTPError):
        async with http.stream("POST", url + "/v1/chat/completions", json=body, headers=headers) as r:
            async for _ in r.aiter_bytes():
                pass


async def newcomer(
    http: httpx.AsyncClient, url: str, n: int, regex: bool, tokens: int = 1
) -> tuple[list[float], list[int]]:
    """The bystander: `n` requests of `tokens` greedy tokens one after another, 0.2 s apart,
    each with a regex no one asked for before when `regex` (so each waits for a compile
    thread); none begins after HOG_BYSTANDER_SECONDS (beside the row hog without the reserve
    each took seconds)."""
    lat, statuses = [], []
    stop = time.perf_counter() + HOG_BYSTANDER_SECONDS
    for _ in range(n):
        if time.perf_counter() > stop:
            break
        params = (
            {"max_new_tokens": tokens, "temperature": 0, "ignore_eos": True} if tokens > 1 else {"max_new_tokens": 1}
        )
        body: dict = {"text": "N", "sampling_params": params}
        if regex:
            body["sampling_params"]["regex"] = f"(ab|cd){{1,{random.randint(2, 10**6)}}}"
        t0 = time.perf_counter()
        r = await http.post(url + "/generate", json=body, headers={"X-Forwarded-For": "10.0.0.2"})
        lat.append(time.perf_counter() - t0)
        statuses.append(r.status_code)
        await asyncio.sleep(0.2)
    return lat, statuses


async def hog_case(url: str, case: str, addresses: int, n: int) -> tuple[list[float], list[int]]:
    """The bystander's latencies beside `case` from `addresses` clients. The hogs run in a
    process of their own (`--run-hog`): read in this one, 250 streams' chunks kept its event
    loop from the bystander's answer (a 9.3 s max that the server did not cause: 0.5 s with
    the hog in another process)."""
    hogs = subprocess.Popen([sys.executable, __file__, "--run-hog", f"{case},{url},{addresses}"], cwd=ROOT)
    try:
        await asyncio.sleep(0.3 if case == "bursts" else HOG_WARMUP)
        async with httpx.AsyncClient(timeout=300) as http:
            return await newcomer(http, url, n, regex=case == "compiles", tokens=bystander_tokens(case))
    finally:
        hogs.terminate()
        hogs.wait(30)


async def run_hog(url: str, case: str, addresses: int) -> None:
    """The hog clients of `case`, until this process is terminated (`hog_case`)."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    # One client sending the same body on each of its connections, the rows and jumps cases:
    same = {
        "jumps": (HOG_JUMPERS, {"max_new_tokens": HOG_JUMP_TOKENS, "temperature": 0, "regex": JUMPY}, "List pairs."),
        "rows": (HOG_STREAMS, {"max_new_tokens": HOG_STREAM_TOKENS, "ignore_eos": True}, "Go"),
    }
    if case == "cancels":
        await asyncio.gather(*(cancel_loop(url, i) for i in range(HOG_CANCELERS)))
    if case == "trickles":
        await asyncio.gather(*(trickle(url) for _ in range(HOG_TRICKLERS)))
    async with httpx.AsyncClient(timeout=300, limits=limits) as http:
        if case == "bursts":
            while True:
                await asyncio.gather(*(burst_chat(http, url, i) for i in range(HOG_BURST)))
        if case in same:
            count, params, text = same[case]
            body = json.dumps({"text": text, "stream": case == "rows", "sampling_params": params})
            tasks = [asyncio.create_task(hog(http, url, "10.0.2.1", lambda i: body)) for _ in range(count)]
        elif case in SCHEDULING_HOGS:
            rng = random.Random(0)
            tasks = [
                asyncio.create_task(
                    hog(
                        http,
                        url,
                        # (fresh: every request from an address never seen before, 10.c.x.y)
                        (lambda i, c=c: f"10.{100 + c}.{i // 250 % 250}.{i % 250 + 1}")
                        if case == "fresh"
                        else "10.0.2.1",
                        lambda i, c=c: scheduling_hog_body(case, c * 100_000 + i, rng),
                    )
                )
                for c in range(SCHEDULING_HOGS[case])
            ]
        else:
            template = hog_schema_body()
            tasks = [
                asyncio.create_task(
                    hog(
                        http,
                        url,
                        f"10.0.2.{a + 1}",
                        lambda i, k=a * HOG_COMPILES + c: template.replace("QQIDQQ", f"{k}_{i}"),
                    )
                )
                for a in range(addresses)
                for c in range(HOG_COMPILES)
            ]
        await asyncio.gather(*tasks)


SCHEDULING_HOGS = {
    "arrivals": HOG_ARRIVERS,
    "backlog": HOG_BACKLOG_CONNECTIONS,
    "chunks": HOG_CHUNKERS,
    "fresh": HOG_FRESH,
    "longs": HOG_LONGS,
}


def bystander_tokens(case: str) -> int:
    """The bystander's tokens a request beside `case`: a decode for the scheduling hogs and cancels."""
    return HOG_DECODE_TOKENS if case in SCHEDULING_HOGS or case in ("cancels", "trickles") else 1


def spread(lat: list[float], statuses: list[int]) -> str:
    """'median / p90 / max' in ms, and the statuses that were not 200."""
    lat = sorted(lat)
    shown = f"{statistics.median(lat) * 1e3:.0f} / {lat[int(0.9 * (len(lat) - 1))] * 1e3:.0f} / {lat[-1] * 1e3:.0f}"
    bad = [s for s in statuses if s != 200]
    return shown + f" (n={len(lat)}" + (f", {len(bad)} not 200: {sorted(set(bad))})" if bad else ")")


# (case, addresses, [(column, serve args)]): each row's columns, side by side (bursts: one
# column, its fix has no option; results/server_faults.md has the numbers before it).
HOG_ROWS = [
    ("bursts", 1, [("default", [])]),
    ("rows", 1, [("default", []), ("--reserved-for-new-clients 0", ["--reserved-for-new-clients", "0"])]),
    ("jumps", 1, [("default", []), ("--stage s7", ["--stage", "s7"])]),
    ("arrivals", 1, [("default", [])]),
    ("backlog", 1, [("default", [])]),
    ("chunks", 1, [("s7, chunks of 128", CHUNK_SERVER), ("--mixed-prefill", [*CHUNK_SERVER, "--mixed-prefill"])]),
    ("fresh", 1, [("default", [])]),
    ("longs", 1, [("default", [])]),
    ("cancels", 1, [("default", []), ("no rate limit", NO_RATE_LIMIT)]),
    ("trickles", 1, [("default", [])]),
] + [
    ("compiles", a, [("default", []), ("--compile-usage-half-life 0", ["--compile-usage-half-life", "0"])])
    for a in HOG_ADDRESSES
]


def run_hogs(n: int, only: list[str]) -> list[str]:
    """Each hog row (of the cases in `only`; all without) on a fresh server per column (one
    server at a time); the table's rows."""
    rows = []
    for case, addresses, columns in HOG_ROWS:
        if only and case not in only:
            continue
        cells = []
        for _, serve_args in columns:
            with serving(["--forwarded-allow-ips", "127.0.0.1", *serve_args]) as (url, _pid):
                alone = asyncio.run(hog_case_alone(url, case == "compiles", n, bystander_tokens(case)))
                cells.append((alone, spread(*asyncio.run(hog_case(url, case, addresses, n)))))
        name = {
            "bursts": f"burst_hog ({HOG_BURST} chats at once, again when answered)",
            "rows": f"row_hog ({HOG_STREAMS} streams)",
            "jumps": f"jump_hog ({HOG_JUMPERS} jumping requests)",
            "arrivals": f"arrival_hog ({HOG_ARRIVERS} connections of 1-token requests; bystander: {HOG_DECODE_TOKENS} tokens)",
            "backlog": f"backlog_hog ({HOG_BACKLOG_CONNECTIONS} x n={HOG_BACKLOG_N} choices; bystander: {HOG_DECODE_TOKENS} tokens)",
            "chunks": f"chunk_hog ({HOG_CHUNKERS} connections of 300-600-token prompts, s7 chunks of 128; bystander: {HOG_DECODE_TOKENS} tokens)",
            "fresh": f"fresh_hog ({HOG_FRESH} connections of 1-token requests, each from a new address; bystander: {HOG_DECODE_TOKENS} tokens)",
            "longs": f"long_hog ({HOG_LONGS} connections of ~900-token 1-token prompts; bystander: {HOG_DECODE_TOKENS} tokens)",
            "trickles": f"trickle_hog ({HOG_TRICKLERS} connections sending a body a byte a packet; bystander: {HOG_DECODE_TOKENS} tokens)",
            "cancels": f"cancel_hog ({HOG_CANCELERS} connections that send a prompt too long and hang up after {HOG_CANCEL_AFTER * 1e3:.0f} ms, over and over; bystander: {HOG_DECODE_TOKENS} tokens)",
        }.get(case, f"compile_hog on {addresses} address(es)")
        first = columns[0][0]
        if first != "default":  # (a case whose server is not the default one says which it is)
            cells[0] = (cells[0][0], f"{first}: {cells[0][1]}")
        other = f"{columns[1][0]}: {cells[1][1]} (alone {cells[1][0]})" if len(cells) > 1 else "(no option)"
        rows.append(f"| {name} | {cells[0][0]} | {cells[0][1]} | {other} |")
        print(rows[-1], flush=True)
    return rows


async def hog_case_alone(url: str, regex: bool, n: int, tokens: int) -> str:
    """The bystander alone (its baseline on this server)."""
    async with httpx.AsyncClient(timeout=60) as http:
        return spread(*await newcomer(http, url, max(5, n // 3), regex, tokens))


@contextlib.contextmanager
def serving(args: list[str]) -> Iterator[tuple[str, int]]:
    """A `minisglang serve` with `args` on a free port, until it answers /health: (url, pid);
    terminated on exit."""
    port = free_port()
    server = subprocess.Popen(
        # (`-m` from ROOT: the checkout this script is in, whatever the environment installed)
        [sys.executable, "-m", "minisglang.cli", "serve", "--port", str(port), *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        yield url, server.pid
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="bystander time per class (at least)")
    ap.add_argument("--only", default="", help="comma-separated classes")
    ap.add_argument("--grammar-backend", default=None, help="the server's backend (default: fsm)")
    ap.add_argument(
        "--serve-args",
        default="",
        help='more options for `minisglang serve`, e.g. "--stage s7 --chunked-prefill-size 256 --mixed-prefill"',
    )
    ap.add_argument("--hogs", action="store_true", help="run the hog cases (servers of their own) instead")
    ap.add_argument("--bystander-requests", type=int, default=20, help="the bystander's requests per hog case")
    ap.add_argument("--run-hog", default=None, help=argparse.SUPPRESS)  # CASE,URL,ADDRESSES: a hog process
    args = ap.parse_args()
    if args.run_hog:
        case, url, addresses = args.run_hog.split(",")
        asyncio.run(run_hog(url, case, int(addresses)))
        return
    if args.hogs:
        started = time.perf_counter()
        rows = run_hogs(args.bystander_requests, [c for c in args.only.split(",") if c])
        took = time.perf_counter() - started
        head = [
            HOG_SECTION,
            "",
            "`python benchmarks/bench_server_stalls.py --hogs`: a server per cell, one at a time. The bystander "
            f"(its own client) sends {args.bystander_requests} 1-token requests one after another, 0.2 s apart, "
            f"once alone and then {HOG_WARMUP:g} s after the hogs start (none begins after {HOG_BYSTANDER_SECONDS:g} s: "
            f"n says how many did; burst_hog: 0.3 s after). burst_hog: one client sends {HOG_BURST} streamed chats "
            f"of {HOG_BURST_TOKENS} tokens at once, and again when all are answered. row_hog: one client keeps {HOG_STREAMS} streams of {HOG_STREAM_TOKENS} tokens "
            "going (the server has 128 rows); plain requests. jump_hog: one client keeps "
            f"{HOG_JUMPERS} greedy requests of up to {HOG_JUMP_TOKENS} tokens going whose regex forces most "
            "of their text (s6 jumps it, a re-admission per jump; s7 drafts it). arrival_hog: one client's "
            f"{HOG_ARRIVERS} connections send ~300-token prompts for 1 token each, back to back; backlog_hog: "
            f"{HOG_BACKLOG_CONNECTIONS} requests of n={HOG_BACKLOG_N} choices of 300 tokens; chunk_hog: "
            f"{HOG_CHUNKERS} connections send 300-600-token prompts for 1 token each to `{' '.join(CHUNK_SERVER)}`; "
            f"fresh_hog: {HOG_FRESH} connections send ~300-token prompts for 1 token each, every request from an "
            "address never seen before (a stranger's address rotation); "
            f"long_hog: one client's {HOG_LONGS} connections send ~900-token prompts for 1 token each, back to back "
            "(with nobody else in the engine, one forward took all of them); "
            f"cancel_hog: {HOG_CANCELERS} connections of one client (its own socket address, not the trusted "
            f"proxy) each connect, send ~950 random characters for 500 tokens (a 400: too long for the context) "
            f"and hang up after {HOG_CANCEL_AFTER * 1e3:.0f} ms, over and over (a stranger's CancelLoop); its "
            "option-off column lifts the per-client request rate (max_requests_per_second_per_client); "
            f"trickle_hog: {HOG_TRICKLERS} connections of that client each send a head declaring a 3 MB body, then the "
            "body a byte a packet for 25 s, again (a stranger's trickle). "
            f"Beside these seven the bystander asks {HOG_DECODE_TOKENS} greedy tokens. compile_hog: each hog address "
            f"keeps {HOG_COMPILES} new 2,000-property json_schemas compiling (each a 400 over max_regex_chars); "
            "the bystander's requests each have a new regex, so each waits for a compile thread. Its option-off "
            "column is plain turns (the pool's order before least-used-first); both columns have the other "
            "change of that fix (a compile waiting for a child process holds no thread slot). The hogs run "
            "in a process of their own, apart from the bystander's client.",
            "",
            "| hog | bystander alone, median / p90 / max (ms) | beside the hog, default server | the same with "
            "the option off: beside the hog (alone) |",
            "|---|---|---|---|",
        ]
        section = HOG_SECTION + (f" (--only {args.only})" if args.only else "")
        write_section("\n".join([section, *head[1:], *rows, "", machine_line(f"{took:.0f} s")]), RESULTS, section)
        return
    serve_args = [
        "--forwarded-allow-ips",
        "127.0.0.1",
        # (the bystander's back-to-back 1-token requests pass the per-client request rate, 50/s:
        # lifted here, where the classes are grammars, not request rates)
        *NO_RATE_LIMIT,
        *(["--grammar-backend", args.grammar_backend] if args.grammar_backend else []),
        *shlex.split(args.serve_args),
    ]
    with serving(serve_args) as (url, pid):
        started = time.perf_counter()
        rows = asyncio.run(run(url, pid, args.seconds, [c for c in args.only.split(",") if c]))
        took = time.perf_counter() - started
    section = SECTION
    if args.only or args.grammar_backend or args.serve_args:
        section += f" ({args.grammar_backend or 'fsm'} backend: {args.only or 'every class'})"
        if args.serve_args:
            section += f" serve {args.serve_args}"
    head = [
        section,
        "",
        "Bystander: 1-token completions one after another from its own client; the attacker's "
        "class of requests at the same time (`python benchmarks/bench_server_stalls.py`). "
        "Targets: p99 <= 3x and max <= +500 ms over the baseline; the attacker's request "
        "finishes or gets a 400 naming a limit; RSS back within 25% of its start.",
        "",
        "| attack | bystander p50 / p99 / max (ms) | p99 / max vs baseline | max over baseline (ms) "
        "| what the attacker got | server RSS start / peak / end (MB) |",
        "|---|---|---|---|---|---|",
    ]
    write_section("\n".join(head + rows + ["", machine_line(f"{took:.0f} s")]), RESULTS, section)


if __name__ == "__main__":
    main()
