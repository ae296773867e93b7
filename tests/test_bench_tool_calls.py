"""benchmarks/bench_tool_calls.py: its scoring against hand-written outputs (the reference
call, a wrong tool, arguments that break the schema, a call cut short), and a tiny run end
to end (2 requests, our fsm backend) whose results file has consistent counts: constrained
calls always validate unless cut by max_new_tokens, and "required" always calls."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import jsonschema
import pytest

from minisglang.function_call import format_call

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))  # the script imports benchmarks/_results.py as a top-level module
    import bench_tool_calls

    return bench_tool_calls


@pytest.fixture(scope="module")
def requests(bench):
    return bench.call_requests(6, bench.make_corpus.make_corpus(400, 0), seed=12345)


def _call_text(name: str, arguments: dict) -> str:
    return format_call(name, json.dumps(arguments, ensure_ascii=False))


def test_held_out_requests_want_calls_whose_arguments_validate(bench, requests):
    assert len(requests) == 6
    for ex in requests:
        assert ex["task"] in ("tool_call", "tool_parallel")
        schemas = {t["function"]["name"]: t["function"]["parameters"] for t in ex["tools"]}
        for call in ex["tool_calls"]:
            jsonschema.validate(call["function"]["arguments"], schemas[call["function"]["name"]])


def test_scoring_against_hand_written_outputs(bench, requests):
    ex = next(e for e in requests if e["task"] == "tool_call" and len(e["tools"]) >= 2)
    ((name, arguments),) = bench.eval_extraction.expected_calls(ex)
    schema = next(t["function"]["parameters"] for t in ex["tools"] if t["function"]["name"] == name)
    wrong_types = {k: [] for k in arguments}  # every value a list: JSON, but not under the schema
    assert not jsonschema.Draft202012Validator(schema).is_valid(wrong_types)
    other = next(t["function"]["name"] for t in ex["tools"] if t["function"]["name"] != name)

    row = bench.Row("fsm", "auto")
    row.add(ex, "Sure. " + _call_text(name, arguments), {"type": "stop"})  # the reference call
    row.add(ex, _call_text(name, wrong_types), {"type": "stop"})  # right tool, breaks the schema
    row.add(ex, _call_text(other, {}), {"type": "stop"})  # wrong tool, missing its required
    row.add(ex, "no call at all", {"type": "stop"})
    row.add(ex, _call_text(name, arguments)[: -len("}</tool_call>") - 3], {"type": "length"})  # cut inside
    assert (row.requests, row.with_call, row.calls, row.json_ok, row.valid) == (5, 4, 4, 3, 1)
    assert (row.right_tool, row.exact, row.cut, row.cut_in_call) == (3, 1, 1, 1)


def _cell(text: str) -> tuple[int, int]:
    k, n = re.match(r"(\d+)/(\d+)", text).groups()
    return int(k), int(n)


def test_a_tiny_run_end_to_end(bench, tmp_path, capsys):
    out = tmp_path / "tool_calls.md"
    bench.main(["--n", "2", "--backends", "fsm", "--examples", "400", "--max-new-tokens", "48", "--output", str(out)])
    text = out.read_text(encoding="utf-8")
    assert "Model: `tiny-json-llama` (safetensors sha256 " in text and "load average" in text
    rows = [
        [c.strip() for c in line.strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("| ") and not line.startswith("| backend")
    ]
    assert [r[:2] for r in rows] == [["any (no constraint)", "unconstrained"], ["fsm", "auto"], ["fsm", "required"]]
    for _backend, choice, with_call, calls, json_ok, valid, right, exact, cut, compile_ms in rows:
        requests = _cell(with_call)[1]
        assert requests == 2
        n_calls, in_call = int(calls), int(re.search(r"\((\d+)\)$", cut).group(1))
        assert _cell(json_ok)[1] == _cell(valid)[1] == n_calls
        assert _cell(valid)[0] <= _cell(json_ok)[0] and _cell(exact)[0] <= _cell(right)[0] <= requests
        if choice != "unconstrained":
            # Under the tag a call's arguments are always valid, unless max_new_tokens cut them.
            assert _cell(valid)[0] == n_calls - in_call
            assert re.fullmatch(r"\d+ \(\d+\)", compile_ms)
        if choice == "required":
            # at_least_one: every output calls, unless max_new_tokens cut it before it could.
            assert _cell(with_call)[0] >= requests - _cell(cut)[0]
