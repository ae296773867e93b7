"""Measure whether the model gets the content right: extraction fields and tool calls on
held-out prompts (names and phrasings that never occur in training), greedy decoding
through minisglang's Engine, constrained and unconstrained.

Extraction: each prompt asks for some keys of a person; the constraint is a JSON Schema
with exactly those keys (in KEY_ORDER, all required). A field is right when its value
equals the reference exactly (a list: the same items in the same order).
Tool calls: the prompt lists 1-5 tools; the constraint is the structural tag of
tool_choice "auto" (minisglang/function_call.py). A call is right when its tool and its
arguments (as JSON values) equal the reference.

Usage:
    python scripts/eval_extraction.py --model minisglang/assets/tiny-json-llama --n 200 --tools 100
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_corpus  # noqa: E402

# The fields the target is about (issue 18): a name, a number and a list.
HEADLINE_FIELDS = ("name", "age", "hobbies")


def extraction_schema(keys: list[str]) -> dict:
    """The JSON Schema of an answer with exactly ``keys``, in that order, all required."""
    return {
        "type": "object",
        "properties": {k: make_corpus.FIELD_SCHEMAS[k] for k in keys},
        "required": list(keys),
        "additionalProperties": False,
    }


def reference_answer(example: dict) -> dict:
    """The reference JSON object of an extraction example (its markdown fence removed)."""
    return json.loads(make_corpus.unfence(example["assistant"]))


def is_chinese(example: dict) -> bool:
    """Whether the paragraph is Chinese: its person's name is written in Han characters."""
    return any("\u4e00" <= ch <= "\u9fff" for ch in reference_answer(example)["name"])


def parse_object(text: str) -> dict | None:
    """The JSON object ``text`` spells, or None (a fenced object counts as not valid)."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def score_extraction(examples: list[dict], outputs: list[str]) -> dict:
    """Field accuracy by field and language, valid-JSON rate and whole-answer exact rate."""
    right, total = defaultdict(int), defaultdict(int)
    valid = exact = 0
    for ex, text in zip(examples, outputs):
        ref, got = reference_answer(ex), parse_object(text)
        valid += got is not None
        exact += got == ref
        lang = "zh" if is_chinese(ex) else "en"
        for key, value in ref.items():
            ok = got is not None and got.get(key) == value
            for group in (key, f"{lang}:{key}", "all", f"{lang}:all"):
                total[group] += 1
                right[group] += ok
            if key in HEADLINE_FIELDS:
                for group in ("headline", f"{lang}:headline"):
                    total[group] += 1
                    right[group] += ok
    accuracy = {g: right[g] / total[g] for g in sorted(total)}
    return {
        "n": len(examples),
        "valid": valid,
        "exact": exact,
        "accuracy": accuracy,
        "counts": {g: [right[g], total[g]] for g in sorted(total)},
    }


# Requests sent to the engine at once: below the scheduler's max_pending_compiles (64), since
# every extraction prompt has its own schema and more distinct compiles at once are refused.
CHUNK = 32


def generate(engine, prompts: list[str], params: list[dict]) -> list[str]:
    """The engine's output texts, CHUNK requests at a time (an aborted request is an error:
    an empty answer would be scored as the model's)."""
    texts = []
    for i in range(0, len(prompts), CHUNK):
        for out in engine.generate(prompts[i : i + CHUNK], params[i : i + CHUNK]):
            reason = out["meta_info"]["finish_reason"]
            if reason and reason.get("type") == "abort":
                raise RuntimeError(f"request aborted by the engine: {reason.get('message')}")
            texts.append(out["text"])
    return texts


def eval_extraction(engine, examples: list[dict], constrained: bool, max_new_tokens: int = 160) -> dict:
    prompts = [engine.tokenizer.apply_chat_template(make_corpus.to_messages(ex, with_answer=False)) for ex in examples]
    params = []
    for ex in examples:
        p = {"temperature": 0, "max_new_tokens": max_new_tokens}
        if constrained:
            p["json_schema"] = extraction_schema(list(reference_answer(ex)))
        params.append(p)
    outputs = generate(engine, prompts, params)
    result = score_extraction(examples, outputs)
    result["samples"] = [(ex["user"].split("\n", 1)[1], text) for ex, text in zip(examples[:6], outputs)]
    return result


