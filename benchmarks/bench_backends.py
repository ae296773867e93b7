"""The four grammar backends side by side, and minisglang against transformers + outlines-core.

One run measures, for one JSON-schema request (a schema every backend supports):

* per backend (fsm, xgrammar, outlines, llguidance) and per vocabulary (the bundled 4k
  byte-level BPE, anthropic's 65k byte-level BPE), with the logits 64 columns wider than
  the vocabulary: building the backend (the library's tokenizer info, once per engine),
  compiling the schema, the first mask after the compile, and the per-step mask cost
  (`fill_vocab_mask_batched` + `apply_vocab_mask`) at batch 1 and 32, walking a valid
  JSON text token by token (every row of the batch at the same step);
* end to end on the bundled model: 32 JSON-schema requests, greedy, through minisglang's
  s5 engine (fsm backend; a fresh engine per turn, so no compile or prefix cache carries
  over) against transformers `generate` with an outlines-core logits processor (one
  `Guide` per row, its allowed-token list turned into a mask), taking turns; requests/s
  and the ratio (target: minisglang >= 3x).

Times are medians over `--repeats` (alternating turns end to end). Prints the tables and
writes benchmarks/results/backends.md.

    python benchmarks/bench_backends.py [--repeats 3] [--batch 32]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path

import jsonschema
import torch
from outlines_core import Guide, Index, Vocabulary
from outlines_core.json_schema import build_regex_from_schema
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, LogitsProcessor, LogitsProcessorList

import minisglang
from minisglang.backends.base import BaseGrammarObject, get_backend_class
from minisglang.tokenizer import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _results import machine_line, write_results  # benchmarks/_results.py (scripts run from benchmarks/)
from real_tokenizers import anthropic_65k  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "backends.md"
BACKENDS = ["fsm", "xgrammar", "outlines", "llguidance"]
PAD = 64  # logit columns past the vocabulary, as models pad them

# Supported by all four backends (outlines-core ignores numeric bounds, so none here; a
# `maxLength` makes our fsm backend's DFA compile slow, so none of those either).
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "city": {"enum": ["Paris", "Rome", "Beijing", "北京"]},
        "hobbies": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "required": ["name", "age", "city", "hobbies"],
    "additionalProperties": False,
}
# The walk for the per-step costs: json.dumps' layout, which every backend's JSON accepts.
INSTANCE = {"name": "Li Lei", "age": 31, "city": "北京", "hobbies": ["编程", "hiking"]}
PEOPLE = [("Li Lei", 31, "Beijing"), ("Anna Rossi", 45, "Rome"), ("Marie Dubois", 28, "Paris"), ("张伟", 52, "北京")]
HOBBIES = ["reading", "hiking", "music", "chess"]


def median_seconds(fn, repeats: int) -> float:
    """Median wall seconds of `fn()` over `repeats` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# ------------------------------------------------------------------ per-backend costs
def backend_costs(name: str, tokenizer: Tokenizer, batch_sizes: list[int], repeats: int) -> dict:
    """Build, compile, first-mask and per-step mask seconds of backend `name`."""
    width = tokenizer.vocab_size + PAD
    start = time.perf_counter()
    backend = get_backend_class(name)(tokenizer, width)
    build_s = time.perf_counter() - start
    schema_text = json.dumps(SCHEMA)

    start = time.perf_counter()
    grammar = backend.compile("json_schema", schema_text)  # directly: no cache, no pool thread
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    grammar.fill_vocab_mask(grammar.allocate_vocab_mask(width, 1), 0)
    first_mask_s = time.perf_counter() - start

    walk = tokenizer.encode(json.dumps(INSTANCE, ensure_ascii=False))
    fill_s, step_s = {}, {}
    for batch in batch_sizes:
        rows = [grammar.copy() for _ in range(batch)]
        logits = torch.randn(batch, width)
        entries = [(g, i) for i, g in enumerate(rows)]
        fills, steps = [], []
        for token_id in walk:

            def fill():
                mask = BaseGrammarObject.allocate_vocab_mask(width, batch)
                type(rows[0]).fill_vocab_mask_batched(entries, mask)
                return mask

            fills.append(median_seconds(fill, repeats))
            steps.append(median_seconds(lambda: BaseGrammarObject.apply_vocab_mask(logits, fill()), repeats))
            for g in rows:
                g.accept_token(token_id)
        fill_s[batch], step_s[batch] = statistics.mean(fills), statistics.mean(steps)
    backend.shutdown()
    return {"build": build_s, "compile": compile_s, "first_mask": first_mask_s, "fill": fill_s, "step": step_s}


