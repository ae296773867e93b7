"""The first stranger's name set for scripts/eval_stranger_names.py (issue 33, second opinion).

Written by a helper who had not read scripts/name_generators.py, scripts/corpus/ or
eval_generalisation.py's generators: the names are drawn from hand-written lists of real-world
naming traditions and shapes instead of syllable inventories:

- English script: Japanese romanisations (``Ryunosuke Hasegawa``), Vietnamese without
  diacritics, surname first, 3-4 parts (``Nguyen Thi Thu Trang``), Arabic with lower-case
  particles and hyphens (``Omar ibn Khalid al-Rashid``), Slavic with diacritics and patronymics
  (``Zdzisław Brzęczyszczykiewicz``), Yoruba and Igbo (``Oluwaseun Adeyemi-Ogunleye``), Irish
  Mc/O' and Dutch ``van der`` (``Jan-Willem van der Heijden``), Hawaiian with okina apostrophes
  (``Keali'i Kaleikini``), initials and particles in unusual places (``J. R. R. Pemberton``,
  ``Anne-Marie de la Croix``), names made of English words (``Hope Stone``, ``Summer Rain
  Fields``), very short names (``Bo``, ``Ed Ng``) and very long ones (4-6 parts, 35-50 letters);
- Han characters: common words as given names (``王天气``, ``李明天``), four-character names
  (compound surnames, or both parents' surnames), rare characters picked by hand
  (``禤龑``, ``亓淼垚``), and transliterated foreign names with a middle dot (``约翰·史密斯``).

Texts come from this set's own templates, English and Chinese: the name at the start, in the
middle or at the end of the text; half the texts mention a second person (a distractor, from
the same family, given no age) whose name must NOT be answered; ages written as digits or as
words (``thirty-four``, ``三十四``); one or two hobbies. Two control families of plain common
names (``John Smith``, ``王伟``) measure what the templates and instructions cost by themselves.
(Moved here from eval_stranger_names.py unchanged when a second set arrived: same seed, same texts.)
"""

from __future__ import annotations

import random
from collections.abc import Callable

from stranger_sets import StrangerSet

# ---------------------------------------------------------------- English-script name families

