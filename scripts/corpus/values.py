"""The values of facts, generated and spelled: people's names (training or held out, by a
stable hash), cities, e-mails, phone numbers, IPv4 addresses, dates and lists."""

from __future__ import annotations

import random
import zlib

import name_generators

# Syllables of generated words and names: onset + vowel + coda, e.g. "Velorin", "Kasumar".
from name_generators import CODAS, ONSETS, VOWELS

from .pools import (
    DEMO_NAMES,
    DOMAINS,
    EN_CITIES,
    EN_FIRST,
    EN_HOBBIES,
    EN_JOBS,
    EN_LAST,
    MONTHS,
    NICKNAMES,
    NUMERAL_NAME_SHARE,
    RARE_HAN,
    SYLLABLES,
    ZH_CITIES,
    ZH_CITY_CHARS,
    ZH_GIVEN,
    ZH_HOBBIES,
    ZH_JOBS,
    ZH_NUMERAL_GIVEN,
    ZH_SURNAMES,
)


def is_held_out(name: str) -> bool:
    """One name in ten (by a stable hash) is reserved for evaluation and never trained on."""
    return zlib.crc32(name.encode("utf-8")) % 10 == 0


def _join(items: list[str], zh: bool) -> str:
    """Join a list the way a person writes it: "A、B和C" or "A, B and C"."""
    if len(items) == 1:
        return items[0]
    if zh:
        return "、".join(items[:-1]) + "和" + items[-1]
    return ", ".join(items[:-1]) + " and " + items[-1]


def _random_date(rng: random.Random, year_lo: int = 1950, year_hi: int = 2025) -> tuple[int, int, int]:
    return rng.randint(year_lo, year_hi), rng.randint(1, 12), rng.randint(1, 28)


def _spell_date(y: int, m: int, d: int, zh: bool, rng: random.Random) -> str:
    """A human spelling of a date; the answers always use ISO YYYY-MM-DD."""
    if zh:
        return rng.choice([f"{y}年{m}月{d}日", f"{y}年{m:02d}月{d:02d}日", f"{y}/{m}/{d}"])
    return rng.choice([f"{MONTHS[m - 1]} {d}, {y}", f"{d} {MONTHS[m - 1]} {y}", f"{y}-{m:02d}-{d:02d}"])


def _email(rng: random.Random) -> str:
    user = rng.choice([rng.choice(SYLLABLES), _word(rng).lower()]) + rng.choice([".", "_", ""]) + rng.choice(SYLLABLES)
    if rng.random() < 0.5:
        user += str(rng.randint(1, 99))
    return f"{user}@{rng.choice(DOMAINS)}"


def _phone(rng: random.Random, zh: bool) -> str:
    if zh:
        digits = "1" + str(rng.randint(3, 9)) + "".join(str(rng.randint(0, 9)) for _ in range(9))
        return rng.choice([digits, f"{digits[:3]}-{digits[3:7]}-{digits[7:]}"])
    a, b, c = rng.randint(200, 999), rng.randint(200, 999), rng.randint(0, 9999)
    return rng.choice([f"+1-{a}-{b}-{c:04d}", f"({a}) {b}-{c:04d}", f"{a}-{b}-{c:04d}"])


def _ipv4(rng: random.Random) -> str:
    first = rng.choice([10, 172, 192, rng.randint(1, 223)])
    return ".".join(str(x) for x in [first, rng.randint(0, 255), rng.randint(0, 255), rng.randint(1, 254)])


def _word(rng: random.Random, syllables: tuple[int, int] = (2, 3)) -> str:
    """A generated, pronounceable capitalised word such as "Velorin"."""
    n = rng.randint(*syllables)
    return "".join(rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS) for _ in range(n)).capitalize()


def _en_name(rng: random.Random) -> str:
    first = rng.choice(EN_FIRST) if rng.random() < 0.4 else _word(rng)
    last = rng.choice(EN_LAST) if rng.random() < 0.4 else _word(rng)
    if rng.random() < 0.05:
        return f'{first} "{rng.choice(NICKNAMES)}" {last}'
    return f"{first} {last}"


def _zh_name(rng: random.Random) -> str:
    given = "".join(rng.choice(ZH_GIVEN) for _ in range(rng.choice([1, 2, 2])))
    if rng.random() < NUMERAL_NAME_SHARE:  # 张三, 李四, 王小五: a numeral as (part of) the given name
        given = rng.choice(["", rng.choice(ZH_GIVEN)]) + rng.choice(ZH_NUMERAL_GIVEN)
    if rng.random() < 0.005:  # a rare character now and then: seen, but too rarely to be merged
        given = given[:-1] + rng.choice(RARE_HAN)
    return rng.choice(ZH_SURNAMES) + given


def person_name(rng: random.Random, zh: bool, held_out: bool) -> str:
    """A person's name from the training pool (9 names in 10) or the held-out pool.

    Held-out names are made as they always were (so the held-out evaluation sets stay the
    same); training names come from the many generators of name_generators, and
    no training name has the signature of a held-out generator (issue 33)."""
    while True:
        if held_out:
            name = _zh_name(rng) if zh else _en_name(rng)
        elif zh:
            name = name_generators.training_zh_name(rng, _zh_name, ZH_GIVEN, ZH_SURNAMES)
        else:
            name = name_generators.training_en_name(rng, EN_FIRST, EN_LAST, NICKNAMES)
        if (
            is_held_out(name) == held_out
            and name not in DEMO_NAMES
            and (held_out or name_generators.held_out_generator(name) is None)
        ):
            return name


def _city(rng: random.Random, zh: bool) -> str:
    if rng.random() < 0.6:
        return rng.choice(ZH_CITIES if zh else EN_CITIES)
    if zh:
        return "".join(rng.sample(ZH_CITY_CHARS, 2))
    return _word(rng, (2, 3)) + rng.choice(["", "", " City", "ville", " Bay"])


def person_facts(rng: random.Random, zh: bool, max_hobbies: int) -> dict:
    """A person's facts besides name, age and birthday, drawn in this order: city, email,
    phone, occupation and 1 to ``max_hobbies`` hobbies (every text about a person draws them
    so; the order of the draws is what keeps a seeded corpus the same)."""
    return {
        "city": _city(rng, zh),
        "email": _email(rng),
        "phone": _phone(rng, zh),
        "occupation": rng.choice(ZH_JOBS if zh else EN_JOBS),
        "hobbies": rng.sample(ZH_HOBBIES if zh else EN_HOBBIES, rng.randint(1, max_hobbies)),
    }