# ----------------------------------------------------------------------- end to end
class OutlinesCoreProcessor(LogitsProcessor):
    """transformers logits processor: one outlines-core Guide per row, masks from allowed lists."""

    def __init__(self, index: Index, eos_token_id: int, batch: int):
        self.guides = [Guide(index) for _ in range(batch)]
        self.done = [False] * batch
        self.eos_token_id = eos_token_id
        self.started = False

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.started:  # the previous call's token is the last column
            for i, token_id in enumerate(input_ids[:, -1].tolist()):
                if self.done[i]:
                    continue
                if token_id == self.eos_token_id:
                    self.done[i] = True  # finished rows are fed padding (EOS) from now on
                else:
                    self.guides[i].advance(token_id, return_tokens=False)
        self.started = True
        bias = torch.full_like(scores, float("-inf"))
        for i, guide in enumerate(self.guides):
            bias[i, [self.eos_token_id] if self.done[i] else guide.get_tokens()] = 0
        return scores + bias


def hf_generate(hf, tokenizer: Tokenizer, index: Index, prompts: list[str], max_new_tokens: int) -> list[str]:
    """Batched greedy generate with the processor; the decoded outputs."""
    encoded = [tokenizer.encode(p) for p in prompts]
    longest = max(map(len, encoded))
    pad = tokenizer.eos_token_id
    input_ids = torch.tensor([[pad] * (longest - len(e)) + e for e in encoded])  # left padding
    attention = torch.tensor([[0] * (longest - len(e)) + [1] * len(e) for e in encoded])
    processor = OutlinesCoreProcessor(index, tokenizer.eos_token_id, len(prompts))
    with torch.inference_mode():
        out = hf.generate(
            input_ids,
            attention_mask=attention,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            logits_processor=LogitsProcessorList([processor]),
            pad_token_id=pad,
            eos_token_id=tokenizer.eos_token_id,
        )
    return [tokenizer.decode(row[longest:].tolist()) for row in out]


def count_valid(texts: list[str]) -> int:
    valid = 0
    for text in texts:
        try:
            jsonschema.validate(json.loads(text), SCHEMA)
            valid += 1
        except (ValueError, jsonschema.ValidationError):
            pass
    return valid


# (label, Engine options) for minisglang; None is transformers + outlines-core.
SYSTEMS = [
    ("minisglang s5 (fsm, jump forward on)", {"grammar_backend": "fsm", "jump_forward": True}),
    ("minisglang s5 (fsm, jump forward off)", {"grammar_backend": "fsm", "jump_forward": False}),
    ("minisglang s5 (xgrammar, jump forward off)", {"grammar_backend": "xgrammar", "jump_forward": False}),
    ("minisglang s5 (llguidance, jump forward off)", {"grammar_backend": "llguidance", "jump_forward": False}),
    ("transformers + outlines-core", None),
]


