"""A short paragraph about a person that says some of their facts: in a shuffled order, with
training or held-out phrasings, in training sometimes with made-up words, a composed opener,
the name after the facts or a second person beside it."""

from __future__ import annotations

import random
import zlib

from .made_up_phrasings import COMPOSED_OPENER, MADE_UP_PHRASING, _made_up_phrasings, composed_opener
from .numerals import en_number, zh_number
from .phrasings import (
    EN_FACTS,
    EN_GENERALISATION_OPENERS,
    EN_OPENERS,
    ZH_FACTS,
    ZH_GENERALISATION_OPENERS,
    ZH_OPENERS,
    _pick,
)
from .values import _join, _spell_date, person_name


def _paragraph(
    rng: random.Random, facts: dict, mentioned: list[str], zh: bool, held_out: bool, generalisation: bool = False
) -> str:
    """Say the ``mentioned`` facts (besides the name) in a shuffled order, in one or two
    sentences; in training, sometimes with made-up words (MADE_UP_PHRASING). A held-out
    paragraph for eval_generalisation (``generalisation``) opens with one of its own openers."""
    if generalisation and not held_out:
        raise ValueError("generalisation paragraphs use held-out phrasings: pass held_out=True")
    order = [k for k in mentioned if k != "name"]
    rng.shuffle(order)
    name = facts["name"]
    fact_pools, openers = (ZH_FACTS, ZH_OPENERS) if zh else (EN_FACTS, EN_OPENERS)
    if generalisation:
        openers = ([], ZH_GENERALISATION_OPENERS if zh else EN_GENERALISATION_OPENERS)
    if not held_out and rng.random() < MADE_UP_PHRASING:
        made_up, made_up_opener = _made_up_phrasings(rng, zh)
        fact_pools = {k: made_up[k] if rng.random() < 0.6 else pool for k, pool in fact_pools.items()}
        openers = made_up_opener if rng.random() < 0.6 else openers
    if not held_out and rng.random() < COMPOSED_OPENER:
        openers = ([composed_opener(rng, zh)], [])
    if zh:
        age = facts["age"] if rng.random() < 0.7 else zh_number(facts["age"])
        values = dict(
            facts,
            age=age,
            hobbies=_join(facts["hobbies"], True),
            birthday=_spell_date(*map(int, facts["birthday"].split("-")), True, rng),
        )
        parts = [_pick(rng, fact_pools[k], held_out).format(values[k]) for k in order]
        opener = _pick(rng, openers, held_out).format(n=name)
        # "高娟48岁，爱好是摄影。": the age straight after the name, with no word between. Chosen by
        # the name's hash, not by rng, so every other example (and the held-out sets, which skip
        # the training user turns) stays as it was.
        pick = zlib.crc32(name.encode())
        if not held_out and "age" in order and pick % 1000 < ZH_AGE_AFTER_NAME * 1000:
            at = order.index("age")
            parts.insert(0, ["{}岁", "{}岁了"][pick // 1000 % 2].format(values["age"]))
            del parts[at + 1]
            opener = ZH_NAME_LAST_OPENERS[pick // 2000 % len(ZH_NAME_LAST_OPENERS)].format(n=name)
        pronoun = rng.choice("他她")
        pieces = [opener + parts[0]] + [(pronoun if rng.random() < 0.2 else "") + p for p in parts[1:]]
        return "，".join(pieces).replace("，，", "，") + "。"
    values = dict(
        facts,
        # "is forty-two years old": in training only, so the held-out sets stay as they were
        age=en_number(facts["age"]) if not held_out and rng.random() < EN_AGE_WORDS else facts["age"],
        hobbies=_join(facts["hobbies"], False),
        birthday=_spell_date(*map(int, facts["birthday"].split("-")), False, rng),
    )
    an = "an" if facts["occupation"][0] in "aeiou" else "a"
    if {"age", "occupation"} <= set(order) and rng.random() < 0.3:
        # "Maria Lopez is a 41-year-old nurse from Madrid who enjoys ...": three facts at once
        head = (
            f"{name} is {'an' if str(facts['age'])[0] == '8' or facts['age'] in (11, 18) else 'a'} "
            f"{facts['age']}-year-old {facts['occupation']}"
        )
        rest = [k for k in order if k not in ("age", "occupation")]
        if "city" in rest and rng.random() < 0.6:
            head += f" from {facts['city']}"
            rest.remove("city")
        parts = [_pick(rng, fact_pools[k], held_out).format(values[k], an=an) for k in rest]
        text = head + (f" who {_join(parts, False)}." if parts else ".")
        return text if held_out else _with_distractor(rng, text, name)
    parts = [_pick(rng, fact_pools[k], held_out).format(values[k], an=an) for k in order]
    if not held_out and rng.random() < LATE_NAME:
        text = rng.choice(LATE_NAME_TEMPLATES).format(facts=_join(parts, False), n=name)
        return _with_distractor(rng, text, name)
    opener = _pick(rng, openers, held_out).format(n=name)
    pronoun = rng.choice(["He", "She", "They"])
    if pronoun == "They":  # "They is" would teach bad English; keep the name-only form then
        pronoun = rng.choice(["He", "She"])
    cut = rng.randint(1, len(parts))  # two sentences, the second one starting with a pronoun
    text = f"{opener} {_join(parts[:cut], False)}."
    if parts[cut:]:
        text += f" {pronoun} {_join(parts[cut:], False)}."
    return text if held_out else _with_distractor(rng, text, name)


# bench_production's Chinese texts say "{n}{a}岁" with nothing between name and age; issue 33's
# stages 11-18 lost it (stage 18 took "高娟48岁" for the name in 24 of 100, stage 4 in 4), as only
# ~1% of their Chinese paragraphs had the age straight after the name.
ZH_AGE_AFTER_NAME = 0.12
ZH_NAME_LAST_OPENERS = [o for o in ZH_OPENERS[0] if o.endswith("{n}")]
# English ages in words ("forty-two") in a share of training paragraphs: until stage 27 no
# English training text spelled an age, and texts that do were answered with a wrong age.
EN_AGE_WORDS = 0.2
# English training paragraphs sometimes name the person only after the facts, or mention
# a second person (issue 33): the name is then found by what the text says about it, not
# by its place at the start, and the answer is about the person the facts are about.
LATE_NAME = 0.15
LATE_NAME_TEMPLATES = [
    "The person who {facts} is called {n}.",
    "Here is someone who {facts}. The name is {n}.",
    "There is a person who {facts}: {n}.",
    "Someone who {facts}? That is {n}.",
    "This note is about a person who {facts}. Their name is {n}.",
]
DISTRACTOR = 0.2
DISTRACTOR_BEFORE = [
    "{d} wrote this note.",
    "From the notes of {d}:",
    "{d} told us about a friend.",
    "A message from {d}.",
]
DISTRACTOR_AFTER = [
    "{n} shares a flat with {d}.",
    "{d} is a neighbour of {n}.",
    "A friend, {d}, introduced us.",
    "{n} often visits {d}.",
    "The manager of {n} is {d}.",
]


def _with_distractor(rng: random.Random, text: str, name: str) -> str:
    """``text``, sometimes with a sentence about another person before or after it."""
    if rng.random() >= DISTRACTOR:
        return text
    other = person_name(rng, False, False)
    if rng.random() < 0.4:
        return rng.choice(DISTRACTOR_BEFORE).format(d=other) + " " + text
    return text + " " + rng.choice(DISTRACTOR_AFTER).format(d=other, n=name)
