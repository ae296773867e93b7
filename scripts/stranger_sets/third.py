"""The third outsider's name set: real-world names inside the kinds of text people paste into an
extraction tool.

Written on 2026-12-04 by a third outsider (a helper session) who had not read
scripts/stranger_sets/first.py or second.py, scripts/corpus/, scripts/make_corpus.py,
scripts/name_generators.py, scripts/eval_generalisation.py, the extraction results in
benchmarks/results/, the bundled model's MODEL_CARD.md, training/ or chapters/. Only this
package's interface and the runner (scripts/eval_stranger_names.py) were read.

It holds 17 English-text families (Irish and Hawaiian spellings with apostrophes and okina,
Spanish double surnames with particles, Arabic nasab chains, Vietnamese and Japanese names with
and without their diacritics, Korean and Cantonese given names with hyphens, Tamil initials,
two-letter names, very long Portuguese, Thai and Sri Lankan names...) and 8 Chinese-text ones
(compound and double surnames, Uyghur names with three kinds of middle dot, Tibetan and Mongolian
names, transliterated foreign names, Japanese names in kanji or kana, Latin-Chinese mixes as
WeChat shows them, one-character given names that read as words), each language with a control
family of plain common names. The texts are grouped by ``kind``: 13 English kinds (tickets,
invoices, bookings, intake forms, obituaries, voicemail transcripts, CRM exports...) and 9
Chinese ones (快递单, 病历, 成绩单, 租房合同, 群公告, 朋友圈, 简历, 征婚启事, 志愿者登记表).
Every number in a template lies outside 18-90 or inside a longer number, so the age is the only
one a reader could take for it.
"""

from __future__ import annotations

import random
import unicodedata
from collections.abc import Callable

from stranger_sets import StrangerSet

Make = Callable[[random.Random], str]


def _strip_marks(text: str) -> str:
    """The name as a system that drops diacritics stores it (Đ has no mark to drop, so it is mapped)."""
    text = text.replace("Đ", "D").replace("đ", "d")
    return "".join(c for c in unicodedata.normalize("NFD", text) if not unicodedata.combining(c))


# ---------------------------------------------------------------- English-text families


def control_plain_en(rng: random.Random) -> str:
    first = ["James", "Mary", "Robert", "Linda", "Michael", "Sarah", "David", "Karen", "Daniel", "Emily"]
    last = ["Smith", "Johnson", "Brown", "Miller", "Davis", "Wilson", "Taylor", "Anderson", "Moore", "Clark"]
    return f"{rng.choice(first)} {rng.choice(last)}"


def irish_gaelic(rng: random.Random) -> str:
    given = ["Siobhán", "Aoife", "Pádraig", "Caoimhe", "Seán", "Niamh", "Oisín", "Róisín", "Ciarán", "Gráinne"]
    surname = [
        "O'Sullivan", "O'Donoghue", "Ó Súilleabháin", "Ní Bhriain", "Mac Giolla Phádraig",
        "McCarthy", "Mac an tSaoir", "O'Neill", "Nic Aodha", "Ó Dálaigh",
    ]  # fmt: skip
    return f"{rng.choice(given)} {rng.choice(surname)}"


def hispanic_two_surnames(rng: random.Random) -> str:
    given = ["María José", "Juan Carlos", "Ana Sofía", "José Luis", "Lucía", "Alejandro", "Ximena", "Rodrigo"]
    surnames = ["García", "Fernández", "de la Fuente", "del Río", "Ortega", "Núñez", "Ibáñez", "de los Santos"]
    a, b = rng.sample(surnames, 2)
    join = rng.choice([" ", " ", "-", " y "])  # Spain and Latin America write the pair all these ways
    return f"{rng.choice(given)} {a}{join}{b}"


def dutch_german_particles(rng: random.Random) -> str:
    given = ["Jan", "Anneke", "Pieter", "Femke", "Dirk", "Maartje", "Friedrich", "Liesel", "Joost", "Griet"]
    particle = ["van", "van der", "van den", "de", "ter", "van 't", "von", "von der", "zu"]
    root = ["Berg", "Veen", "Hoek", "Bülow", "Heide", "Wiel", "Brink", "Linden", "Graaf", "Hövel"]
    return f"{rng.choice(given)} {rng.choice(particle)} {rng.choice(root)}"


