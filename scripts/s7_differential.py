"""A differential test of stage s7 against s6 (helper s7diff): the same greedy requests on
s6 (jump_forward=False) and on s7 under several draft configurations; outputs must match
token for token, constrained outputs must be valid, meta_info's spec counts consistent,
and the pools and radix exact afterwards. Prints the counts per class and every fault.

Usage:
    PYTHONPATH=. python scripts/s7_differential.py --seed 0 --backends fsm,xgrammar,llguidance [--extras]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import Counter

import jsonschema
import torch

torch.set_num_threads(1)
sys.path.insert(0, "tests")
from test_engine import assert_no_leak  # noqa: E402

from minisglang.demo import PERSON_SCHEMA  # noqa: E402
from minisglang.engine import Engine  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--seed", type=int, default=0, help="the generator's seed")
parser.add_argument("--backends", default="fsm,xgrammar,llguidance", help="grammar backends, comma-separated")
parser.add_argument("--extras", action="store_true", help="the rarer paths (reasoning gate, memory pressure, seeded)")
ARGS = parser.parse_args() if __name__ == "__main__" else parser.parse_args([])
BACKENDS = ARGS.backends.split(",")
rng = random.Random(ARGS.seed)
TOKENIZER = None  # the engines' tokenizer, for the oracles

NAMES = ["Maria Lopez", "Tomas Okafor", "Ana Ruiz", "张三", "李小龙", "Émile Zoë", "Kwame Mensah"]
CITIES = ["Madrid", "北京", "Lagos", "São Paulo", "Köln", "上海"]
HOBBIES = ["painting", "cycling", "chess", "编程", "摄影", "爬山", "surfing 🏄", "reading"]


def person_text() -> tuple[str, str]:
    n, c = rng.choice(NAMES), rng.choice(CITIES)
    a = rng.randint(1, 99)
    hs = rng.sample(HOBBIES, rng.randint(1, 3))
    if rng.random() < 0.5:
        return f"{n} is a {a}-year-old nurse from {c} who enjoys {', '.join(hs)}.", n
    return f"{n}今年{a}岁，住在{c}，爱好是{'、'.join(hs)}。", n


def chat(eng: Engine, content: str):
    return eng.tokenizer.encode_chat([{"role": "user", "content": content}])


MANY_KEYS = {
    "type": "object",
    "properties": {
        k: {"type": "string"} if k != "age" else {"type": "integer", "minimum": 0, "maximum": 200}
        for k in ["name", "age", "city", "occupation_of_the_person", "favourite_colour_of_all_time", "email"]
    },
    "required": ["name", "age", "city", "occupation_of_the_person", "favourite_colour_of_all_time", "email"],
    "additionalProperties": False,
}
CONST_SCHEMA = {
    "type": "object",
    "properties": {
        "kind": {"const": "person_record_version_two_point_three"},
        "status": {"enum": ["active_and_verified", "inactive_pending_review"]},
        "name": {"type": "string", "maxLength": 12},
        "tags": {"type": "array", "items": {"enum": ["alpha", "beta", "gamma"]}, "maxItems": 3},
    },
    "required": ["kind", "status", "name", "tags"],
    "additionalProperties": False,
}
REGEXES = [
    r"[0-9]{3}-[a-z]{2,5}",  # drafts of the copied prompt are forbidden
    r"[^ex\" ]{3,25}",  # the model's favourite tokens forbidden
    r"(你好|世界|😀|🎉){1,6}",  # multi-byte
    r"The answer is (yes|no|maybe)\. Thank you for asking the question\.",  # long forced text
    r'\{"name": "[^"\\\x00-\x1f]{1,20}", "age": (0|[1-9][0-9]{0,2})\}',
    r"(abc|abd|x y z ){2,8}",
    r"[a-z]+@[a-z]+\.(com|org)",
]
EBNFS = [
    'root ::= "{\\"answer\\": " value "}"\nvalue ::= "true" | "false" | [0-9]+',
    'root ::= item (", " item)*\nitem ::= "alpha" | "beta" | "gamma" | "数据"',
]
STAG = {
    "structures": [
        {
            "begin": '<tool_call>{"name": "get_the_current_weather_in_city", "arguments": ',
            "schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            "end": "}</tool_call>",
        }
    ],
    "triggers": ["<tool_call>"],
}
STAG_FIRST = dict(STAG, at_least_one=True, stop_after_first=True)


def make_requests(eng: Engine) -> list[tuple[str, object, dict]]:
    """(class, prompt, params) for one batch."""
    out: list[tuple[str, object, dict]] = []
    for _ in range(3):
        text, _name = person_text()
        p = chat(eng, f"Extract name, age and hobbies from the text as JSON.\n{text}")
        out.append(
            ("copy_json", p, {"json_schema": json.dumps(PERSON_SCHEMA), "max_new_tokens": rng.choice([24, 48, 80])})
        )
    text, _ = person_text()
    out.append(
        (
            "many_keys",
            chat(eng, f"Extract the person as JSON.\n{text}"),
            {"json_schema": json.dumps(MANY_KEYS), "max_new_tokens": 90},
        )
    )
    out.append(
        ("const_schema", chat(eng, f"Record: {text}"), {"json_schema": json.dumps(CONST_SCHEMA), "max_new_tokens": 70})
    )
    text, _ = person_text()
    out.append(("free_copy", chat(eng, f"Repeat exactly: {text} {text}"), {"max_new_tokens": rng.randint(1, 40)}))
    out.append(
        (
            "free_nocopy",
            chat(eng, rng.choice(["Write a poem.", "你好", "What is 2+2?", "Tell me about 🎉"])),
            {"max_new_tokens": rng.randint(1, 30)},
        )
    )
    rx = rng.choice(REGEXES)
    out.append(("regex", chat(eng, f"Answer. {person_text()[0]}"), {"regex": rx, "max_new_tokens": rng.randint(1, 40)}))
    out.append(
        ("ebnf", chat(eng, "Give the answer."), {"ebnf": rng.choice(EBNFS), "max_new_tokens": rng.randint(4, 40)})
    )
    out.append(
        (
            "stag",
            chat(eng, f"What is the weather in {rng.choice(CITIES)}? Use the tool."),
            {"structural_tag": json.dumps(rng.choice([STAG, STAG_FIRST])), "max_new_tokens": rng.randint(10, 60)},
        )
    )
    text, _ = person_text()
    out.append(
        (
            "short_max",
            chat(eng, f"Extract name, age and hobbies from the text as JSON.\n{text}"),
            {"json_schema": json.dumps(PERSON_SCHEMA), "max_new_tokens": rng.randint(1, 12)},
        )
    )
    return out


def with_stops(reqs, ref_out):
    """Stop strings cut from s6's outputs at random places (they straddle draft boundaries)."""
    new = []
    for (cls, p, sp), o in zip(reqs, ref_out):
        t = o["text"]
        if len(t) >= 3:
            i = rng.randrange(1, len(t) - 1)
            j = min(len(t), i + rng.randint(1, 4))
            sp = dict(sp, stop=[t[i:j], "zzqq"])
            new.append(("stop_" + cls, p, sp))
    return new


