"""Phrasings made at random for training paragraphs: made-up connecting words for facts and
openers, openers composed of a subject and a verb (or, in Chinese, random characters and a
connector), and made-up connectors of the vocabulary's own characters."""

from __future__ import annotations

import random

import name_generators

from .phrasings import EN_FACTS, ZH_FACTS, ZH_GENERALISATION_OPENERS
from .pools import ZH_SURNAMES
from .values import _word
from .vocab_tokens import vocab_letter_tokens

# A share of training paragraphs says its facts with made-up connecting words ("Brelo
# vastin Velorin Kasumar, who tromi 35 and klaisa hiking"): the words around a value then
# tell nothing, so the model must find a name, an age or a list by its form and place,
# which is what carries over to phrasings it has never seen.
MADE_UP_PHRASING = 0.3
# Filler characters for made-up Chinese phrasings: no surname characters (a filler must not
# look like part of a name) and none of the held-out phrasings' characters.
ZH_FILLER = [
    c
    for c in "了有这那们来去说要就都也与对把被让给为而且又或但很还再更最已曾将会能该呢吧啊嘛着过"
    if c not in "".join(ZH_SURNAMES)
]

# Openers composed from pieces (issue 33, stage 9). Stage 8 missed 92% of the held-out texts
# opening "We interviewed NAME" and 95% of those opening "档案里写着NAME" (against 5-28% for
# the other held-out openers): after an unseen verb ("We visited", "We zorbled": 0/40) or
# unseen characters the model starts the name at the wrong token. A share of training
# paragraphs therefore opens with a subject and a verb (real or made-up) or, in Chinese, with
# random characters from the whole CJK block (split into byte-level tokens like the rarest
# names, so such a token no longer says "this is a name") and a connecting word. No verb is a
# held-out opener's and no random character is one of theirs, so those openers stay unseen.
COMPOSED_OPENER = 0.3  # 0.2 until stage 18
OPENER_SUBJECTS = [
    "We",
    "They",
    "I",
    "He",
    "She",
    "You",
    "My sister",
    "Our team",
    "The police",
    "Everyone",
    "The doctor",
    "Reporters",
    "The committee",
    "A neighbour",
    "Yesterday we",
    "Last year they",
    "Today I",
    "The children",
    "Her boss",
    "Nobody",
    "Somebody",
    "The judges",
    "Our school",
]
OPENER_VERBS = [
    "visited",
    "photographed",
    "called",
    "emailed",
    "thanked",
    "praised",
    "hired",
    "helped",
    "invited",
    "followed",
    "watched",
    "trained",
    "phoned",
    "greeted",
    "paid",
    "warned",
    "found",
    "chose",
    "elected",
    "saw",
    "heard",
    "recommended",
    "filmed",
    "drove",
    "coached",
    "taught",
    "adopted",
    "rescued",
    "contacted",
    "quoted",
    "admired",
    "remembered",
    "knew",
    "asked",
    "told",
    "wrote to",
    "waited for",
    "voted for",
    "looked after",
    "worked with",
    "sat next to",
    "played chess with",
    "had lunch with",
    "talked about",
]
ZH_OPENER_CONNECTORS = ["是", "叫", "：", "，", "显示", "有", "提到了", "里有", "见到了", "记的是", "中是", "中的"]
# Characters no composed Chinese opener uses: surnames (the name must start where its surname
# is), held-out given names and compound surnames, and the held-out openers' own characters.
_ZH_OPENER_EXCLUDED = (
    set("".join(ZH_SURNAMES))
    | set(name_generators.HELD_OUT_HAN)
    | set(
        "".join(
            name_generators.HELD_OUT_COMPOUND_SURNAMES
            + name_generators.TRAINING_COMPOUND_SURNAMES
            + ZH_GENERALISATION_OPENERS
        ).replace("{n}", "")
    )
)


def random_han(rng: random.Random, n: int) -> str:
    """``n`` random characters of the CJK block, none of them excluded (_ZH_OPENER_EXCLUDED)."""
    chars = []
    while len(chars) < n:
        ch = chr(rng.randint(name_generators.CJK_FIRST, name_generators.CJK_LAST))
        if ch not in _ZH_OPENER_EXCLUDED:
            chars.append(ch)
    return "".join(chars)


# Stage 11 answered `档案` to every text opening "档案里写着NAME": 档 and 案 are byte-level like a
# rare name's characters, and 里写着 is no connector it had seen. A share of composed openers
# therefore ends in a made-up connector of the vocabulary's own single-token characters (写 and
# 里 are such tokens), so the name starts at its surname whatever word comes before it.
# Stage 18 raised it from 0.4: stage 17, given more names that start with a random character
# (X孙), took 档案 of 档案里写着 for the name in 15 of 16 texts.
MADE_UP_CONNECTOR = 0.6


def made_up_connector(rng: random.Random) -> str:
    """1-3 single-token Han characters (vocab_letter_tokens), none of them excluded
    (_ZH_OPENER_EXCLUDED: no surname, held-out character or held-out opener's character)."""
    han = [c for c in vocab_letter_tokens()[1] if c not in _ZH_OPENER_EXCLUDED]
    return "".join(rng.choice(han) for _ in range(rng.randint(1, 3)))


def composed_opener(rng: random.Random, zh: bool) -> str:
    """A training opener made of pieces: "Our team photographed {n}, who", "We zorbled {n}, who",
    "鞅瀣显示{n}，" ({n} is the name)."""
    if zh:
        head = random_han(rng, rng.randint(1, 4))
        if rng.random() < 0.3:
            head = rng.choice(ZH_FILLER) + head
        connector = rng.choice(ZH_OPENER_CONNECTORS)
        # drawn from a side generator seeded by the opener so far: the corpus's own draws stay
        # as they were, and so do eval_extraction's held-out sets (they exclude its requests)
        side = random.Random(head + connector)
        if side.random() < MADE_UP_CONNECTOR:
            connector = made_up_connector(side)
        return head + connector + "{n}，"
    verb = rng.choice(OPENER_VERBS) if rng.random() < 0.6 else _word(rng, (1, 2)).lower() + rng.choice(["ed", "s"])
    return f"{rng.choice(OPENER_SUBJECTS)} {verb} " + "{n}" + rng.choice([", who", ", who", ". This person"])


def _filler(rng: random.Random, zh: bool) -> str:
    """Made-up connecting words: 1-3 generated lowercase words, or 1-3 filler characters."""
    if zh:
        return "".join(rng.choice(ZH_FILLER) for _ in range(rng.randint(1, 3)))
    return " ".join(_word(rng, (1, 2)).lower() for _ in range(rng.randint(1, 3)))


def _made_up_phrasings(rng: random.Random, zh: bool) -> tuple[dict, tuple[list, list]]:
    """Fact phrasings and an opener of made-up words (training only), shaped like _pick's pools."""
    if zh:
        facts = {k: ([_filler(rng, True) + ("{}岁" if k == "age" else "{}")], []) for k in ZH_FACTS}
        opener = rng.choice([_filler(rng, True) + "{n}，", _filler(rng, True) + "，{n}"])
    else:
        facts = {k: ([_filler(rng, False) + (" {an} {}" if k == "occupation" else " {}")], []) for k in EN_FACTS}
        opener = _filler(rng, False).capitalize() + rng.choice([" {n}, who", ", {n}"])
    return facts, ([opener], [])