def arabic_nasab(rng: random.Random) -> str:
    male = ["Mohammed", "Abdullah", "Omar", "Yousef", "Hamad", "Khalid", "Tariq", "Saif"]
    female = ["Fatima", "Khadija", "Layla", "Mariam", "Noura", "Aisha", "Huda", "Reem"]
    father = ["Rashid", "Saeed", "Hassan", "Abdulaziz", "Ibrahim", "Salem", "Nasser", "Jaber"]
    family = ["Al-Qahtani", "al-Khouri", "Al Shamsi", "El-Sayed", "Abdel-Rahman", "Al-Hashimi", "Al Mansoori"]
    is_male = rng.random() < 0.5
    given = rng.choice(male if is_male else female)
    shape = rng.random()
    if shape < 0.4:  # the chain: given, "son/daughter of" father, family
        return f"{given} {'bin' if is_male else 'bint'} {rng.choice(father)} {rng.choice(family)}"
    if shape < 0.7:  # the father's name as a middle name, as passports print it
        return f"{given} {rng.choice(father)} {rng.choice(family)}"
    return f"{given} {rng.choice(family)}"


def vietnamese(rng: random.Random) -> str:
    surname = ["Nguyễn", "Trần", "Lê", "Phạm", "Hoàng", "Huỳnh", "Phan", "Vũ", "Đặng", "Bùi"]
    middle = ["Văn", "Thị", "Minh", "Ngọc", "Đức", "Thanh", "Quốc", "Hữu"]
    given = ["Hùng", "Lan", "Tuấn", "Hương", "Dũng", "Phương", "Khoa", "Thảo", "Anh", "Vy"]
    name = f"{rng.choice(surname)} {rng.choice(middle)} {rng.choice(given)}"
    return _strip_marks(name) if rng.random() < 0.3 else name


def korean(rng: random.Random) -> str:
    surname = ["Kim", "Lee", "Park", "Choi", "Jung", "Kang", "Yoon", "Jang", "Lim", "Han"]
    syllable = ["Min", "Ji", "Seo", "Hyun", "Woo", "Jun", "Yeon", "Ha", "Eun", "Soo"]
    a, b = rng.sample(syllable, 2)
    shape = rng.random()
    if shape < 0.4:
        return f"{rng.choice(surname)} {a}-{b.lower()}"  # surname first, as in Korea
    if shape < 0.8:
        return f"{a}-{b.lower()} {rng.choice(surname)}"  # turned round for a Western form
    return f"{rng.choice(surname)} {a}{b.lower()}"  # the hyphen dropped


def west_african(rng: random.Random) -> str:
    given = [
        "Olúwaseun", "Chukwuemeka", "Ngozi", "Kwame", "Akosua", "Adaeze",
        "Babatunde", "Yaw", "Efua", "Fọláṣadé", "Chiamaka", "Kofi",
    ]  # fmt: skip
    surname = [
        "Adébáyọ̀", "Okonkwo", "Mensah", "Boateng", "Oyelaran-Bello",
        "Nwachukwu", "Asante", "Ògúnlèyé", "Eze", "Owusu-Ansah",
    ]  # fmt: skip
    return f"{rng.choice(given)} {rng.choice(surname)}"


def polynesian(rng: random.Random) -> str:
    given = ["Keʻalohilani", "Mānoa", "Tāne", "Leilani", "Kahiau", "Aroha", "Wiremu", "Mere", "Sione", "Losana"]
    surname = ["Kahananui", "Kealoha", "Te Whiti", "Ngāta", "Tuiasosopo", "Fifita", "Kapaona", "Te Rangi-Hīroa"]
    return f"{rng.choice(given)} {rng.choice(surname)}"


def two_letter_names(rng: random.Random) -> str:
    given = ["Al", "Bo", "Ed", "Jo", "Ty", "Vi", "Li", "Su", "Ky", "Oz"]
    surname = ["Wu", "Ng", "Li", "Ma", "Oh", "Yi", "Ek", "Ho", "Do", "Le"]
    return f"{rng.choice(given)} {rng.choice(surname)}"


