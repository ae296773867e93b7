"""benchmarks/bench_extraction_accuracy.py: where the paragraph says each fact (against
str.find on values spelled once), the scoring on hand-written answers (the reference, a
valid wrong answer, a cut one), and a tiny run end to end whose table has one row per
condition and in which every constrained answer that stopped is valid (jsonschema is the
oracle). It never asserts accuracy: that is the model's, and the model changes."""

from __future__ import annotations

import json
import random
import re
import sys
from argparse import Namespace
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))  # the script imports benchmarks/_results.py as a top-level module
    import bench_extraction_accuracy

    return bench_extraction_accuracy


@pytest.fixture(scope="module")
def examples(bench):
    return bench.make_corpus.heldout_extraction_prompts(200, bench.make_corpus.make_corpus(400, 0))


def _example(text: str, answer: dict) -> dict:
    return {
        "task": "extract_person",
        "system": None,
        "user": "Extract the person's information as JSON.\n" + text,
        "assistant": json.dumps(answer, ensure_ascii=False),
    }


def test_text_order_of_hand_written_paragraphs(bench):
    maria = _example(
        "Maria Lopez is a 41-year-old nurse from Madrid who enjoys painting, cycling and chess.",
        {
            "name": "Maria Lopez",
            "age": 41,
            "city": "Madrid",
            "occupation": "nurse",
            "hobbies": ["painting", "cycling", "chess"],
        },
    )
    assert bench.text_order(maria) == ["name", "age", "occupation", "city", "hobbies"]
    zhang = _example(
        "张三是一名软件工程师，今年二十八岁，生日是1997年3月28日，平时喜欢编程、摄影和爬山。",
        {
            "name": "张三",
            "age": 28,
            "occupation": "软件工程师",
            "hobbies": ["编程", "摄影", "爬山"],
            "birthday": "1997-03-28",
        },
    )
    assert bench.text_order(zhang) == ["name", "occupation", "age", "birthday", "hobbies"]
    # The day of the birthday (28) is not the age: the age is found where a phrasing says it.
    later = _example(
        "Say hello to Ann Lee, who was born on March 28, 1997 and is 28 years old.",
        {"name": "Ann Lee", "age": 28, "birthday": "1997-03-28"},
    )
    assert bench.text_order(later) == ["name", "birthday", "age"]
    with pytest.raises(ValueError, match="city = 'Oslo'"):
        bench.text_order(_example("Ann Lee lives in Rome.", {"name": "Ann Lee", "city": "Oslo"}))


LITERAL = ("city", "email", "phone", "occupation")  # keys whose value the paragraph spells as is


def _check_text_order(bench, ex: dict) -> int:
    """Every requested key is placed, the name first; the keys whose value is spelled once,
    as is, in the paragraph come in the order str.find gives them. Returns how many such keys."""
    paragraph = ex["user"].split("\n", 1)[1]
    ref = bench.eval_extraction.reference_answer(ex)
    order = bench.text_order(ex)
    assert sorted(order) == sorted(ref) and order[0] == "name"
    once = [k for k in order if k in LITERAL and paragraph.count(ref[k]) == 1]
    assert once == sorted(once, key=lambda k: paragraph.find(ref[k]))
    return len(once)


def test_text_order_agrees_with_find_on_held_out_prompts(bench, examples):
    checked = sum(_check_text_order(bench, ex) >= 2 for ex in examples)
    assert checked >= 20  # the oracle compared real orders, not single keys


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_text_order_of_any_held_out_paragraph(bench, seed):
    """Any held-out paragraph, English or Chinese (the benchmark's only kind): every fact is found."""
    _check_text_order(bench, bench.make_corpus.person_example(random.Random(seed), held_out=True))


def test_schema_keys_orders(bench, examples):
    ex = next(e for e in examples if len(bench.eval_extraction.reference_answer(e)) >= 3)
    keys = list(bench.eval_extraction.reference_answer(ex))
    assert bench.schema_keys(ex, "training") == keys
    assert bench.schema_keys(ex, "alphabetical") == sorted(keys)
    assert sorted(bench.schema_keys(ex, "text")) == sorted(keys)
    with pytest.raises(ValueError, match="key_order"):
        bench.schema_keys(ex, "random")