_JA_GIVEN = [
    "Haruto", "Yui", "Sota", "Mitsuki", "Kenji", "Ayumi", "Ryunosuke", "Tsubasa", "Chiharu",
    "Shun", "Hinata", "Kotone", "Daisuke", "Emiko", "Takumi", "Natsumi", "Yoshiro", "Fumika",
]  # fmt: skip
_JA_FAMILY = [
    "Takahashi", "Watanabe", "Yamaguchi", "Matsumoto", "Inoue", "Kobayashi", "Hasegawa",
    "Fujiwara", "Ishikawa", "Okonogi", "Tsukamoto", "Higashiyama", "Sakuraba", "Nishimura", "Ueda",
]  # fmt: skip
_VI_FAMILY = ["Nguyen", "Tran", "Le", "Pham", "Hoang", "Huynh", "Phan", "Vu", "Dang", "Bui", "Do", "Ngo"]
_VI_MIDDLE = ["Van", "Thi", "Huu", "Duc", "Minh", "Ngoc", "Thanh", "Quoc", "Kim", "Xuan"]
_VI_GIVEN = ["Trang", "Duc", "Linh", "Phuong", "Tuan", "Huong", "Khoa", "Nhung", "Thao", "Vinh", "Quynh", "Bao"]
_AR_GIVEN = ["Omar", "Fatima", "Yusuf", "Layla", "Abdulrahman", "Khadija", "Tariq", "Noor", "Hamza", "Zainab"]
_AR_FATHER = ["Khalid", "Ibrahim", "Yusuf", "Mahmoud", "Saeed", "Abdullah", "Hassan", "Mustafa"]
_AR_FAMILY = ["al-Rashid", "al-Masri", "Al Saud", "el-Amin", "al-Farsi", "Abu Zaid", "al-Qahtani", "Haddad"]
_SLAVIC_GIVEN = [
    "Zdzisław", "Wojciech", "Małgorzata", "Bożena", "Jiří", "Dušan", "Yevgeny", "Svetlana",
    "Radosław", "Ljubica", "Miroslav", "Agnieszka", "Přemysl", "Vesna",
]  # fmt: skip
_SLAVIC_FAMILY = [
    "Brzęczyszczykiewicz", "Szczepański", "Dvořák", "Kowalczyk", "Vukovič", "Novák", "Grabowska",
    "Wróblewski", "Petrović", "Voronezhsky", "Krawczyk", "Ždanov",
]  # fmt: skip
_SLAVIC_PATRONYMIC = ["Petrovich", "Ivanovna", "Sergeyevich", "Nikolaevna", "Mikhailovich"]
_YORUBA_GIVEN = [
    "Oluwaseun", "Babatunde", "Chidinma", "Folasade", "Adebola", "Ngozi", "Olumide", "Temitope",
    "Obinna", "Yewande", "Chukwuemeka", "Ifeoluwa",
]  # fmt: skip
_YORUBA_FAMILY = ["Adebayo", "Ogunleye", "Okonkwo", "Adeyemi", "Eze", "Balogun", "Olawale", "Nwachukwu", "Oyelaran"]
_CELTIC_GIVEN = ["Siobhan", "Ciaran", "Niamh", "Padraig", "Aoife", "Eoghan", "Saoirse", "Tadhg"]
_CELTIC_FAMILY = ["O'Driscoll", "McGillycuddy", "O'Sullivan", "MacNamara", "Ó Briain", "McAuliffe", "O'Keeffe"]
_DUTCH_GIVEN = ["Jan-Willem", "Annelies", "Maarten", "Femke", "Joost", "Sanne", "Pieter-Jan", "Lieke"]
_DUTCH_FAMILY = ["van der Heijden", "de Vries", "van den Broek", "ter Horst", "van 't Hof", "de Jong", "van Dijk"]
_HAWAIIAN_GIVEN = ["Keali'i", "Leilani", "Kalani", "Mahina", "Kawika", "Noelani", "Ikaika", "Pualani", "Kaimana"]
_HAWAIIAN_FAMILY = ["Kaleikini", "Kahananui", "Kapule", "Keawe", "Kamaka'ala", "Nakoa", "Kealoha", "Kanahele"]
_INITIAL_FIRST = ["Mary-Kate", "Anne-Marie", "T. Bone", "J. Edgar", "Hugh", "Beatrix", "Cornelius", "Wen"]
_INITIAL_FAMILY = ["Pemberton", "de la Croix", "Fairweather", "St. John", "Ashcombe", "du Plessis", "Okafor"]
_WORD_GIVEN = [
    "Hope", "Grace", "River", "Summer", "Sky", "Faith", "Justice", "Sunny", "Rich", "April",
    "Honor", "Ocean", "Winter", "Story", "Brook", "Major",
]  # fmt: skip
_WORD_FAMILY = [
    "Stone", "Banks", "Fields", "Baker", "Wood", "Day", "Young", "Rain", "Hill", "Sterling",
    "Green", "Walker", "Marsh", "King", "Bridge", "Hunter",
]  # fmt: skip
_TWO = ["Bo", "Ed", "Al", "Jo", "Ty", "Oz", "Ai", "Yu", "Li", "Ng", "Oh", "Xi", "Ka", "Lu"]
_LONG_PARTS_GIVEN = ["Maria", "Fernanda", "Pablo", "Diego", "Francisco", "Josefina", "Wilhelmina", "Bartholomew"]
_LONG_PARTS_PARTICLE = ["de los", "de la", "y", "von und zu", "del"]
_LONG_PARTS_FAMILY = [
    "Gutierrez-Villalobos", "Angeles", "Santisima Trinidad", "Montgomery-Fotheringham",
    "Hohenzollern", "Castellanos", "Ruiz-Picasso", "Rosario",
]  # fmt: skip