def very_long_names(rng: random.Random) -> str:
    shape = rng.random()
    if shape < 0.4:  # Brazilian: two given names and a chain of family names
        given = ["Maria Eduarda", "João Pedro", "Ana Beatriz", "Luiz Henrique", "Maria Clara", "Pedro Henrique"]
        chain = ["dos Santos", "Oliveira", "Pereira", "da Silva", "Carvalho", "de Albuquerque", "Cavalcanti"]
        return f"{rng.choice(given)} {' '.join(rng.sample(chain, rng.randint(3, 4)))}"
    if shape < 0.7:  # Thai: long surnames made to be unique
        given = ["Thanakorn", "Siriporn", "Kittisak", "Pimchanok", "Worawut", "Nattaya", "Chanathip", "Rungnapa"]
        surname = ["Wongsawatdichai", "Chaiyaphruek", "Srisuwannakul", "Rattanapongsakorn", "Phanomwanchai"]
        return f"{rng.choice(given)} {rng.choice(surname)}"
    # Sri Lankan: a house name (ge name) before the given names
    house = ["Wijesinghe Arachchige", "Hettiarachchige", "Kankanamge", "Mudiyanselage", "Liyanage"]
    given = ["Don Nimal", "Chamari Sandamali", "Don Ruwan Kumara", "Dilani Priyanka", "Kasun Tharaka"]
    surname = ["Perera", "Fernando", "Jayasuriya", "Bandara", "Gunawardena"]
    return f"{rng.choice(house)} {rng.choice(given)} {rng.choice(surname)}"


def tamil_initials(rng: random.Random) -> str:
    initials = ["R.", "S.", "K.", "M.", "V.", "T.", "P.", "N."]
    given = [
        "Karthikeyan", "Anitha", "Lakshmi", "Senthil", "Priya", "Balasubramanian",
        "Deepa", "Venkatesh", "Meenakshi", "Arun",
    ]  # fmt: skip
    lead = "".join(rng.sample(initials, rng.randint(1, 2)))
    shape = rng.random()
    if shape < 0.5:
        return f"{lead} {rng.choice(given)}"  # "S.P. Lakshmi"
    if shape < 0.8:
        return f"{rng.choice(given)} {lead}"  # the initial after, as on many forms
    return f"{lead.replace('.', '. ').strip()} {rng.choice(given)}"  # "S. P. Lakshmi"


def central_european(rng: random.Random) -> str:
    given = ["Małgorzata", "Jiří", "Ágnes", "Łukasz", "Zsófia", "Dušan", "Bartłomiej", "Gergő", "Věra", "Tomáš"]
    surname = [
        "Wiśniewska", "Dvořák", "Szőke", "Błaszczykowski", "Nagy-Tóth",
        "Procházková", "Krzyżanowski", "Horváth", "Šťastný", "Kowalczyk",
    ]  # fmt: skip
    return f"{rng.choice(given)} {rng.choice(surname)}"


def nordic(rng: random.Random) -> str:
    male = ["Jón", "Ólafur", "Björn", "Søren", "Gunnar", "Halldór"]
    female = ["Þórunn", "Guðrún", "Sigríður", "Åsa", "Ingrid", "Eydís"]
    son = ["Guðmundsson", "Sigurðsson", "Ólafsson", "Einarsson", "Magnússon"]
    dottir = ["Guðmundsdóttir", "Sigurðardóttir", "Ólafsdóttir", "Einarsdóttir", "Magnúsdóttir"]
    family = ["Ødegård", "Lindqvist", "Bjørnstad", "Åberg", "Sæther", "Kjærsgaard"]
    is_male = rng.random() < 0.5
    given = rng.choice(male if is_male else female)
    if rng.random() < 0.5:  # an Icelandic patronymic, which follows the person's sex
        return f"{given} {rng.choice(son if is_male else dottir)}"
    return f"{given} {rng.choice(family)}"


