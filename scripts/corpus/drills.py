"""The copy drills of the first phase of training (scripts/train_tiny_model.py's
``--copy-steps``): dense copying of generated names, words, numbers, random strings and the
tokenizer's own letter tokens (those the main corpus's answers hold least, most often), mixed
with numeral drills."""

from __future__ import annotations

import functools
import random

import name_generators

from .example_format import _dumps
from .made_up_phrasings import random_han
from .mix import make_corpus
from .numerals import numeral_drill_example
from .phrasings import ZH_GENERALISATION_OPENERS
from .pools import EN_HOBBIES, ZH_CITIES, ZH_CITY_CHARS, ZH_GIVEN, ZH_HOBBIES, ZH_JOBS, ZH_SURNAMES
from .values import _city, _email, _word, person_name
from .vocab_tokens import TOKENIZER_FILE, vocab_letter_tokens


def copy_drill_example(rng: random.Random, held_out: bool = False) -> dict:
    """A short, dense copying exercise for the first phase of training (the copy-first
    curriculum of scripts/train_tiny_model.py): 2-6 generated names, words, numbers, cities
    or hobbies, repeated verbatim as a list or as a JSON array. Nearly every answer token is
    a copy, so a tiny model forms the attention that finds the earlier occurrence of the
    current token and emits the one after it (an induction head) in a few hundred steps."""
    zh = rng.random() < 0.5
    # e-mails too: a local part of generated syllables is copied character by character;
    # and random strings, so that every token is copied often (random_string)
    makers = [
        lambda: person_name(rng, zh, held_out),
        lambda: _unsigned_word(rng),
        lambda: str(rng.randint(0, 9999)),
        lambda: _city(rng, zh),
        lambda: rng.choice(ZH_HOBBIES if zh else EN_HOBBIES),
        lambda: _email(rng),
        lambda: random_string(rng, zh),
        # four times in the list: rare tokens need a hundred emissions, not a few (stage 12)
        lambda: vocab_string(rng, zh),
        lambda: vocab_string(rng, zh),
        lambda: vocab_string(rng, zh),
        lambda: vocab_string(rng, zh),
    ]
    items = [rng.choice(makers)() for _ in range(rng.randint(2, 6))]
    sep = "、" if zh else ", "
    if rng.random() < 0.5:
        question = rng.choice(["照抄下面的内容：", "重复一遍："] if zh else ["Repeat exactly:", "Copy this:"])
        return {
            "task": "copy_drill",
            "system": None,
            "user": question + "\n" + sep.join(items),
            "assistant": sep.join(items),
        }
    question = rng.choice(
        ["把下面的内容写成 JSON 数组：", "列成 JSON 列表："]
        if zh
        else ["Write these as a JSON array:", "List them as JSON:"]
    )
    return {"task": "copy_drill", "system": None, "user": question + "\n" + sep.join(items), "assistant": _dumps(items)}


def _unsigned_word(rng: random.Random) -> str:
    """A generated word (_word) without a held-out generator's signature: a drill copies
    name-like words, and "Sundruklum" or "Flaisais" would be a held-out generator's names."""
    while True:
        word = _word(rng, (1, 3))
        if name_generators.held_out_generator(word) is None:
            return word


# The characters a drill's random Chinese string is half made of: those of the corpus's own
# Chinese pools and drill questions (so 容 of 内容, in every copy-drill question and never in an
# answer, is copied too), less the held-out given-name characters and the held-out openers'.
DRILL_HAN = sorted(
    set(
        "".join(
            ZH_GIVEN
            + ZH_SURNAMES
            + ZH_CITY_CHARS
            + ZH_HOBBIES
            + ZH_JOBS
            + ZH_CITIES
            + name_generators.TRAINING_COMPOUND_SURNAMES
        )
        + "照抄下面的内容重复一遍把写成数组列表"
        + "中文数字阿拉伯这些是多少用回答"
    )
    - set(name_generators.HELD_OUT_HAN)
    - set("".join(ZH_GENERALISATION_OPENERS).replace("{n}", ""))
)


