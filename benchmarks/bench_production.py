"""Chapter 06's measurements: what structured output costs and buys in production.

Four experiments on the field advice chapter 06 tests, measured side by side in one run:

1. Tokenizer against FSM (§3): in four real vocabularies (the bundled 4k BPE, Mistral's
   32k SentencePiece, anthropic's 65k byte-level BPE, Mistral NeMo's 131k tekken), how
   many tokens are pure digit strings of length 1, 2, 3, 4+; and for the two date regexes
   `[0-9]{4}-[0-9]{2}-[0-9]{2}` and
   `(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])` (plus the
   extraction schema's regex for scale): character-DFA, byte-DFA and token-index states, token
   transitions, and the token index build time (`build_index_fast`, median of --repeats,
   after the one-time vocabulary trie, which is timed on its own).
2. Radix cache synergy (§4): --radix-requests extraction requests, one after another (each
   finds the tree as the earlier ones left it), sharing a system prompt and an instruction
   that shows the schema and a one-shot example. Three layouts: keys in one fixed order;
   keys shuffled per request (as when a schema is serialised from an unordered map); and
   the fixed instruction placed after the document. Hit rate = cached_tokens /
   prompt_tokens from meta_info.
3. Pitfalls (§5.4) on the bundled model: (a) max_new_tokens too small: finish_reason
   "length" and JSON that does not parse; (b) escapes in strings: quoted nicknames, and a
   `pattern` that forces a quote, backslash or newline into the value; (c) whitespace:
   free `[ \\n\\t]*` against the bounded default `[ ]?`, for the extraction schema and for a
   schema whose key names the model never saw.
4. Validation (§3.4): --samples extraction prompts (names, ages, hobbies; half English,
   half Chinese) with the extraction schema, checked with `jsonschema`: constrained
   (json_schema, with and without jump-forward) against unconstrained (the prompt asks
   for JSON; then also with up to --retries retries of the failures), all at temperature
   0.7 with a seed per prompt, each set sent as one batched `Engine.generate` call.

Parts 2 and 3 use `Engine(jump_forward=False)`: part 2 because a jump re-admits the request
and adds its re-admission hits to cached_tokens; part 3 to look at one thing at a time.

    python benchmarks/bench_production.py [--samples 200] [--radix-requests 24] [--repeats 3] [--out FILE]

Prints every table; writes benchmarks/results/production.md (or --out).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import time
from pathlib import Path

import jsonschema
import torch
from tqdm.auto import tqdm

from minisglang.constrained.json_schema import build_regex_from_schema
from minisglang.constrained.regex_dfa import ByteDFA, compile_regex
from minisglang.constrained.token_index import build_index_fast, vocab_trie
from minisglang.demo import PERSON_SCHEMA
from minisglang.engine import Engine

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results" / "production.md"
sys.path.insert(0, str(REPO / "tests"))
from _results import machine_line, write_results  # noqa: E402  (benchmarks/_results.py: scripts run from benchmarks/)
from real_tokenizers import load  # noqa: E402

# Seed 004 §5.2's schema.
SCHEMA = PERSON_SCHEMA  # the demo's: name, age and hobbies
# The same shape under key names the bundled model never saw in training.
UNSEEN_KEYS = {
    "type": "object",
    "properties": {
        "full_name": {"type": "string"},
        "years": {"type": "integer", "minimum": 0, "maximum": 200},
        "interests": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["full_name", "years", "interests"],
    "additionalProperties": False,
}
# ASCII digits: Python's \d (and so ours) is every Unicode decimal digit, a larger automaton.
DATE_REGEXES = {
    "exact length": r"[0-9]{4}-[0-9]{2}-[0-9]{2}",
    "ranges spelled out": r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
}
VOCABULARIES = {
    "bundled": "bundled 4k BPE",
    "mistral_sentencepiece": "Mistral 32k SentencePiece",
    "anthropic_65k": "anthropic 65k byte-level BPE",
    "mistral_tekken": "Mistral NeMo 131k tekken",
}
FREE_WHITESPACE = r"[ \n\t]*"
ESCAPED_QUOTE = '\\"'  # the two characters backslash, quote
TEMPERATURE = 0.7

# The evaluation prompts: people described in one or two sentences, in English or Chinese.
# The instructions and system prompts are ones the bundled model saw in training
# (scripts/corpus/phrasings.py); the people and sentences are drawn here.
EN_SYSTEM = "You are an information extraction assistant. Output valid JSON only."
ZH_SYSTEM = "你是一个信息抽取助手，只输出合法 JSON，不要输出任何解释。"  # the course's extraction example
EN_INSTRUCTION = "Extract name, age, hobbies from the following text. Reply with JSON only."
ZH_INSTRUCTION = "从以下文本中提取name, age, hobbies，只输出 JSON。"
EN_FIRST = [
    ("Alice", "f"),
    ("Bob", "m"),
    ("Carol", "f"),
    ("David", "m"),
    ("Emma", "f"),
    ("Frank", "m"),
    ("Grace", "f"),
    ("Henry", "m"),
    ("Maria", "f"),
    ("Noah", "m"),
    ("Olivia", "f"),
    ("Peter", "m"),
]
EN_LAST = ["Smith", "Brown", "Taylor", "Wilson", "Clark", "Lewis", "King", "Green", "Chen", "Patel"]
NICKNAMES = ["Ace", "Doc", "Red", "Sunny", "Kit"]
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
ZH_SURNAMES = list("张王李赵刘陈杨黄周吴徐孙马朱胡郭林高")
ZH_GIVEN = list("伟芳娜敏静丽强磊军洋杰娟涛明超华玉红鹏飞宇浩")
ZH_HOBBIES = ["编程", "摄影", "爬山", "跑步", "游泳", "阅读", "画画", "唱歌", "钓鱼", "下棋", "旅行", "烹饪"]


# ---------------------------------------------------------------------------------------
# Prompts
# ---------------------------------------------------------------------------------------
def join_list(items: list[str], zh: bool) -> str:
    """ "A、B和C" or "A, B and C"."""
    if len(items) == 1:
        return items[0]
    return ("、".join(items[:-1]) + "和" if zh else ", ".join(items[:-1]) + " and ") + items[-1]


def person(rng: random.Random, zh: bool, nickname: bool = False) -> tuple[str, dict]:
    """A short paragraph about a person, and the facts it states (the expected answer)."""
    hobbies_pool = ZH_HOBBIES if zh else EN_HOBBIES
    hobbies = rng.sample(hobbies_pool, rng.randint(1, 3))
    age = rng.randint(18, 80)
    if zh:
        name = rng.choice(ZH_SURNAMES) + "".join(rng.choice(ZH_GIVEN) for _ in range(rng.choice([1, 2])))
        text = (
            f"{name}{rng.choice([f'今年{age}岁', f'{age}岁'])}，"
            f"{rng.choice(['平时喜欢', '爱好是', '业余时间喜欢'])}{join_list(hobbies, True)}。"
        )
    else:
        first, gender = rng.choice(EN_FIRST)
        last = rng.choice(EN_LAST)
        name = f'{first} "{rng.choice(NICKNAMES)}" {last}' if nickname else f"{first} {last}"
        text = (
            f"{name} is {age} years old. {'He' if gender == 'm' else 'She'} "
            f"{rng.choice(['enjoys', 'likes', 'loves'])} {join_list(hobbies, False)}."
        )
    return text, {"name": name, "age": age, "hobbies": hobbies}


def extraction_messages(text: str, zh: bool) -> list[dict]:
    """System + user turn in the style the model was trained on; the user turn names the fields."""
    system, instruction = (ZH_SYSTEM, ZH_INSTRUCTION) if zh else (EN_SYSTEM, EN_INSTRUCTION)
    return [{"role": "system", "content": system}, {"role": "user", "content": instruction + "\n" + text}]


def validation_set(n: int, seed: int, nickname: bool = False) -> list[tuple[list[dict], dict, bool]]:
    """n (messages, truth, zh) triples, alternating English and Chinese."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        zh = (i % 2 == 1) and not nickname
        text, truth = person(rng, zh, nickname)
        out.append((extraction_messages(text, zh), truth, zh))
    return out