def double_barrelled(rng: random.Random) -> str:
    given = ["Olivia", "Hugh", "Priya", "Marcus", "Imogen", "Tariq", "Beatrix", "Rafael"]
    parts = ["Fiennes", "Tanaka", "Reyes", "Whitworth", "Okafor", "Lindgren", "Bose", "Montague", "Kowalski"]
    a, b = rng.sample(parts, 2)
    return f"{rng.choice(given)} {a}-{b}"


def hong_kong(rng: random.Random) -> str:
    english = ["Tony", "Winnie", "Kenneth", "Cherry", "Alvin", "Queenie", "Raymond", "Fanny", "Edmond", "Mandy"]
    surname = ["Leung", "Chan", "Wong", "Cheung", "Lau", "Tsang", "Yip", "Kwok", "Lam", "Fung"]
    cantonese = ["Chiu-wai", "Tai-man", "Siu-ming", "Ka-yan", "Wing-sze", "Hoi-lam", "Chun-kit", "Man-ying"]
    shape = rng.random()
    if shape < 0.4:
        return f"{rng.choice(english)} {rng.choice(surname)} {rng.choice(cantonese)}"  # all three, as HK IDs
    if shape < 0.7:
        return f"{rng.choice(surname)} {rng.choice(cantonese)}"
    return f"{rng.choice(english)} {rng.choice(surname)}"


def japanese_romaji(rng: random.Random) -> str:
    surname = ["Satō", "Suzuki", "Takahashi", "Itō", "Watanabe", "Yamamoto", "Nakamura", "Ōta", "Saitō", "Kōno"]
    given = ["Yūki", "Haruto", "Sakura", "Kenji", "Yōko", "Ren", "Aoi", "Shōta", "Mei", "Daisuke"]
    s, g = rng.choice(surname), rng.choice(given)
    name = f"{s} {g}" if rng.random() < 0.4 else f"{g} {s}"
    return _strip_marks(name) if rng.random() < 0.4 else name


# ---------------------------------------------------------------- Chinese-text families

_COMMON_SURNAMES = ["王", "李", "张", "刘", "陈", "杨", "黄", "赵", "周", "吴"]


def control_plain_zh(rng: random.Random) -> str:
    given = ["伟", "芳", "娜", "敏", "磊", "军", "秀英", "建华", "志强", "丽娟", "海燕", "晓明", "俊杰", "子涵"]
    return rng.choice(_COMMON_SURNAMES) + rng.choice(given)


def compound_surname_zh(rng: random.Random) -> str:
    surname = ["欧阳", "司马", "上官", "诸葛", "慕容", "东方", "令狐", "皇甫", "尉迟", "司徒", "端木", "公孙"]
    given = ["娜娜", "明轩", "婉清", "晓", "静怡", "子墨", "振宇", "嘉欣", "浩", "若曦"]
    return rng.choice(surname) + rng.choice(given)


def minority_zh(rng: random.Random) -> str:
    shape = rng.random()
    if shape < 0.5:  # Uyghur and Kazakh: given name, a dot, the father's name; forms type the dot three ways
        given = ["阿依古丽", "古丽娜扎", "艾力", "努尔兰", "热依拉", "帕提古丽", "吐尔逊", "阿迪力"]
        father = ["买买提", "艾买提", "吐尔洪", "沙依拉保", "阿不力孜", "热合曼", "玉素甫", "依明"]
        dot = rng.choice(["·", "·", "•", "."])
        return f"{rng.choice(given)}{dot}{rng.choice(father)}"
    if shape < 0.75:  # Tibetan: two two-syllable names, no surname
        first = ["扎西", "次仁", "格桑", "丹增", "索朗", "达瓦", "尼玛", "白玛"]
        second = ["卓玛", "央金", "梅朵", "平措", "旺堆", "拉姆", "多吉", "曲珍"]
        return rng.choice(first) + rng.choice(second)
    mongolian = ["巴特尔", "乌云其木格", "其其格", "苏日娜", "额尔敦毕力格", "斯琴高娃", "呼和巴日", "阿拉坦仓"]
    return rng.choice(mongolian)