def end_to_end(model_path: str, batch: int, max_new_tokens: int, repeats: int) -> dict:
    """Per system: median seconds cold and warm (all systems take turns), and its outputs.

    cold: a fresh engine (no compile cache, no prefix cache) or a fresh outlines-core Index,
    compile timed. warm: the grammar compiled beforehand (the engine by one untimed request
    with an unrelated prompt, so its prefix cache holds nothing useful).
    """
    prompts = []
    for i in range(batch):  # all distinct: the ages differ
        name, age, city = PEOPLE[i % len(PEOPLE)]
        prompts.append(
            f"<|user|>\nExtract as JSON: {name} is {age + i} years old, lives in {city} and likes "
            f"{HOBBIES[i % len(HOBBIES)]}.\n<|assistant|>\n"
        )
    schema_text = json.dumps(SCHEMA, ensure_ascii=False)
    params = [{"json_schema": schema_text, "temperature": 0, "max_new_tokens": max_new_tokens}] * batch
    hf = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    tokenizer = Tokenizer.from_pretrained(model_path)
    eos = tokenizer.eos_token_id
    ids_by_bytes: dict[bytes, list[int]] = {}
    for token_id, data in enumerate(tokenizer.token_bytes):
        if data and token_id != eos:
            ids_by_bytes.setdefault(data, []).append(token_id)
    vocabulary = Vocabulary(eos, ids_by_bytes)
    warm_index = Index(build_regex_from_schema(schema_text), vocabulary)

    def run(options: dict | None, warm: bool) -> tuple[float, list[str], int]:
        """(seconds, output texts, tokens the model sampled) of one turn."""
        if options is None:
            start = time.perf_counter()
            index = warm_index if warm else Index(build_regex_from_schema(schema_text), vocabulary)
            texts = hf_generate(hf, tokenizer, index, prompts, max_new_tokens)
            seconds = time.perf_counter() - start
            return seconds, texts, sum(len(tokenizer.encode(t)) for t in texts)
        engine = minisglang.Engine(model_path=model_path, stage="s5", **options)
        if warm:
            engine.generate("<|user|>\nHi\n<|assistant|>\n", params[0])  # compiles the grammar
        start = time.perf_counter()
        outs = engine.generate(prompts, params)
        seconds = time.perf_counter() - start
        engine.shutdown()
        return (
            seconds,
            [o["text"] for o in outs],
            sum(o["meta_info"]["completion_tokens_wo_jump_forward"] for o in outs),
        )

    times = {(label, warm): [] for label, _ in SYSTEMS for warm in (False, True)}
    last = {}
    for _ in tqdm(range(repeats + 1), desc="end to end (turns)"):
        for warm in (False, True):
            for label, options in SYSTEMS:
                seconds, texts, sampled = run(options, warm)
                times[label, warm].append(seconds)
                last[label] = (texts, sampled)
    result = {}
    for label, _ in SYSTEMS:
        texts, sampled = last[label]
        result[label] = {
            "cold": statistics.median(times[label, False][1:]),  # turn 0: warm-up
            "warm": statistics.median(times[label, True][1:]),
            "tokens": sum(len(tokenizer.encode(t)) for t in texts),
            "sampled": sampled,
            "valid": count_valid(texts),
            "example": texts[0],
        }
    return result


