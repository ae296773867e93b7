"""scripts/mine_failures.py: the states where a model's greedy answer first goes wrong, mined
from training texts only (never a held-out generator, opener or set), well-formed for training."""

import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import eval_generalisation  # noqa: E402
import make_corpus  # noqa: E402
import mine_failures  # noqa: E402
import name_generators  # noqa: E402

MODEL = REPO / "minisglang" / "assets" / "tiny-json-llama"


def test_value_labels_mark_values_not_keys():
    answer = '{"name": "Kaka Lo", "age": 41, "hobbies": ["chess", "go"]}'
    labels = mine_failures.value_labels(answer)
    marked = "".join(ch if lab else "_" for ch, lab in zip(answer, labels))
    # a string value's characters and its closing quote; an integer's digits and the character after them
    assert marked == '__________Kaka Lo"_________41,______________chess"___go"__'


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(MODEL)


def _ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_first_miss_finds_an_over_copy_and_ignores_other_tokenisations(tokenizer):
    answer = '{"name": "Brudeldel Mivo", "age": 44}'
    ids = _ids(tokenizer, answer)
    assert mine_failures.first_miss(tokenizer, answer, ids, ids) is None
    # the token that closes the name predicted as one more piece of it: copied on (a loop's start)
    close = next(j for j, t in enumerate(ids) if tokenizer.decode([t]).startswith('"') and j > 3)
    over = list(ids)
    over[close] = _ids(tokenizer, "del")[0]
    miss = mine_failures.first_miss(tokenizer, answer, ids, over)
    assert miss["kind"] == "over" and miss["key"] == "name" and answer[: miss["at"]].endswith("Mivo")
    # a wrong age digit
    age = next(j for j, t in enumerate(ids) if tokenizer.decode([t]) == "44")
    wrong = list(ids)
    wrong[age] = _ids(tokenizer, "84")[0]
    miss = mine_failures.first_miss(tokenizer, answer, ids, wrong)
    assert miss["kind"] == "wrong" and miss["key"] == "age" and miss["got"] == "84"
    # the same text in other tokens is no miss: a first letter alone where the answer has more
    first = next(j for j, t in enumerate(ids) if tokenizer.decode([t]).startswith("Br"))
    other = list(ids)
    other[first] = _ids(tokenizer, "B")[0]
    assert mine_failures.first_miss(tokenizer, answer, ids, other) is None
    # a key is structure (the schema decides it), not a miss
    key = list(ids)
    key[1] = _ids(tokenizer, "zz")[0]
    assert mine_failures.first_miss(tokenizer, answer, ids, key) is None


def test_mining_examples_are_training_extraction_texts_only():
    examples = mine_failures.mining_examples(600, 0)
    assert len(examples) > 150
    held_out_openers = [
        o.split("{n}")[0] for o in make_corpus.EN_GENERALISATION_OPENERS + make_corpus.ZH_GENERALISATION_OPENERS
    ]
    held_out_sets = {ex["user"] for ex in make_corpus.heldout_extraction_prompts(200, make_corpus.make_corpus(2000, 1))}
    eval_texts = {ex["user"] for ex in eval_generalisation.generalisation_examples(8)}
    for ex in examples:
        assert ex["task"] in mine_failures.EXTRACTION_TASKS
        for name in mine_failures.names_of(ex):
            assert name_generators.held_out_generator(name) is None, name
            assert not make_corpus.is_held_out(name), name
        text = ex["user"].split("\n", 1)[1]
        assert not any(o and text.startswith(o) for o in held_out_openers), text
        assert ex["user"] not in held_out_sets and ex["user"] not in eval_texts
    # seeds of their own: none of the texts of a training run's corpus (seed 36, epoch 0)
    assert not {ex["user"] for ex in examples} & {ex["user"] for ex in make_corpus.make_corpus(2000, 36)}


def test_mined_examples_are_well_formed():
    """Mined with the bundled model: each is a training example with its right answer, and its
    record says where the greedy answer leaves it, inside a value."""
    examples = mine_failures.mining_examples(80, 5)  # 28 texts, 4 mined (3 at a name or an age): 5 s, not 20
    mined = mine_failures.mine(MODEL, examples)
    assert mined, "the bundled model gets some training texts wrong"
    users = {ex["user"] for ex in examples}
    for ex in mined:
        assert ex["user"] in users
        answer = make_corpus.unfence(ex["assistant"])
        json.loads(answer)
        m = ex["mined"]
        assert m["kind"] in ("over", "short", "wrong") and m["want"] != m["got"]
        assert 0 < m["at"] < len(answer) and mine_failures.value_labels(answer)[m["at"]]
        assert m["key"] in make_corpus.KEY_ORDER
    # (teacher-forced: a field's miss is a first miss, so only the mined texts can have one)
    missed = [ex for ex in examples if ex["user"] in {m["user"] for m in mined}]
    only = mine_failures.mine(MODEL, missed, ["name", "age"])
    assert only and {ex["mined"]["key"] for ex in only} <= {"name", "age"}


def test_repeat_names_swap_in_training_names_with_a_repeated_piece():
    """--repeat-names: each text's person renamed, in the text and the answer alike, with a
    training name that has a repeated piece; never a held-out generator's name."""
    plain = mine_failures.mining_examples(300, 2)
    examples = mine_failures.mining_examples(300, 2, repeat_names=True)
    assert len(examples) > len(plain) // 2
    langs = set()
    for ex in examples:
        (name,) = mine_failures.names_of(ex)
        assert mine_failures.has_repeat(name), name
        assert name_generators.held_out_generator(name) is None and not make_corpus.is_held_out(name), name
        assert name in ex["user"]
        langs.add(bool(re.search(r"[\u4e00-\u9fff]", name)))
    assert langs == {True, False}
    assert mine_failures.has_repeat("Penpenja") and mine_failures.has_repeat("张婷婷玉")
    assert not mine_failures.has_repeat("Penja") and not mine_failures.has_repeat("张婷玉")
