"""Token index build time: our reference and fast builds against outlines-core's `Index`.

One regex, the JSON schema {name: string of at most 20 characters, age: integer,
hobbies: array of strings} turned into a regex by outlines-core's own
`json_schema.build_regex_from_schema` (so both sides get the identical string), over two
real vocabularies: anthropic's 65k byte-level BPE and Mistral NeMo's 131k tekken.

Measured side by side in one run, each row end to end from the regex string:
* outlines-core: `outlines_core.Index(regex, vocabulary)` (Rust; regex-automata DFA);
* fast: `compile_regex` + `ByteDFA.from_char_dfa` + `build_index_fast`;
* reference: the same with `build_index_reference` (one Python walk per token and state),
  run once (it takes seconds, not minutes, so no cap is needed), and checked == fast;
* lazy first mask: `LazyTokenIndex` + `allowed_token_ids(initial)` from a compiled DFA,
  i.e. what a request waits for before its first constrained step once the regex's DFA
  exists, plus the slowest single state (the first time a request enters a string).
Per-vocabulary preparation (our trie, outlines-core's `Vocabulary`) is timed separately.
Fast and outlines-core are the median of `--repeats` runs after a warm-up, interleaved.

    python benchmarks/bench_token_index.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import outlines_core
from _results import machine_line, write_results  # benchmarks/_results.py (scripts run from benchmarks/)
from outlines_core.json_schema import build_regex_from_schema
from tqdm.auto import tqdm

from minisglang.constrained.regex_dfa import ByteDFA, compile_regex
from minisglang.constrained.token_index import LazyTokenIndex, build_index_fast, build_index_reference, vocab_trie
from minisglang.tokenizer import Tokenizer

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results" / "token_index.md"
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer"},
        "hobbies": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age", "hobbies"],
}
EXAMPLE = '{"name": "Ada 中文", "age": 36, "hobbies": ["chess", "tea 🍵"]}'


def load_vocabularies() -> dict[str, Tokenizer]:
    import mistral_common

    tekken = Path(mistral_common.__file__).parent / "data" / "tekken_240718.json"
    return {
        "anthropic 65k (byte-level BPE)": Tokenizer.from_pretrained(
            REPO / ".cache/tokenizers/anthropic-0.3.11/tokenizer.json"
        ),
        "tekken 131k (Mistral NeMo)": Tokenizer.from_tekken(tekken),
    }


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def ours_end_to_end(regex: str, tok: Tokenizer):
    dfa = ByteDFA.from_char_dfa(compile_regex(regex))
    return build_index_fast(dfa, tok.token_bytes, tok.eos_token_id, progress=False)


def same_as_outlines(ours, theirs: outlines_core.Index, tok: Tokenizer) -> bool:
    """Walk EXAMPLE's tokens through both indexes; the allowed sets must agree at every step."""
    s_ours, s_theirs = ours.initial_state, theirs.get_initial_state()
    for token in tok.encode(EXAMPLE) + [None]:
        a = set(ours.allowed_token_ids(s_ours)) - {tok.eos_token_id}
        b = set(theirs.get_allowed_tokens(s_theirs)) - {tok.eos_token_id}
        if a != b:
            return False
        if token is None:
            return ours.is_final(s_ours) and theirs.is_final_state(s_theirs)
        s_ours, s_theirs = ours.next_state(s_ours, token), theirs.get_next_state(s_theirs, token)
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    regex = build_regex_from_schema(json.dumps(SCHEMA))
    compile_s, dfa = timed(lambda: ByteDFA.from_char_dfa(compile_regex(regex)))
    rows = []
    for name, tok in tqdm(load_vocabularies().items(), desc="vocabularies"):
        vocab, eos = tok.token_bytes, tok.eos_token_id
        trie_s, _ = timed(lambda: vocab_trie(vocab))
        groups: dict[bytes, list[int]] = {}
        for i, b in enumerate(vocab):
            if b is not None and i != eos:
                groups.setdefault(b, []).append(i)
        oc_vocab_s, oc_vocab = timed(lambda: outlines_core.Vocabulary(eos, groups))

        ours_end_to_end(regex, tok)  # warm-up both
        outlines_core.Index(regex, oc_vocab)
        fast_times, oc_times = [], []
        for _ in range(args.repeats):  # interleaved, so machine noise hits both alike
            t, index = timed(lambda: ours_end_to_end(regex, tok))
            fast_times.append(t)
            t, oc_index = timed(lambda: outlines_core.Index(regex, oc_vocab))
            oc_times.append(t)
        fast_s, oc_s = statistics.median(fast_times), statistics.median(oc_times)

        first_times = []
        for _ in range(args.repeats):
            t, _ = timed(lambda: LazyTokenIndex(dfa, vocab, eos).allowed_token_ids(dfa.initial))
            first_times.append(t)
        lazy = LazyTokenIndex(dfa, vocab, eos)
        worst_s = max(timed(lambda s=s: lazy.allowed_token_ids(s))[0] for s in index.state_to_tokens)

        ref_s, reference = timed(lambda: build_index_reference(dfa, vocab, eos, progress=False))
        ref_full_s = compile_s + ref_s
        rows.append(
            {
                "vocab": name,
                "size": len(vocab),
                "states": index.num_states,
                "transitions": sum(len(t) for t in index.state_to_tokens.values()),
                "trie_s": trie_s,
                "oc_vocab_s": oc_vocab_s,
                "fast_s": fast_s,
                "oc_s": oc_s,
                "ref_s": ref_full_s,
                "ref_equal": reference == index,
                "lazy_first_ms": 1000 * statistics.median(first_times),
                "lazy_worst_ms": 1000 * worst_s,
                "agree": same_as_outlines(index, oc_index, tok),
            }
        )
        r = rows[-1]
        print(
            f"{name}: fast {fast_s:.3f}s, outlines-core {oc_s:.3f}s, ratio {fast_s / oc_s:.2f}; "
            f"reference {ref_full_s:.1f}s (== fast: {r['ref_equal']}); lazy first mask {r['lazy_first_ms']:.1f} ms"
        )

    lines = [
        "# Token index build time: minisglang vs outlines-core",
        "",
        f"Regex (from outlines-core's `build_regex_from_schema` for {json.dumps(SCHEMA)}):",
        "",
        f"    {regex}",
        "",
        f"Our regex -> byte DFA compile (interegular): {compile_s:.3f} s, {dfa.num_char_states} character "
        f"states, {dfa.num_states} byte states. Fast, reference and outlines-core rows are end to "
        "end from the regex string; fast and outlines-core are medians of "
        f"{args.repeats} interleaved runs.",
        "",
        "| vocabulary | ids | reachable states | transitions | outlines-core Index (s) | fast (s) | fast / outlines-core | reference (s) | reference / fast | reference == fast | lazy first mask (ms) | lazy slowest state (ms) | same allowed sets on an example |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['vocab']} | {r['size']} | {r['states']} | {r['transitions']} | {r['oc_s']:.3f} | {r['fast_s']:.3f} | "
            f"**{r['fast_s'] / r['oc_s']:.2f}** | {r['ref_s']:.1f} | {r['ref_s'] / r['fast_s']:.0f}x | "
            f"{'yes' if r['ref_equal'] else 'NO'} | "
            f"{r['lazy_first_ms']:.1f} | {r['lazy_worst_ms']:.1f} | {'yes' if r['agree'] else 'NO'} |"
        )
    lines += ["", "One-time preparation per vocabulary (not in the rows above):", ""]
    for r in rows:
        lines.append(
            f"- {r['vocab']}: our vocabulary trie {r['trie_s']:.2f} s; outlines-core `Vocabulary` {r['oc_vocab_s']:.2f} s"
        )
    lines += [
        "",
        "Targets: fast / outlines-core <= 1.0; lazy first mask <= 20 ms. 'lazy first mask' "
        "starts from the compiled DFA (add the compile time above for a brand-new regex).",
        "",
        machine_line(f"numpy {np.__version__}", f"outlines-core {outlines_version()}"),
    ]
    write_results("\n".join(lines) + "\n", RESULTS)


def outlines_version() -> str:
    from importlib.metadata import version

    return version("outlines-core")


if __name__ == "__main__":
    main()
