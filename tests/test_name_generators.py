"""The corpus's name generators and the held-out generators of scripts/eval_generalisation.py
(issue 33): held-out generators stay disjoint from the training ones, and the evaluation's
texts, scoring and loop count do what they say."""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import eval_generalisation  # noqa: E402
import make_corpus  # noqa: E402
import name_generators as ng  # noqa: E402


def _held_out_names(generator: str, n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    make = ng.HELD_OUT_GENERATORS[generator][1]
    return [make(rng, make_corpus.ZH_GIVEN, make_corpus.ZH_SURNAMES) for _ in range(n)]


@pytest.mark.parametrize("generator", sorted(ng.HELD_OUT_GENERATORS))
def test_every_held_out_name_has_a_held_out_signature(generator):
    """What makes the generators disjoint: a held-out name always has a signature that
    training names are filtered never to have (most have their own generator's)."""
    names = _held_out_names(generator, 2000)
    assert all(ng.held_out_generator(n) is not None for n in names)
    assert sum(ng.held_out_generator(n) == generator for n in names) >= 0.95 * len(names)


@pytest.mark.parametrize("zh", [False, True])
def test_training_names_never_have_a_held_out_signature(zh):
    rng = random.Random(7)
    names = [make_corpus.person_name(rng, zh, held_out=False) for _ in range(5000)]
    assert not [n for n in names if ng.held_out_generator(n) is not None]
    # and the training generators do vary: many distinct names, not one inventory's
    assert len(set(names)) > 4900


def test_training_corpus_names_are_disjoint_from_held_out_generators():
    corpus = make_corpus.make_corpus(3000, seed=11)
    names = {
        json.loads(make_corpus.unfence(ex["assistant"])).get("name") for ex in corpus if ex["task"] == "extract_person"
    } - {None}
    held = {n for g in ng.HELD_OUT_GENERATORS for n in _held_out_names(g, 500)}
    assert names and not names & held
    assert all(ng.held_out_generator(n) is None for n in names)


def test_held_out_inventories_are_outside_the_training_ones():
    han = set(ng.HELD_OUT_HAN)
    assert not han & set(make_corpus.ZH_GIVEN + make_corpus.ZH_SURNAMES + make_corpus.RARE_HAN)
    assert not set(ng.HELD_OUT_COMPOUND_SURNAMES) & set(make_corpus.ZH_SURNAMES + ng.TRAINING_COMPOUND_SURNAMES)
    training_pieces = (
        [s for inv in ng.ROMANISATIONS.values() for s in inv]
        + ng.ONSETS
        + ng.NAME_WORDS
        + make_corpus.EN_FIRST
        + make_corpus.EN_LAST
    )
    assert not [p for p in training_pieces for c in ng.HELD_OUT_CLUSTERS if c in p.lower()]
    # Korean "sung" starts with "sun": a training name that starts a part with it is dropped
    # by the signature filter (test_training_names_never_have_a_held_out_signature)
    assert [p for p in training_pieces for w in ng.HELD_OUT_WORDS if p.lower().startswith(w.lower())] == ["sung"]


@pytest.mark.parametrize(
    "name, generator",
    [
        ("Mivi Brudeldel", "tail_repeat"),
        ("Sunvaro Kel", "english_prefix"),
        ("Kwaro Pfeli", "foreign_clusters"),
        ("Mivazote Kel", "long_cv"),
        ("端木明", "compound_surname"),
        ("谢婷婷", "doubled_given"),
        ("夏骁", "rare_han"),
        ("Maria Lopez", None),
        ("Kaka Lolomar", None),
        ("张婷婷玉", None),
        ("Velorin Kasumar", None),
    ],
)
def test_signatures_of_hand_written_names(name, generator):
    assert ng.held_out_generator(name) == generator


def test_the_held_out_extraction_sets_are_made_as_before():
    """Held-out names come from today's generators, so eval_extraction's sets stay comparable."""
    rng = random.Random(3)
    for _ in range(200):
        name = make_corpus.person_name(rng, rng.random() < 0.5, held_out=True)
        assert make_corpus.is_held_out(name)


@pytest.mark.parametrize("fields", [["name", "age", "hobbies"], ["age", "name"]])
def test_generalisation_examples_are_seeded_grounded_and_held_out(fields):
    a = eval_generalisation.generalisation_examples(40, seed=1, fields=fields)
    assert a == eval_generalisation.generalisation_examples(40, seed=1, fields=fields)
    assert a != eval_generalisation.generalisation_examples(40, seed=2, fields=fields)
    assert len(a) == 40 * len(ng.HELD_OUT_GENERATORS)
    en_openers = make_corpus.EN_OPENERS[0]
    openers_used = set()
    for ex in a:
        ref = json.loads(ex["assistant"])
        assert list(ref) == [k for k in make_corpus.KEY_ORDER if k in fields]
        text = ex["user"].split("\n", 1)[1]
        assert ref["name"] in text
        assert ng.held_out_generator(ref["name"]) is not None
        assert str(ref["age"]) in text or make_corpus.zh_number(ref["age"]) in text
        # the held-out phrasings only: never a training opener
        assert not any(o != "{n}" and text.startswith(o.split("{n}")[0]) for o in en_openers if o.split("{n}")[0])
        pool = make_corpus.ZH_GENERALISATION_OPENERS if ex["lang"] == "zh" else make_corpus.EN_GENERALISATION_OPENERS
        opener = [o for o in pool if text.startswith(o.format(n=ref["name"]))]
        assert opener or text.startswith(ref["name"] + " is a")  # or "NAME is a 41-year-old ..."
        openers_used.update(opener)
    # several openers, so a score does not measure one phrase
    assert openers_used == set(make_corpus.EN_GENERALISATION_OPENERS + make_corpus.ZH_GENERALISATION_OPENERS)


def test_generalisation_openers_are_never_trained():
    corpus = make_corpus.make_corpus(3000, seed=5) + make_corpus.copy_drill_corpus(1000, seed=5)
    train_text = "\n".join(ex["user"] for ex in corpus)
    fixed = [
        o.replace("{n}", "").strip(" ，,")
        for o in make_corpus.EN_GENERALISATION_OPENERS + make_corpus.ZH_GENERALISATION_OPENERS
    ]
    assert all(fixed) and not [f for f in fixed if f in train_text]
    assert not set(make_corpus.EN_GENERALISATION_OPENERS) & set(make_corpus.EN_OPENERS[0])
    assert not set(make_corpus.ZH_GENERALISATION_OPENERS) & set(make_corpus.ZH_OPENERS[0])
    with pytest.raises(ValueError, match="held_out=True"):
        make_corpus._paragraph(random.Random(0), {"name": "Kel"}, ["name"], False, held_out=False, generalisation=True)


@pytest.mark.parametrize("fields", [["name"], ["age", "hobbies"], ["name", "age", "shoe size"]])
def test_generalisation_fields_must_be_known_and_include_name_and_age(fields):
    with pytest.raises(ValueError, match="must include name and age"):
        eval_generalisation.generalisation_examples(1, fields=fields)


@given(st.lists(st.one_of(st.text(max_size=8), st.integers()), max_size=4), st.integers(0, 30))
@settings(max_examples=200, deadline=None)
def test_ends_inside_string_agrees_with_json(values, cut):
    """On any prefix of a JSON array, the quote count says whether the cut is in a string."""
    text = json.dumps(values, ensure_ascii=False)
    prefix = text[:cut]
    inside = eval_generalisation.ends_inside_string(prefix)
    # closing the string (if open) and then the array must give valid JSON exactly when the cut is between values
    try:
        json.loads(prefix + ('"' if inside else "") + "]")
        closes = True
    except ValueError:
        closes = False
    if closes:
        # a quote is a string's edge when an even run of backslashes (maybe none) comes before it
        assert inside == len(re.findall(r'(?<!\\)(?:\\\\)*"', prefix)) % 2
    assert not eval_generalisation.ends_inside_string(text)


def test_loops_and_scoring_of_hand_written_answers():
    examples = [
        {
            "generator": "tail_repeat",
            "lang": "en",
            "assistant": '{"name": "Mivi Brudeldel", "age": 44, "hobbies": ["chess"]}',
        }
    ] * 3
    outputs = [
        ('{"name": "Mivi Brudeldel", "age": 44, "hobbies": []}', {"type": "stop"}),
        ('{"name": "Mivi Brudeldeldeldeldel', {"type": "length", "length": 64}),
        ('{"name": "Mivi Brudeldel", "age": 4444444444', {"type": "length", "length": 64}),
    ]
    row = eval_generalisation.score(examples, outputs)["tail_repeat"]
    # a field counts only in an answer that parses: the cut third answer has no right name
    assert row == {"lang": "en", "n": 3, "name": 1, "age": 1, "both": 1, "hobbies": 0, "loops": 1, "ran_on": 2}
    assert eval_generalisation.is_loop('{"name": "a\\"', {"type": "length"})
    assert not eval_generalisation.is_loop('{"name": "a"', {"type": "length"})
    assert not eval_generalisation.is_loop('{"name": "a', {"type": "stop"})
    # asked for name and age only, hobbies are not scored
    two = [{"generator": "long_cv", "lang": "en", "assistant": '{"name": "Mivazote Kel", "age": 30}'}]
    row = eval_generalisation.score(two, [('{"name": "Mivazote Kel", "age": 30}', {"type": "stop"})])["long_cv"]
    assert row == {"lang": "en", "n": 1, "name": 1, "age": 1, "both": 1, "hobbies": 0, "loops": 0, "ran_on": 0}