def foreign_transliterated_zh(rng: random.Random) -> str:
    given = ["约翰", "玛丽亚", "穆罕默德", "安娜", "彼得", "伊丽莎白", "亚历山大", "索菲亚", "迈克尔", "娜塔莎"]
    surname = ["史密斯", "加西亚", "伊万诺夫", "穆勒", "阿卜杜拉", "约翰逊", "罗德里格斯", "科瓦尔斯基", "费尔南德斯"]
    if rng.random() < 0.2:  # a middle initial kept in Latin letters, as the press writes it
        return f"{rng.choice(given)}·{rng.choice('CJKLMR')}·{rng.choice(surname)}"
    return f"{rng.choice(given)}·{rng.choice(surname)}"


def mixed_script_zh(rng: random.Random) -> str:
    english = ["Kevin", "Amy", "Jason", "Lisa", "Tony", "Vivian", "Eric", "Cindy", "Leo", "Grace"]
    han = ["张", "王", "李", "陈", "刘", "黄", "林", "周"]
    pinyin = ["Zhang", "Wang", "Li", "Chen", "Liu", "Huang", "Lin", "Zhou"]
    given = ["晓明", "佳怡", "思远", "雨桐", "子豪", "梦琪", "博文", "欣然"]
    shape = rng.random()
    if shape < 0.3:
        return f"{rng.choice(english)} {rng.choice(pinyin)}"
    if shape < 0.6:
        return rng.choice(english) + rng.choice(han)  # a WeChat remark: "Kevin张"
    return f"{rng.choice(han)}{rng.choice(given)} {rng.choice(english)}"  # the Chinese name, then the English


def double_surname_zh(rng: random.Random) -> str:
    # A married name with the husband's surname first (Hong Kong, Taiwan) or a child given both parents' surnames.
    first, second = rng.sample(["陈", "范", "叶", "李", "林", "徐", "刘", "张", "黄", "杨"], 2)
    given = ["美玲", "淑芬", "玉珍", "秀琴", "月娥", "惠珍", "子涵", "一诺", "思远", "欣怡"]
    return first + second + rng.choice(given)


def japanese_kanji_zh(rng: random.Random) -> str:
    surname = ["山田", "佐藤", "铃木", "高桥", "渡边", "伊藤", "中村", "小林", "田中", "松本"]
    given = ["太郎", "花子", "健一", "美咲", "翔太", "由美", "大辅", "阳菜", "拓也", "惠子"]
    kana = ["さくら", "ひなた", "あおい", "ゆうき"]  # some given names are written in kana alone
    return rng.choice(surname) + rng.choice(kana if rng.random() < 0.2 else given)


def one_char_given_zh(rng: random.Random) -> str:
    # Two characters in all; many read as a word too (安静 "quiet", 高山 "mountain", 白雪 "snow").
    surname = ["高", "安", "江", "夏", "文", "白", "金", "方", "石", "向"]
    given = ["静", "山", "宁", "雪", "峰", "然", "冰", "洁", "岚", "阳"]
    return rng.choice(surname) + rng.choice(given)


# ---------------------------------------------------------------- texts

