"""Valid is not right: field accuracy beside validity on held-out extraction prompts.

N held-out extraction prompts (English and Chinese; names and phrasings never trained on:
scripts/make_corpus.py's `heldout_extraction_prompts`), greedy, through the Engine of the
latest stage with its default grammar backend (fsm), under these conditions:

- unconstrained: the prompt asks for JSON, nothing enforces it;
- constrained, keys in the training order (make_corpus.KEY_ORDER, the order of every
  answer the model was trained on): the default, and the reference for the others;
- constrained, keys in the order their facts appear in the text (`text_order`);
- constrained, keys in alphabetical order (what a serializer with sorted keys writes);
- constrained, jump-forward off (the seam: with it on, forced text is retokenized and the
  model reads the tokenizer's spelling of it, not the tokens it would have picked);
- constrained, free whitespace between JSON tokens (`json_whitespace="[ \\n\\t]*"`) and
  none (`""`), against the default one optional space (`[ ]?`, how the answers were written);
- a control: the default run with the model in float64, which shows how many answers
  rounding alone moves (so that a condition's changed answers can be told from noise).

Per condition: answers that are valid (json.loads gives an object and jsonschema accepts it
under the condition's schema), exact field accuracy for name, age and hobbies and their
pooled rate (scripts/eval_extraction.py's `score_extraction`, "name/age/hobbies"), all
fields, whole answers exactly right, answers with the same values as the default
constrained run, answers whose tokens are the tokenizer's spelling of their text, and
output tokens and decode steps per answer. Also the demo's three texts
(minisglang/demo.py), unconstrained and constrained.

Writes benchmarks/results/extraction_accuracy.md (`--output`). Rerun it when the bundled
model changes; `--model DIR` measures a checkpoint before it is bundled.

    python benchmarks/bench_extraction_accuracy.py [--n 200] [--model DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
from tqdm import tqdm

import minisglang
from minisglang import demo

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import eval_extraction  # noqa: E402  (it imports make_corpus from scripts/ too)
import make_corpus  # noqa: E402
from _results import machine_line, model_checksum, write_results  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "extraction_accuracy.md"
FREE_WHITESPACE = "[ \n\t]*"
NO_WHITESPACE = ""
CHUNK = 50  # prompts per generate call (the progress bar moves once per chunk)


@dataclass(frozen=True)
class Condition:
    """One way of asking: the constraint (or none), the schema's key order and the engine's options."""

    name: str
    constrained: bool = True
    key_order: str = "training"  # "training", "text" or "alphabetical"
    jump_forward: bool = True
    whitespace: str | None = None  # None: the engine's default, one optional space
    dtype: str = "float32"  # the model's; float64 is a control for rounding

    def engine_options(self) -> tuple:
        """What the engine must be built with (conditions that share it share one engine)."""
        return (self.jump_forward, self.whitespace, self.dtype)

    def whitespace_label(self) -> str:
        return {None: "`[ ]?` (default)", FREE_WHITESPACE: "free `[ \\n\\t]*`", NO_WHITESPACE: "none"}.get(
            self.whitespace, repr(self.whitespace)
        )


CONDITIONS = [
    Condition("unconstrained", constrained=False),
    Condition("constrained (default)"),
    Condition("keys in text order", key_order="text"),
    Condition("keys in alphabetical order", key_order="alphabetical"),
    Condition("jump-forward off", jump_forward=False),
    Condition("free whitespace", whitespace=FREE_WHITESPACE),
    Condition("no whitespace", whitespace=NO_WHITESPACE),
    Condition("default in float64 (control)", dtype="float64"),
]
REFERENCE = "constrained (default)"


# ------------------------------------------------------------------ the order facts appear in

DATE_CHAR = r"[A-Za-z0-9 ,/\-年月日]"  # what a spelled date is made of, around its year


def _value_patterns(key: str, value) -> list[str]:
    """Regexes for how the paragraph spells ``value`` (make_corpus writes an age in digits or
    Chinese numerals, a list joined as "A, B and C" or "A、B和C", a birthday as a date
    spelled around its year)."""
    if key == "age":
        return [rf"(?<!\d)(?:{value}|{make_corpus.zh_number(value)})(?!\d)"]
    if key == "birthday":  # "March 5, 1997", "5 March 1997", "1997-03-05", "1997年3月5日", "1997/3/5"
        return [rf"{DATE_CHAR}{{0,16}}?(?<!\d){value[:4]}(?!\d){DATE_CHAR}{{0,10}}?"]
    if key == "hobbies":
        return [re.escape(make_corpus._join(value, zh)) for zh in (False, True)]
    return [re.escape(value)]


# The English head "Maria Lopez is a 41-year-old nurse from Madrid who ..." says three facts
# without make_corpus's per-fact phrasings.
HEAD_PHRASINGS = {"age": ["{}-year-old"], "occupation": ["-year-old {}"], "city": ["from {}"]}


def fact_position(paragraph: str, key: str, value) -> int:
    """Where the paragraph says ``key`` = ``value``: the earliest match of one of make_corpus's
    phrasings of that fact (English or Chinese, trained or held out) around the value.
    ValueError if none matches."""
    phrasings = [p for facts in (make_corpus.EN_FACTS, make_corpus.ZH_FACTS) for pool in facts[key] for p in pool]
    found = []
    for phrasing in phrasings + HEAD_PHRASINGS.get(key, []):
        before, after = (re.escape(part).replace(re.escape("{an}"), "an?") for part in phrasing.split("{}"))
        for value_re in _value_patterns(key, value):
            m = re.search(before + value_re + after, paragraph)
            if m:
                found.append(m.start())
    if not found:
        raise ValueError(f"the paragraph does not say {key} = {value!r}: {paragraph!r}")
    return min(found)


def text_order(example: dict) -> list[str]:
    """The example's requested keys in the order the paragraph says them (the name opens
    every paragraph). For held-out examples: training paragraphs may use made-up words
    (make_corpus.MADE_UP_PHRASING) that no phrasing matches, and then ValueError."""
    paragraph = example["user"].split("\n", 1)[1]
    ref = eval_extraction.reference_answer(example)
    where = {k: (-1 if k == "name" else fact_position(paragraph, k, v)) for k, v in ref.items()}
    return sorted(ref, key=where.__getitem__)


def schema_keys(example: dict, key_order: str) -> list[str]:
    keys = list(eval_extraction.reference_answer(example))  # the training order (make_corpus.KEY_ORDER)
    if key_order == "text":
        return text_order(example)
    if key_order == "alphabetical":
        return sorted(keys)
    if key_order != "training":
        raise ValueError(f"key_order must be 'training', 'text' or 'alphabetical', got {key_order!r}")
    return keys


# ------------------------------------------------------------------ running and scoring


@dataclass
class Result:
    """One condition's answers and what they score."""

    condition: Condition
    texts: list[str] = field(default_factory=list)
    finishes: list[str] = field(default_factory=list)  # per answer: "stop" or "length"
    objects: int = 0  # answers that json.loads as an object (valid or not)
    valid: int = 0
    output_tokens: int = 0
    decode_steps: int = 0  # output tokens the model produced itself (not jumped over)
    canonical: int = 0  # answers whose tokens are the tokenizer's own spelling of their text
    cut: int = 0  # stopped by max_new_tokens
    score: dict = field(default_factory=dict)


