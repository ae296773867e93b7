"""A realistic extraction service: minisglang against transformers + outlines-core.

The workload (seeded): `--requests` (256) extraction requests, half English, half Chinese.
Every prompt starts with the same instruction (~340 tokens of the bundled tokenizer: the
task, the rules and the JSON schema with its descriptions), then a document of 50-400
tokens about one person (facts scattered among everyday sentences), and asks for the
person as JSON. Outputs vary in length (1-4 hobbies, names and jobs of any length). The
requests arrive as a Poisson process at `--rate` requests/s (seeded exponential gaps), the
same arrival times for every system; every answer is greedy and constrained by the schema.

Four systems serve the trace one after another on this machine:

* minisglang, default stage (s5, our fsm backend, jump-forward on), through its `Engine`:
  a thread sleeps to each arrival, tokenizes the request and puts it in an inbox, as the
  HTTP server's handlers do; the serving loop moves the inbox into the scheduler and runs
  `step()` (server/engine_loop.py's `EngineLoop` in miniature);
* minisglang with xgrammar's backend (`grammar_backend="xgrammar"`);
* transformers, batched, the way a user would write a service: wait for requests; take up
  to 32 of those that have arrived, in arrival order; left-pad them and call `generate`
  with an outlines-core logits processor built from the same schema (one `Guide` per row,
  benchmarks/bench_backends.py's `OutlinesCoreProcessor`; the `outlines` package itself is
  not installed, outlines-core is); greedy;
* transformers, one request at a time, the same processor.

Each grammar is compiled before its system's timed run (compile time is chapter 05's
subject). Per system: requests/s (requests over the time from the first arrival to the last
answer), TTFT (arrival to the first output token computed: the engine's `first_token_time`;
for transformers the processor's first call of the batch, i.e. after its prefill), latency
(arrival to the answer) p50/p99, validity (`jsonschema` on every output) and whether the answer is
right (name and age, and all five fields, equal to the facts the document states). For the
profile: prefill tokens computed, forwards, and the share of the wall time each part took.

    python benchmarks/bench_extraction_service.py [--requests 256] [--rate R] [--quick]

Prints the table and the ratios; writes benchmarks/results/extraction_service.md.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import statistics
import threading
import time
from pathlib import Path

import jsonschema
import torch
from _results import (
    machine_line,
    model_checksum,
    write_results,
)  # benchmarks/_results.py (scripts run from benchmarks/)
from bench_backends import OutlinesCoreProcessor
from outlines_core import Index
from outlines_core.json_schema import build_regex_from_schema
from transformers import AutoModelForCausalLM, LogitsProcessor, LogitsProcessorList

import minisglang
from minisglang.backends.outlines_backend import OutlinesBackend
from minisglang.engine import Engine, default_torch_threads
from minisglang.tokenizer import Tokenizer

RESULTS = Path(__file__).parent / "results" / "extraction_service.md"
TARGET = 3.0
HF_BATCH = 32

# The keys in the order the bundled model learned them; no numeric bounds (outlines-core
# would ignore them, and both systems must enforce the same grammar).
SCHEMA = {
    "title": "Person",
    "description": "One person mentioned in the document.",
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "The person's full name, copied exactly as written."},
        "age": {"type": "integer", "description": "Age in whole years."},
        "city": {"type": "string", "description": "The city where the person lives or works."},
        "occupation": {"type": "string", "description": "The person's job."},
        "hobbies": {
            "type": "array",
            "items": {"type": "string"},
            "maxItems": 4,
            "description": "Things the person likes to do, in the order the document names them.",
        },
    },
    "required": ["name", "age", "city", "occupation", "hobbies"],
    "additionalProperties": False,
}
RULES = [
    "You are an information extraction assistant. Output valid JSON only.",
    "You read one document at a time and return exactly one JSON object that describes the person in it.",
    "Copy names, cities and jobs exactly as the document writes them; never translate, shorten or correct them.",
    "The age is a whole number of years. If the document gives a year of birth instead, do not guess.",
    "List the hobbies in the order the document names them, at most four of them.",
    "Do not add keys that the schema does not name, and do not wrap the object in a markdown fence.",
    "Answer in the language of the document: Chinese documents keep Chinese names and words.",
    "Ignore sentences about the weather, the news or other people; they are there to distract you.",
]
EN_FIRST = ["Anna", "Omar", "Lena", "Ivan", "Sara", "Tomas", "Yuki", "Nora", "Pablo", "Greta", "Kofi", "Mei"]
EN_LAST = ["Novak", "Berg", "Tanaka", "Petrov", "Garcia", "Okafor", "Lindqvist", "Rossi", "Moreau", "Haddad"]
EN_CITIES = ["London", "Paris", "Tokyo", "Berlin", "Toronto", "Sydney", "Boston", "Madrid", "Oslo", "Vienna"]
EN_JOBS = ["teacher", "nurse", "software engineer", "pilot", "chef", "lawyer", "designer", "data analyst"]
EN_HOBBIES = [
    "hiking",
    "reading",
    "photography",
    "swimming",
    "chess",
    "cooking",
    "painting",
    "cycling",
    "running",
    "gardening",
    "singing",
    "yoga",
]
EN_FILLER = [
    "The weather was grey and cold for most of the week.",
    "The bus to the city centre was late again.",
    "A new bakery opened on the corner of the street last month.",
    "The library is closed on Mondays.",
    "Most people in the office drink tea in the afternoon.",
    "Prices at the market went up this spring.",
    "The neighbours are planning a small party for the weekend.",
    "The river flooded the park in April.",
    "A colleague moved to another team after the summer.",
    "The local football club lost its last game.",
]
ZH_SURNAMES = list("张王李赵刘陈杨黄周吴徐孙马朱胡郭林高")
ZH_GIVEN = list("伟芳娜敏静丽强磊军洋杰娟涛明超华玉红鹏飞宇浩")
ZH_CITIES = ["北京", "上海", "广州", "深圳", "杭州", "成都", "武汉", "南京", "西安", "重庆"]
ZH_JOBS = ["软件工程师", "教师", "医生", "护士", "律师", "设计师", "会计", "记者", "厨师", "摄影师"]
ZH_HOBBIES = ["编程", "摄影", "爬山", "跑步", "游泳", "阅读", "画画", "唱歌", "钓鱼", "下棋", "旅行", "烹饪"]
ZH_FILLER = [
    "这周的天气一直很冷，还下了几场小雨。",
    "去市中心的公交车今天又晚点了。",
    "街角新开了一家面包店，生意很好。",
    "图书馆每周一闭馆。",
    "办公室里的人下午都喜欢喝茶。",
    "今年春天菜市场的价格涨了不少。",
    "邻居们打算周末办一个小聚会。",
    "四月的时候河水淹了公园。",
    "一位同事夏天以后调到了别的部门。",
    "本地的足球队上一场比赛输了。",
]


ASK_EN = "Extract the person from this text. Reply with JSON only."
ASK_ZH = "从以下文本中提取这个人的信息，只输出 JSON。"


# ------------------------------------------------------------------------------ the workload
def instruction(tok: Tokenizer, target_tokens: int = 300) -> str:
    """The shared system prompt: rules, then the schema; rules repeat until ~target_tokens."""
    schema = json.dumps(SCHEMA, ensure_ascii=False)
    rules, i = [], 0
    while len(tok.encode(" ".join(rules) + "\nThe JSON must follow this schema: " + schema)) < target_tokens:
        rules.append(RULES[i % len(RULES)])
        i += 1
    return " ".join(rules) + "\nThe JSON must follow this schema: " + schema


def document(rng: random.Random, tok: Tokenizer, zh: bool, target_tokens: int) -> tuple[str, dict]:
    """A document of about `target_tokens` tokens about one person, and the facts it states."""
    hobbies = rng.sample(ZH_HOBBIES if zh else EN_HOBBIES, rng.randint(1, 4))
    age = rng.randint(18, 80)
    if zh:
        name = rng.choice(ZH_SURNAMES) + "".join(rng.choice(ZH_GIVEN) for _ in range(rng.choice([1, 2])))
        city, job = rng.choice(ZH_CITIES), rng.choice(ZH_JOBS)
        facts = [f"{name}今年{age}岁。", f"{name}住在{city}，是一名{job}。", f"{name}平时喜欢{'、'.join(hobbies)}。"]
        filler, sep = ZH_FILLER, ""
    else:
        name = f"{rng.choice(EN_FIRST)} {rng.choice(EN_LAST)}"
        city, job = rng.choice(EN_CITIES), rng.choice(EN_JOBS)
        facts = [
            f"{name} is {age} years old.",
            f"{name} lives in {city} and works as a {job}.",
            f"{name} enjoys {', '.join(hobbies)}.",
        ]
        filler, sep = EN_FILLER, " "
    sentences = list(facts)
    while len(tok.encode(sep.join(sentences))) < target_tokens:
        sentences.insert(rng.randint(0, len(sentences)), rng.choice(filler))  # facts keep their order
    return sep.join(sentences), {"name": name, "age": age, "city": city, "occupation": job, "hobbies": hobbies}


def workload(tok: Tokenizer, n: int, rate: float, seed: int) -> tuple[list[str], list[float], str, list[dict]]:
    """(prompts, arrival offsets in seconds, shared instruction, the facts each document
    states) for `n` requests (seeded)."""
    rng = random.Random(seed)
    system = instruction(tok)
    prompts, arrivals, stated, t = [], [], [], 0.0
    for i in range(n):
        zh = i % 2 == 1
        text, facts = document(rng, tok, zh, rng.randint(50, 400))
        stated.append(facts)
        ask = ASK_ZH if zh else ASK_EN
        prompts.append(
            tok.apply_chat_template(
                [{"role": "system", "content": system}, {"role": "user", "content": ask + "\n" + text}]
            )
        )
        arrivals.append(t)
        t += rng.expovariate(rate)
    return prompts, arrivals, system, stated


def right(text: str, facts: dict, keys: tuple[str, ...]) -> bool:
    """Whether the answer `text` states `keys` of `facts` exactly (valid is not right: a
    grammar makes any model's answer valid, only the model makes it right)."""
    try:
        answer = json.loads(text)
    except ValueError:
        return False
    return isinstance(answer, dict) and all(answer.get(k) == facts[k] for k in keys)


# ------------------------------------------------------------------------------ minisglang
def serve_minisglang(engine: Engine, prompts: list[str], arrivals: list[float], params: dict) -> dict:
    """Serve the trace: a thread submits each request at its arrival time; this loop steps."""
    inbox: queue.Queue = queue.Queue()
    s = engine.scheduler
    s.tree_cache.evict(10**9)  # no prefix left over from the warm-up
    forwards, first_event = dict(s.forward_counts), len(s.trace)
    start = time.perf_counter() + 0.05

    def submitter() -> None:
        for i, (prompt, at) in enumerate(zip(prompts, arrivals)):
            time.sleep(max(0.0, start + at - time.perf_counter()))
            inbox.put((i, engine.make_request(prompt, params)))  # tokenized in this thread, as a server's handler

    thread = threading.Thread(target=submitter, daemon=True)
    cpu = time.process_time()
    thread.start()
    reqs: dict[int, object] = {}
    done_at: dict[int, float] = {}
    busy = 0.0
    while len(done_at) < len(prompts):
        try:  # block briefly only when there is nothing to run
            while True:
                i, req = inbox.get(timeout=0.002) if not s.has_work() else inbox.get_nowait()
                reqs[i] = req
                s.add_request(req)
        except queue.Empty:
            pass
        if s.has_work():
            t0 = time.perf_counter()
            engine.step()
            now = time.perf_counter()
            busy += now - t0
            for i, req in reqs.items():
                if req.released and i not in done_at:
                    done_at[i] = now
    thread.join()
    cpu = time.process_time() - cpu
    events = list(s.trace)[first_event:]
    order = range(len(prompts))
    return {
        "texts": [reqs[i].output_text for i in order],
        "latency": [done_at[i] - (start + arrivals[i]) for i in order],
        "ttft": [reqs[i].first_token_time - (start + arrivals[i]) for i in order],
        "wall": max(done_at.values()) - start,
        "busy": busy,
        "cpu": cpu,
        "prefill_tokens": sum(e["tokens"] for e in events if e["event"] == "prefill"),
        "prompt_tokens": sum(len(reqs[i].origin_input_ids) for i in order),
        "cached_tokens": sum(reqs[i].cached_tokens for i in order),
        "decode_forwards": s.forward_counts["decode"] - forwards["decode"],
        "prefill_forwards": s.forward_counts["prefill"] - forwards["prefill"],
        "output_tokens": sum(len(reqs[i].output_ids) for i in order),
        "sampled_tokens": sum(reqs[i].sampled_tokens for i in order),
    }


# ------------------------------------------------------------------------------ transformers
class FirstCallClock(LogitsProcessor):
    """Records when `generate` first asks for a token (its prefill is done); changes nothing."""

    def __init__(self):
        self.first: float | None = None

    def __call__(self, input_ids, scores):
        if self.first is None:
            self.first = time.perf_counter()
        return scores


def serve_transformers(
    hf, tok: Tokenizer, index: Index, prompts: list[str], arrivals: list[float], batch: int, max_new_tokens: int
) -> dict:
    """Serve the trace with `generate`: up to `batch` arrived requests at a time, arrival order."""
    eos = tok.eos_token_id
    n = len(prompts)
    texts, latency, ttft = [""] * n, [0.0] * n, [0.0] * n
    prefill_tokens = decode_steps = output_tokens = 0
    start = time.perf_counter() + 0.05
    cpu = time.process_time()
    next_req = 0
    while next_req < n:
        time.sleep(max(0.0, start + arrivals[next_req] - time.perf_counter()))  # idle until one arrives
        now = time.perf_counter() - start
        chosen = []
        while next_req < n and len(chosen) < batch and arrivals[next_req] <= now:
            chosen.append(next_req)
            next_req += 1
        encoded = [tok.encode(prompts[i]) for i in chosen]
        width = max(map(len, encoded))
        input_ids = torch.tensor([[eos] * (width - len(e)) + e for e in encoded])  # left padding
        attention = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded])
        clock = FirstCallClock()
        processors = LogitsProcessorList([OutlinesCoreProcessor(index, eos, len(chosen)), clock])
        with torch.inference_mode():
            out = hf.generate(
                input_ids,
                attention_mask=attention,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                logits_processor=processors,
                pad_token_id=eos,
                eos_token_id=eos,
            )
        finished = time.perf_counter()
        prefill_tokens += input_ids.numel()
        decode_steps += out.shape[1] - width
        for row, i in zip(out[:, width:].tolist(), chosen):
            row = row[: row.index(eos)] if eos in row else row
            output_tokens += len(row)
            texts[i] = tok.decode(row)
            latency[i] = finished - (start + arrivals[i])
            ttft[i] = clock.first - (start + arrivals[i])
    return {
        "texts": texts,
        "latency": latency,
        "ttft": ttft,
        "cpu": time.process_time() - cpu,
        "wall": max(start + a + wait for a, wait in zip(arrivals, latency)) - start,
        "prefill_tokens": prefill_tokens,
        "decode_steps": decode_steps,
        "output_tokens": output_tokens,
    }


