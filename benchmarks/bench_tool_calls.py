"""Tool calls on held-out requests: validity and correctness, unconstrained vs structural tags, per backend.

N held-out tool requests (seeded: scripts/make_corpus.py's `heldout_tool_prompts`, kept to
those whose reference answer is a call; 1-5 tools listed, the arguments copyable from the
request), greedy, through the Engine of stage s6. For each grammar backend (fsm, xgrammar,
llguidance) and tool_choice:

- unconstrained: the tools in the prompt, no constraint; whatever the model writes is
  parsed for calls (the same parser as the server's). The backend plays no part here, so
  this row is run once;
- "auto": the structural tag of the tools (free text, or calls under each tool's schema);
- "required": the same tag with at_least_one (no end of output before a call).

Per row: outputs with a call; of the calls, those whose arguments are JSON and those that
validate against the tool's parameters (jsonschema is the oracle); requests whose calls
name the right tool(s), and whose arguments are exactly right (as JSON values); outputs cut
by max_new_tokens (and of those, cut inside a call); and the structural tag's compile time
per request (one fresh compile on the backend, timed before generating). The prompts, params and the reading of calls are
scripts/eval_extraction.py's (`tool_prompt`, `tool_params`, `read_calls`).

Writes benchmarks/results/tool_calls.md (`--output`). `--model DIR` measures a checkpoint
before it is bundled; `--examples/--seed` name the corpus it was trained on (its user turns
are never among the held-out requests).

    python benchmarks/bench_tool_calls.py [--n 80] [--model DIR] [--backends fsm xgrammar llguidance]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema

import minisglang
from minisglang.constrained.structural_tag import parse_structural_tag

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import eval_extraction  # noqa: E402  (it imports make_corpus from scripts/ too)
import make_corpus  # noqa: E402
from _results import machine_line, model_checksum, write_results  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "tool_calls.md"
BACKENDS = ["fsm", "xgrammar", "llguidance"]
CHOICES = [None, "auto", "required"]  # None: unconstrained, calls parsed from whatever is written


def call_requests(n: int, train: list[dict], seed: int) -> list[dict]:
    """The first ``n`` held-out tool conversations whose reference answer is a call."""
    pool = make_corpus.heldout_tool_prompts(4 * n + 8, train, seed)  # about 2/3 of them want a call
    wanted = [ex for ex in pool if ex["task"] in eval_extraction.CALL_TASKS][:n]
    if len(wanted) < n:
        raise RuntimeError(f"only {len(wanted)} of {len(pool)} held-out tool conversations want a call; asked for {n}")
    return wanted


@dataclass
class Row:
    """The counts of one (backend, tool_choice) run over the requests."""

    backend: str
    choice: str
    requests: int = 0
    with_call: int = 0
    calls: int = 0
    json_ok: int = 0
    valid: int = 0
    right_tool: int = 0
    exact: int = 0
    cut: int = 0  # outputs ended by max_new_tokens ...
    cut_in_call: int = 0  # ... inside a call's arguments (so they are not JSON)
    compile_ms: list[float] = field(default_factory=list)

    def add(self, example: dict, text: str, finish: dict | None) -> None:
        """Score one output against its example's reference calls."""
        schemas = {tool.name: tool.parameters for tool in eval_extraction.function_tools(example)}
        got, want = eval_extraction.read_calls(example, text), eval_extraction.expected_calls(example)
        self.requests += 1
        self.with_call += bool(got)
        self.calls += len(got)
        for name, arguments in got:
            self.json_ok += arguments is not None
            self.valid += arguments is not None and jsonschema.Draft202012Validator(schemas[name]).is_valid(arguments)
        self.right_tool += [n for n, _ in got] == [n for n, _ in want]
        self.exact += got == want
        cut = bool(finish) and finish.get("type") == "length"
        self.cut += cut
        self.cut_in_call += cut and bool(got) and got[-1][1] is None

    def cells(self) -> list[str]:
        def of(k: int, n: int) -> str:
            return f"{k}/{n} ({k / n:.0%})" if n else "0/0"

        compile_ms = (
            f"{statistics.median(self.compile_ms):.0f} ({max(self.compile_ms):.0f})" if self.compile_ms else "-"
        )
        return [
            self.backend,
            self.choice,
            of(self.with_call, self.requests),
            str(self.calls),
            of(self.json_ok, self.calls),
            of(self.valid, self.calls),
            of(self.right_tool, self.requests),
            of(self.exact, self.requests),
            f"{of(self.cut, self.requests)} ({self.cut_in_call})",
            compile_ms,
        ]


def compile_ms(backend, params: dict) -> float:
    """One fresh compile of the request's structural tag on ``backend`` (not its cache), in ms."""
    start = time.perf_counter()
    backend.compile_structural_tag(parse_structural_tag(params["structural_tag"]))
    return (time.perf_counter() - start) * 1000


