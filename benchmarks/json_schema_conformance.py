"""The official JSON-Schema-Test-Suite (draft 2020-12) against JSON Schema backends.

Each test case is a schema, a JSON value and whether the value is valid. A backend turns
the schema into an `accepts(text) -> bool` (or raises: a compile error, e.g. an
unsupported keyword); the value is serialised with `json.dumps` (default: `", "`, `": "`,
non-ASCII as `\\uXXXX`) and compactly (`","`, `":"`, raw non-ASCII), and each
serialisation's verdict is compared with `valid`:

- pass: accepted and valid, or rejected and invalid;
- false positive: accepted but invalid (a constrained generator could emit it: a bug);
- false negative: rejected but valid (a generator never writes that text: allowed).

The libraries run twice: with their own defaults (what each library does), and through
our adapters (what `--grammar-backend` serves: the adapter refuses a schema using a keyword
its library would not enforce, and asks for json.dumps' layout). An adapter's refusals are
counted apart ("refused"); the target is zero false positives on every adapter row, on
the suite and on the MaskBench sample (tests/data/maskbench).

Another backend plugs in through `run_suite(accepts_factory)`. Run as a script to
measure our compiler and write benchmarks/results/json_schema_conformance.md:

    python benchmarks/json_schema_conformance.py
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "json_schema_conformance.md"
# The suite is vendored under tests/data (see its SOURCE.md for the upstream commit);
# MINISGLANG_JSON_SCHEMA_SUITE may point at another checkout to run a different version.
SUITE_DIR = Path(os.environ.get("MINISGLANG_JSON_SCHEMA_SUITE", REPO / "tests" / "data" / "json-schema-test-suite"))
SERIALISATIONS: dict[str, Callable[[object], str]] = {
    "json.dumps": json.dumps,
    "compact": lambda data: json.dumps(data, separators=(",", ":"), ensure_ascii=False),
}


@dataclass
class SuiteCounts:
    """What one backend did on the suite; `outcomes[serialisation]` counts the compiled cases."""

    cases: int = 0
    compile_errors: int = 0  # test cases whose schema did not compile (refusals included)
    refused: int = 0  # of those, refused by an adapter: its library would ignore a keyword
    outcomes: dict[str, Counter] = field(default_factory=lambda: {s: Counter() for s in SERIALISATIONS})
    per_file: dict[str, Counter] = field(default_factory=dict)  # file -> cases/compiled/pass/fp/fn (json.dumps)
    false_positives: list[str] = field(default_factory=list)  # "file: schema / test (serialisation)"
    error_reasons: Counter = field(default_factory=Counter)  # short reason -> test cases


def load_suite(suite_dir: Path = SUITE_DIR) -> list[tuple[str, dict]]:
    """(file name, test group) for every group in tests/draft2020-12/*.json (not optional/)."""
    folder = suite_dir / "draft2020-12"
    files = sorted(folder.glob("*.json"))
    if not files:
        raise FileNotFoundError(
            f"no JSON-Schema-Test-Suite files in {folder} (vendored under "
            "tests/data/json-schema-test-suite, or MINISGLANG_JSON_SCHEMA_SUITE)"
        )
    return [(f.name, group) for f in files for group in json.loads(f.read_text(encoding="utf-8"))]


def error_reason(error: Exception) -> str:
    """A short label for a compile error: the first quoted keyword in its message, or its type."""
    quoted = re.search(r"'([^']+)'", str(error))
    return f"{type(error).__name__}: {quoted.group(1) if quoted else str(error)[:40]}"


def is_refusal(error: Exception) -> bool:
    """True for an adapter's refusal of a keyword its library ignores (ignored_keywords.IgnoredKeywordError)."""
    return type(error).__name__ == "IgnoredKeywordError"


def judge(accepts: Callable[[str], bool], test: dict) -> dict[str, str]:
    """serialisation -> "pass" / "false_positive" / "false_negative" for one test case
    ({"data": value, "valid": bool}) written each way of SERIALISATIONS."""
    outcomes = {}
    for name, serialise in SERIALISATIONS.items():
        accepted = accepts(serialise(test["data"]))
        outcomes[name] = "pass" if accepted == test["valid"] else "false_positive" if accepted else "false_negative"
    return outcomes


def run_suite(
    accepts_factory: Callable[[object], Callable[[str], bool]], suite_dir: Path = SUITE_DIR, progress: bool = True
) -> SuiteCounts:
    """Run every test case; `accepts_factory(schema)` compiles once per schema (or raises)."""
    counts = SuiteCounts()
    for file_name, group in tqdm(load_suite(suite_dir), desc="schemas", disable=not progress):
        per_file = counts.per_file.setdefault(file_name, Counter())
        tests = group["tests"]
        counts.cases += len(tests)
        per_file["cases"] += len(tests)
        try:
            accepts = accepts_factory(group["schema"])
        except Exception as e:  # any failure to compile is a compile error, counted per case
            counts.compile_errors += len(tests)
            counts.refused += len(tests) if is_refusal(e) else 0
            counts.error_reasons[error_reason(e)] += len(tests)
            continue
        per_file["compiled"] += len(tests)
        for test in tests:
            for name, outcome in judge(accepts, test).items():
                counts.outcomes[name][outcome] += 1
                if name == "json.dumps":
                    per_file[outcome] += 1
                if outcome == "false_positive":
                    counts.false_positives.append(
                        f"{file_name}: {group['description']} / {test['description']} ({name})"
                    )
    return counts


def minisglang_accepts(schema) -> Callable[[str], bool]:
    """Our backend: JSON Schema -> regex -> character DFA."""
    from minisglang.constrained.json_schema import build_regex_from_schema
    from minisglang.constrained.regex_dfa import compile_regex

    return compile_regex(build_regex_from_schema(schema)).accepts


def minisglang_lazy_accepts(schema) -> Callable[[str], bool]:
    """Our fsm backend's default: JSON Schema -> regex for the lazy automaton (automaton="lazy",
    as the backend asks: private groups for intersections, shared sub-expressions, ...) ->
    lazy byte DFA (states made on first visit)."""
    from minisglang.constrained.json_schema import build_regex_from_schema
    from minisglang.constrained.lazy_byte_dfa import LazyByteDFA

    dfa = LazyByteDFA.from_regex(build_regex_from_schema(schema, automaton="lazy"), members=True)
    return lambda text: dfa.matches(text.encode("utf-8"))


@functools.lru_cache(maxsize=1)
def bundled_tokenizer():
    """The bundled model's tokenizer: xgrammar and llguidance compile against a vocabulary."""
    import minisglang
    from minisglang.tokenizer import Tokenizer

    return Tokenizer.from_pretrained(minisglang.DEFAULT_MODEL_PATH)


@functools.lru_cache(maxsize=1)
def xgrammar_compiler():
    """One xgrammar GrammarCompiler over the bundled vocabulary (built as our xgrammar backend does)."""
    import xgrammar as xgr

    tokenizer = bundled_tokenizer()
    vocab = [b"" if data is None else data for data in tokenizer.token_bytes]
    info = xgr.TokenizerInfo(
        vocab, xgr.VocabType.RAW, vocab_size=tokenizer.vocab_size, stop_token_ids=[tokenizer.eos_token_id]
    )
    return xgr.GrammarCompiler(info, max_threads=2, cache_enabled=False)


def xgrammar_accepts(schema) -> Callable[[str], bool]:
    """xgrammar with its defaults (any whitespace, strict mode: no unlisted properties/items)."""
    import xgrammar as xgr

    compiled = xgrammar_compiler().compile_json_schema(json.dumps(schema))
    eos = bundled_tokenizer().eos_token_id

    def accepts(text: str) -> bool:
        # xgrammar calls a match complete only once the stop token is accepted after it.
        matcher = xgr.GrammarMatcher(compiled)
        return matcher.accept_string(text) and matcher.accept_token(eos) and matcher.is_terminated()

    return accepts


def outlines_core_accepts(schema) -> Callable[[str], bool]:
    """outlines-core's schema -> regex (default whitespace `[ ]?`), matched by Python's `re`."""
    from outlines_core.json_schema import build_regex_from_schema

    # A regex in Rust syntax that Python's `re` cannot read raises re.error: a compile error.
    pattern = re.compile(build_regex_from_schema(json.dumps(schema)))
    return lambda text: pattern.fullmatch(text) is not None


@functools.lru_cache(maxsize=1)
def llguidance_tokenizer():
    """llguidance's token trie over the bundled vocabulary (built as our llguidance backend does)."""
    import llguidance as llg

    from minisglang.backends.llguidance_backend import _TokenizerSource

    tokenizer = bundled_tokenizer()
    return llg.LLTokenizer(llg.TokenizerWrapper(_TokenizerSource(tokenizer, tokenizer.vocab_size)))


def llguidance_accepts(schema) -> Callable[[str], bool]:
    """llguidance with its defaults (flexible whitespace); the text is fed as the bundled tokens."""
    import llguidance as llg

    grammar = llg.LLMatcher.grammar_from_json_schema(json.dumps(schema))
    start = llg.LLMatcher(llguidance_tokenizer(), grammar, log_level=0, limits=llg.LLParserLimits(verbose_errors=False))
    if start.is_error():  # an unsupported or invalid schema leaves the matcher in an error state
        raise ValueError(start.get_error())
    tokenizer = bundled_tokenizer()

    def accepts(text: str) -> bool:
        ids = tokenizer.encode(text)
        if tokenizer.decode_bytes(ids, skip_special_tokens=False) != text.encode("utf-8"):
            raise ValueError(f"the bundled tokenizer does not spell {text!r} exactly")
        matcher = start.deep_copy()
        return matcher.consume_tokens(ids) and matcher.is_accepting()

    return accepts


@functools.cache
def adapter(name: str):
    """Our grammar backend `name` over the bundled vocabulary (what `--grammar-backend name` serves)."""
    from minisglang.backends.base import get_backend_class

    tokenizer = bundled_tokenizer()
    return get_backend_class(name)(tokenizer, tokenizer.vocab_size, threads=1)


def token_paths(text: str) -> list[list[int]]:
    """Two ways to write `text` in tokens: byte by byte (the bundled vocabulary has every
    byte), and the tokenizer's own encoding when it spells the text exactly."""
    tokenizer = bundled_tokenizer()
    byte_ids = {data: i for i, data in enumerate(tokenizer.token_bytes) if data is not None and len(data) == 1}
    data = text.encode("utf-8")
    paths = [[byte_ids[data[i : i + 1]] for i in range(len(data))]]
    ids = tokenizer.encode(text)
    if tokenizer.decode_bytes(ids, skip_special_tokens=False) == data:
        paths.append(ids)
    return paths


def adapter_accepts(name: str) -> Callable[[object], Callable[[str], bool]]:
    """A factory for our `name` backend: compile as a request would (refusals raise), and
    accept a text if one of its token paths is taken and then EOS (a generator could write it)."""
    from minisglang.backends.base import GrammarError

    def factory(schema) -> Callable[[str], bool]:
        grammar = adapter(name).compile("json_schema", json.dumps(schema))

        def takes(ids: list[int]) -> bool:
            matcher = grammar.copy()
            try:
                for token_id in ids + [bundled_tokenizer().eos_token_id]:
                    matcher.accept_token(token_id)
            except GrammarError:
                return False
            return True

        return lambda text: any(takes(ids) for ids in token_paths(text))

    return factory


BACKENDS: dict[str, Callable[[object], Callable[[str], bool]]] = {
    "minisglang fsm (lazy, the default)": minisglang_lazy_accepts,
    "minisglang eager (regex -> DFA)": minisglang_accepts,
    "xgrammar 0.2.9": xgrammar_accepts,
    "outlines-core 0.2.14 (regex -> re)": outlines_core_accepts,
    "llguidance 1.9.1": llguidance_accepts,
    "backend xgrammar (our adapter)": adapter_accepts("xgrammar"),
    "backend outlines (our adapter)": adapter_accepts("outlines"),
    "backend llguidance (our adapter)": adapter_accepts("llguidance"),
}
ADAPTERS = [name for name in BACKENDS if name.startswith("backend ")]


def results_table(results: dict[str, tuple[SuiteCounts, float]]) -> str:
    """The markdown results: one row per backend, then our per-file breakdown."""
    lines = [
        "# JSON-Schema-Test-Suite (draft 2020-12) conformance",
        "",
        "Each test case's value is serialised with `json.dumps` (default separators, ASCII escapes) "
        'and compactly (`separators=(",", ":")`, raw non-ASCII). A false positive (accepted but '
        "invalid) would let a generator emit invalid output; a false negative (rejected but valid) "
        "only narrows what it may write. Compile errors are unsupported keywords or schemas. "
        "Libraries run with their defaults: xgrammar any whitespace and strict mode (unlisted "
        "properties/items refused), llguidance flexible whitespace, outlines-core `[ ]?`; "
        "xgrammar and llguidance compile against the bundled tokenizer's vocabulary and judge "
        "the whole text (xgrammar: `accept_string` + stop token; llguidance: the text's tokens "
        "+ `is_accepting`). The `backend ...` rows are what `--grammar-backend` serves: our adapter "
        "compiles the schema as a request would, refusing keywords its library ignores (counted in "
        "`refused`, part of `compile error`), with json.dumps' layout (so compact text is mostly rejected), "
        "and a text is accepted if its bytes or its tokens are taken and then EOS.",
        "",
        "| backend | cases | compile error | refused | pass | false positive | false negative "
        "| pass (compact) | FP (compact) | FN (compact) | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, (c, seconds) in results.items():
        d, k = c.outcomes["json.dumps"], c.outcomes["compact"]
        lines.append(
            f"| {name} | {c.cases} | {c.compile_errors} | {c.refused} | {d['pass']} | {d['false_positive']} "
            f"| {d['false_negative']} | {k['pass']} | {k['false_positive']} | {k['false_negative']} "
            f"| {seconds:.1f} |"
        )
    for name, (c, _) in results.items():
        lines += [
            "",
            f"## {name}: per file (json.dumps)",
            "",
            "| file | cases | compiled | pass | false positive | false negative |",
            "|---|---|---|---|---|---|",
        ]
        for file_name, f in sorted(c.per_file.items()):
            lines.append(
                f"| {file_name} | {f['cases']} | {f['compiled']} | {f['pass']} "
                f"| {f['false_positive']} | {f['false_negative']} |"
            )
        lines += ["", f"## {name}: compile errors by reason", "", "| reason | cases |", "|---|---|"]
        lines += [f"| {reason} | {n} |" for reason, n in c.error_reasons.most_common()]
    return "\n".join(lines) + "\n"


# One adapter's MaskBench run goes in a child process with this much time and memory: a
# schema whose automaton explodes (outlines-core built 7 GB for one) must not take the machine.
MASKBENCH_LIMIT_S, MASKBENCH_LIMIT_BYTES = 900, 4 << 30


def _maskbench_child(name: str, results) -> None:
    import resource

    from json_schema_maskbench import load_sample, run_sample

    resource.setrlimit(resource.RLIMIT_AS, (MASKBENCH_LIMIT_BYTES, MASKBENCH_LIMIT_BYTES))
    counts = run_sample(BACKENDS[name], load_sample())
    refused = sum(n for reason, n in counts.reasons.items() if reason.startswith("IgnoredKeywordError"))
    others = [(r, n) for r, n in counts.reasons.most_common() if not r.startswith("IgnoredKeywordError")]
    results.put((counts.files, refused, counts.compiled, counts.false_positives, counts.files_with_fp, others[:3]))


def maskbench_table() -> str:
    """The MaskBench sample through each adapter: files, refused, compiled, false positives."""
    import multiprocessing

    from json_schema_maskbench import load_sample

    sample = load_sample()
    lines = [
        "",
        "## The MaskBench sample through the adapters",
        "",
        f"tests/data/maskbench: {len(sample)} real-world-like schemas with labelled instances "
        "(benchmarks/results/maskbench.md runs the libraries with their defaults). A refused file is "
        "one whose schema uses a keyword the library would ignore. Each adapter runs in a child process "
        f"limited to {MASKBENCH_LIMIT_S} s and {MASKBENCH_LIMIT_BYTES >> 30} GiB.",
        "",
        "| backend | files | refused | compiled | FP instances | files with FP | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    # A fresh interpreter, not a fork: a fork of this process (whose suite run used the same
    # adapters) inherited their kept children and its compiles all failed ("No child processes",
    # "can only test a child process"): the table said 0 compiled for xgrammar and outlines.
    context = multiprocessing.get_context("spawn")
    for name in ADAPTERS:
        start = time.perf_counter()
        results = context.Queue()
        child = context.Process(target=_maskbench_child, args=(name, results))
        child.start()
        child.join(MASKBENCH_LIMIT_S)
        if child.is_alive():
            child.kill()
        seconds = time.perf_counter() - start
        if results.empty():
            lines.append(f"| {name} | {len(sample)} | not finished (time or memory limit) | | | | {seconds:.1f} |")
            print(f"{name} on MaskBench: not finished within the limits")
            continue
        files, refused, compiled, fp, fp_files, others = results.get()
        lines.append(f"| {name} | {files} | {refused} | {compiled} | {fp} | {len(fp_files)} | {seconds:.1f} |")
        # (the other reasons said aloud: a run whose compiles all failed once wrote "0 compiled" unseen)
        print(
            f"{name} on MaskBench: refused {refused}, compiled {compiled}/{files}, FP {fp} in {fp_files}; "
            f"other errors, most common: {others}"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # --help, nothing else
    load_before = os.getloadavg()[0]
    results = {}
    for name, factory in BACKENDS.items():
        start = time.perf_counter()
        counts = run_suite(factory)
        results[name] = (counts, time.perf_counter() - start)
        d = counts.outcomes["json.dumps"]
        compiled = counts.cases - counts.compile_errors
        print(
            f"{name}: {compiled}/{counts.cases} cases compiled ({compiled / counts.cases:.0%}); "
            f"pass {d['pass']}, false positives {d['false_positive']}, false negatives {d['false_negative']} "
            f"({d['pass'] / max(compiled, 1):.0%} of compiled pass)"
        )
        for fp in counts.false_positives:
            print("  FALSE POSITIVE:", fp)
    from _results import machine_line, write_results  # here: the tests load this file without benchmarks/ on the path

    write_results(
        results_table(results)
        + maskbench_table()
        + "\n"
        + machine_line(f"load average {load_before:.1f} before the runs")
        + "\n",
        RESULTS,
    )


if __name__ == "__main__":
    main()