_CONTROL_GIVEN = ["John", "Mary", "David", "Sarah", "James", "Emily", "Michael", "Laura", "Robert", "Anna"]
_CONTROL_FAMILY = ["Smith", "Johnson", "Brown", "Miller", "Wilson", "Davis", "Taylor", "Clark", "Lewis", "Moore"]


def _control(rng: random.Random) -> str:
    return f"{rng.choice(_CONTROL_GIVEN)} {rng.choice(_CONTROL_FAMILY)}"


def _ja(rng: random.Random) -> str:
    return f"{rng.choice(_JA_GIVEN)} {rng.choice(_JA_FAMILY)}"


def _vi(rng: random.Random) -> str:
    middles = rng.sample(_VI_MIDDLE, rng.randint(1, 2))
    return " ".join([rng.choice(_VI_FAMILY), *middles, rng.choice(_VI_GIVEN)])


def _ar(rng: random.Random) -> str:
    given = rng.choice(_AR_GIVEN)
    link = "bint" if given in ("Fatima", "Layla", "Khadija", "Noor", "Zainab") else "ibn"
    if rng.random() < 0.5:
        return f"{given} {link} {rng.choice(_AR_FATHER)} {rng.choice(_AR_FAMILY)}"
    return f"{given} {rng.choice(_AR_FAMILY)}"


def _slavic(rng: random.Random) -> str:
    if rng.random() < 0.3:
        return f"{rng.choice(_SLAVIC_GIVEN)} {rng.choice(_SLAVIC_PATRONYMIC)} {rng.choice(_SLAVIC_FAMILY)}"
    return f"{rng.choice(_SLAVIC_GIVEN)} {rng.choice(_SLAVIC_FAMILY)}"


def _yoruba(rng: random.Random) -> str:
    family = rng.choice(_YORUBA_FAMILY)
    if rng.random() < 0.3:
        family += "-" + rng.choice([f for f in _YORUBA_FAMILY if f != family])
    return f"{rng.choice(_YORUBA_GIVEN)} {family}"


