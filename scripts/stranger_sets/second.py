"""The second stranger's name set for scripts/eval_stranger_names.py (issue 33, a third opinion).

Written by a second helper (``stranger2``) who had read neither the training side
(scripts/name_generators.py, scripts/corpus/, scripts/make_corpus.py, scripts/train_tiny_model.py,
eval_generalisation.py's generators, the model card) nor the first stranger's lists and templates
(stranger_sets/first.py was only moved, not used as a model): only the runner and the functions
it imports. So neither the trainers nor the first outsider shaped these names or texts.

Families (12 in Latin script, 6 in Han characters), each from hand-written lists:

- ``control_plain_en`` (``Karen Hughes``) and ``control_plain_zh`` (``郑文博``): common names,
  what the templates and instructions cost by themselves;
- Korean, surname first with a hyphenated given name or in Western order (``Park Ji-hoon``,
  ``Seo-yeon Kim``); South Indian with initials (``K. S. Raghavan``) or long patronymic names
  (``Lakshmi Narayanan Iyer``); Turkish and Hungarian with their letters, Hungarian surname
  first (``Şükrü Öztürk``, ``Szőke Ildikó``); Spanish and Portuguese with two surnames and
  ``da/dos/de la/e`` (``João Pedro dos Santos Ferreira``); Nordic with ø/å/æ and Icelandic
  patronymics (``Sigrún Þórsdóttir``); Greek (``Chrysoula Triantafyllopoulou``); Māori and
  Pacific with macrons and glottal stops (``Tāne Ngata``, ``Fa'amoana Tuiasosopo``); Thai long
  surnames (``Kanokwan Srisuwannarat``); Chinese in pinyin inside English text, either order,
  the surname sometimes in capitals (``Ouyang Xiaoming``, ``ZHANG Yuting``); names written all
  in capitals or all in lower case (``MARGARET O'NEILL``, ``tomás ribeiro``); names with no
  family name at all, Burmese and Javanese (``Aung Kyaw Moe``, ``Suharti``);
- Han characters: traditional characters (``陳詠琪``); reduplicated given names (``韩冬冬``);
  Tibetan and Mongolian names, 3-5 characters with no surname and no dot (``次仁卓玛``,
  ``乌云其木格``); Japanese names in kanji (``佐佐木翔太``); Latin-script names inside Chinese
  text (``Lukas Becker``).

Templates are kinds of text rather than sentences: an email with a greeting and a signature, a
chat log with timestamps, a form whose labelled fields come in another order, a news item, a CSV
row under its header, a dialogue, a note with typos; 11 English and 7 Chinese. About seven texts
in ten have a second person (always from the same family, never given an age): in 5 of the 11
English and 3 of the 7 Chinese templates that person is part of the text and may come BEFORE the person asked about (the greeting of an
email, the first line of a chat); elsewhere a line is appended to half the texts (``cc:``, ``P.S.``). Ages stand
in different places (``I'm 34``, ``age: 34``, ``34 y/o``, ``(34)``, a CSV column), in digits or,
in half the texts, in words (``thirty-four``, ``三十四``); every other number in a text is below
18 or has more digits, so exactly one number in the text can be the age.

The right answer, decided here: the name exactly as the text writes it, and nothing else.
Titles around it are not part of it (``Dr. Park Ji-hoon`` -> ``Park Ji-hoon``, ``陳詠琪教授`` ->
``陳詠琪``, ``Capt.``, ``Prof.``, ``老师``, ``医生`` likewise), nor is a nickname (``Capt. Tāne Ngata
- "Skip" to friends`` -> ``Tāne Ngata``); the text's order and case are kept (``Szőke Ildikó``
is not turned round, ``MARGARET O'NEILL`` is not turned into ``Margaret O'Neill``).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from stranger_sets import StrangerSet

# ---------------------------------------------------------------- Latin-script families

_PLAIN_GIVEN = ["Karen", "Peter", "Linda", "Mark", "Susan", "George", "Helen", "Steven", "Nancy", "Kevin"]
_PLAIN_FAMILY = ["Carter", "Hughes", "Turner", "Parker", "Evans", "Collins", "Morgan", "Cooper", "Ward", "Bennett"]

_KO_FAMILY = ["Park", "Choi", "Jung", "Kang", "Yoon", "Jang", "Han", "Seo", "Shin", "Kwon", "Hwang", "Kim"]
_KO_GIVEN = [
    "Ji-hoon", "Seo-yeon", "Min-jun", "Ha-eun", "Do-yoon", "Su-bin", "Eun-ji", "Hyun-woo",
    "Ye-jin", "Jae-sung", "Na-rae", "Tae-yang",
]  # fmt: skip

_IN_INITIALS = ["K.", "S.", "R.", "V.", "T.", "M.", "N.", "P."]
_IN_FAMILY = [
    "Raghavan", "Balasubramanian", "Venkataraman", "Krishnamurthy", "Ramachandran", "Subramaniam",
    "Chidambaram", "Padmanabhan", "Iyer", "Nair",
]  # fmt: skip
_IN_GIVEN = ["Lakshmi", "Priya", "Arun", "Meenakshi", "Karthik", "Deepa", "Sundar", "Kavitha", "Gopal"]
_IN_FATHER = ["Narayanan", "Srinivasan", "Gopalakrishnan", "Ananthan", "Sethuraman"]

_TR_GIVEN = ["Şükrü", "Gülşen", "Çağrı", "Özlem", "İlker", "Ayşegül", "Doğan", "Büşra", "Ümit"]
_TR_FAMILY = ["Öztürk", "Çağlayan", "Yılmaz", "Şahin", "Karaağaç", "Güneş", "Doğru", "Kılıç"]
_HU_FAMILY = ["Szőke", "Kovács", "Tóth", "Szűcs", "Horváth", "Nagy-Bálint", "Erdős", "Fehér"]
_HU_GIVEN = ["Ildikó", "Zsófia", "Gyula", "Csaba", "Erzsébet", "Levente", "Enikő", "Bálint"]

_IB_GIVEN = [
    "María José", "João Pedro", "Ana Luísa", "Inés", "Gonçalo", "Maria da Graça", "José Antonio",
    "Conceição", "Álvaro", "Begoña",
]  # fmt: skip
_IB_SURNAME = [
    "Fernández", "dos Santos", "Ortega", "da Costa", "Ferreira", "de la Fuente", "Robles",
    "Gonçalves", "del Río", "Magalhães", "Núñez", "das Neves",
]  # fmt: skip

_NORDIC_GIVEN = ["Søren", "Åse", "Bjørn", "Sigrún", "Ægir", "Ragnhild", "Jørgen", "Gunnhild", "Þórir", "Solveig"]
_NORDIC_FAMILY = ["Ødegård", "Åkerlund", "Kjærsgaard", "Bråten", "Sæther", "Løvås", "Thorsø", "Haugen"]
_ICE_FATHER = ["Þór", "Guðmund", "Jón", "Einar", "Sigurð", "Ólaf"]

_GR_GIVEN = ["Konstantinos", "Eleni", "Dimitrios", "Chrysoula", "Panagiotis", "Vasiliki", "Spyridon", "Aikaterini"]
_GR_FAMILY = [
    "Papadopoulos", "Triantafyllopoulou", "Georgiou", "Karamanlidis", "Oikonomou", "Christodoulou",
    "Papanikolaou", "Vlachou",
]  # fmt: skip

_PACIFIC = [  # (given names, family names) of one tradition each: Māori, Tongan, Samoan
    (["Aroha", "Tāne", "Mere", "Wiremu", "Hēmi", "Ngaio"], ["Te Whare", "Ngata", "Tūhoe", "Te Rangi", "Pōmare"]),
    (["Mele", "Sione", "Losaline", "Viliami", "Salote"], ["Tupou", "Fifita", "Vaipulu", "Taufa", "Havili"]),
    (["Fa'amoana", "Sina", "Tavita", "Lagi", "Malia"], ["Tuiasosopo", "Leaupepe", "Fa'alogo", "Sapolu"]),
]

_TH_GIVEN = ["Somchai", "Kanokwan", "Thitiporn", "Anan", "Siriporn", "Prasert", "Wanida", "Narongrit"]
_TH_FAMILY = [
    "Wongsawat", "Srisuwannarat", "Chaiyaphruek", "Rattanakosin", "Phongphaichit", "Kittikhunwattana",
    "Suwannaphum", "Jirasakunthong",
]  # fmt: skip

_PY_FAMILY = ["Ouyang", "Zhang", "Xu", "Guo", "Zhuge", "Lü", "Qiu", "Xiao", "Situ", "Huang"]
_PY_GIVEN = ["Xiaoming", "Yuting", "Qiang", "Wenjing", "Zhiyuan", "Xinyi", "Jianguo", "Shuang", "Haoran", "Ruoxi"]

_CASE_GIVEN = ["Margaret", "Tomás", "Ingeborg", "Declan", "Rosalind", "Anselm", "Perpetua", "Gideon"]
_CASE_FAMILY = ["O'Neill", "Ribeiro", "Vandermeer", "Whitlock", "Brandt", "Achterberg", "Fairclough", "Pascoe"]

_BURMESE_PARTS = ["Aung", "Kyaw", "Moe", "Thiri", "Hla", "Zaw", "Myint", "Thandar", "Htet", "Nandar"]
_JAVANESE = ["Suharti", "Wiranto", "Sumarsih", "Budiono", "Sulastri", "Purnomo", "Tukiyem", "Hartono"]


def _plain_en(rng: random.Random) -> str:
    return f"{rng.choice(_PLAIN_GIVEN)} {rng.choice(_PLAIN_FAMILY)}"


def _korean(rng: random.Random) -> str:
    family, given = rng.choice(_KO_FAMILY), rng.choice(_KO_GIVEN)
    if rng.random() < 0.3:  # Western order, as on a foreign business card
        return f"{given} {family}"
    if rng.random() < 0.3:  # the given name run together, as many passports write it
        return f"{family} {given.replace('-', '').capitalize()}"
    return f"{family} {given}"


def _indian(rng: random.Random) -> str:
    if rng.random() < 0.5:  # the Tamil habit: the father's (and village's) initials before the name
        return " ".join(rng.sample(_IN_INITIALS, rng.randint(1, 2))) + " " + rng.choice(_IN_FAMILY)
    if rng.random() < 0.5:
        return f"{rng.choice(_IN_GIVEN)} {rng.choice(_IN_FATHER)} {rng.choice(_IN_FAMILY)}"
    return f"{rng.choice(_IN_GIVEN)} {rng.choice(_IN_FAMILY)}"


def _turkish_hungarian(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return f"{rng.choice(_TR_GIVEN)} {rng.choice(_TR_FAMILY)}"
    return f"{rng.choice(_HU_FAMILY)} {rng.choice(_HU_GIVEN)}"  # Hungarian: family name first


def _iberian(rng: random.Random) -> str:
    first, second = rng.sample(_IB_SURNAME, 2)
    joiner = " e " if rng.random() < 0.2 else " "  # Portuguese "da Costa e Silva"
    return f"{rng.choice(_IB_GIVEN)} {first}{joiner}{second}"


def _nordic(rng: random.Random) -> str:
    if rng.random() < 0.35:  # Icelandic: the father's name + son / dóttir, no family name
        given = rng.choice(["Sigrún", "Þórir", "Ægir", "Gunnhild", "Ragnhild"])
        suffix = "sdóttir" if given in ("Sigrún", "Gunnhild", "Ragnhild") else "sson"
        return f"{given} {rng.choice(_ICE_FATHER)}{suffix}"
    return f"{rng.choice(_NORDIC_GIVEN)} {rng.choice(_NORDIC_FAMILY)}"


def _greek(rng: random.Random) -> str:
    return f"{rng.choice(_GR_GIVEN)} {rng.choice(_GR_FAMILY)}"


def _pacific(rng: random.Random) -> str:
    given, family = rng.choice(_PACIFIC)
    return f"{rng.choice(given)} {rng.choice(family)}"


def _thai(rng: random.Random) -> str:
    return f"{rng.choice(_TH_GIVEN)} {rng.choice(_TH_FAMILY)}"


def _pinyin(rng: random.Random) -> str:
    family, given = rng.choice(_PY_FAMILY), rng.choice(_PY_GIVEN)
    shape = rng.randrange(3)
    if shape == 0:
        return f"{family} {given}"  # Chinese order
    if shape == 1:
        return f"{given} {family}"  # Western order
    return f"{family.upper()} {given}"  # the surname in capitals, as on conference badges


def _case(rng: random.Random) -> str:
    name = f"{rng.choice(_CASE_GIVEN)} {rng.choice(_CASE_FAMILY)}"
    return name.upper() if rng.random() < 0.5 else name.lower()


def _no_surname(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return rng.choice(_JAVANESE)  # one name and nothing else
    return " ".join(rng.sample(_BURMESE_PARTS, rng.randint(2, 3)))  # all parts are the name


# ---------------------------------------------------------------- Han-character families

_ZH_PLAIN_SURNAME = ["郑", "冯", "蒋", "沈", "韩", "唐", "曹", "许", "邓", "彭", "曾", "罗"]
_ZH_PLAIN_GIVEN = ["文博", "秀英", "桂兰", "海燕", "国庆", "春梅", "建军", "丽华", "志刚", "玉珍"]
_ZH_TRAD_SURNAME = ["陳", "黃", "劉", "鄭", "謝", "蕭", "顏", "鍾", "鄧", "葉"]
_ZH_TRAD_GIVEN = ["嘉欣", "志豪", "詠琪", "家瑋", "曉彤", "俊傑", "慧敏", "冠廷", "雅婷", "國華"]
_ZH_DOUBLED = "丹婷乐圆亮楠冬萌晶欢"
_ZH_TIBETAN_FIRST = ["扎西", "次仁", "格桑", "达瓦", "索朗", "尼玛", "洛桑"]
_ZH_TIBETAN_SECOND = ["顿珠", "卓玛", "央金", "旺堆", "拉姆", "平措"]
_ZH_MONGOLIAN = ["巴特尔", "乌云其木格", "斯琴高娃", "其其格", "额尔敦", "那仁花", "敖登格日勒", "苏和"]
_ZH_JA_SURNAME = ["渡边", "山本", "佐佐木", "小林", "中村", "松田", "石川", "森"]
_ZH_JA_GIVEN = ["健太", "美咲", "翔太", "由美子", "一郎", "优花", "大辅", "千寻"]
_ZH_LATIN_GIVEN = ["Lukas", "Emma", "Chloé", "Kevin", "Sofia", "Mateo", "Ingrid", "Rahul"]
_ZH_LATIN_FAMILY = ["Becker", "Dubois", "Chan", "Rossi", "Lindqvist", "Moreau", "Kaur", "Novak"]


def _plain_zh(rng: random.Random) -> str:
    return rng.choice(_ZH_PLAIN_SURNAME) + rng.choice(_ZH_PLAIN_GIVEN)


def _zh_traditional(rng: random.Random) -> str:
    return rng.choice(_ZH_TRAD_SURNAME) + rng.choice(_ZH_TRAD_GIVEN)


def _zh_doubled(rng: random.Random) -> str:
    return rng.choice(_ZH_PLAIN_SURNAME) + rng.choice(_ZH_DOUBLED) * 2


def _zh_minority(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return rng.choice(_ZH_TIBETAN_FIRST) + rng.choice(_ZH_TIBETAN_SECOND)
    return rng.choice(_ZH_MONGOLIAN)


def _zh_japanese(rng: random.Random) -> str:
    return rng.choice(_ZH_JA_SURNAME) + rng.choice(_ZH_JA_GIVEN)


def _zh_latin(rng: random.Random) -> str:
    return f"{rng.choice(_ZH_LATIN_GIVEN)} {rng.choice(_ZH_LATIN_FAMILY)}"


FAMILIES: dict[str, tuple[str, Callable[[random.Random], str]]] = {
    "control_plain_en": ("en", _plain_en),
    "korean": ("en", _korean),
    "indian_initials": ("en", _indian),
    "turkish_hungarian": ("en", _turkish_hungarian),
    "iberian_two_surnames": ("en", _iberian),
    "nordic_icelandic": ("en", _nordic),
    "greek": ("en", _greek),
    "maori_pacific": ("en", _pacific),
    "thai": ("en", _thai),
    "pinyin_in_english": ("en", _pinyin),
    "all_caps_or_lower": ("en", _case),
    "no_family_name": ("en", _no_surname),
    "control_plain_zh": ("zh", _plain_zh),
    "zh_traditional": ("zh", _zh_traditional),
    "zh_reduplicated": ("zh", _zh_doubled),
    "zh_tibetan_mongolian": ("zh", _zh_minority),
    "zh_japanese_kanji": ("zh", _zh_japanese),
    "zh_latin_in_chinese": ("zh", _zh_latin),
}

# ---------------------------------------------------------------- ages in words, hobbies

_SMALL = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_DECADES = {2: "twenty", 3: "thirty", 4: "forty", 5: "fifty", 6: "sixty", 7: "seventy", 8: "eighty", 9: "ninety"}


def spell_en(n: int) -> str:
    """An age 0-99 in English words, hyphenated the usual way: 47 -> "forty-seven"."""
    if n < 20:
        return _SMALL[n]
    return _DECADES[n // 10] + ("" if n % 10 == 0 else "-" + _SMALL[n % 10])


def spell_zh(n: int) -> str:
    """An age 10-99 in Chinese numerals: 47 -> "四十七", 15 -> "十五", 60 -> "六十"."""
    digits = "〇一二三四五六七八九"
    tens = "" if n // 10 == 1 else digits[n // 10]
    return tens + "十" + ("" if n % 10 == 0 else digits[n % 10])


_EN_HOBBIES = [
    "bouldering", "crossword puzzles", "gardening", "jigsaw puzzles", "woodworking", "choir singing",
    "trail running", "fly fishing", "board games", "sea swimming", "model railways", "embroidery",
]  # fmt: skip
_ZH_HOBBIES = ["跑步", "游泳", "看电影", "弹吉他", "做饭", "打羽毛球", "养猫", "种菜", "写诗", "跳广场舞"]

# ---------------------------------------------------------------- kinds of text

# {n}: the name, {a}: the age, {h}: the hobbies, {d}: a second person (optional). Numbers other
# than the age stay below 18 or have more digits (timestamps 09:05, ids 1042).
_EN_TEMPLATES = {
    "email": [
        "Subject: Saturday rota\n\nHi {d},\n\nCount me in for the early shift. I'm {a} and mostly into "
        "{h}, so anything outdoors suits me.\n\nCheers,\n{n}",
        "From: Dr. {n}\nTo: members list\nSubject: hello\n\nDear all, a short note for the newsletter: "
        "I am {a} y/o, I enjoy {h}, and I look forward to meeting you.",
    ],
    "chat": [
        "[09:05] {d}: who is the new face at the front desk?\n[09:06] {n}: that's me! {a}, just moved "
        "here, big on {h}\n[09:07] {d}: welcome aboard",
        "<{n}> ok fine. age: {a}. hobbies: {h}. happy now?\n<modbot> very, thanks",
    ],
    "form": [
        "Hobbies / interests: {h}\nAge (years): {a}\nFull name: {n}\nMembership: standard",
        "Name (as on ID): {n} | Age: {a} | Interests: {h}",
    ],
    "news": [
        "HARBOURTOWN - Prof. {n} ({a}), a keen amateur of {h}, was elected chair of the residents' "
        "association on Tuesday, succeeding {d}.",
    ],
    "csv": [
        'member_id,full_name,age,hobbies\n1042,"{n}",{a},"{h}"',
    ],
    "dialogue": [
        "Receptionist: Name, please?\nVisitor: It's {n}.\nReceptionist: And how old are you?\n"
        "Visitor: {a}. I'm here for the {h} group.\nReceptionist: Take a seat; {d} will call you in.",
        'Coach: Everyone, meet Capt. {n} - "Skip" to friends. Skip is {a} and has done {h} for years.',
    ],
    "note": [
        "note to self - ring {n} abt the flat. theyre {a} (!!), do {h}, seem nice. {d} gave me there number",
    ],
}
_ZH_TEMPLATES = {
    "email": [
        "主题：周六值班\n\n{d}你好：\n\n早班算我一个。我今年{a}岁，平时喜欢{h}，户外的活都可以找我。\n\n{n}\n敬上"
    ],
    "chat": ["[09:05] {d}：前台新来的是谁呀？\n[09:06] {n}：是我！{a}岁，刚搬来，爱{h}\n[09:07] {d}：欢迎欢迎"],
    "form": ["爱好：{h}\n年龄：{a}\n姓名：{n}\n会员类型：普通"],
    "news": ["本报讯 {n}教授（{a}岁）周二当选业主委员会主任，其业余爱好为{h}。"],
    "csv": ["编号,姓名,年龄,爱好\n1042,{n},{a},{h}"],
    "dialogue": [
        "护士：叫什么名字？\n病人：{n}。\n护士：多大了？\n病人：{a}岁。平时就{h}。\n护士：好，稍等，{d}医生马上来。"
    ],
    "note": ["便条：明天请{n}老师来开会（大家都叫这位“老顽童”），{a}岁了还天天{h}。"],
}
# Appended to half the texts whose template has no second person of its own.
_EN_DISTRACTORS = ["\nP.S. {d} says hello.", "\ncc: {d}", "\n(entered by {d})"]
_ZH_DISTRACTORS = ["\n附：{d}向你问好。", "\n抄送：{d}", "\n（录入人：{d}）"]

_EN_INSTRUCTIONS = [
    "Return {f} of the person this is about, as a JSON object.",
    "Read the record below and fill in {f}; reply with JSON only.",
    "Who is this about? Answer in JSON with {f}.",
]
_ZH_INSTRUCTIONS = [
    "根据下面的内容，用 JSON 写出此人的{f}。",
    "下面是一段记录，请以 JSON 返回记录主人公的{f}：",
]

SET = StrangerSet(
    families=FAMILIES,
    grouped_by="kind",
    templates={"en": _EN_TEMPLATES, "zh": _ZH_TEMPLATES},
    distractors={"en": _EN_DISTRACTORS, "zh": _ZH_DISTRACTORS},
    instructions={"en": _EN_INSTRUCTIONS, "zh": _ZH_INSTRUCTIONS},
    hobbies={"en": _EN_HOBBIES, "zh": _ZH_HOBBIES},
    spell={"en": spell_en, "zh": spell_zh},
)