def test_scoring_hand_written_answers(bench, examples):
    exs = examples[:3]
    cond = bench.Condition("constrained (default)")
    schemas = bench.condition_schemas(cond, exs)
    right = json.dumps(bench.eval_extraction.reference_answer(exs[0]), ensure_ascii=False)
    wrong = dict(bench.eval_extraction.reference_answer(exs[1]), name="Nobody Atall")  # valid, name wrong
    cut = json.dumps(bench.eval_extraction.reference_answer(exs[2]), ensure_ascii=False)[:-5]
    result = bench.Result(cond, texts=[right, json.dumps(wrong), cut], finishes=["stop", "stop", "length"])
    bench.score_answers(result, exs, schemas)
    assert (result.valid, result.cut, result.score["exact"]) == (2, 1, 1)
    assert result.score["counts"]["name"] == [1, 3]
    row = bench.cells(result, None)
    assert len(row) == len(bench.HEADER)
    assert row[bench.HEADER.index("valid (jsonschema)")] == "2/3 (67%)"
    assert row[bench.HEADER.index("name")] == "1/3 (33%)"
    # Against a reference run: the same object in another key order counts as the same
    # values, so does the same cut text; a changed value does not.
    reordered = json.dumps(
        dict(reversed(list(bench.eval_extraction.reference_answer(exs[0]).items()))), ensure_ascii=False
    )
    reference = bench.Result(bench.Condition("other"), texts=[reordered, right, cut], finishes=["stop"] * 3)
    assert bench.cells(result, reference)[bench.HEADER.index("same values as default")] == "2/3 (67%)"


def test_fences_stripped_rescores_only_the_fenced_answers(bench, examples):
    exs = examples[:3]
    answers = [json.dumps(bench.eval_extraction.reference_answer(ex), ensure_ascii=False) for ex in exs]
    texts = ["```json\n" + answers[0] + "\n```", answers[1], "```json\n" + answers[2][:-3] + "\n```"]
    result = bench.Result(bench.Condition("unconstrained", constrained=False), texts=texts, finishes=["stop"] * 3)
    bench.score_answers(result, exs, bench.condition_schemas(result.condition, exs))
    stripped = bench.fences_stripped(result, exs)
    assert (result.valid, stripped.valid) == (1, 2)  # a fence around a broken object stays invalid
    assert stripped.texts[1] == answers[1] and stripped.score["exact"] == 2
    assert stripped.condition.name == "unconstrained, fences stripped" and not stripped.condition.constrained
    assert result.texts[0].startswith("```")  # the original answers are left alone


def test_a_tiny_run_end_to_end(bench, examples):
    exs = examples[:4]
    results, demo_rows = bench.run(Path(bench.minisglang.DEFAULT_MODEL_PATH), exs, bench.CONDITIONS, max_new_tokens=96)
    assert [r.condition for r in results] == bench.CONDITIONS
    for r in results:
        assert len(r.texts) == len(r.finishes) == len(exs)
        if not r.condition.constrained:
            continue
        for _ex, schema, text, finish in zip(exs, bench.condition_schemas(r.condition, exs), r.texts, r.finishes):
            if finish == "stop":  # the grammar's promise: a constrained answer that stopped is valid
                jsonschema.validate(json.loads(text), schema)
                assert list(json.loads(text)) == schema["required"]  # and its keys come in the schema's order
        # 100% of the answers that stopped: only an answer cut by max_new_tokens may be invalid.
        assert r.valid == len(exs) - r.cut, (r.condition.name, r.texts, r.finishes)

    args = Namespace(heldout_seed=12345, examples=400, seed=0, max_new_tokens=96)
    text = bench.report(results, demo_rows, exs, args, Path(bench.minisglang.DEFAULT_MODEL_PATH), 0.0, 1.0)
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    header = rows[0]
    assert [c.strip() for c in header.strip("|").split("|")] == bench.HEADER
    table = rows[1 : 1 + len(bench.CONDITIONS)]
    assert [r.split("|")[1].strip() for r in table] == [c.name for c in bench.CONDITIONS]
    assert all(len(r.strip().strip("|").split("|")) == len(bench.HEADER) for r in table)
    assert len(demo_rows) == 3 and "| text | unconstrained | constrained |" in text
    assert re.search(r"sha256 [0-9a-f]{16}, [\d,?]+ steps", text)


def test_demo_table_keeps_one_row_per_text(bench):
    """A fenced answer spans lines and has backticks; its cell must not break the table."""
    fenced = '```json\n{"name": "张三", "age": 28, "hobbies": ["编程", "摄影", "爬山"]}\n```'
    lines = bench.demo_table([(t, fenced, "{} | {}") for t in bench.demo.TEXTS])
    assert len(lines) == 2 + len(bench.demo.TEXTS)
    assert all(line.startswith("| ") and line.count("|") == 4 for line in lines[2:])
    assert "(not valid)" in lines[2]


def test_training_steps_come_from_the_cards_lineage_line(bench, tmp_path):
    """The results file's step count is the card's "Steps behind these weights" line, not a sum of
    every command in its Reproduce section (which lists stages that were not kept)."""
    assert bench.training_steps(tmp_path) == "? steps"
    (tmp_path / "MODEL_CARD.md").write_text(
        "## Reproduce\n```\ntrain.py --steps 9999\n```\nSteps behind these weights: 1,000 + 2,000 = 3,000 steps.\n",
        encoding="utf-8",
    )
    assert bench.training_steps(tmp_path) == "1,000 + 2,000 = 3,000 steps"
    import minisglang

    assert re.match(r"[0-9,]+ steps\b", bench.training_steps(Path(minisglang.DEFAULT_MODEL_PATH)))
