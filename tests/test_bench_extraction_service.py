"""benchmarks/bench_extraction_service.py's workload and its accuracy columns: every prompt
states the facts the workload returns for it, and `right` scores an answer against them
(an answer can be valid under the schema and still wrong)."""

import json
import sys
from pathlib import Path

import jsonschema

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import bench_extraction_service as service  # noqa: E402

import minisglang  # noqa: E402
from minisglang.tokenizer import Tokenizer  # noqa: E402


def test_each_prompt_states_its_facts_and_right_scores_against_them():
    tok = Tokenizer.from_pretrained(minisglang.DEFAULT_MODEL_PATH)
    prompts, arrivals, system, stated = service.workload(tok, 8, 32.0, seed=3)
    assert len(prompts) == len(arrivals) == len(stated) == 8
    for prompt, facts in zip(prompts, stated):
        assert prompt.count(system) == 1
        for value in (facts["name"], str(facts["age"]), facts["city"], facts["occupation"], *facts["hobbies"]):
            assert value in prompt
        answer = json.dumps(facts, ensure_ascii=False)
        jsonschema.validate(json.loads(answer), service.SCHEMA)
        assert service.right(answer, facts, ("name", "age"))
        assert service.right(answer, facts, tuple(service.SCHEMA["properties"]))
        wrong = json.dumps({**facts, "age": facts["age"] + 1}, ensure_ascii=False)
        assert service.valid(wrong) and not service.right(wrong, facts, ("name", "age"))
        assert service.right(wrong, facts, ("name", "city"))
        assert not service.right("{not json", facts, ("name",))
        assert not service.right("[1]", facts, ("name",))


def test_the_probe_rearranges_only_the_document():
    """`rearranged` keeps the instruction and the turns around the document; "facts only"
    keeps exactly the sentences naming the person, in order, and "facts first" / "facts
    last" hold the same sentences as the document, the named ones first or last."""
    tok = Tokenizer.from_pretrained(minisglang.DEFAULT_MODEL_PATH)
    prompts, _, _, stated = service.workload(tok, 6, 32.0, seed=5)
    for prompt, facts in zip(prompts, stated):
        zh = service.ASK_ZH in prompt
        ask = service.ASK_ZH if zh else service.ASK_EN
        head, rest = prompt.split(ask + "\n")
        document, tail = rest.split("\n", 1)
        stop = "。" if zh else "."
        count = lambda text: sorted(x.strip() for x in text.split(stop) if x.strip())  # noqa: E731
        only = service.rearranged(prompt, facts, "facts only")
        assert only.startswith(head + ask + "\n") and only.endswith("\n" + tail)
        kept = only[len(head + ask) + 1 : -len(tail) - 1]
        assert count(kept) == sorted(x for x in count(document) if facts["name"] in x)
        for order in ("facts first", "facts last"):
            moved = service.rearranged(prompt, facts, order)[len(head + ask) + 1 : -len(tail) - 1]
            assert count(moved) == count(document)
            sentences = [x for x in moved.split(stop) if x.strip()]
            named = [facts["name"] in x for x in sentences]
            assert named == sorted(named, reverse=order == "facts first")
