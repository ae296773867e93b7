"""The mask oracle (issue 16 item 3): every system's mask, step by step, against brute force.

Along the tokens of a valid document for each schema of bench_compile's seeded sample,
each step's mask from each system (our fsm backend lazy and eager, xgrammar, llguidance,
outlines-core) is compared bit by bit with a brute-force mask: every token's bytes run
one by one through our byte automaton from the current text (LazyStateIndex.
readable_tokens: no trie, no shared rows), EOS allowed exactly when the text so far is a
whole match. The automaton is our JSON Schema compiler's regex, whose language the tests
check against `re` and the eager DFA (tests/test_lazy_automaton.py).

Our backends must differ in 0 steps (tests/test_lazy_automaton.py asserts it too). The
libraries compile the schema with their own rules, so a difference is not necessarily
a bug: each differing token is classified (a token starting with whitespace: the
library allows more whitespace than our `[ ]?` layout, or less; a special token; other)
and the table says what the differences are. Only the first vocabulary-size columns are
compared (logits are 64 columns wider). Writes benchmarks/results/mask_oracle.md.

    python benchmarks/bench_mask_oracle.py [--schemas 24] [--seed 16] [--eager-schemas 4]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from importlib.metadata import version
from pathlib import Path

import numpy as np
import torch

import minisglang
from minisglang.backends.base import InvalidGrammarObject
from minisglang.constrained.bitmask import unpack_bits
from minisglang.tokenizer import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _results import machine_line, write_results  # noqa: E402
from bench_compile import PAD, SYSTEMS, compile_once, generate_schemas, make_backend  # noqa: E402
from real_tokenizers import anthropic_65k  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "mask_oracle.md"
WHITESPACE = b" \t\n\r"


def oracle_masks(grammar, ids: list[int], vocab_size: int, eos: int) -> list[np.ndarray]:
    """Brute-force bool [vocab_size] masks before each of `ids`, from our lazy automaton
    (`grammar` is an fsm-lazy matcher, used for its automaton only)."""
    index = grammar.fsm.index
    everything = np.arange(vocab_size, dtype=np.int64)
    state, masks = index.initial_state, []
    for token_id in ids:
        mask = np.zeros(vocab_size, dtype=bool)
        mask[index.readable_tokens(state, everything)] = True
        mask[eos] = index.is_final(state)
        masks.append(mask)
        state = index.next_state(state, token_id)
        if state < 0:
            break
    return masks


def compare(grammar, ids: list[int], oracle: list[np.ndarray], vocab_size: int, token_bytes, kinds: Counter):
    """(steps compared, steps differing) of `grammar`'s masks against `oracle`; each
    differing token is counted in `kinds` by what it is."""
    width = vocab_size + PAD
    mask = grammar.allocate_vocab_mask(width, 1)
    steps = differing = 0
    for step, token_id in enumerate(ids[: len(oracle)]):
        grammar.fill_vocab_mask(mask, 0)
        got = unpack_bits(mask[0], width)[:vocab_size].numpy()
        steps += 1
        extra, missing = np.flatnonzero(got & ~oracle[step]), np.flatnonzero(~got & oracle[step])
        if extra.shape[0] or missing.shape[0]:
            differing += 1
            for side, tokens in (("allows", extra), ("forbids", missing)):
                for t in tokens.tolist():
                    data = token_bytes[t]
                    what = (
                        "a special token"
                        if not data
                        else "a token starting with whitespace"
                        if data[:1] in (b" ", b"\t", b"\n", b"\r")
                        else "another token"
                    )
                    kinds[f"{side} {what}"] += 1
        try:
            grammar.accept_token(token_id)
        except Exception:  # the library's grammar rejects the document's own token
            kinds["rejects a token of the valid document"] += 1
            break
    return steps, differing


def explain(kinds: Counter, steps: int) -> str:
    if not kinds:
        return "identical to brute force"
    return "; ".join(f"{what} ({n:,})" for what, n in kinds.most_common())


def bench_vocabulary(label: str, tokenizer: Tokenizer, sample, args) -> list[str]:
    vocab_size = len(tokenizer.token_bytes)
    eos = tokenizer.eos_token_id
    lazy = make_backend("fsm", {"automaton": "lazy"}, tokenizer, args.eager_timeout)
    documents, oracles = [], []
    for schema, instance in sample:
        ids = tokenizer.encode(json.dumps(instance, ensure_ascii=False))
        grammar, _, error = compile_once(lazy, schema)
        documents.append(ids)
        oracles.append(oracle_masks(grammar.copy(), ids, vocab_size, eos))
    lazy.shutdown()
    rows = []
    for system, name, options in SYSTEMS:
        backend = make_backend(name, options, tokenizer, args.eager_timeout)
        kinds, steps, differing, compiled, tried = Counter(), 0, 0, 0, 0
        for i, (schema, _) in enumerate(sample):
            if system == "fsm eager" and i >= args.eager_schemas:
                break
            tried += 1
            grammar, _, error = compile_once(backend, schema)
            if grammar is None or isinstance(grammar, InvalidGrammarObject):
                continue
            compiled += 1
            s, d = compare(grammar, documents[i], oracles[i], vocab_size, tokenizer.token_bytes, kinds)
            steps, differing = steps + s, differing + d
        backend.shutdown()
        rows.append(
            f"| {label} | {system} | {compiled}/{tried} | {steps:,} | {differing:,} | {explain(kinds, steps)} |"
        )
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schemas", type=int, default=24)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--eager-schemas", type=int, default=4, help="how many of the sample the eager fsm compiles")
    parser.add_argument("--eager-timeout", type=float, default=10.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    sample = generate_schemas(args.seed, args.schemas)
    rows = [
        row
        for label, tok in [
            ("bundled 4k", Tokenizer.from_pretrained(minisglang.DEFAULT_MODEL_PATH)),
            ("anthropic 65k", anthropic_65k()),
        ]
        for row in bench_vocabulary(label, tok, sample, args)
    ]
    text = "\n".join(
        [
            "# The mask oracle: each system's masks against brute force",
            "",
            f"bench_compile's seeded sample ({len(sample)} schemas, seed {args.seed}); along the tokens of each "
            "schema's valid document (json.dumps layout), every step's mask is compared bit by bit with a "
            "brute-force mask: each token's bytes run one by one through our byte automaton from the current "
            "text (no trie, no shared rows), EOS allowed exactly at a whole match. A system stops on a schema "
            f"where it rejects a token of the document. The eager fsm compiles the first {args.eager_schemas} "
            "schemas only (seconds each).",
            "",
            "Our backends must show 0 differing steps (tests/test_lazy_automaton.py asserts it). The libraries "
            "compile each schema with their own rules: a difference means their grammar is not ours, not "
            "necessarily that a mask is unsound. The last column counts the differing tokens over all steps by "
            "kind: 'allows a token starting with whitespace' is whitespace freedom (xgrammar and llguidance "
            "allow any JSON whitespace between tokens, we allow at most the one space json.dumps writes); "
            "'forbids another token' is a grammar stricter than ours (for instance a library that does not "
            "let a number continue where ours does); 'rejects a token of the valid document' would be "
            "unsound for a valid document of the schema.",
            "",
            "| vocabulary | system | compiled | steps | steps differing | differing tokens, by kind |",
            "|---|---|---:|---:|---:|---|",
            *rows,
            "",
            machine_line(
                f"load average {load_before:.1f} before the run",
                f"xgrammar {version('xgrammar')}",
                f"llguidance {version('llguidance')}",
                f"outlines_core {version('outlines_core')}",
                f"run took {time.perf_counter() - started:.0f} s",
            ),
            "",
        ]
    )
    write_results(text, RESULTS)


if __name__ == "__main__":
    main()