def valid(cls: str, sp: dict, o: dict) -> str | None:
    fr = o["meta_info"]["finish_reason"] or {}
    if fr.get("type") != "stop" or sp.get("stop"):
        return None
    t = o["text"]
    if sp.get("think_end"):  # the grammar applies after the reasoning marker (one token) only
        marker, ids = TOKENIZER.encode(sp["think_end"])[0], o["output_ids"]
        if marker not in ids:
            return None
        t = TOKENIZER.decode(ids[ids.index(marker) + 1 :])
    if "regex" in sp and not re.fullmatch(sp["regex"], t):
        return f"regex {sp['regex']!r} does not match {t!r}"
    if "json_schema" in sp:
        try:
            jsonschema.validate(json.loads(t), json.loads(sp["json_schema"]))
        except Exception as e:
            return f"json invalid {t!r}: {str(e)[:80]}"
    return None


def spec_ok(o: dict) -> str | None:
    m = o["meta_info"]
    if "spec_verify_ct" not in m:
        return None
    v, d, a, n = m["spec_verify_ct"], m["spec_draft_tokens"], m["spec_accepted_tokens"], m["completion_tokens"]
    if not (0 <= a <= d) or v < 0:
        return f"counts {m}"
    if n > 1 + v + a:
        return f"completion {n} > 1 + verify {v} + accepted {a}"
    return None


