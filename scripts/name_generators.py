"""People's names for the corpus, made many ways, and the held-out ways that only the
generalisation evaluation (scripts/eval_generalisation.py) uses.

A model that has seen names from one syllable inventory learns to choose among familiar
pieces instead of copying; shown a name made another way it drops a piece or loops on a
repeated one (issue 33). So training names come from many generators (real first and
last names, several syllable inventories, romanisations of other languages, random
letters, repeated syllables, English words, hyphens, apostrophes, initials, particles),
and the evaluation keeps whole *generators* back: ``HELD_OUT_GENERATORS``, each with a
signature (``held_out_generator``) that its every name has and that training names are
filtered never to have, so no held-out name can occur in training, however it is drawn.
"""

from __future__ import annotations

import random
import re

# ---------------------------------------------------------------- training generators
# The corpus's first inventory (corpus/values.py's _word uses it for words, cities and e-mails too):
# onset + vowel + coda, e.g. "Velorin", "Kasumar".
ONSETS = [
    "b",
    "c",
    "d",
    "f",
    "g",
    "h",
    "j",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "w",
    "z",
    "br",
    "ch",
    "sh",
    "th",
    "tr",
    "st",
    "gr",
    "kl",
    "dr",
    "fl",
]
VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "io", "ou", "y"]
CODAS = ["", "", "", "n", "r", "l", "s", "m", "x"]

# Syllables of names as other languages romanise them (rough, made for variety, not for
# accuracy): a name part is 1-3 of one language's syllables.
ROMANISATIONS = {
    "japanese": [
        "ka",
        "ki",
        "ku",
        "ke",
        "ko",
        "sa",
        "shi",
        "su",
        "se",
        "so",
        "ta",
        "chi",
        "tsu",
        "te",
        "to",
        "na",
        "ni",
        "nu",
        "ne",
        "no",
        "ha",
        "hi",
        "fu",
        "he",
        "ho",
        "ma",
        "mi",
        "mu",
        "me",
        "mo",
        "ya",
        "yu",
        "yo",
        "ra",
        "ri",
        "ru",
        "re",
        "ro",
        "wa",
        "ga",
        "go",
        "ji",
        "da",
        "be",
        "ryo",
        "kyo",
    ],
    "korean": [
        "ji",
        "hoon",
        "seo",
        "yeon",
        "min",
        "jun",
        "hye",
        "soo",
        "kyung",
        "tae",
        "woo",
        "sung",
        "eun",
        "hyun",
        "jae",
        "dong",
        "young",
        "ha",
        "na",
        "bin",
    ],
    "swahili": [
        "wa",
        "nji",
        "ru",
        "mba",
        "nde",
        "ngo",
        "ki",
        "mu",
        "zi",
        "tu",
        "ka",
        "mwa",
        "ni",
        "ja",
        "ri",
        "odhi",
        "ambo",
        "we",
        "li",
        "chu",
    ],
    "finnish": [
        "vir",
        "ta",
        "nen",
        "hei",
        "kki",
        "lai",
        "ne",
        "ai",
        "no",
        "mä",
        "ki",
        "saa",
        "ri",
        "il",
        "ja",
        "tuo",
        "mi",
        "kor",
        "pe",
        "la",
    ],
    "slavic": [
        "zdra",
        "vko",
        "prze",
        "mys",
        "slav",
        "bor",
        "mir",
        "ek",
        "ska",
        "wicz",
        "rad",
        "ov",
        "ich",
        "ya",
        "lud",
        "mil",
        "ka",
        "sto",
        "jan",
        "ova",
    ],
    "arabic": [
        "ha",
        "mid",
        "ra",
        "shid",
        "far",
        "ouk",
        "zah",
        "ir",
        "sal",
        "im",
        "na",
        "jib",
        "kha",
        "lid",
        "yas",
        "min",
        "aziz",
        "nour",
        "qa",
        "sim",
    ],
    "hindi": [
        "aa",
        "rav",
        "pri",
        "yan",
        "ka",
        "shre",
        "ya",
        "vik",
        "ram",
        "deep",
        "an",
        "jal",
        "ku",
        "mar",
        "ni",
        "sha",
        "adi",
        "tya",
        "ro",
        "hit",
    ],
    "polynesian": [
        "ke",
        "a",
        "lo",
        "ha",
        "ma",
        "ka",
        "la",
        "ni",
        "hi",
        "wai",
        "mo",
        "ana",
        "le",
        "i",
        "ta",
        "u",
        "po",
        "hu",
        "me",
        "no",
    ],
}
# Common English words that are also (parts of) names: Stone, Rivers, Brookfield, Velbird.
NAME_WORDS = [
    "Rose",
    "Hill",
    "Brook",
    "Field",
    "Wood",
    "Bird",
    "Fox",
    "King",
    "Star",
    "Snow",
    "Stone",
    "River",
    "Bell",
    "Lake",
    "Green",
    "Black",
    "White",
    "Young",
    "Hope",
    "Joy",
    "May",
    "Love",
    "Grace",
    "Law",
    "Church",
    "Mill",
    "Ford",
    "Well",
    "Land",
    "Port",
    "Hart",
    "Cook",
    "Mason",
    "Baker",
    "Hunter",
    "Walker",
    "Page",
    "Marsh",
    "Dale",
    "Glen",
]
# Lower-case particles between parts: "Anna van Velde", "Tariq bin Hamad", "Luc de Vorin".
PARTICLES = ["van", "von", "de", "del", "da", "di", "bin", "ibn", "al", "le", "la", "van der", "dos"]
APOSTROPHE_PREFIXES = ["O'", "D'", "M'", "L'"]
# The letters of random-letter names (every letter, no structure).
LETTERS = "abcdefghijklmnopqrstuvwxyz"