# ---------------------------------------------------------------------------------------
# Checking outputs
# ---------------------------------------------------------------------------------------
def verdict(text: str, schema: dict) -> str:
    """'ok', 'not JSON', or the jsonschema keyword that failed first (e.g. 'required')."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return "not JSON"
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(value))
    return "ok" if error is None else error.validator


def parses(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except json.JSONDecodeError:
        return False


def percent(k: int, n: int) -> str:
    return f"{k}/{n} ({100 * k / n:.0f}%)"


def shorten(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


def md_table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def generate_timed(engine: Engine, prompts: list[str], params: list[dict]) -> tuple[list[dict], float]:
    start = time.perf_counter()
    outs = engine.generate(prompts, params)
    return outs, time.perf_counter() - start


def chat_prompts(engine: Engine, conversations: list[list[dict]]) -> list[str]:
    return [engine.tokenizer.apply_chat_template(m) for m in conversations]


# ---------------------------------------------------------------------------------------
# 1. Tokenizer against FSM
# ---------------------------------------------------------------------------------------
def part_tokenizer_fsm(repeats: int) -> list[str]:
    regexes = dict(DATE_REGEXES)
    regexes["extraction schema (for scale)"] = build_regex_from_schema(SCHEMA)
    dfas = {}
    for label, regex in regexes.items():
        char_dfa = compile_regex(regex)
        dfas[label] = (char_dfa, ByteDFA.from_char_dfa(char_dfa))
    digit_rows, index_rows = [], []
    for key, label in tqdm(VOCABULARIES.items(), desc="1. vocabularies"):
        tok = load(key)
        vocab = tok.token_bytes
        counts = [0, 0, 0, 0]
        for data in vocab:
            if data and re.fullmatch(rb"[0-9]+", data):
                counts[min(len(data), 4) - 1] += 1
        spaced = sum(1 for data in vocab if data and re.fullmatch(rb" [0-9]+", data))
        start = time.perf_counter()
        vocab_trie(vocab)  # one-time per vocabulary, cached by identity
        trie_s = time.perf_counter() - start
        digit_rows.append([label, len(vocab), *counts, sum(counts), spaced, f"{trie_s:.2f}"])
        for regex_label, (char_dfa, byte_dfa) in dfas.items():
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                index = build_index_fast(byte_dfa, vocab, tok.eos_token_id, progress=False)
                times.append(time.perf_counter() - start)
            transitions = sum(len(m) for m in index.state_to_tokens.values())
            index_rows.append(
                [
                    label,
                    regex_label,
                    char_dfa.num_states,
                    byte_dfa.num_states,
                    index.num_states,
                    transitions,
                    len(index.allowed_token_ids(index.initial_state)),
                    f"{1000 * statistics.median(times):.1f}",
                ]
            )
    lines = [
        "## 1. Tokenizer against FSM",
        "",
        "Tokens that are pure ASCII digit strings, by length (SentencePiece's 20 one-digit tokens are the "
        "10 digit pieces and the 10 byte-fallback tokens `<0x30>`..`<0x39>`):",
        "",
    ]
    lines += md_table(
        [
            "vocabulary",
            "ids",
            "1 digit",
            "2 digits",
            "3 digits",
            "4+ digits",
            "all digit tokens",
            "space + digits",
            "vocabulary trie (s, once)",
        ],
        digit_rows,
    )
    lines += [
        "",
        "Regexes: "
        + "; ".join(f"{k}: `{v}`" for k, v in DATE_REGEXES.items())
        + ". States of the token index = states reachable with this vocabulary's tokens; transitions = "
        f"(state, token) pairs in the index; build = `build_index_fast`, median of {repeats}.",
        "",
    ]
    lines += md_table(
        [
            "vocabulary",
            "regex",
            "char-DFA states",
            "byte-DFA states",
            "token-index states",
            "transitions",
            "tokens allowed first",
            "build (ms)",
        ],
        index_rows,
    )
    return lines


# ---------------------------------------------------------------------------------------
# 2. Radix cache synergy
# ---------------------------------------------------------------------------------------
def shuffled_schema(rng: random.Random | None) -> tuple[dict, list[str]]:
    """SCHEMA with its properties and required list in a random order (None: as written)."""
    keys = list(SCHEMA["properties"])
    if rng is not None:
        rng.shuffle(keys)
    required = list(SCHEMA["required"])
    if rng is not None:
        rng.shuffle(required)
    return {
        "type": "object",
        "properties": {k: SCHEMA["properties"][k] for k in keys},
        "required": required,
        "additionalProperties": False,
    }, keys


def radix_prompt(engine: Engine, text: str, layout: str, rng: random.Random) -> str:
    schema, keys = shuffled_schema(rng if layout == "shuffled key order" else None)
    example = {"name": "张三", "age": 28, "hobbies": ["编程", "摄影", "爬山"]}
    instruction = (
        "请从下面的文本中抽取人物信息，严格按照给定的 JSON Schema 输出。\nJSON Schema："
        + json.dumps(schema, ensure_ascii=False)
        + "\n示例输出："
        + json.dumps({k: example[k] for k in keys}, ensure_ascii=False)
    )
    user = (text + "\n" + instruction) if layout == "document first" else (instruction + "\n文本：" + text)
    return engine.tokenizer.apply_chat_template(
        [{"role": "system", "content": ZH_SYSTEM}, {"role": "user", "content": user}]
    )


def part_radix(n: int, seed: int) -> list[str]:
    layouts = ["fixed key order", "shuffled key order", "document first"]
    rows = []
    for layout in tqdm(layouts, desc="2. radix layouts"):
        engine = Engine(jump_forward=False)
        rng = random.Random(seed)
        texts = [person(rng, zh=True)[0] for _ in range(n)]
        prompt_tokens = cached = 0
        ttfts = []
        start = time.perf_counter()
        for text in texts:
            out = engine.generate(
                radix_prompt(engine, text, layout, rng), {"json_schema": SCHEMA, "temperature": 0, "max_new_tokens": 64}
            )
            meta = out["meta_info"]
            prompt_tokens += meta["prompt_tokens"]
            cached += meta["cached_tokens"]
            ttfts.append(meta["ttft"])
        wall = time.perf_counter() - start
        engine.shutdown()
        rows.append(
            [
                layout,
                n,
                prompt_tokens // n,
                cached,
                prompt_tokens,
                f"**{100 * cached / prompt_tokens:.0f}%**",
                prompt_tokens - cached,
                f"{1000 * statistics.mean(ttfts):.0f}",
                f"{wall:.1f}",
            ]
        )
    base = rows[0]
    lines = [
        "## 2. Radix cache and structured extraction",
        "",
        f"{n} Chinese extraction requests sent one after another (each finds the tree as the earlier ones "
        "left it), greedy, `json_schema` = the extraction schema, max_new_tokens 64. The prompt: system prompt, "
        "an instruction that shows the JSON Schema and a one-shot example, then the document. "
        "*fixed key order*: schema and example always list name, age, hobbies; *shuffled key order*: "
        "each request lists properties, required and the example's keys in its own random order; "
        "*document first*: fixed order, but the document comes before the instruction.",
        "",
    ]
    lines += md_table(
        [
            "layout",
            "requests",
            "prompt tokens / request",
            "cached tokens",
            "prompt tokens",
            "hit rate",
            "prefill tokens computed",
            "mean TTFT (ms)",
            "wall (s)",
        ],
        rows,
    )
    lines += [
        "",
        "Prefill tokens computed, relative to the fixed order: "
        + ", ".join(f"{r[0]} {r[6] / base[6]:.2f}x" for r in rows[1:])
        + ".",
    ]
    return lines


# ---------------------------------------------------------------------------------------
# 3. Pitfalls
# ---------------------------------------------------------------------------------------
def part_truncation(engine: Engine, n: int, seed: int) -> list[str]:
    data = validation_set(n, seed)
    prompts = chat_prompts(engine, [m for m, _, _ in data])
    rows, example = [], None
    for budget in tqdm([16, 24, 32, 128], desc="3a. max_new_tokens"):
        params = [
            {"json_schema": SCHEMA, "temperature": TEMPERATURE, "seed": i, "max_new_tokens": budget} for i in range(n)
        ]
        outs, _ = generate_timed(engine, prompts, params)
        length = [o for o in outs if o["meta_info"]["finish_reason"]["type"] == "length"]
        broken = [o for o in outs if not parses(o["text"])]
        if example is None and broken:
            example = (budget, broken[0]["text"])
        rows.append(
            [
                budget,
                percent(len(length), n),
                percent(len(broken), n),
                percent(sum(verdict(o["text"], SCHEMA) == "ok" for o in outs), n),
            ]
        )
    lines = [
        "### (a) max_new_tokens too small",
        "",
        f"{n} extraction prompts, `json_schema`, temperature {TEMPERATURE}, one seed per prompt; "
        "only max_new_tokens changes.",
        "",
    ]
    lines += md_table(["max_new_tokens", 'finish_reason "length"', "json.loads fails", "schema-valid"], rows)
    if example:
        lines += ["", f"A truncated output (max_new_tokens {example[0]}): `{shorten(example[1])}`"]
    return lines


def part_escapes(engine: Engine, n: int, seed: int) -> list[str]:
    data = validation_set(n, seed, nickname=True)
    prompts = chat_prompts(engine, [m for m, _, _ in data])
    # The last run forces the nickname's quotes into the value: the grammar can only spell them `\"`.
    forced = json.loads(json.dumps(SCHEMA))
    forced["properties"]["name"] = {"type": "string", "pattern": '^[A-Za-z]+ "[A-Za-z]+" [A-Za-z]+$'}
    runs = [
        ("extraction schema, json_schema", {"json_schema": SCHEMA}),
        ("extraction schema, unconstrained", {}),
        ('name with `pattern` `^[A-Za-z]+ "[A-Za-z]+" [A-Za-z]+$`', {"json_schema": forced}),
    ]
    rows, example = [], None
    for label, extra in runs:
        params = [{**extra, "temperature": TEMPERATURE, "seed": i, "max_new_tokens": 128} for i in range(n)]
        outs, _ = generate_timed(engine, prompts, params)
        values = [json.loads(o["text"]) for o in outs if parses(o["text"])]
        quoted = sum(isinstance(v, dict) and '"' in str(v.get("name", "")) for v in values)
        length = sum(o["meta_info"]["finish_reason"]["type"] == "length" for o in outs)
        rows.append(
            [label, percent(len(values), n), quoted, sum(ESCAPED_QUOTE in o["text"] for o in outs), percent(length, n)]
        )
        example = next((o["text"] for o in outs if ESCAPED_QUOTE in o["text"]), example)
    lines = [
        "### (b) Quotes inside strings",
        "",
        f'{n} English prompts whose names carry a nickname in double quotes (`Alice "Ace" Smith`), '
        f"temperature {TEMPERATURE}. The last run gives `name` a `pattern` that requires the quoted "
        "nickname in the value, so the grammar leaves the model no way but an escape.",
        "",
    ]
    lines += md_table(
        [
            "run",
            "json.loads succeeds",
            'parsed name contains `"`',
            f"raw text contains `{ESCAPED_QUOTE}`",
            "hit max_new_tokens",
        ],
        rows,
    )
    lines += [
        "",
        f"An output with an escaped quote: `{shorten(example)}`" if example else "No output wrote an escaped quote.",
    ]
    return lines


def part_whitespace(n: int, seed: int) -> list[str]:
    data = validation_set(n, seed)
    rows = []
    for ws_label, ws in tqdm(
        [("bounded `[ ]?` (default)", None), (f"free `{FREE_WHITESPACE}`", FREE_WHITESPACE)], desc="3c. whitespace"
    ):
        engine = Engine(jump_forward=False, json_whitespace=ws)
        prompts = chat_prompts(engine, [m for m, _, _ in data])
        for schema_label, schema in [("extraction schema keys", SCHEMA), ("unseen keys", UNSEEN_KEYS)]:
            for temperature in (TEMPERATURE, 1.0):
                params = [
                    {"json_schema": schema, "temperature": temperature, "seed": i, "max_new_tokens": 128}
                    for i in range(n)
                ]
                outs, _ = generate_timed(engine, prompts, params)
                tokens = [o["meta_info"]["completion_tokens"] for o in outs]
                runs = [max((len(r) for r in re.findall(r"[ \n\t]+", o["text"])), default=0) for o in outs]
                length = sum(o["meta_info"]["finish_reason"]["type"] == "length" for o in outs)
                rows.append(
                    [
                        ws_label,
                        schema_label,
                        temperature,
                        f"{statistics.mean(tokens):.1f}",
                        percent(length, n),
                        max(runs),
                        percent(sum(parses(o["text"]) for o in outs), n),
                    ]
                )
        engine.shutdown()
    lines = [
        "### (c) Whitespace loops",
        "",
        f"{n} extraction prompts (the user turn asks for name, age, hobbies), max_new_tokens 128. "
        "*unseen keys* asks for the same shape under the keys full_name, years, interests, which the "
        "model never saw, so the grammar keeps forcing tokens the model does not want.",
        "",
    ]
    lines += md_table(
        [
            "whitespace",
            "schema",
            "temperature",
            "mean output tokens",
            "hit max_new_tokens",
            "longest whitespace run",
            "json.loads succeeds",
        ],
        rows,
    )
    return lines


# ---------------------------------------------------------------------------------------
# 4. Validation
# ---------------------------------------------------------------------------------------
# What a person's name looks like in the prompts: "First Last", "First \"Nick\" Last", or 2-4 Han characters.
PLAUSIBLE_NAME = re.compile(r'[A-Z][a-z]+(?: "[A-Z][a-z]+")? [A-Z][a-z]+|[\u4e00-\u9fff]{2,4}')


def first_part(name: str, zh: bool) -> str:
    """The surname of a Chinese name (its first character), the first name of an English one."""
    return name[:1] if zh else name.split(" ")[0]


def score(outs: list[dict], data) -> dict:
    """Validity, failure kinds, and how close the valid answers are to the facts."""
    verdicts = [verdict(o["text"], SCHEMA) for o in outs]
    valid = [(json.loads(o["text"]), truth, zh) for o, v, (_, truth, zh) in zip(outs, verdicts, data) if v == "ok"]
    failures: dict[str, int] = {}
    for v in verdicts:
        if v != "ok":
            failures[v] = failures.get(v, 0) + 1
    return {
        "valid": len(valid),
        "valid_en": sum(not zh for _, _, zh in valid),
        "valid_zh": sum(zh for _, _, zh in valid),
        "plausible": sum(bool(PLAUSIBLE_NAME.fullmatch(v["name"])) for v, _, _ in valid),
        "first": sum(first_part(v["name"], zh) == first_part(t["name"], zh) for v, t, zh in valid),
        "name": sum(v["name"] == t["name"] for v, t, _ in valid),
        "age": sum(v["age"] == t["age"] for v, t, _ in valid),
        "failures": ", ".join(f"{k} {v}" for k, v in sorted(failures.items(), key=lambda kv: -kv[1])) or "-",
        "tokens": sum(o["meta_info"]["completion_tokens"] for o in outs),
        "length": sum(o["meta_info"]["finish_reason"]["type"] == "length" for o in outs),
        "latency": [o["meta_info"]["e2e_latency"] for o in outs],
    }


def part_validation(n: int, seed: int, retries: int) -> list[str]:
    data = validation_set(n, seed)
    n_en = sum(not zh for _, _, zh in data)
    results, examples = [], []
    for label, jump, constrained in tqdm(
        [
            ("json_schema, jump-forward on (default engine)", True, True),
            ("json_schema, jump-forward off", False, True),
            ("unconstrained (the prompt asks for JSON)", False, False),
        ],
        desc="4. validation",
    ):
        engine = Engine(jump_forward=jump)
        prompts = chat_prompts(engine, [m for m, _, _ in data])
        extra = {"json_schema": SCHEMA} if constrained else {}
        compile_s = 0.0
        if constrained:  # compile once, outside the timed batch (a cached grammar in production)
            start = time.perf_counter()
            engine.generate(prompts[0], {**extra, "max_new_tokens": 1})
            compile_s = time.perf_counter() - start
        params = [{**extra, "temperature": TEMPERATURE, "seed": i, "max_new_tokens": 128} for i in range(n)]
        outs, wall = generate_timed(engine, prompts, params)
        results.append((label, score(outs, data), wall, compile_s))
        bad = [i for i, o in enumerate(outs) if verdict(o["text"], SCHEMA) != "ok"]
        example = f"- {label}: prompt 0 -> `{shorten(outs[0]['text'])}`" + (" (invalid)" if 0 in bad else "")
        if bad and bad[0] != 0:
            example += f"; first invalid (prompt {bad[0]}) -> `{shorten(outs[bad[0]]['text'])}`"
        examples.append(example)
        if not constrained:  # post-hoc repair: retry the failures with new seeds
            outs = list(outs)
            spent = sum(o["meta_info"]["completion_tokens"] for o in outs)
            waited = [o["meta_info"]["e2e_latency"] for o in outs]  # a retry waits for the earlier tries
            total_wall = wall
            for attempt in range(1, retries + 1):
                bad = [i for i, o in enumerate(outs) if verdict(o["text"], SCHEMA) != "ok"]
                if not bad:
                    break
                params = [{"temperature": TEMPERATURE, "seed": 1000 * attempt + i, "max_new_tokens": 128} for i in bad]
                again, wall = generate_timed(engine, [prompts[i] for i in bad], params)
                total_wall += wall
                for i, o in zip(bad, again):
                    outs[i] = o
                    spent += o["meta_info"]["completion_tokens"]
                    waited[i] += o["meta_info"]["e2e_latency"]
                label = f"unconstrained + up to {attempt} retr{'y' if attempt == 1 else 'ies'} of failures"
                results.append(
                    (label, {**score(outs, data), "tokens": spent, "latency": list(waited)}, total_wall, 0.0)
                )
        engine.shutdown()
    rows = []
    for label, s, wall, compile_s in results:
        lat = sorted(s["latency"])
        rows.append(
            [
                label,
                f"**{percent(s['valid'], n)}**",
                f"{s['valid_en']}/{n_en}",
                f"{s['valid_zh']}/{n - n_en}",
                s["failures"],
                f"{s['plausible']}/{s['valid']}",
                f"{s['first']}/{s['valid']}",
                f"{s['name']}/{s['valid']}",
                f"{s['age']}/{s['valid']}",
                s["length"],
                f"{s['tokens'] / n:.1f}",
                f"{wall:.1f}",
                f"{statistics.median(lat):.2f}",
                f"{compile_s:.2f}" if compile_s else "-",
            ]
        )
    lines = [
        "## 4. Validation: constrained against unconstrained",
        "",
        f"{n} extraction prompts (names, ages, 1-3 hobbies; {n_en} English, {n - n_en} Chinese; the user turn "
        f"names the fields), the extraction schema, temperature {TEMPERATURE}, seed = prompt number, "
        "max_new_tokens 128, each set in ONE batched `Engine.generate` call. *schema-valid*: json.loads "
        "then jsonschema; *failures* name the first failing keyword. The name and age columns count "
        "valid outputs: a name shaped like the prompts' names (`First Last`, optionally with a quoted "
        "nickname, or 2-4 Han characters), the right first name (English) or surname (Chinese), the "
        "exact name, the exact age. Retries resend only the failing prompts "
        "with new seeds; their tokens and wall time add up. Latency: median end-to-end per request "
        "inside the batch. Compile: the first constrained request (schema -> regex -> DFA -> token "
        "index), outside the timed batch.",
        "",
    ]
    lines += md_table(
        [
            "run",
            "schema-valid",
            "English",
            "Chinese",
            "failures",
            "name looks like a name",
            "first name / surname right",
            "name correct",
            "age correct",
            'finish "length"',
            "output tokens / prompt",
            "wall (s)",
            "median latency (s)",
            "compile (s)",
        ],
        rows,
    )
    lines += ["", f"Prompt 0 is: {json.dumps(data[0][0][1]['content'], ensure_ascii=False)}", ""] + examples
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=200, help="validation prompts (part 4)")
    ap.add_argument("--radix-requests", type=int, default=24, help="requests per layout (part 2)")
    ap.add_argument("--pitfall-samples", type=int, default=32, help="prompts per pitfall run (part 3)")
    ap.add_argument("--retries", type=int, default=2, help="retries of failed unconstrained outputs (part 4)")
    ap.add_argument("--repeats", type=int, default=3, help="token index builds per cell (part 1)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--out", type=Path, default=RESULTS, help="where to write the tables")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()

    lines = [
        "# Structured output in production (chapter 06)",
        "",
        "Written by `benchmarks/bench_production.py`; every number below comes from one run. Model: the "
        "bundled tiny-json-llama (minisglang.DEFAULT_MODEL_PATH), stage s5, grammar backend `fsm`.",
        "",
    ]
    lines += part_tokenizer_fsm(args.repeats) + [""]
    lines += part_radix(args.radix_requests, args.seed) + [""]
    engine = Engine(jump_forward=False)
    lines += ["## 3. Pitfalls", ""]
    lines += part_truncation(engine, args.pitfall_samples, args.seed + 1) + [""]
    lines += part_escapes(engine, args.pitfall_samples, args.seed + 2) + [""]
    engine.shutdown()
    lines += part_whitespace(args.pitfall_samples, args.seed + 3) + [""]
    lines += part_validation(args.samples, args.seed + 4, args.retries) + [""]
    minutes = (time.perf_counter() - started) / 60
    lines += [machine_line(f"whole run {minutes:.1f} min")]
    text = "\n".join(lines) + "\n"
    write_results(text, args.out)


if __name__ == "__main__":
    main()