def condition_schemas(cond: Condition, examples: list[dict]) -> list[dict]:
    """Each example's schema under ``cond``'s key order (an unconstrained answer is checked
    against the training-order one; jsonschema ignores key order anyway)."""
    return [eval_extraction.extraction_schema(schema_keys(ex, cond.key_order)) for ex in examples]


def run_condition(
    engine, cond: Condition, examples: list[dict], prompts: list[str], max_new_tokens: int, bar: tqdm
) -> Result:
    result = Result(cond)
    schemas = condition_schemas(cond, examples)
    params = [
        {"temperature": 0, "max_new_tokens": max_new_tokens, **({"json_schema": s} if cond.constrained else {})}
        for s in schemas
    ]
    for start in range(0, len(prompts), CHUNK):
        outs = engine.generate(prompts[start : start + CHUNK], params[start : start + CHUNK])
        for out in outs:
            meta = out["meta_info"]
            finish = meta["finish_reason"] or {}
            if finish.get("type") == "abort":  # a failure of the run, never an answer to score
                raise RuntimeError(f"{cond.name}: a request was aborted: {finish.get('message')}")
            result.texts.append(out["text"])
            result.finishes.append(finish.get("type"))
            result.output_tokens += meta["completion_tokens"]
            result.decode_steps += meta["completion_tokens_wo_jump_forward"]
            ids = out["output_ids"]
            if isinstance(finish.get("matched"), int) and ids and ids[-1] == finish["matched"]:
                ids = ids[:-1]  # the stop token (EOS) ends the ids but is not part of the text
            result.canonical += ids == engine.tokenizer.encode(out["text"])
        bar.update(len(outs))
    score_answers(result, examples, schemas)
    return result


