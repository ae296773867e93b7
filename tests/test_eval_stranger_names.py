"""scripts/eval_stranger_names.py without a model: its texts contain their names, its reference
answers are right, it is reproducible from its seed, and a distractor is never the answer."""

from __future__ import annotations

import json
import random

import pytest
from script_modules import REPO, load_script

stranger = load_script(REPO / "scripts" / "eval_stranger_names.py")
FIRST = stranger.load_set("first")

FIELDS = ["name", "age", "hobbies"]
EXAMPLES = stranger.examples(12, 5, FIELDS)


def test_every_family_has_its_share_and_at_least_five_english_and_two_chinese_families():
    langs = [lang for lang, _ in FIRST.families.values()]
    assert langs.count("en") >= 5 and langs.count("zh") >= 2
    assert len(EXAMPLES) == 12 * len(FIRST.families)
    for family in FIRST.families:
        assert sum(ex["family"] == family for ex in EXAMPLES) == 12


@pytest.mark.parametrize("ex", EXAMPLES, ids=lambda ex: ex["family"])
def test_the_text_holds_the_reference_answer(ex):
    ans = ex["answer"]
    assert ex["text"].count(ans["name"]) == 1, "the name appears exactly once"
    assert ex["user"].endswith("\n" + ex["text"])
    age = ans["age"]
    spelled = FIRST.spell[ex["lang"]](age)
    assert (spelled if ex["age_words"] else str(age)) in ex["text"]
    assert 18 <= age <= 90
    assert all(h in ex["text"] for h in ans["hobbies"]) and ans["hobbies"]


@pytest.mark.parametrize("ex", EXAMPLES, ids=lambda ex: ex["family"])
def test_the_distractor_is_never_the_answer(ex):
    d = ex["distractor"]
    if d is None:
        return
    name = ex["answer"]["name"]
    assert d != name and d not in name and name not in d
    assert d in ex["text"]
    # the distractor comes after the person's own sentence and is given no age
    assert ex["text"].index(name) < ex["text"].index(d)
    assert str(ex["answer"]["age"]) not in ex["text"][ex["text"].index(d) :]


def test_seeded_reproducibility():
    assert stranger.examples(6, 11, FIELDS) == stranger.examples(6, 11, FIELDS)
    assert stranger.examples(6, 11, FIELDS) != stranger.examples(6, 12, FIELDS)


def test_fields_and_schema():
    two = stranger.examples(2, 5, ["age", "name"])
    assert all(list(ex["answer"]) == ["name", "age"] for ex in two)
    s = stranger.schema(["name", "age"])
    assert s["required"] == ["name", "age"] and s["additionalProperties"] is False
    assert stranger.schema(FIELDS)["properties"]["hobbies"] == {"type": "array", "items": {"type": "string"}}
    with pytest.raises(ValueError):
        stranger.check_fields(["name", "hobbies"])


@pytest.mark.parametrize(
    ("n", "en", "zh"), [(18, "eighteen", "十八"), (34, "thirty-four", "三十四"), (90, "ninety", "九十")]
)
def test_numbers_in_words(n, en, zh):
    assert FIRST.spell["en"](n) == en and FIRST.spell["zh"](n) == zh


def test_name_shapes():
    rng = random.Random(0)
    _, long_ = FIRST.families["long"]
    _, short = FIRST.families["short"]
    assert all(35 <= len(long_(rng)) <= 50 for _ in range(50))
    assert all(len(short(rng).replace(" ", "")) <= 4 for _ in range(50))
    _, rare = FIRST.families["zh_rare_chars"]
    assert all(all("\u4e00" <= c <= "\u9fff" for c in rare(rng)) for _ in range(20))


def test_score_counts_right_answers_distractors_and_loops():
    ex = next(e for e in EXAMPLES if e["distractor"])
    right = json.dumps(ex["answer"], ensure_ascii=False)
    wrong = json.dumps({**ex["answer"], "name": ex["distractor"]}, ensure_ascii=False)
    loop = '{"name": "ab ab ab ab'
    table = stranger.score([ex] * 3, [(right, {"type": "stop"}), (wrong, {"type": "stop"}), (loop, {"type": "length"})])
    row = table[ex["family"]]
    assert row == {"n": 3, "name": 1, "age": 2, "both": 1, "hobbies": 2, "distractor": 1, "loops": 1, "ran_on": 1}
    assert "| **all** | 3 |" in stranger.markdown(table, "family", True)
