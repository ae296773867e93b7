"""scripts/corpus/long_documents.py: long extraction prompts (rules and a schema as the system turn,
the facts among filler). Each answer validates under the schema its prompt states
(jsonschema is the oracle), its values are in the document, and none of the extraction
service benchmark's own sentences is trained on (it stays a test of the prompt's shape)."""

import json
import random
import sys
from pathlib import Path

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "benchmarks"))
import bench_extraction_service as service  # noqa: E402
import make_corpus  # noqa: E402
from corpus import long_documents  # noqa: E402


def schema_of(system: str) -> dict:
    """The JSON Schema a system turn states on its last line, after its lead-in."""
    last = system.rsplit("\n", 1)[1]
    return json.loads(last[last.index("{") :])


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**9))
def test_every_answer_is_valid_under_its_stated_schema_and_copied_from_the_document(seed):
    ex = long_documents.long_document_example(random.Random(seed))
    schema = schema_of(ex["system"])
    answer = json.loads(ex["assistant"])
    jsonschema.validate(answer, schema)
    assert list(answer) == list(schema["properties"])
    document = ex["user"].split("\n", 1)[1]
    assert answer["name"] in document
    for key in ("city", "email", "phone", "occupation"):
        if key in answer:
            assert answer[key] in document, key


def test_documents_reach_the_service_lengths_and_never_hold_its_sentences():
    rng = random.Random(0)
    examples = [long_documents.long_document_example(rng) for _ in range(300)]
    chars = sorted(len(ex["user"]) for ex in examples)
    assert chars[-1] > 1000 and chars[0] < 200  # short and long documents both
    theirs = service.RULES + service.EN_FILLER + service.ZH_FILLER
    for ex in examples:
        text = ex["system"] + ex["user"]
        assert not any(sentence in text for sentence in theirs)
    assert {"extract_long"} == {ex["task"] for ex in examples}


def test_the_corpus_mixes_them_in_and_held_out_sets_do_not_move():
    corpus = make_corpus.make_corpus(600, seed=2)
    share = sum(ex["task"] == "extract_long" for ex in corpus) / len(corpus)
    assert 0.02 < share < 0.12
    held = make_corpus.heldout_extraction_prompts(20, corpus)
    assert all(ex["task"] == "extract_person" for ex in held)
