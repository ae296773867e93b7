"""What the library backends' workarounds cost and what they mend, side by side (chapter 05).

The xgrammar and outlines adapters do not hand a regex to the library as the client wrote it;
each change works around a library fault that strangers' fuzzing found. One run measures,
over the bundled 4k vocabulary:

1. **xgrammar and repeated parts that can match nothing.** Each regex of NULLABLE (a repeat
   of a part that matches the empty string) is masked token by token along a text it matches,
   with xgrammar given the regex as Python spells it (`portable_regex`, counts spelled) and as
   the adapter writes it (`xgrammar_regex`: the part without its empty match): mask ms at the
   first, middle and last token. A walk stops after a mask past `--cap` seconds.
2. **xgrammar's mask against its own matcher.** A seeded sample of random regexes (our own
   generator, `random_regex`: repetitions of classes before multi-byte classes, optional groups,
   empty alternatives): random walks where every token the mask allows is tried on the matcher
   (accept, then roll back). Regexes with a token the mask allowed and the matcher refused (the
   request that samples it aborts), as written (`portable_regex` alone) and as the adapter writes
   them (`xgrammar_regex`).
3. **outlines-core's narrowing check.** The same sample through outlines-core: per regex the
   index's build and our check beside it (`narrower_than_the_regex`, every state within 100,000
   moves compared with our lazy automaton): the check's time against the build's, and how many
   indexes it finds narrower than the regex (refused by name instead of served).

    python benchmarks/bench_library_workarounds.py [--regexes 200] [--seed 5] [--cap 2.0]
"""

from __future__ import annotations

import argparse
import pickle
import random
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path

import torch
import xgrammar as xgr
from tqdm.auto import tqdm

import minisglang
from minisglang.backends.base import get_backend_class
from minisglang.backends.outlines_backend import MAX_CHECKED_TRANSITIONS, narrower_than_the_regex
from minisglang.backends.xgrammar_backend import XGRAMMAR_SPELLED_COUNTS, xgrammar_regex
from minisglang.constrained.bitmask import unpack_bits
from minisglang.constrained.python_regex import portable_regex
from minisglang.constrained.regex_dfa import RegexError
from minisglang.constrained.token_fsm import ConstraintError
from minisglang.tokenizer import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import machine_line, write_results  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "library_workarounds.md"
PAD = 64  # logit columns past the vocabulary, as models pad them

# Regexes that repeat a part which can match the empty string, each with a text it matches
# (the first four are the shapes a stranger's fuzzing found slowing xgrammar's mask).
NULLABLE = [
    ("(?:[a-z]?)+!", "abcdefghij" * 6 + "!"),
    ("(?:[^b]?)+x", "a" * 200 + "x"),
    ("(?:[a-z]?b?)*!", "ab" * 30 + "!"),
    ("(?:.?)*x", "hello world " * 6 + "x"),
    ("(?:\\w{0,3}?)+?!", "abc" * 20 + "!"),
    ("(?:[0-9]*,?)+;", "12,345,6,78" * 5 + ";"),
]

ATOMS = ["a", "b", "x", "é", "中", "Ω", "😀", '"', ":", "\\{", "[a-z]", "[A-Z]", "\\d", "\\w", "\\s", "[^a]", "."]
MULTI_BYTE = ["[\\u0400-\\u04ff]", "[一-鿿]", "\\d", "\\w", "é", "中"]
QUANTIFIERS = ["", "", "?", "*", "+", "{2}", "{1,3}", "{0,2}", "{3,}"]