# ---------------------------------------------------------------- held-out generators
# Consonant clusters that no training inventory has: a held-out "foreign" syllable starts with one.
HELD_OUT_CLUSTERS = ["kw", "pf", "zv", "bj", "hj", "gv", "dl", "fn"]
HELD_OUT_VOWELS = ["a", "e", "i", "o", "u", "ae", "oa", "ui"]
# English words that start held-out names ("Sunvaro", "Bookelin") and never start a training name part.
HELD_OUT_WORDS = ["Sun", "Book", "Wind", "Milk", "Salt", "Rain", "Frog", "Bread", "Cloud", "Dust", "Fish", "Nut"]
# Han characters of held-out given names (none is in make_corpus.ZH_GIVEN) and rare compound surnames.
HELD_OUT_HAN = list("骁珂翊骞晗昊钰琛璇瑾祺炜烨珩琰蔚苒芮岚")
HELD_OUT_COMPOUND_SURNAMES = ["端木", "皇甫", "慕容", "令狐", "公孙", "宇文", "长孙", "独孤", "南宫", "东方"]
CV_CONSONANTS = "bcdfghjklmnpqrstvwxz"
CV_VOWELS = "aeiou"
_LONG_CV = re.compile(f"(?:[{CV_CONSONANTS}][{CV_VOWELS}]){{4,}}")
_TAIL_REPEAT = re.compile(r"[a-z]*?([a-z]{3,})\1")
_HAN = re.compile(r"[\u4e00-\u9fff]")


def _parts(name: str) -> list[str]:
    """The lower-case letter runs of a name ("Jean-Luc O'Vel" -> jean, luc, o, vel)."""
    return re.findall(r"[a-zäöüé]+", name.lower())


def held_out_generator(name: str) -> str | None:
    """The held-out generator whose signature ``name`` has, or None. Every name a held-out
    generator makes has its signature, and training drops every name that has one."""
    if _HAN.search(name):
        if any(name.startswith(s) for s in HELD_OUT_COMPOUND_SURNAMES):
            return "compound_surname"
        if any(ch in HELD_OUT_HAN for ch in name):
            return "rare_han"
        if len(name) >= 3 and name[-1] == name[-2]:
            return "doubled_given"
        return None
    parts = _parts(name)
    if any(part[i : i + 2] in HELD_OUT_CLUSTERS for part in parts for i in range(len(part) - 1)):
        return "foreign_clusters"
    if any(_LONG_CV.fullmatch(part) for part in parts):
        return "long_cv"
    if any(_TAIL_REPEAT.fullmatch(part) for part in parts):
        return "tail_repeat"
    if any(part.startswith(w.lower()) for part in parts for w in HELD_OUT_WORDS):
        return "english_prefix"
    return None


def _syllable_word(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS) for _ in range(n))


def _romanised(rng: random.Random) -> str:
    syllables = ROMANISATIONS[rng.choice(sorted(ROMANISATIONS))]
    return "".join(rng.choice(syllables) for _ in range(rng.choice([2, 2, 3])))


def _random_letters(rng: random.Random) -> str:
    return "".join(rng.choice(LETTERS) for _ in range(rng.randint(3, 9)))