def leaks(eng: Engine, where: str) -> list[str]:
    """A fault line if the engine's pools and radix are not exact once idle, else none."""
    try:
        assert_no_leak(eng)
    except AssertionError as e:
        return [f"LEAK [{where}] {e!r}"]
    return []


def run(eng: Engine, reqs):
    return eng.generate([p for _, p, _ in reqs], [dict(sp, temperature=0) for _, _, sp in reqs])


def main() -> None:
    counts: Counter = Counter()
    faults: list[str] = []
    finishes: Counter = Counter()
    spec: Counter = Counter()
    configs = []
    for alg in ["NGRAM", "FORCED", "FORCED+NGRAM", None]:
        for _ in range(2 if alg else 1):
            configs.append(
                dict(
                    speculative_algorithm=alg,
                    speculative_num_draft_tokens=rng.choice([1, 2, 3, 4, 7, 12]),
                    speculative_ngram_min_match_window_size=rng.choice([1, 2]),
                    speculative_ngram_max_match_window_size=rng.choice([2, 4, 6]),
                    chunked_prefill_size=rng.choice([None, None, 16, 40]),
                    disable_overlap_schedule=rng.random() < 0.5,
                )
            )
    for backend in BACKENDS:
        s6 = Engine(stage="s6", grammar_backend=backend, jump_forward=False, torch_threads=1)
        batches = []
        for _ in range(2):
            reqs = make_requests(s6)
            ref = run(s6, reqs)
            stops = with_stops(reqs, ref)
            batches.append((reqs + stops, ref + run(s6, stops)))
        assert_no_leak(s6)
        s6.shutdown()
        for cfg in configs:
            if backend == "outlines" and "FORCED" in (cfg["speculative_algorithm"] or ""):
                continue
            s7 = Engine(stage="s7", grammar_backend=backend, torch_threads=1, **cfg)
            for reqs, ref in batches:
                outs = run(s7, reqs)
                for (cls, _p, sp), a, b in zip(reqs, ref, outs):
                    counts[cls] += 1
                    m = b["meta_info"]
                    finishes[(cls.split("_")[0], (m["finish_reason"] or {}).get("type"))] += 1
                    spec["drafts"] += m.get("spec_draft_tokens", 0)
                    spec["accepted"] += m.get("spec_accepted_tokens", 0)
                    spec["tokens"] += m["completion_tokens"]
                    where = (
                        f"[{backend} {cfg} {cls} {json.dumps({k: v for k, v in sp.items()}, ensure_ascii=False)[:300]}]"
                    )
                    if (
                        a["output_ids"] != b["output_ids"]
                        or a["meta_info"]["finish_reason"] != b["meta_info"]["finish_reason"]
                    ):
                        faults.append(
                            f"DIFF {where}\n  s6: {a['text']!r} {a['meta_info']['finish_reason']}\n  s7: {b['text']!r} {b['meta_info']['finish_reason']}"
                        )
                    for check in (valid(cls, sp, b), spec_ok(b)):
                        if check:
                            faults.append(f"BAD {where} {check}")
            # aborts: a request cancelled after a few steps keeps a prefix of s6's text
            for reqs, ref in batches[:1]:
                for i in rng.sample(range(len(reqs)), 3):
                    cls, p, sp = reqs[i]
                    r = s7.submit(p, dict(sp, temperature=0))
                    for _ in range(rng.randint(1, 4)):
                        s7.step()
                    s7.abort(r.rid)
                    while s7.has_work():
                        s7.step()
                    counts["abort_" + cls] += 1
                    ids = list(r.output_ids)
                    if ids != ref[i]["output_ids"][: len(ids)]:
                        faults.append(f"ABORT-DIFF [{backend} {cfg} {cls}] {ids} vs {ref[i]['output_ids']}")
            faults += leaks(s7, f"{backend} {cfg}")
            s7.shutdown()
        print(backend, "done", dict(counts), len(faults), flush=True)
    print("COUNTS", json.dumps(dict(counts)))
    print("FINISHES", sorted(finishes.items()))
    print("SPEC", dict(spec))
    print("FAULTS", len(faults))
    for f in faults:
        print(f)