def random_regex(rng: random.Random, depth: int = 0) -> str:
    """A random regex of our own generator: a sequence of 1-3 items, each an atom, a group
    (an alternation, maybe with an empty branch) or a multi-byte class, maybe quantified; half
    the quantified ones followed by one or two multi-byte classes."""
    items = []
    for _ in range(rng.randint(1, 3)):
        roll = rng.random()
        if roll < 0.2 and depth < 1:
            branches = [random_regex(rng, depth + 1) for _ in range(rng.randint(1, 3))]
            if rng.random() < 0.25:
                branches.insert(rng.randint(0, len(branches)), "")
            item = "(?:" + "|".join(branches) + ")"
        elif roll < 0.45:
            item = rng.choice(MULTI_BYTE)
        else:
            item = rng.choice(ATOMS)
        quantifier = rng.choice(QUANTIFIERS)
        items.append(item + quantifier)
        if quantifier and rng.random() < 0.5:  # (the shape xgrammar's faults were found in)
            items += [rng.choice(MULTI_BYTE) for _ in range(rng.randint(1, 2))]
    return "".join(items)


def mask_ids(matcher: xgr.GrammarMatcher, bitmask: torch.Tensor, width: int) -> list[int]:
    """The ids xgrammar's mask allows now."""
    matcher.fill_next_token_bitmask(bitmask)
    ids: list[int] = unpack_bits(bitmask, width)[0].nonzero().flatten().tolist()
    return ids