def score_answers(result: Result, examples: list[dict], schemas: list[dict]) -> None:
    """Fill in ``result``'s validity (each answer under its own schema), cut answers and field scores."""
    result.objects = result.valid = result.cut = 0
    for text, schema, finish in zip(result.texts, schemas, result.finishes, strict=True):
        got = eval_extraction.parse_object(text)
        result.objects += got is not None
        result.valid += got is not None and jsonschema.Draft202012Validator(schema).is_valid(got)
        result.cut += finish == "length"
    result.score = eval_extraction.score_extraction(examples, result.texts)


def fences_stripped(result: Result, examples: list[dict]) -> Result:
    """``result``'s answers with a markdown ```json fence taken off by hand, as a client's
    post-processing would (scored again, nothing generated): how much of the gap between
    unconstrained and constrained answers is the fence alone."""
    stripped = Result(
        Condition(f"{result.condition.name}, fences stripped", constrained=False),
        texts=[make_corpus.unfence(t) for t in result.texts],
        finishes=list(result.finishes),
        output_tokens=result.output_tokens,
        decode_steps=result.decode_steps,
        canonical=result.canonical,
    )
    score_answers(stripped, examples, condition_schemas(stripped.condition, examples))
    return stripped


def demo_answers(engine, max_new_tokens: int) -> list[tuple[str, str, str]]:
    """(text, unconstrained answer, constrained answer) for the demo's three texts, as `minisglang demo` asks."""
    prompts = [
        engine.tokenizer.apply_chat_template([{"role": "user", "content": f"{demo.INSTRUCTION}\n{t}"}])
        for t in demo.TEXTS
    ]
    free = {"temperature": 0, "max_new_tokens": max_new_tokens}
    outs = [
        engine.generate(prompts, [dict(free, **extra)] * len(prompts))
        for extra in ({}, {"json_schema": demo.PERSON_SCHEMA})
    ]
    return [(t, a["text"], b["text"]) for t, a, b in zip(demo.TEXTS, *outs)]


def run(
    model: Path, examples: list[dict], conditions: list[Condition], max_new_tokens: int = 160, with_demo: bool = True
) -> tuple[list[Result], list]:
    """Every condition over the examples (one engine per distinct engine options, built in
    turn), then the demo's texts on the default engine."""
    from minisglang.engine import Engine

    results: dict[str, Result] = {}
    demo_rows = []
    groups: dict[tuple, list[Condition]] = {}
    for cond in conditions:
        groups.setdefault(cond.engine_options(), []).append(cond)
    with tqdm(total=len(conditions) * len(examples), desc="answers", mininterval=5) as bar:
        for (jump_forward, whitespace, dtype), conds in groups.items():
            # Every distinct schema of a chunk is a compile submitted at once: let them all wait.
            engine = Engine(
                model_path=str(model),
                dtype=dtype,
                jump_forward=jump_forward,
                json_whitespace=whitespace,
                max_pending_compiles=max(64, CHUNK),
            )
            try:
                prompts = [
                    engine.tokenizer.apply_chat_template(make_corpus.to_messages(ex, with_answer=False))
                    for ex in examples
                ]
                for cond in conds:
                    results[cond.name] = run_condition(engine, cond, examples, prompts, max_new_tokens, bar)
                if with_demo and (jump_forward, whitespace, dtype) == (True, None, "float32"):
                    demo_rows = demo_answers(engine, max_new_tokens)
            finally:
                engine.shutdown()
    return [results[c.name] for c in conditions], demo_rows