# Every {d} is someone else (an agent, a doctor, a sender); only {n} is given an age and hobbies.
_EN_TEMPLATES = {
    "support_ticket": [
        "Ticket #204117 | Status: Open\nFrom: {n}\nSubject: Wrong details on my profile\n\n"
        "Hi, the profile page shows the wrong age. I am {a}, please fix it. "
        "Also my hobbies should read {h}. Thanks!",
        "[Helpdesk] Case 7731-A\nAssigned agent: {d}\nCustomer: {n} (age {a})\n"
        "Notes: customer asked about a delayed order; says the gear is for their hobbies, {h}. "
        "Agent promised a callback.",
    ],
    "invoice": [
        "INVOICE No. 2026-1187\nBill to: {n}\nItem: Annual membership, Riverside Leisure Club\n"
        "Amount due: $315.00\nMember profile on file: age {a}; hobbies: {h}.\nPayment terms: net 14 days.",
        "Receipt from Harbour Outfitters\nSold to: {n}\nServed by: {d}\nTotal: £1,240.00\n"
        "Loyalty card holder's age: {a}\nLoyalty card holder's hobbies: {h}\nThank you for shopping with us!",
    ],
    "booking": [
        "Booking confirmation HX7Q2P\nGuest: {n}\nCheck-in: Fri 12 Jun 2026, from 15:00\nNights: 3\n"
        "Guest age: {a}\nGuest's hobbies (for our concierge): {h}",
        "Your flight is confirmed!\nPassenger: {n}, age {a}\nBooked by: {d}\n"
        "Route: Lisbon to Reykjavik, departs 07:10\nPassenger's hobbies (travel profile): {h}",
    ],
    "medical_intake": [
        "PATIENT INTAKE FORM\nName: {n}\nAge: {a}\nReason for visit: recurring knee pain\n"
        "Hobbies/activities: {h}\nSmoker: no",
        "Referral letter\nDear colleague,\nI am referring {n}, aged {a}, for assessment of shoulder pain. "
        "The patient's hobbies are {h}, and they are keen to return to them.\nKind regards,\nDr. {d}",
    ],
    "sign_up_sheet": [
        "Evening Class Sign-up Sheet, spring term\nParticipant: {n}\nAge: {a}\n"
        "What do you do for fun? {h}\nEmergency contact (not attending): {d}",
        "Volunteer roster, Saturday shift\nName | Age | Hobbies | Station\n{n} | {a} | {h} | registration desk",
    ],
    "sports_result": [
        "Results: Lakeside Half Marathon\nFirst in the age group: {n} ({a}), finishing in 1:12:04. "
        "Asked about life off the course, the winner named {h} as their hobbies.",
        "Club tennis final: {n} beat {d} 6-4, 7-5. The winner, aged {a}, listed {h} as hobbies off the court.",
    ],
    "obituary": [
        "{n} passed away peacefully at home on 3 March, aged {a}. Family and friends will remember "
        "a life full of their hobbies, {h}. A service will be held at St Brigid's Church.",
        "In loving memory of {n}, who died on 9 November at the age of {a} and whose hobbies were {h}. "
        "Survived by their sibling {d}.",
    ],
    "forum_post": [
        "Re: Introduce yourself thread\nPosted by {n} on Tue 10:05\n"
        "Hello all! Long-time lurker, first post. I'm {a} and my hobbies are {h}. Glad to be here.",
        "> {d} wrote:\n> Welcome! Tell us about yourself.\n\nThanks! I'm {n}, {a} years old, and my hobbies are {h}.",
    ],
    "voicemail": [
        'Voicemail transcript (auto-generated)\n"Hi, this is {n} calling about the community garden plot. '
        "Um, I'm {a}, and my hobbies are {h}, so I'd love to get involved. Call me back, thanks.\"",
        "Transcript of a message left for {d}:\n\"Hello, it's {n}. For the club form: I'm {a}, "
        'and my hobbies are, uh, {h}. Bye!"',
    ],
    "social_post": [
        "{n} @ 2h\njust turned {a} 🎉 celebrating with my favourite hobbies: {h}",
        "Happy birthday to my best friend {n}, {a} today!! Here's to more of your hobbies, {h} 💛 (from {d})",
    ],
    "contract": [
        "TENANCY AGREEMENT (extract)\nThis agreement is made between Northside Lettings Ltd (the Landlord) "
        "and {n} (the Tenant), who confirms being {a} years of age. Clause 9: the Tenant may store "
        "equipment for the Tenant's hobbies ({h}) in the basement storage unit.",
        "EMPLOYMENT CONTRACT: PARTICULARS\nEmployee: {n}\nEmployee's age at start date: {a}\n"
        "Line manager: {d}\nThe wellbeing allowance may be spent on the employee's hobbies: {h}.",
    ],
    "crm_export": [
        "contact_id: 5512093\nfull_name: {n}\nage: {a}\nhobbies: {h}\nsource: web sign-up\naccount_owner: {d}",
        "Name\tAge\tHobbies\tNewsletter\n{n}\t{a}\t{h}\tyes",
    ],
    "job_application": [
        "Application for: Warehouse Associate\nApplicant: {n}\nApplicant's age: {a}\nReferee: {d}\n"
        "Applicant's statement: Outside work my hobbies are {h}.",
        "Cover note: Dear hiring team, my name is {n}. I am {a} and my hobbies are {h}. I would love to join you.",
    ],
}