def _celtic_dutch(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return f"{rng.choice(_CELTIC_GIVEN)} {rng.choice(_CELTIC_FAMILY)}"
    return f"{rng.choice(_DUTCH_GIVEN)} {rng.choice(_DUTCH_FAMILY)}"


def _hawaiian(rng: random.Random) -> str:
    return f"{rng.choice(_HAWAIIAN_GIVEN)} {rng.choice(_HAWAIIAN_FAMILY)}"


def _initials(rng: random.Random) -> str:
    letters = "ABCDEFGHJKLMNPRSTW"
    shape = rng.randrange(3)
    if shape == 0:  # initials first: "J. R. R. Pemberton"
        return " ".join(f"{rng.choice(letters)}." for _ in range(rng.randint(1, 3))) + " " + rng.choice(_INITIAL_FAMILY)
    if shape == 1:  # initial in the middle: "Mary-Kate A. Fairweather"
        return f"{rng.choice(_INITIAL_FIRST)} {rng.choice(letters)}. {rng.choice(_INITIAL_FAMILY)}"
    return f"{rng.choice(_INITIAL_FIRST)} {rng.choice(_INITIAL_FAMILY)}"  # particle family names


def _words(rng: random.Random) -> str:
    if rng.random() < 0.25:
        return f"{rng.choice(_WORD_GIVEN)} {rng.choice(_WORD_GIVEN)} {rng.choice(_WORD_FAMILY)}"
    return f"{rng.choice(_WORD_GIVEN)} {rng.choice(_WORD_FAMILY)}"


def _short(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return rng.choice(_TWO)
    first, last = rng.sample(_TWO, 2)
    return f"{first} {last}"


def _long(rng: random.Random) -> str:
    while True:
        parts = rng.sample(_LONG_PARTS_GIVEN, rng.randint(2, 3))
        parts += [rng.choice(_LONG_PARTS_PARTICLE), *rng.sample(_LONG_PARTS_FAMILY, rng.randint(1, 2))]
        name = " ".join(parts)
        if 35 <= len(name) <= 50:
            return name


# ---------------------------------------------------------------- Han-character name families

_ZH_SURNAME = ["王", "李", "张", "刘", "陈", "杨", "赵", "黄", "周", "吴", "孙", "马"]
_ZH_WORD_GIVEN = [
    "天气", "明天", "电脑", "苹果", "学校", "飞机", "快乐", "今天", "火车", "老师",
    "米饭", "星期", "太阳", "朋友", "音乐", "银行",
]  # fmt: skip
_ZH_COMPOUND = ["欧阳", "司马", "诸葛", "上官", "皇甫", "慕容", "令狐", "东方", "尉迟", "公孙"]
_ZH_GIVEN_PLAIN = ["雨欣", "建国", "子涵", "浩然", "思远", "佳怡", "明轩", "晓峰", "婉清", "志强"]
_ZH_RARE_SURNAME = ["禤", "亓", "仉", "訾", "晁", "逯", "郗", "缑"]
_ZH_RARE_GIVEN = ["龑", "犇", "淼", "鑫", "垚", "焱", "骉", "昶", "彧", "翀", "喆", "堃", "劼", "懿", "赟", "燊"]
_ZH_FOREIGN_GIVEN = ["约翰", "玛丽亚", "穆罕默德", "伊丽莎白", "亚历山大", "安娜", "弗朗索瓦", "娜塔莎"]
_ZH_FOREIGN_FAMILY = ["史密斯", "加西亚", "阿卜杜拉", "冯·诺伊曼", "彼得罗夫", "穆勒", "奥康纳", "田中"]


_ZH_CONTROL_GIVEN = ["伟", "芳", "娜", "敏", "静", "丽", "强", "磊", "洋", "军", "杰", "娟"]


def _zh_control(rng: random.Random) -> str:
    return rng.choice(_ZH_SURNAME) + rng.choice(_ZH_CONTROL_GIVEN)


def _zh_words(rng: random.Random) -> str:
    return rng.choice(_ZH_SURNAME) + rng.choice(_ZH_WORD_GIVEN)


def _zh_four(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return rng.choice(_ZH_COMPOUND) + rng.choice(_ZH_GIVEN_PLAIN)
    father, mother = rng.sample(_ZH_SURNAME, 2)
    return father + mother + rng.choice(_ZH_GIVEN_PLAIN)


def _zh_rare(rng: random.Random) -> str:
    return rng.choice(_ZH_RARE_SURNAME) + "".join(rng.sample(_ZH_RARE_GIVEN, rng.randint(1, 2)))


def _zh_foreign(rng: random.Random) -> str:
    return f"{rng.choice(_ZH_FOREIGN_GIVEN)}·{rng.choice(_ZH_FOREIGN_FAMILY)}"


FAMILIES: dict[str, tuple[str, Callable[[random.Random], str]]] = {
    "control_common_en": ("en", _control),  # plain common names: what the templates alone cost
    "japanese": ("en", _ja),
    "vietnamese": ("en", _vi),
    "arabic": ("en", _ar),
    "slavic": ("en", _slavic),
    "yoruba_igbo": ("en", _yoruba),
    "irish_dutch": ("en", _celtic_dutch),
    "hawaiian": ("en", _hawaiian),
    "initials_particles": ("en", _initials),
    "english_words": ("en", _words),
    "short": ("en", _short),
    "long": ("en", _long),
    "control_common_zh": ("zh", _zh_control),
    "zh_word_given": ("zh", _zh_words),
    "zh_four_chars": ("zh", _zh_four),
    "zh_rare_chars": ("zh", _zh_rare),
    "zh_foreign_dot": ("zh", _zh_foreign),
}

# ---------------------------------------------------------------- ages, hobbies, templates

_ONES = ["", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
_TEENS = ["ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_ZH_DIGITS = "零一二三四五六七八九"


def english_number(n: int) -> str:
    """``n`` (10-99) in English words: 34 -> "thirty-four". (Written apart from the corpus's
    numerals on purpose: this set's texts must not share the training generators' code.)"""
    if n < 20:
        return _TEENS[n - 10]
    tens, ones = divmod(n, 10)
    return _TENS[tens] + (f"-{_ONES[ones]}" if ones else "")


def chinese_number(n: int) -> str:
    """``n`` (10-99) in Chinese numerals: 34 -> "三十四", 10 -> "十"."""
    tens, ones = divmod(n, 10)
    return ("" if tens == 1 else _ZH_DIGITS[tens]) + "十" + (_ZH_DIGITS[ones] if ones else "")


_EN_HOBBIES = [
    "chess", "pottery", "birdwatching", "rock climbing", "sourdough baking", "kayaking", "origami",
    "stargazing", "knitting", "fencing", "beekeeping", "salsa dancing",
]  # fmt: skip
_ZH_HOBBIES = ["下棋", "书法", "钓鱼", "爬山", "摄影", "养花", "太极拳", "剪纸", "骑车", "唱京剧"]

# {n}: name, {a}: age phrase, {h}: hobbies phrase. Positions: where the name sits.
_EN_TEMPLATES = {
    "start": [
        "{n} turned {a} this spring and spends most evenings on {h}.",
        "{n}, aged {a}, signed up for the club because of a love of {h}.",
        "{n} is {a} years old. Weekends are for {h}.",
    ],
    "middle": [
        "Last week the library welcomed {n}, who is {a} and enjoys {h}, as a volunteer.",
        "According to the form, {n} is {a} years of age and lists {h} as pastimes.",
        "At {a}, {n} still finds time for {h} every day.",
    ],
    "end": [
        "Age: {a}. Free time: {h}. Full name on the badge: {n}",
        "The {a}-year-old who runs the {h} group is called {n}",
        "Aged {a} and fond of {h}, the new tenant introduced themself as {n}",
    ],
}
_EN_DISTRACTORS = [
    " A neighbour, {d}, helped carry the boxes.",
    " The interview was arranged by {d}.",
    " {d} recommended the club.",
]
_ZH_TEMPLATES = {
    "start": [
        "{n}今年{a}岁，平时喜欢{h}。",
        "{n}，{a}岁，因为爱好{h}加入了社团。",
    ],
    "middle": [
        "上周图书馆来了一位新志愿者{n}，{a}岁，爱好是{h}。",
        "表格上写着，{n}今年{a}岁，业余时间{h}。",
    ],
    "end": [
        "年龄：{a}岁。爱好：{h}。名牌上的全名是{n}",
        "那位{a}岁、喜欢{h}的新房客自我介绍说叫{n}",
    ],
}
_ZH_DISTRACTORS = ["邻居{d}帮忙搬了箱子。", "面试是{d}安排的。", "是{d}推荐了这个社团。"]

_EN_INSTRUCTIONS = [
    "Pull out {f} of the person described below and answer in JSON.",
    "Give me a JSON object with {f} for the main person in this note:",
    "From the text that follows, extract {f} as JSON.",
]
_ZH_INSTRUCTIONS = [
    "请从下面这段话里提取主要人物的{f}，用 JSON 回答。",
    "阅读下文，以 JSON 给出{f}：",
]


SET = StrangerSet(
    families=FAMILIES,
    grouped_by="position",
    templates={"en": _EN_TEMPLATES, "zh": _ZH_TEMPLATES},
    distractors={"en": _EN_DISTRACTORS, "zh": _ZH_DISTRACTORS},
    instructions={"en": _EN_INSTRUCTIONS, "zh": _ZH_INSTRUCTIONS},
    hobbies={"en": _EN_HOBBIES, "zh": _ZH_HOBBIES},
    spell={"en": english_number, "zh": chinese_number},
)