# ------------------------------------------------------------------ the table

HEADER = [
    "condition",
    "key order",
    "jump-forward",
    "whitespace",
    "JSON object",
    "valid (jsonschema)",
    "name",
    "age",
    "hobbies",
    "name/age/hobbies",
    "English",
    "Chinese",
    "all fields",
    "whole answer right",
    "same values as default",
    "tokens as the tokenizer spells the text",
    "output tokens / answer",
    "decode steps / answer",
    "hit max_new_tokens",
]


def _of(k: int, n: int) -> str:
    return f"{k}/{n} ({k / n:.0%})" if n else "-"


def _same_answer(a: str, b: str) -> bool:
    """The same object (key order aside), or, for text that is not a JSON object, the same text."""
    got_a, got_b = eval_extraction.parse_object(a), eval_extraction.parse_object(b)
    return got_a == got_b if got_a is not None and got_b is not None else a == b


def cells(result: Result, reference: Result | None) -> list[str]:
    c, s, n = result.condition, result.score, result.score["n"]

    def field_cell(group: str) -> str:
        return _of(*s["counts"].get(group, [0, 0]))

    same = "-"
    if reference is not None and reference is not result:
        same = _of(sum(map(_same_answer, result.texts, reference.texts)), n)
    return [
        c.name,
        c.key_order if c.constrained else "-",
        ("on" if c.jump_forward else "off") if c.constrained else "-",
        c.whitespace_label() if c.constrained else "-",
        _of(result.objects, n),
        _of(result.valid, n),
        field_cell("name"),
        field_cell("age"),
        field_cell("hobbies"),
        field_cell("headline"),
        field_cell("en:headline"),
        field_cell("zh:headline"),
        field_cell("all"),
        _of(s["exact"], n),
        same,
        _of(result.canonical, n),
        f"{result.output_tokens / n:.1f}",
        f"{result.decode_steps / n:.1f}",
        _of(result.cut, n),
    ]


def table(results: list[Result]) -> list[str]:
    reference = next((r for r in results if r.condition.name == REFERENCE), None)
    return [
        "| " + " | ".join(HEADER) + " |",
        "|---|---|---|---|" + "---:|" * (len(HEADER) - 4),
        *("| " + " | ".join(cells(r, reference)) + " |" for r in results),
    ]


def demo_table(rows: list[tuple[str, str, str]]) -> list[str]:
    def answer(text: str, expected: dict) -> str:
        right = (
            "right"
            if demo.is_right(text, expected)
            else ("valid, wrong" if demo.is_valid_person(text) else "not valid")
        )
        # One table cell: no newline, no column bar, no backtick (a fence is shown as ''').
        shown = text.replace("\n", "\\n").replace("|", "/").replace("`", "'")
        return f"`{shown}` ({right})"

    expected = dict(demo.EXAMPLES)
    return [
        "| text | unconstrained | constrained |",
        "|---|---|---|",
        *(f"| {t} | {answer(a, expected[t])} | {answer(b, expected[t])} |" for t, a, b in rows),
    ]


def training_steps(model: Path) -> str:
    """The training steps behind these weights, from its MODEL_CARD.md's line "Steps behind these
    weights: ..." (the card's Reproduce section also lists stages that were not kept, so only the
    card can say which stages the weights descend from); "? steps" without one."""
    card = model / "MODEL_CARD.md"
    text = card.read_text(encoding="utf-8") if card.exists() else ""
    line = re.search(r"^Steps behind these weights: (.+?)\.?$", text, re.M)
    return line[1] if line else "? steps"