def extras(backend: str) -> None:
    """The rarer paths: a reasoning gate (drafts across think-end), memory pressure (drafts
    cut by kv room, retractions), mixed prefill beside chunked prefill, ignore_eos, and
    seeded sampling, whose text must not depend on the drafts (s7 against s7)."""
    faults: list[str] = []
    counts: Counter = Counter()
    s6 = Engine(stage="s6", grammar_backend=backend, jump_forward=False, torch_threads=1)
    global TOKENIZER
    TOKENIZER = s6.tokenizer
    reqs = make_requests(s6)
    think = [
        (
            "think",
            chat(s6, f"Think, then extract as JSON.\n{person_text()[0]}"),
            {"json_schema": json.dumps(PERSON_SCHEMA), "think_end": te, "max_new_tokens": 40},
        )
        for te in ["}", '"', " ", "name"]
    ]
    eos = [("ignore_eos", chat(s6, "Hi"), {"ignore_eos": True, "max_new_tokens": 30, "regex": r"(ab|c)*"})]
    reqs = reqs + think + eos
    ref = run(s6, reqs)
    s6.shutdown()
    seeded = [(c, p, dict(sp, temperature=0.9, seed=11 + i)) for i, (c, p, sp) in enumerate(reqs)]
    seeded_ref = None
    retractions: list[int] = []
    for cfg in [
        dict(
            speculative_algorithm="FORCED+NGRAM",
            speculative_num_draft_tokens=5,
            max_total_tokens=400,
            new_token_ratio=0.1,
            min_new_token_ratio=0.05,
        ),
        dict(
            speculative_algorithm="NGRAM", speculative_num_draft_tokens=3, mixed_prefill=True, chunked_prefill_size=24
        ),
        dict(speculative_algorithm="FORCED", speculative_num_draft_tokens=6, mixed_prefill=True),
        dict(
            speculative_algorithm="FORCED+NGRAM",
            speculative_num_draft_tokens=2,
            max_total_tokens=450,
            new_token_ratio=0.2,
            min_new_token_ratio=0.1,
            chunked_prefill_size=32,
        ),
    ]:
        s7 = Engine(stage="s7", grammar_backend=backend, torch_threads=1, **cfg)
        outs = run(s7, reqs)
        for (cls, _p, sp), a, b in zip(reqs, ref, outs):
            counts[cls] += 1
            if a["output_ids"] != b["output_ids"] or a["meta_info"]["finish_reason"] != b["meta_info"]["finish_reason"]:
                faults.append(
                    f"DIFF [{backend} {cfg} {cls} {json.dumps(sp, ensure_ascii=False)[:200]}]\n  s6: {a['text']!r} {a['meta_info']['finish_reason']}\n  s7: {b['text']!r} {b['meta_info']['finish_reason']}"
                )
            for check in (valid(cls, sp, b), spec_ok(b)):
                if check:
                    faults.append(f"BAD [{backend} {cfg} {cls}] {check}")
        # Staggered arrivals: a request a step, so new prefills meet running verifies.
        live = []
        for (cls, p, sp), a in zip(reqs, ref):
            live.append((cls, s7.submit(p, dict(sp, temperature=0)), a))
            s7.step()
        while s7.has_work():
            s7.step()
        for cls, r, a in live:
            counts["staggered"] += 1
            if list(r.output_ids) != a["output_ids"]:
                faults.append(f"STAGGERED-DIFF [{backend} {cfg} {cls}] {r.output_text!r} vs {a['text']!r}")
        retractions.append(s7.scheduler.totals.retractions)
        s_outs = s7.generate([p for _, p, _ in seeded], [sp for _, _, sp in seeded])
        counts["seeded"] += len(seeded)
        if seeded_ref is None:
            seeded_ref = s_outs
        else:
            for (cls, _p, _sp), a, b in zip(seeded, seeded_ref, s_outs):
                if a["output_ids"] != b["output_ids"]:
                    faults.append(f"SEEDED-DIFF [{backend} {cfg} {cls}] {a['text']!r} vs {b['text']!r}")
        faults += leaks(s7, f"{backend} {cfg}")
        s7.shutdown()
    print("EXTRAS", backend, json.dumps(dict(counts)), "FAULTS", len(faults), "retractions", retractions)
    for f in faults:
        print(f)


if __name__ == "__main__":
    t = time.time()
    if ARGS.extras:
        for b in BACKENDS:
            extras(b)
    else:
        main()
    print("seconds", time.time() - t)