# ------------------------------------------------------------------------------ report
def rearranged(prompt: str, facts: dict, order: str) -> str:
    """`prompt` with its document's sentences rearranged: "facts only" keeps the sentences
    that name the person, "facts first" and "facts last" put them before or after the
    others (the filler). A probe of what a model cannot read past (`--probe`)."""
    zh = ASK_ZH in prompt
    ask = ASK_ZH if zh else ASK_EN
    start = prompt.index(ask) + len(ask) + 1
    end = prompt.index("\n", start)
    stop = "。" if zh else ". "
    sentences = [x if x.endswith((".", "。")) else x + stop.strip() for x in prompt[start:end].split(stop) if x]
    named = [x for x in sentences if facts["name"] in x]
    others = [x for x in sentences if facts["name"] not in x]
    chosen = {"facts only": named, "facts first": named + others, "facts last": others + named}[order]
    return prompt[:start] + ("" if zh else " ").join(chosen) + prompt[end:]


def probe(model_path: str, n: int) -> None:
    """Name and age right on `n` of the workload's requests as they are and rearranged
    (`rearranged`), greedy, s5: which part of the documents a model cannot read past."""
    engine = Engine(model_path)
    prompts, _, _, stated = workload(engine.tokenizer, n, 32.0, 0)
    params = {"json_schema": json.dumps(SCHEMA, ensure_ascii=False), "temperature": 0, "max_new_tokens": 96}
    for order in ("as is", "facts only", "facts first", "facts last"):
        asked = prompts if order == "as is" else [rearranged(p, f, order) for p, f in zip(prompts, stated)]
        outs = engine.generate(asked, [params] * n)
        hits = sum(right(o["text"], f, ("name", "age")) for o, f in zip(outs, stated))
        print(f"{order:12s} name and age right {hits}/{n}", flush=True)
    engine.shutdown()