def nullable_part(compiler: xgr.GrammarCompiler, tok: Tokenizer, width: int, cap: float) -> list[str]:
    """Part 1's table rows: mask ms along each NULLABLE text, as written and as rewritten."""
    rows = []
    for regex, text in tqdm(NULLABLE, desc="nullable repeats"):
        ids = tok.encode(text)
        cells = []
        for form in (portable_regex(regex, XGRAMMAR_SPELLED_COUNTS), xgrammar_regex(regex)):
            matcher = xgr.GrammarMatcher(compiler.compile_regex(form))
            bitmask = xgr.allocate_token_bitmask(1, width)
            times = []
            for t in ids:
                start = time.perf_counter()
                matcher.fill_next_token_bitmask(bitmask)
                times.append(time.perf_counter() - start)
                if times[-1] > cap or not matcher.accept_token(t):
                    break
            shown = [f"{times[i] * 1000:.2f}" for i in (0, len(times) // 2, -1)]
            cells.append(" / ".join(shown) + ("" if len(times) == len(ids) else f" (stopped at token {len(times)})"))
        rows.append(f"| `{regex}` | {len(ids)} | {cells[0]} | {cells[1]} |")
    return rows


def disagreements(
    compiler: xgr.GrammarCompiler, form: str, tok: Tokenizer, width: int, rng: random.Random, steps: int = 15
) -> int:
    """Tokens xgrammar's mask allowed and its matcher refused, over 3 random walks of `form`."""
    bad = 0
    for _ in range(3):
        matcher = xgr.GrammarMatcher(compiler.compile_regex(form))
        bitmask = xgr.allocate_token_bitmask(1, width)
        for _ in range(steps):
            good = []
            for t in mask_ids(matcher, bitmask, width):
                if t == tok.eos_token_id:
                    continue
                if matcher.accept_token(t):
                    matcher.rollback(1)
                    good.append(t)
                else:
                    bad += 1
            if not good:
                break
            matcher.accept_token(rng.choice(good))
            if matcher.is_terminated():
                break
    return bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--regexes", type=int, default=200, help="random regexes in parts 2 and 3")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds: an outlines-core index build stopped")
    parser.add_argument("--cap", type=float, default=2.0, help="seconds: part 1 stops a walk after a slower mask")
    args = parser.parse_args()
    tok = Tokenizer.from_pretrained(minisglang.DEFAULT_MODEL_PATH)
    width = tok.vocab_size + PAD
    xg = get_backend_class("xgrammar")(tok, width, compile_timeout=300.0)
    outlines = get_backend_class("outlines")(tok, width, compile_timeout=args.timeout)
    started = time.perf_counter()
    try:
        nullable_rows = nullable_part(xg.compiler, tok, width, args.cap)
        rng = random.Random(args.seed)
        regexes = sorted({random_regex(rng) for _ in range(args.regexes)})
        disagreed = {"as written": 0, "as the adapter writes it": 0}
        walked = 0
        builds, checks, narrower, checked, timeouts = [], [], [], 0, 0
        for regex in tqdm(regexes, desc="random regexes"):
            try:
                written, rewritten = portable_regex(regex), xgrammar_regex(regex)
            except (RegexError, ValueError):
                continue  # (an empty language, or a rewrite the adapter refuses by name)
            walked += 1
            for name, form in (("as written", written), ("as the adapter writes it", rewritten)):
                disagreed[name] += disagreements(xg.compiler, form, tok, width, random.Random(regex)) > 0
            start = time.perf_counter()
            try:  # (in the adapter's own child process, stopped at --timeout as a compile is)
                index = pickle.loads(outlines._index(written)[1])
            except ConstraintError:
                timeouts += 1
                continue
            except ValueError:
                continue  # (a regex outlines-core cannot compile: the adapter says so)
            built = time.perf_counter()
            found = narrower_than_the_regex(index, written, tok, width, MAX_CHECKED_TRANSITIONS["regex"])
            builds.append(built - start)
            checks.append(time.perf_counter() - built)
            checked += 1
            if found is not None:
                narrower.append(regex)
    finally:
        xg.shutdown()
        outlines.shutdown()

    def quantiles(values: list[float]) -> str:
        cut = statistics.quantiles(values, n=10)
        return f"{statistics.median(values) * 1000:.1f} / {cut[-1] * 1000:.1f} / {max(values) * 1000:.0f}"

    text = "\n".join(
        [
            "# The libraries' workarounds: what they cost, what they mend",
            "",
            "`benchmarks/bench_library_workarounds.py`: each part measures the library given the regex as "
            "written beside the library given it as our adapter writes it, in one run, over the bundled 4k "
            "vocabulary (logits 64 columns wider).",
            "",
            "## 1. xgrammar: a repeated part that can match nothing",
            "",
            f"Mask ms at the first / middle / last token of a text the regex matches (a walk stops after a mask "
            f"past {args.cap:g} s). As written: `portable_regex` with counts spelled; rewritten: the adapter's "
            "`xgrammar_regex` (each such part without its empty match).",
            "",
            "| regex | tokens | as written (ms) | rewritten (ms) |",
            "|---|---:|---|---|",
            *nullable_rows,
            "",
            "## 2. xgrammar: mask against its own matcher",
            "",
            f"{walked} random regexes of the script's own generator (seed {args.seed}; repetitions of classes "
            "before multi-byte classes, optional groups, empty alternatives), 3 random walks of 15 steps each, "
            "every token the mask allows tried on the matcher. Regexes with a token the mask allowed and the "
            "matcher refused (the request that samples it aborts):",
            "",
            "| xgrammar given | regexes with a disagreement |",
            "|---|---:|",
            *(f"| {name} | {count} of {walked} |" for name, count in disagreed.items()),
            "",
            "## 3. outlines-core: the narrowing check",
            "",
            f"The same regexes, {checked} indexed ({timeouts} index builds stopped at {args.timeout:g} s, as the "
            "adapter stops a compile): outlines-core's `Index` (read back from the adapter's child process) and "
            "our check beside it "
            f"(`narrower_than_the_regex`, at most {MAX_CHECKED_TRANSITIONS['regex']:,} moves), ms p50 / p90 / max:",
            "",
            "| | p50 / p90 / max (ms) |",
            "|---|---|",
            f"| outlines-core's index build | {quantiles(builds)} |",
            f"| the check | {quantiles(checks)} |",
            "",
            f"Indexes narrower than their regex (refused by name, not served): {len(narrower)} of {checked}"
            + (f", e.g. `{min(narrower, key=len)}`." if narrower else "."),
            "",
            machine_line(
                f"xgrammar {version('xgrammar')}",
                f"outlines-core {version('outlines_core')}",
                f"{time.perf_counter() - started:.0f} s",
            ),
        ]
    )
    write_results(text, RESULTS)


if __name__ == "__main__":
    main()