def random_string(rng: random.Random, zh: bool) -> str:
    """A string with no structure to copy: 3-12 random letters (sometimes capitalised) or 1-4
    CJK characters, each from DRILL_HAN or (half the time) from anywhere in the block. Stage
    8's names went wrong at the tokens copied least (median 8 times an epoch against about
    500 for a name's tokens; 容 never): random strings copy the vocabulary's rare tokens. None
    has a held-out generator's signature or holds a held-out compound surname or character."""
    while True:
        if zh:
            text = "".join(
                rng.choice(DRILL_HAN) if rng.random() < 0.5 else random_han(rng, 1) for _ in range(rng.randint(1, 4))
            )
            if any(s in text for s in name_generators.HELD_OUT_COMPOUND_SURNAMES):
                continue
        else:
            text = "".join(rng.choice(name_generators.LETTERS) for _ in range(rng.randint(3, 12)))
            text = text.capitalize() if rng.random() < 0.5 else text
        if name_generators.held_out_generator(text) is None:
            return text


# Stage 11's drills emitted each letter token about 5 times an epoch, `Book` 26 times in the
# whole run, too few to move it (teacher-forced probability 0.001 at a name's start): three in four
# of a vocab_string's tokens are drawn from those that the main corpus's answers never hold.
RARE_TOKEN_SHARE = 0.75
RARE_BELOW = 1  # a token is rare when a 4,000-example sample of answers holds it fewer times


@functools.cache
def rare_letter_tokens() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The vocab_letter_tokens (Latin, Han) that the answers of make_corpus(4000, seed=0) hold
    fewer than RARE_BELOW times: the tokens the model is almost never asked to emit."""
    from collections import Counter

    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TOKENIZER_FILE))
    counts = Counter(i for ex in make_corpus(4000, seed=0) for i in tok.encode(ex["assistant"]).ids)
    latin, han = vocab_letter_tokens()
    return tuple(t for t in latin if counts[tok.token_to_id(t)] < RARE_BELOW), tuple(
        t for t in han if counts[tok.encode(t).ids[0]] < RARE_BELOW
    )


def vocab_string(rng: random.Random, zh: bool) -> str:
    """2-3 random Latin-letter tokens of the tokenizer written together ("qoBookurant"), or 2-4
    of its Han characters, each 3 times in 4 one that answers never hold (rare_letter_tokens).
    A token no answer holds is a token the model has never emitted: the bundled model's answers
    in one epoch held 3,470 of its 4,096 tokens, and names starting with the held-out `Book` lost
    it (`Bookvoun Brolgea` -> `Brolgea`). A string that merely holds such a word after other
    letters has no held-out signature (held_out_generator checks the start of each letter run),
    and none is kept that has one."""
    latin, han = vocab_letter_tokens()
    rare_latin, rare_han = rare_letter_tokens()

    def pick(pool: tuple[str, ...], rare: tuple[str, ...]) -> str:
        return rng.choice(rare if rare and rng.random() < RARE_TOKEN_SHARE else pool)

    while True:
        if zh:
            text = "".join(pick(han, rare_han) for _ in range(rng.randint(2, 4)))
            if any(s in text for s in name_generators.HELD_OUT_COMPOUND_SURNAMES):
                continue
        else:
            text = "".join(pick(latin, rare_latin) for _ in range(rng.randint(2, 3)))
        if name_generators.held_out_generator(text) is None:
            return text


# A share of the copy-drill stream is numeral conversion (numeral_drill_example).
NUMERAL_DRILL_SHARE = 0.2


def copy_drill_corpus(n_examples: int, seed: int = 0) -> list[dict]:
    """``n_examples`` seeded copy drills and numeral drills (training names only)."""
    rng = random.Random(seed * 7919 + 1)
    return [
        numeral_drill_example(rng) if rng.random() < NUMERAL_DRILL_SHARE else copy_drill_example(rng)
        for _ in range(n_examples)
    ]