def _repeated(rng: random.Random) -> str:
    """A part with a repeated piece: "kaka", "lolomar", "zelzelan", "mivalulu" (a piece of
    3+ letters is never repeated at the very end: that is the held-out tail_repeat)."""
    piece = rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS)
    times = rng.choice([2, 2, 2, 3])
    where = rng.choice(["alone", "start", "middle", "end"])
    if len(piece) > 2 and where in ("alone", "end"):
        where = "start"
    head = _syllable_word(rng, 1) if where in ("middle", "end") else ""
    tail = _syllable_word(rng, rng.randint(1, 2)) if where in ("start", "middle") else ""
    if tail and len(piece) > 2 and rng.random() < 0.5:
        # one or two letters after the repeats ("modmoda", "zelzelis"): stage 14 copied a
        # repeated piece that ends a name for ever, having seen repeats end only at a syllable
        tail = rng.choice(VOWELS + [c for c in CODAS if c])[: rng.choice([1, 2])]
    return head + piece * times + tail


def _with_word(rng: random.Random) -> str:
    """A part with an English word: "Stone", "Brookfield", "Velbird", "Hillmar"."""
    word = rng.choice(NAME_WORDS)
    return rng.choice(
        [
            word,
            word + rng.choice(NAME_WORDS).lower(),
            _syllable_word(rng, 1) + word.lower(),
            word + _syllable_word(rng, 1),
        ]
    )


def training_part(rng: random.Random, first: bool, first_names: list[str], last_names: list[str]) -> str:
    """One capitalised part of a training name, from one of the training generators."""
    kind = rng.choices(["real", "syllables", "romanised", "letters", "repeated", "word"], [25, 25, 20, 10, 10, 10])[0]
    if kind == "real":
        return rng.choice(first_names if first else last_names)
    part = {
        "syllables": lambda: _syllable_word(rng, rng.randint(2, 3)),
        "romanised": lambda: _romanised(rng),
        "letters": lambda: _random_letters(rng),
        "repeated": lambda: _repeated(rng),
        "word": lambda: _with_word(rng),
    }[kind]()
    return part[:1].upper() + part[1:]


def training_en_name(rng: random.Random, first_names: list[str], last_names: list[str], nicknames: list[str]) -> str:
    """A Latin-script training name: 1-3 parts from the training generators, sometimes
    hyphenated, with an apostrophe, an initial, a particle or a nickname in quotes."""
    n_parts = rng.choices([1, 2, 3], [5, 80, 15])[0]
    parts = [training_part(rng, i == 0, first_names, last_names) for i in range(n_parts)]
    decoration = rng.choices(["none", "hyphen", "apostrophe", "initial", "particle", "nickname"], [60, 10, 8, 8, 8, 6])[
        0
    ]
    if decoration == "hyphen":
        i = rng.randrange(len(parts))
        parts[i] += "-" + training_part(rng, i == 0, first_names, last_names)
    elif decoration == "apostrophe":
        i = rng.randrange(len(parts))
        parts[i] = (
            rng.choice(APOSTROPHE_PREFIXES) + parts[i]
            if rng.random() < 0.6
            else parts[i][:3] + "'" + parts[i][3:].lower()
        )
    elif decoration == "initial":
        initials = [rng.choice(LETTERS).upper() + "." for _ in range(rng.choice([1, 1, 2]))]
        parts = initials + parts[-1:] if rng.random() < 0.5 else parts[:1] + initials + parts[1:]
    elif decoration == "particle" and len(parts) >= 2:
        parts.insert(len(parts) - 1, rng.choice(PARTICLES))
    elif decoration == "nickname" and len(parts) >= 2:
        parts.insert(1, f'"{rng.choice(nicknames)}"')
    return " ".join(parts)


# Compound surnames of training names besides make_corpus's four (欧阳, 司马, 诸葛, 上官).
TRAINING_COMPOUND_SURNAMES = [
    "夏侯",
    "尉迟",
    "赫连",
    "澹台",
    "呼延",
    "闻人",
    "轩辕",
    "申屠",
    "司徒",
    "万俟",
    "钟离",
    "淳于",
]
# The CJK block: a training name's rare character is any of it (most are several byte-level
# tokens, so the model learns to copy a character it has no token for).
CJK_FIRST, CJK_LAST = 0x4E00, 0x9FA5