def expected_calls(example: dict) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for c in example.get("tool_calls", [])]


# The pieces of a tool eval; benchmarks/bench_tool_calls.py measures with the same ones.
CALL_TASKS = ("tool_call", "tool_parallel")  # the examples whose reference answer is a call


def tool_prompt(tokenizer, example: dict) -> str:
    """The prompt of a tool example: its conversation up to the answer, its tools listed."""
    return tokenizer.apply_chat_template(make_corpus.to_messages(example, with_answer=False), tools=example["tools"])


def function_tools(example: dict) -> list:
    """The example's tools as minisglang.function_call.FunctionTool (name, arguments schema)."""
    from minisglang.function_call import FunctionTool, arguments_schema

    return [
        FunctionTool(t["function"]["name"], arguments_schema(t["function"]["parameters"])) for t in example["tools"]
    ]


def tool_params(example: dict, tool_choice: str | None, max_new_tokens: int = 120) -> dict:
    """Greedy sampling params; with tool_choice ("auto", "required") the structural tag
    that choice makes of the example's tools, with None no constraint."""
    from minisglang.function_call import ToolChoice, tool_constraint

    params = {"temperature": 0, "max_new_tokens": max_new_tokens}
    if tool_choice is not None:
        params["structural_tag"] = tool_constraint(function_tools(example), ToolChoice(tool_choice)).value
    return params


def read_calls(example: dict, text: str) -> list[tuple[str, dict | None]]:
    """The calls an output makes, as (tool name, arguments as a JSON value, or None where
    the arguments are not JSON), read by the server's parser. A call the output ends inside
    (after its whole opening) counts as a call whose arguments are not JSON: the server
    answers it as content, but here it is the model's attempt at a call."""
    from minisglang.function_call import ToolCallParser, call_begin

    names = [t["function"]["name"] for t in example["tools"]]
    parser = ToolCallParser(names)
    parser.feed(text)
    parser.finish()
    calls = []
    for call in parser.calls:
        try:
            calls.append((call.name, json.loads(call.arguments)))
        except ValueError:
            calls.append((call.name, None))
    cut = next((n for n in names if parser.cut.startswith(call_begin(n))), None)
    if cut is not None:
        calls.append((cut, None))
    return calls


def eval_tools(engine, examples: list[dict], constrained: bool, max_new_tokens: int = 120) -> dict:
    """Right tool, right arguments and valid JSON for the calls; no call where none is wanted;
    the reply after a tool result equal to the reference."""
    prompts = [tool_prompt(engine.tokenizer, ex) for ex in examples]
    params = [tool_params(ex, "auto" if constrained else None, max_new_tokens) for ex in examples]
    outputs = generate(engine, prompts, params)
    counts = defaultdict(lambda: [0, 0])  # kind -> [right, total]
    for ex, text in zip(examples, outputs):
        got = read_calls(ex, text)
        want = expected_calls(ex)
        if ex["task"] == "tool_none":
            counts["no call when none fits"][0] += not got
            counts["no call when none fits"][1] += 1
            continue
        if ex["task"] == "tool_reply":
            counts["reply uses the tool result"][0] += text.strip() == ex["assistant"]
            counts["reply uses the tool result"][1] += 1
            continue
        for kind, ok in (
            ("valid JSON arguments", bool(got) and all(args is not None for _, args in got)),
            ("right tool", [n for n, _ in got] == [n for n, _ in want]),
            ("right tool and arguments", got == want),
        ):
            counts[kind][0] += ok
            counts[kind][1] += 1
    samples = [(ex["user"], text) for ex, text in zip(examples[:6], outputs)]
    return {"n": len(examples), "counts": dict(counts), "samples": samples}