def valid(text: str) -> bool:
    try:
        jsonschema.validate(json.loads(text), SCHEMA)
        return True
    except (ValueError, jsonschema.ValidationError):
        return False


def pct(xs: list[float], q: int) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-path", default=minisglang.DEFAULT_MODEL_PATH)
    ap.add_argument("--requests", type=int, default=256)
    # A throughput claim is measured at load: the arrivals must outrun every system, or the
    # trace itself caps requests/s (at 16/s the last of 256 arrives at 16.2 s: no system can
    # beat ~15.8 requests/s, and minisglang came within 8% of that).
    ap.add_argument("--rate", type=float, default=32.0, help="Poisson arrival rate, requests/s")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=default_torch_threads(), help="torch threads, every system")
    ap.add_argument("--quick", action="store_true", help="64 requests (a smoke run)")
    ap.add_argument("--output", type=Path, default=RESULTS)
    ap.add_argument("--probe", type=int, default=0, help="only probe N requests' accuracy, rearranged (no timing)")
    args = ap.parse_args()
    if args.probe:
        probe(args.model_path, args.probe)
        return
    if args.quick:
        args.requests = min(args.requests, 64)

    tok = Tokenizer.from_pretrained(args.model_path)
    prompts, arrivals, system, stated = workload(tok, args.requests, args.rate, args.seed)
    params = {
        "json_schema": json.dumps(SCHEMA, ensure_ascii=False),
        "temperature": 0,
        "max_new_tokens": args.max_new_tokens,
    }
    engines = {
        "minisglang (s5, fsm backend)": Engine(args.model_path, torch_threads=args.threads),
        "minisglang (s5, xgrammar backend)": Engine(
            args.model_path, torch_threads=args.threads, grammar_backend="xgrammar"
        ),
    }
    for engine in engines.values():  # compile the schema (untimed): compile time is chapter 05's subject
        engine.generate(tok.apply_chat_template([{"role": "user", "content": "Hi"}]), params)
    torch.set_num_threads(args.threads)
    hf = AutoModelForCausalLM.from_pretrained(args.model_path, dtype=torch.float32).eval()
    vocabulary = OutlinesBackend(tok, hf.config.vocab_size).vocabulary  # our exact token bytes
    index = Index(build_regex_from_schema(params["json_schema"]), vocabulary)

    results, loads = {}, {}
    began = time.perf_counter()
    systems = [
        ("transformers + outlines-core, batches of up to 32", HF_BATCH),
        *engines.items(),
        ("transformers + outlines-core, one at a time", 1),
    ]
    for name, system in systems:
        loads[name] = os.getloadavg()[0]
        print(f"serving {args.requests} requests: {name} ...", flush=True)
        if isinstance(system, Engine):
            results[name] = serve_minisglang(system, prompts, arrivals, params)
        else:
            results[name] = serve_transformers(hf, tok, index, prompts, arrivals, system, args.max_new_tokens)
        r = results[name]
        print(f"  {args.requests / r['wall']:.2f} requests/s, p99 {pct(r['latency'], 99):.2f} s", flush=True)
    minutes = (time.perf_counter() - began) / 60
    for engine in engines.values():
        engine.shutdown()

    n = args.requests
    encoded = [tok.encode(p) for p in prompts]
    shared = len(os.path.commonprefix(encoded))  # the tokens every prompt starts with
    doc_tokens = [len(e) - shared for e in encoded]
    lines = [
        "# An extraction service: minisglang vs transformers + outlines-core",
        "",
        f"{n} extraction requests (half English, half Chinese; seed {args.seed}), each a shared instruction of "
        f"{shared} tokens (rules and the JSON schema with descriptions) and a document "
        f"({min(doc_tokens)}-{max(doc_tokens)} tokens with the question, mean {statistics.fmean(doc_tokens):.0f}), "
        f"arriving as a Poisson process at {args.rate:g} requests/s (the last at {arrivals[-1]:.1f} s, so no "
        f"system can exceed {n / arrivals[-1]:.1f} requests/s here: the rate is chosen above every system's "
        "capacity, since a throughput claim is measured at load), "
        f"greedy, constrained by the schema below, max_new_tokens={args.max_new_tokens}. Model "
        f"`{Path(args.model_path).name}` (safetensors sha256 {model_checksum(args.model_path)}), torch threads "
        f"{args.threads} for every system. The systems serve the same trace one after another; the load "
        "average before each is in its row. Requests/s = requests over the time from the first arrival to "
        "the last answer; TTFT = arrival to the first output token computed; latency = arrival to the answer.",
        "",
        f"Schema: `{json.dumps(SCHEMA, ensure_ascii=False)}`",
        "",
        "| system | valid (jsonschema) | name and age right | all five fields right | requests/s | TTFT p50 (s) "
        "| TTFT p99 (s) | latency p50 (s) | latency p99 (s) | output tokens | CPU s | CPU share | load before |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        name_age = sum(right(t, f, ("name", "age")) for t, f in zip(r["texts"], stated))
        every = sum(right(t, f, tuple(SCHEMA["properties"])) for t, f in zip(r["texts"], stated))
        lines.append(
            f"| {name} | {sum(map(valid, r['texts']))}/{n} | {name_age}/{n} | {every}/{n} | {n / r['wall']:.2f} "
            f"| {pct(r['ttft'], 50):.2f} | {pct(r['ttft'], 99):.2f} | {pct(r['latency'], 50):.2f} "
            f"| {pct(r['latency'], 99):.2f} | {r['output_tokens']} | {r['cpu']:.1f} | {r['cpu'] / r['wall']:.0%} "
            f"| {loads[name]:.1f} |"
        )
    hf_names = [name for name, system in systems if not isinstance(system, Engine)]
    best = min(hf_names, key=lambda k: results[k]["wall"])
    best_tail = min(hf_names, key=lambda k: pct(results[k]["latency"], 99))
    lines += [
        "",
        f"Against the better transformers setup (requests/s: {best}; p99: {best_tail}); "
        f"target >= {TARGET:g}x on both. 'CPU-seconds ratio' is the better transformers setup's CPU time "
        "over ours for the same requests (this process's `time.process_time()`): other jobs on the machine "
        "do not add to it, so it is the load-independent check of the requests/s ratio.",
        "",
        "| system | requests/s ratio | p99 latency ratio (lower is better) | CPU-seconds ratio | target |",
        "|---|---:|---:|---:|---|",
    ]
    for name in engines:
        r = results[name]
        speed = results[best]["wall"] / r["wall"]
        tail = pct(results[best_tail]["latency"], 99) / pct(r["latency"], 99)
        lines.append(
            f"| {name} | **{speed:.2f}x** | **{tail:.2f}x** | {results[best]['cpu'] / r['cpu']:.2f}x | "
            f"{'met' if min(speed, tail) >= TARGET else '**missed**'} |"
        )
    lines += [
        "",
        "How to read it: 'CPU share' is CPU seconds over wall seconds, the part of a core the run got (one "
        "torch thread: 100% is a core of its own). When other jobs take the machine, each run gets what the "
        "scheduler of the operating system leaves it, the wall-clock ratios measure those shares as much as "
        "the systems, and the CPU-seconds ratio is the one to trust; on a quiet machine the two agree.",
        "",
        "Where the work goes (counts from the same runs): tokens the model computed in prefills (transformers: "
        "the padded batches), decode forwards (transformers: `generate` steps), and for minisglang the share "
        "of prompt tokens the radix tree supplied and the time its loop spent inside `step()`.",
        "",
        "| system | prefill tokens computed | decode forwards | prompt tokens cached | busy in step() (s) | wall (s) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        if "busy" in r:
            lines.append(
                f"| {name} | {r['prefill_tokens']:,} | {r['decode_forwards']:,} "
                f"| {r['cached_tokens'] / r['prompt_tokens']:.0%} | {r['busy']:.1f} | {r['wall']:.1f} |"
            )
        else:
            lines.append(f"| {name} | {r['prefill_tokens']:,} | {r['decode_steps']:,} | - | - | {r['wall']:.1f} |")
    lines += ["", machine_line(f"{minutes:.1f} min for the four systems"), ""]
    write_results("\n".join(lines), args.output)


if __name__ == "__main__":
    main()