def report(
    results: list[Result], demo_rows: list, examples: list[dict], args, model: Path, load_before: float, seconds: float
) -> str:
    n = len(examples)
    zh = sum(map(eval_extraction.is_chinese, examples))
    same_order = sum(text_order(ex) == list(eval_extraction.reference_answer(ex)) for ex in examples)
    asked = {k: sum(k in eval_extraction.reference_answer(ex) for ex in examples) for k in ("age", "hobbies")}
    lines = [
        "# Valid is not right: field accuracy on held-out extraction prompts",
        "",
        f"{n} held-out extraction prompts ({n - zh} English, {zh} Chinese paragraphs; `heldout_extraction_prompts` "
        f"seed {args.heldout_seed} of scripts/make_corpus.py, excluding the user turns of its {args.examples}-example "
        f"corpus, seed {args.seed}): each paragraph mentions 3-8 facts about a person with a name and phrasings "
        f"never trained on, and the request asks for some of them (the name always; age in {asked['age']}, "
        f"hobbies in {asked['hobbies']}). Greedy, at most {args.max_new_tokens} new tokens, the latest stage with "
        "its default backend (fsm). Constrained: a JSON Schema with exactly the requested keys, all required; "
        "its key order is the training order (make_corpus.KEY_ORDER, the order of every trained answer), the "
        f"order the paragraph says the facts in (equal to the training order for {same_order} of the {n} "
        "prompts), or alphabetical. 'JSON object': json.loads gives an object (a fenced answer does not; a "
        "field counts as right only in such an answer). 'valid': jsonschema accepts the object under the "
        "condition's schema (the training-order schema for the unconstrained row). 'fences stripped': the same "
        "unconstrained answers with a markdown ```json fence taken off by hand (make_corpus.unfence; nothing "
        "generated again), the post-processing a client without a constraint writes. A field is right when its "
        "value equals the reference exactly (a list: the same items in order); 'name/age/hobbies' pools those "
        "three fields over the prompts that ask for them (English, Chinese: the same by paragraph language), "
        "'all fields' pools every requested field, 'whole answer right' counts answers equal to the reference. "
        "'same values as default': the answer parses to the same object as the default constrained run's "
        "(key order aside), or is the same text where it does not parse; the float64 control row shows how "
        "many answers rounding alone moves. 'tokens as the tokenizer spells the text': the answer's output "
        "tokens equal the tokenizer's encoding of its text (jump-forward retokenizes what was written before "
        "each jump, the model's own tokens included). 'decode steps': output tokens the model produced, not "
        "jumped over. "
        "benchmarks/bench_extraction_accuracy.py.",
        "",
        *table(results),
        "",
    ]
    if demo_rows:
        lines += [
            f'The demo\'s three texts (minisglang/demo.py, `make demo`): "{demo.INSTRUCTION}", greedy, '
            "unconstrained and under the demo's schema (name, age, hobbies).",
            "",
            *demo_table(demo_rows),
            "",
        ]
    lines += [
        f"Model: `{model.name}` (safetensors sha256 {model_checksum(model)}, {training_steps(model)} by its "
        "MODEL_CARD.md).",
        machine_line(f"load average {load_before:.1f} before the run", f"run took {seconds:.0f} s"),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model",
        type=Path,
        default=Path(minisglang.DEFAULT_MODEL_PATH),
        help="the checkpoint to measure (default: the bundled model)",
    )
    ap.add_argument("--n", type=int, default=200, help="held-out extraction prompts")
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--examples", type=int, default=20000, help="size of the corpus the model was trained on")
    ap.add_argument("--seed", type=int, default=1, help="seed of the corpus the model was trained on")
    ap.add_argument("--heldout-seed", type=int, default=12345, help="seed of the held-out prompts")
    ap.add_argument("--output", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error(f"--n must be at least 1, got {args.n}")
    load_before, started = os.getloadavg()[0], time.perf_counter()
    train = make_corpus.make_corpus(args.examples, args.seed)
    examples = make_corpus.heldout_extraction_prompts(args.n, train, args.heldout_seed)
    results, demo_rows = run(args.model, examples, CONDITIONS, args.max_new_tokens)
    free = next(i for i, r in enumerate(results) if not r.condition.constrained)
    results.insert(free + 1, fences_stripped(results[free], examples))
    write_results(
        report(results, demo_rows, examples, args, args.model, load_before, time.perf_counter() - started), args.output
    )


if __name__ == "__main__":
    main()