# ------------------------------------------------------------------------------ main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-path", default=minisglang.DEFAULT_MODEL_PATH)
    parser.add_argument("--batch-sizes", default="1,32")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32, help="requests in the end-to-end run")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (one is stable on a shared machine)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]

    vocabularies = [
        ("bundled 4k (byte-level BPE)", Tokenizer.from_pretrained(args.model_path)),
        ("anthropic 65k (byte-level BPE)", anthropic_65k()),
    ]
    for name in BACKENDS:  # import every library now, so no 'build' time includes an import
        get_backend_class(name)
    mask = BaseGrammarObject.allocate_vocab_mask(PAD, 1)  # and pay torch's first-op costs here
    BaseGrammarObject.apply_vocab_mask(torch.zeros(1, PAD), mask)
    costs = {}
    with tqdm(total=len(vocabularies) * len(BACKENDS), desc="backends") as bar:
        for label, tok in vocabularies:
            for name in BACKENDS:
                costs[label, name] = backend_costs(name, tok, batch_sizes, args.repeats)
                bar.update()
    e2e = end_to_end(args.model_path, args.batch, args.max_new_tokens, args.repeats)

    ms = lambda s: f"{s * 1000:,.2f}"  # noqa: E731
    lines = [
        "# Grammar backends: compile and mask costs; minisglang vs transformers + outlines-core",
        "",
        f"JSON schema: `{json.dumps(SCHEMA, ensure_ascii=False)}`",
        "",
        f"Per-step costs walk `{json.dumps(INSTANCE, ensure_ascii=False)}` token by token, every row of "
        f"the batch at the same step (mean over the steps of the median of {args.repeats} runs per step); "
        f"logits are {PAD} columns wider than the vocabulary. 'build' is the backend's one-time "
        "tokenizer preparation (the fsm backend's `prepare_vocabulary`: its vocabulary trie, the first "
        "calls of its compiled loops and the repetition counts of the bodies JSON grammars repeat: a "
        "string's character, a digit, ...); "
        "'first mask' is the first fill after the compile; 'fill' is allocate + "
        "`fill_vocab_mask_batched`, 'step' is fill + `apply_vocab_mask` on the logits.",
        "",
        "| vocabulary | backend | build (ms) | compile (ms) | first mask (ms) | "
        + " | ".join(f"fill B={b} (ms) | step B={b} (ms) | step B={b} vs fsm" for b in batch_sizes)
        + " |",
        "|---|---|---:|---:|---:|" + "---:|---:|---:|" * len(batch_sizes),
    ]
    for label, _ in vocabularies:
        fsm = costs[label, "fsm"]
        for name in BACKENDS:
            c = costs[label, name]
            lines.append(
                f"| {label} | {name} | {ms(c['build'])} | {ms(c['compile'])} | {ms(c['first_mask'])} | "
                + " | ".join(
                    f"{ms(c['fill'][b])} | {ms(c['step'][b])} | {c['step'][b] / fsm['step'][b]:.2f}x"
                    for b in batch_sizes
                )
                + " |"
            )
    n = args.batch
    theirs = e2e[SYSTEMS[-1][0]]
    lines += [
        "",
        f"## End to end: {n} JSON-schema requests, bundled model, greedy, max_new_tokens={args.max_new_tokens}",
        "",
        "minisglang: stage s5 with the backend named in the row. transformers: `generate` with an outlines-core "
        "logits processor (one Guide per row, the mask from `get_tokens()`). cold: fresh engine / fresh "
        "Index, compile timed; warm: grammar compiled beforehand. 'output tokens' re-encodes the texts; "
        "'sampled' counts the tokens the model chose (jump forward inserts the others). Median of "
        f"{args.repeats} turns after a warm-up turn, the systems taking turns.",
        "",
        "| system | cold s | cold req/s | warm s | warm req/s | output tokens | sampled tokens | valid "
        "| cold vs transformers | warm vs transformers |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, _ in SYSTEMS:
        r = e2e[label]
        lines.append(
            f"| {label} | {r['cold']:.2f} | {n / r['cold']:.2f} | {r['warm']:.2f} | {n / r['warm']:.2f} | "
            f"{r['tokens']} | {r['sampled']} | {r['valid']}/{n} | {theirs['cold'] / r['cold']:.2f}x | "
            f"{theirs['warm'] / r['warm']:.2f}x |"
        )
    lines += ["", "Target: minisglang >= 3x transformers' requests/s.", ""]
    lines += [f"Example output ({label}): `{e2e[label]['example'][:120]}`  " for label, _ in SYSTEMS]
    lines += [
        "",
        machine_line(*(f"{p} {version(p)}" for p in ("xgrammar", "outlines_core", "llguidance", "transformers"))),
        "",
    ]
    table = "\n".join(lines)
    write_results(table, args.output)


if __name__ == "__main__":
    main()