def run(model: Path, n: int, n_tools: int, examples: int, seed: int, stage: str | None = None, n_long: int = 0) -> dict:
    from minisglang.engine import Engine

    train = make_corpus.make_corpus(examples, seed)
    held = make_corpus.heldout_extraction_prompts(n, train)
    tools = make_corpus.heldout_tool_prompts(n_tools, train) if n_tools else []
    long = make_corpus.heldout_long_prompts(n_long, train) if n_long else []
    engine = Engine(model_path=str(model), stage=stage)
    t0 = time.time()
    report = {
        "model": str(model),
        "n": n,
        "corpus": {"examples": examples, "seed": seed},
        "extraction": {
            "constrained": eval_extraction(engine, held, True),
            "unconstrained": eval_extraction(engine, held, False),
        },
    }
    if n_long:  # long prompts: rules and a schema, the facts among filler (constrained only)
        room = engine.model.config.max_position_embeddings - 160  # max_new_tokens must fit too
        fits = [
            ex
            for ex in long
            if len(engine.tokenizer.encode(engine.tokenizer.apply_chat_template(make_corpus.to_messages(ex, False))))
            <= room
        ]
        report["long"] = eval_extraction(engine, fits, True)
    if n_tools:
        report["tools"] = {
            "constrained": eval_tools(engine, tools, True),
            "unconstrained": eval_tools(engine, tools, False),
        }
    engine.shutdown()
    report["seconds"] = round(time.time() - t0, 1)
    report["loadavg"] = os.getloadavg()
    return report


def summary(report: dict) -> str:
    """The report as a few lines of text."""
    lines = [
        f"model {report['model']}: {report['n']} held-out extraction prompts "
        f"({report['seconds']} s, load {report['loadavg'][0]:.1f})"
    ]
    for mode in ("constrained", "unconstrained"):
        r = report["extraction"][mode]
        acc = r["accuracy"]
        lines.append(
            f"  {mode:13s} valid {r['valid']}/{r['n']}  exact {r['exact']}/{r['n']}  "
            f"name/age/hobbies {acc.get('headline', 0):.1%} (en {acc.get('en:headline', 0):.1%}, "
            f"zh {acc.get('zh:headline', 0):.1%})  all fields {acc['all']:.1%}  "
            + " ".join(f"{k} {acc[k]:.0%}" for k in make_corpus.KEY_ORDER if k in acc)
        )
    if "long" in report:
        r = report["long"]
        acc = r["accuracy"]
        lines.append(
            f"  long prompts  valid {r['valid']}/{r['n']}  exact {r['exact']}/{r['n']}  name {acc['name']:.0%} "
            f"(en {acc.get('en:name', 0):.0%}, zh {acc.get('zh:name', 0):.0%})  all fields {acc['all']:.1%}"
        )
    for mode in ("constrained", "unconstrained"):
        if "tools" in report:
            counts = report["tools"][mode]["counts"]
            lines.append(f"  tools {mode:13s} " + ", ".join(f"{k} {r}/{t}" for k, (r, t) in counts.items()))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=Path("minisglang/assets/tiny-json-llama"))
    ap.add_argument("--n", type=int, default=200, help="held-out extraction prompts")
    ap.add_argument("--tools", type=int, default=100, help="held-out tool conversations (0: skip)")
    ap.add_argument(
        "--examples",
        type=int,
        default=20000,
        help="corpus size whose user turns are excluded (the model card's evaluations: 20000)",
    )
    ap.add_argument("--seed", type=int, default=1, help="seed of that corpus (the model card's evaluations: 1)")
    ap.add_argument(
        "--long", type=int, default=0, help="held-out long prompts (rules, a schema, facts among filler; 0: skip)"
    )
    ap.add_argument("--json", type=Path, help="also write the whole report here")
    ap.add_argument("--samples", action="store_true", help="print a few answers")
    args = ap.parse_args()
    report = run(args.model, args.n, args.tools, args.examples, args.seed, n_long=args.long)
    if args.samples:
        for mode in ("constrained", "unconstrained"):
            for text, out in report["extraction"][mode]["samples"]:
                print(f"[{mode}] {text}\n    -> {out}")
        for text, out in report.get("tools", {}).get("constrained", {}).get("samples", []):
            print(f"[tools] {text}\n    -> {out}")
    print(summary(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