def training_zh_name(rng: random.Random, classic, zh_given: list[str], zh_surnames: list[str]) -> str:
    """A Chinese training name: make_corpus's own (``classic(rng)``) half the time, else one
    with a character from anywhere in the CJK block, a doubled given character that is not
    last (张婷婷玉), a rarer or random two-character surname (one in four ends in a listed
    one-character surname), or a three-character given name.
    (Characters outside the given-name pool are most of these: they are the ones a model
    copies worst, issue 33.)"""
    kind = rng.choices(["classic", "any_han", "doubled", "surname", "long"], [46, 20, 8, 19, 7])[0]
    if kind == "classic":
        return classic(rng)
    surname, given = rng.choice(zh_surnames), [rng.choice(zh_given) for _ in range(rng.choice([1, 2]))]
    if kind == "any_han":
        for i in rng.sample(range(len(given)), rng.randint(1, len(given))):
            given[i] = chr(rng.randint(CJK_FIRST, CJK_LAST))
        if rng.random() < 0.3:
            surname = chr(rng.randint(CJK_FIRST, CJK_LAST))
    elif kind == "doubled":
        char = rng.choice(zh_given)
        given = [char, char, rng.choice(zh_given)]
    elif kind == "surname":
        surname = rng.choice(
            [
                rng.choice(TRAINING_COMPOUND_SURNAMES),
                "".join(rng.choice(zh_given) for _ in range(2)),
                "".join(chr(rng.randint(CJK_FIRST, CJK_LAST)) for _ in range(2)),
                # a character before a listed one-character surname (X孙, X方): the held-out
                # 公孙, 长孙 and 东方 end in a surname, and a model that knows only 孙 drops 公
                rng.choice([rng.choice(zh_given), chr(rng.randint(CJK_FIRST, CJK_LAST))])
                + rng.choice([s for s in zh_surnames if len(s) == 1]),
            ]
        )
    else:
        given = [rng.choice(zh_given) for _ in range(3)]
    return surname + "".join(given)


# ---------------------------------------------------------------- held-out generators
def _foreign(rng: random.Random) -> str:
    syllables = [rng.choice(HELD_OUT_CLUSTERS) + rng.choice(HELD_OUT_VOWELS)]
    syllables += [rng.choice(CV_CONSONANTS) + rng.choice(HELD_OUT_VOWELS) for _ in range(rng.randint(1, 2))]
    rng.shuffle(syllables)
    return "".join(syllables).capitalize()


def _long_cv(rng: random.Random) -> str:
    return "".join(rng.choice(CV_CONSONANTS) + rng.choice(CV_VOWELS) for _ in range(rng.randint(4, 5))).capitalize()


def _tail_repeat(rng: random.Random) -> str:
    piece = rng.choice(CV_CONSONANTS) + rng.choice(CV_VOWELS) + rng.choice("lnrmsdt")
    return (_syllable_word(rng, rng.randint(1, 2)) + piece + piece).capitalize()


def _english_prefix(rng: random.Random) -> str:
    return rng.choice(HELD_OUT_WORDS) + _syllable_word(rng, rng.randint(1, 2))


def _held_out_en(make_first, make_last=None):
    """A two-part held-out name whose first part (or a random one) comes from ``make_first``."""

    def make(rng: random.Random, zh_given: list[str], zh_surnames: list[str]) -> str:
        other = make_last or (lambda r: _syllable_word(r, rng.randint(2, 3)).capitalize())
        parts = [make_first(rng), other(rng)]
        if rng.random() < 0.5:
            parts.reverse()
        return " ".join(parts)

    return make


def _rare_han(rng: random.Random, zh_given: list[str], zh_surnames: list[str]) -> str:
    given = [rng.choice(HELD_OUT_HAN)] + [rng.choice(zh_given) for _ in range(rng.randint(0, 1))]
    rng.shuffle(given)
    return rng.choice(zh_surnames) + "".join(given)


def _doubled_given(rng: random.Random, zh_given: list[str], zh_surnames: list[str]) -> str:
    char = rng.choice(zh_given)
    return rng.choice(zh_surnames) + rng.choice(["", rng.choice(zh_given)]) + char + char


def _compound_surname(rng: random.Random, zh_given: list[str], zh_surnames: list[str]) -> str:
    return rng.choice(HELD_OUT_COMPOUND_SURNAMES) + "".join(rng.choice(zh_given) for _ in range(rng.randint(1, 2)))


# name -> (language of the texts, maker(rng, zh_given, zh_surnames)); the signature that
# held_out_generator gives each of its names is the generator's own name.
HELD_OUT_GENERATORS = {
    "foreign_clusters": ("en", _held_out_en(_foreign, _foreign)),
    "long_cv": ("en", _held_out_en(_long_cv)),
    "tail_repeat": ("en", _held_out_en(_tail_repeat)),
    "english_prefix": ("en", _held_out_en(_english_prefix)),
    "rare_han": ("zh", _rare_han),
    "doubled_given": ("zh", _doubled_given),
    "compound_surname": ("zh", _compound_surname),
}