def measure(engine, backend_name: str, examples: list[dict], choice: str | None, max_new_tokens: int) -> Row:
    row = Row(backend_name if choice else "any (no constraint)", choice or "unconstrained")
    prompts = [eval_extraction.tool_prompt(engine.tokenizer, ex) for ex in examples]
    params = [eval_extraction.tool_params(ex, choice, max_new_tokens) for ex in examples]
    if choice:
        row.compile_ms = [compile_ms(engine.stage.backend, p) for p in params]
    for ex, out in zip(examples, engine.generate(prompts, params)):
        finish = out["meta_info"]["finish_reason"]
        if finish and finish.get("type") == "abort":  # a failure of the run, never a request without a call
            raise RuntimeError(f"{row.backend} {row.choice}: a request was aborted: {finish.get('message')}")
        row.add(ex, out["text"], finish)
    print(" | ".join(row.cells()), flush=True)
    return row


def run(
    model: Path,
    n: int,
    backends: list[str],
    corpus_examples: int,
    corpus_seed: int,
    heldout_seed: int,
    max_new_tokens: int,
) -> tuple[list[Row], list[dict]]:
    """Every row: the unconstrained one (on the first backend's engine), then auto and
    required per backend; and the requests measured."""
    from minisglang.engine import Engine

    train = make_corpus.make_corpus(corpus_examples, corpus_seed)
    examples = call_requests(n, train, heldout_seed)
    rows = []
    for i, name in enumerate(backends):
        # Every request's tag is a distinct compile, all submitted at once: let them all wait.
        engine = Engine(
            model_path=str(model),
            stage="s6-function-calling",
            grammar_backend=name,
            max_pending_compiles=max(64, len(examples)),
        )
        try:
            for choice in CHOICES:
                if choice is not None or i == 0:
                    rows.append(measure(engine, name, examples, choice, max_new_tokens))
        finally:
            engine.shutdown()
    return rows, examples


def report(rows: list[Row], examples: list[dict], args, model: Path, load_before: float, seconds: float) -> str:
    from importlib.metadata import version

    parallel = sum(ex["task"] == "tool_parallel" for ex in examples)
    header = [
        "backend",
        "tool_choice",
        "with a call",
        "calls",
        "arguments are JSON",
        "arguments validate",
        "right tool",
        "arguments exactly right",
        "cut by max_new_tokens (in a call)",
        "compile ms, median (max)",
    ]
    return "\n".join(
        [
            "# Tool calls on held-out requests: unconstrained vs structural tags",
            "",
            f"{len(examples)} held-out tool requests ({parallel} of them want two calls; `heldout_tool_prompts` seed "
            f"{args.heldout_seed} of scripts/make_corpus.py, excluding the user turns of its {args.examples}-example "
            f"corpus, seed {args.seed}), each listing 1-5 tools whose arguments can be copied from the request. "
            f"Greedy, at most {args.max_new_tokens} new tokens, stage s6. 'unconstrained': the tools in the prompt, "
            "no constraint, calls parsed from whatever the model wrote (the backend plays no part, so it ran once); "
            "'auto' and 'required': the tools' structural tag (minisglang/function_call.py). 'with a call', 'right "
            "tool' and 'arguments exactly right' count requests (the called tools, and their arguments as JSON "
            "values, equal the reference's, in order); 'arguments are JSON' and 'arguments validate' count calls "
            "(jsonschema against the tool's parameters). 'cut by max_new_tokens' counts outputs, and in brackets those "
            "cut inside a call's arguments (the only way a constrained call can fail to validate). 'compile ms' is one fresh compile of the request's tag on "
            "the backend before generating (median and max over the requests). "
            "benchmarks/bench_tool_calls.py.",
            "",
            "| " + " | ".join(header) + " |",
            "|---|---|" + "---:|" * (len(header) - 2),
            *("| " + " | ".join(r.cells()) + " |" for r in rows),
            "",
            f"Model: `{model.name}` (safetensors sha256 {model_checksum(model)}).",
            machine_line(
                f"load average {load_before:.1f} before the run",
                f"xgrammar {version('xgrammar')}",
                f"llguidance {version('llguidance')}",
                f"run took {seconds:.0f} s",
            ),
            "",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model",
        type=Path,
        default=Path(minisglang.DEFAULT_MODEL_PATH),
        help="the checkpoint to measure (default: the bundled model)",
    )
    ap.add_argument("--n", type=int, default=80, help="held-out tool requests that want a call")
    ap.add_argument("--backends", nargs="+", default=BACKENDS, choices=BACKENDS)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument(
        "--examples",
        type=int,
        default=20000,
        help="size of the corpus whose user turns are excluded (as the model card and results/extraction_accuracy.md)",
    )
    ap.add_argument("--seed", type=int, default=1, help="seed of that corpus")
    ap.add_argument("--heldout-seed", type=int, default=12345, help="seed of the held-out requests")
    ap.add_argument("--output", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error(f"--n must be at least 1, got {args.n}")
    load_before, started = os.getloadavg()[0], time.perf_counter()
    rows, examples = run(
        args.model, args.n, args.backends, args.examples, args.seed, args.heldout_seed, args.max_new_tokens
    )
    write_results(report(rows, examples, args, args.model, load_before, time.perf_counter() - started), args.output)


if __name__ == "__main__":
    main()