_ZH_TEMPLATES = {
    "zh_waybill": [
        "【顺丰速运】运单号：SF1402283365017\n收件人：{n}\n收件地址：浙江省杭州市西湖区文三路\n"
        "备注：收件人{a}岁，平时爱好{h}，包裹内为相关器材，请轻拿轻放。",
        "寄件人：{d}\n收件人：{n}（{a}岁）\n物品：生日礼物\n留言：收件人的爱好是{h}，希望你喜欢这份礼物！",
    ],
    "zh_medical_record": [
        "门诊病历\n姓名：{n}\n年龄：{a}岁\n主诉：右膝关节疼痛两周\n个人史：平素爱好{h}，无吸烟饮酒史。",
        "入院记录\n患者{n}，{a}岁，因反复头晕入院。患者自述业余爱好为{h}。\n主治医师：{d}",
    ],
    "zh_report_card": [
        "春季学期 成人夜校成绩单\n学员：{n}\n年龄：{a}岁\n总评：优秀\n兴趣爱好：{h}\n班主任：{d}",
        "学员档案\n姓名：{n}\n年龄：{a}岁\n各科成绩：语文 优，英语 良\n爱好：{h}",
    ],
    "zh_lease": [
        "房屋租赁合同（节选）\n出租方（甲方）：{d}\n承租方（乙方）：{n}，{a}岁\n"
        "第六条：乙方的爱好为{h}，甲方同意乙方在阳台存放相关用品。",
        "租客信息登记\n租客姓名：{n}\n年龄：{a}岁\n兴趣爱好：{h}\n入住日期：2026年3月1日",
    ],
    "zh_group_notice": [
        "【群公告】欢迎新朋友加入读书会！新成员：{n}，今年{a}岁，爱好是{h}。大家多多关照～",
        "@所有人 本周六活动报名截止。已报名：{n}（{a}岁，爱好{h}）。如有疑问请联系群主{d}。",
    ],
    "zh_moments": [
        "今天是我的{a}岁生日🎂 感谢大家的祝福！新的一年继续坚持我的爱好：{h}。——{n}",
        "{d}：祝{n}{a}岁生日快乐！你的爱好{h}今年也要继续哦～",
    ],
    "zh_resume": [
        "个人简历\n姓名：{n}\n年龄：{a}岁\n求职意向：行政助理\n兴趣爱好：{h}\n推荐人：{d}",
        "自我介绍：大家好，我叫{n}，今年{a}岁，毕业于师范学院，平时的爱好是{h}。",
    ],
    "zh_matchmaking": [
        "【征婚】{n}，{a}岁，本科学历，爱好{h}，诚寻有缘人。介绍人：{d}",
        "相亲资料卡\n姓名：{n}\n年龄：{a}岁\n职业：会计\n爱好：{h}",
    ],
    "zh_volunteer_form": [
        "社区志愿者登记表\n姓名：{n}　年龄：{a}岁\n特长/爱好：{h}\n登记人：{d}",
        "志愿者报名回执：{n}同学，{a}岁，爱好{h}，已分配到图书角服务。",
    ],
}

# Most start a line of their own: appended to a form or a table row, a note sits below it.
_DISTRACTORS = {
    "en": ["\ncc: {d}", "\nForwarded by {d}.", " (Entered by {d}.)", "\nSent from the phone of {d}", "\nQueries: {d}."],
    "zh": ["\n录入：{d}", "\n转发自{d}。", "\n抄送：{d}", "\n——来自{d}的分享", "如有疑问请联系{d}。"],
}

_INSTRUCTIONS = {
    "en": [
        "Extract the {f} of the person this text is about. Answer with JSON only.",
        "Read the text below and return a JSON object with {f}.",
        "I copied this from our system. Give me {f} as JSON, please:",
        "Fill in {f} for the main person in the following text (JSON):",
        "JSON only: {f} of whoever the text is about.",
    ],
    "zh": [
        "请从下面的文字中提取主人公的{f}，以JSON格式输出。",
        "帮我把这段内容里那个人的{f}整理成JSON：",
        "阅读以下文本，返回包含{f}的JSON对象。",
        "提取{f}，只输出JSON，不要解释。",
        "下面是我复制来的一段话，请给出当事人的{f}（JSON）：",
    ],
}

_HOBBIES = {
    "en": [
        "birdwatching", "sourdough baking", "bouldering", "amateur radio", "salsa dancing", "fly fishing",
        "urban sketching", "restoring vintage bikes", "crossword puzzles", "beekeeping", "sea kayaking",
        "playing the ukulele", "board games", "pottery", "trail running", "stamp collecting", "karaoke",
        "geocaching", "woodworking", "tai chi",
    ],
    "zh": [
        "钓鱼", "书法", "广场舞", "养多肉", "追剧", "打羽毛球", "摄影", "烘焙", "徒步", "下围棋",
        "弹古筝", "跑马拉松", "集邮", "骑行", "唱K", "剪纸", "露营", "打太极拳", "养鸽子", "做手工",
    ],
}  # fmt: skip

# ---------------------------------------------------------------- ages in words

_EN_ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen".split()
_EN_ONES += ["sixteen", "seventeen", "eighteen", "nineteen"]
_EN_TENS = {2: "twenty", 3: "thirty", 4: "forty", 5: "fifty", 6: "sixty", 7: "seventy", 8: "eighty", 9: "ninety"}
_ZH_DIGITS = "零一二三四五六七八九"


def spell_en(n: int) -> str:
    """18-99 in English words, hyphenated: 47 -> "forty-seven"."""
    if n < 20:
        return _EN_ONES[n]
    tens, ones = divmod(n, 10)
    return _EN_TENS[tens] + (f"-{_EN_ONES[ones]}" if ones else "")


def spell_zh(n: int) -> str:
    """18-99 in Chinese numerals: 18 -> 十八, 40 -> 四十, 47 -> 四十七."""
    tens, ones = divmod(n, 10)
    head = "十" if tens == 1 else _ZH_DIGITS[tens] + "十"
    return head + (_ZH_DIGITS[ones] if ones else "")


_FAMILIES: dict[str, tuple[str, Make]] = {
    "control_plain_en": ("en", control_plain_en),
    "irish_gaelic": ("en", irish_gaelic),
    "hispanic_two_surnames": ("en", hispanic_two_surnames),
    "dutch_german_particles": ("en", dutch_german_particles),
    "arabic_nasab": ("en", arabic_nasab),
    "vietnamese": ("en", vietnamese),
    "korean": ("en", korean),
    "west_african": ("en", west_african),
    "polynesian": ("en", polynesian),
    "two_letter_names": ("en", two_letter_names),
    "very_long_names": ("en", very_long_names),
    "tamil_initials": ("en", tamil_initials),
    "central_european": ("en", central_european),
    "nordic": ("en", nordic),
    "double_barrelled": ("en", double_barrelled),
    "hong_kong": ("en", hong_kong),
    "japanese_romaji": ("en", japanese_romaji),
    "control_plain_zh": ("zh", control_plain_zh),
    "compound_surname_zh": ("zh", compound_surname_zh),
    "minority_zh": ("zh", minority_zh),
    "foreign_transliterated_zh": ("zh", foreign_transliterated_zh),
    "mixed_script_zh": ("zh", mixed_script_zh),
    "double_surname_zh": ("zh", double_surname_zh),
    "japanese_kanji_zh": ("zh", japanese_kanji_zh),
    "one_char_given_zh": ("zh", one_char_given_zh),
}

SET = StrangerSet(
    families=_FAMILIES,
    grouped_by="kind",
    templates={"en": _EN_TEMPLATES, "zh": _ZH_TEMPLATES},
    distractors=_DISTRACTORS,
    instructions=_INSTRUCTIONS,
    hobbies=_HOBBIES,
    spell={"en": spell_en, "zh": spell_zh},
)
