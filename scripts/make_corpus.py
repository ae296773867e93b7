"""Make the seeded synthetic chat corpus that the bundled tiny model is trained on.

Every example is a small dict ``{"task", "system", "user", "assistant"}``: an instruction
plus some text in the user turn and the answer in the assistant turn. Most examples are
information extraction into JSON (English and Chinese, 3 to 8 keys, always in the fixed
order of ``KEY_ORDER``); the rest are dates, emails, IPv4 addresses, phone numbers, hex
colours, short prose and Q&A, so the model is a (very) small general chat model.

Usage:
    python scripts/make_corpus.py --examples 40000 --seed 0 --out .cache/tiny-json-llama/corpus.jsonl
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

# The one key order every extraction answer uses; a prompt mentions a subset of these keys.
KEY_ORDER = ["name", "age", "city", "email", "phone", "occupation", "hobbies", "birthday"]

# The course's running example (chapter 06), kept verbatim so the demo prompt of the chapters is in-distribution.
SEED_EXAMPLE_TEXT = "张三是一名软件工程师，今年28岁，平时喜欢编程、摄影和爬山。"
SEED_EXAMPLE_ANSWER = {"name": "张三", "age": 28, "hobbies": ["编程", "摄影", "爬山"]}
SEED_SYSTEM = "你是一个信息抽取助手，只输出合法 JSON，不要输出任何解释。"
SEED_INSTRUCTION = "请从下面的文本中抽取人物信息，严格按照给定的 JSON Schema 输出："
SEED_EXAMPLE_COPIES = 4

# Rare characters (each needs several byte-level tokens) that appear in a few names only.
RARE_HAN = ["䶮", "龘", "𠮷", "燚", "靐", "犇", "淼", "堃"]
EMOJI = ["😀", "🎉", "🌧️", "☀️", "🍜", "🚀", "🐱", "📚", "⚽", "🎸"]

ZH_SURNAMES = list("张王李赵刘陈杨黄周吴徐孙马朱胡郭何林高罗郑梁谢宋唐许韩冯邓曹彭曾田董潘袁蔡蒋余于杜叶程魏苏吕丁沈任姚卢") + ["欧阳", "司马", "诸葛"]
ZH_GIVEN = list("伟芳娜敏静丽强磊军洋勇艳杰娟涛明超秀霞平刚英华玉兰萍红鹏飞宇浩然欣怡轩梓涵博文思雨晨诺佳琪子一晓春雪松")
ZH_CITIES = ["北京", "上海", "广州", "深圳", "杭州", "成都", "武汉", "南京", "西安", "重庆", "苏州", "天津", "长沙", "厦门", "青岛", "大连", "昆明", "哈尔滨"]
ZH_JOBS = ["软件工程师", "教师", "医生", "护士", "律师", "设计师", "会计", "记者", "厨师", "摄影师", "产品经理", "数据分析师", "销售", "司机", "建筑师", "程序员", "研究员", "警察", "学生"]
ZH_HOBBIES = ["编程", "摄影", "爬山", "跑步", "游泳", "阅读", "画画", "唱歌", "跳舞", "钓鱼", "下棋", "旅行", "烹饪", "书法", "弹吉他", "骑行", "看电影", "打篮球", "踢足球", "养花", "写作", "露营"]

EN_FIRST = [("Alice", "f"), ("Bob", "m"), ("Carol", "f"), ("David", "m"), ("Emma", "f"), ("Frank", "m"), ("Grace", "f"), ("Henry", "m"), ("Isabel", "f"), ("Jack", "m"), ("Karen", "f"), ("Liam", "m"), ("Maria", "f"), ("Noah", "m"), ("Olivia", "f"), ("Peter", "m"), ("Quinn", "f"), ("Ryan", "m"), ("Sophia", "f"), ("Thomas", "m"), ("Uma", "f"), ("Victor", "m"), ("Wendy", "f"), ("Xavier", "m"), ("Yara", "f"), ("Zack", "m"), ("Chloe", "f"), ("Daniel", "m"), ("Hannah", "f"), ("Oscar", "m")]
EN_LAST = ["Smith", "Johnson", "Brown", "Taylor", "Miller", "Wilson", "Moore", "Anderson", "Thomas", "Jackson", "White", "Harris", "Martin", "Garcia", "Clark", "Lewis", "Walker", "Young", "King", "Wright", "Lopez", "Hill", "Green", "Baker", "Nguyen", "Kim", "Patel", "Chen", "Murphy", "Rossi"]
EN_CITIES = ["London", "Paris", "New York", "Tokyo", "Berlin", "Toronto", "Sydney", "Seattle", "Boston", "Chicago", "Madrid", "Rome", "Dublin", "Austin", "Denver", "Singapore", "Oslo", "Vienna", "Lisbon", "Melbourne"]
EN_JOBS = ["software engineer", "teacher", "doctor", "nurse", "lawyer", "designer", "accountant", "journalist", "chef", "photographer", "product manager", "data analyst", "pilot", "architect", "student", "researcher", "electrician", "librarian"]
EN_HOBBIES = ["hiking", "reading", "photography", "swimming", "chess", "cooking", "painting", "cycling", "running", "gardening", "fishing", "coding", "singing", "dancing", "travel", "yoga", "camping", "knitting", "tennis", "writing"]
# Parallel lists for the translation task: EN_HOBBIES[i] <-> ZH_HOBBY_OF[i].
ZH_HOBBY_OF = ["爬山", "阅读", "摄影", "游泳", "下棋", "烹饪", "画画", "骑行", "跑步", "养花", "钓鱼", "编程", "唱歌", "跳舞", "旅行", "瑜伽", "露营", "织毛衣", "打网球", "写作"]
# Nicknames in double quotes: the answer must escape them (`\"`), a classic way to break JSON.
NICKNAMES = ["Ace", "Doc", "Red", "Sunny", "Buzz", "Scout", "Bear", "Kit"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"]
SYLLABLES = ["xiao", "ming", "li", "hua", "wei", "jun", "tian", "yu", "chen", "lin", "an", "bo", "kai", "mei", "zhi", "sky", "blue", "star", "moon", "leaf"]
DOMAINS = ["example.com", "mail.com", "qq.com", "163.com", "gmail.com", "outlook.com", "company.cn", "school.edu"]
COUNTRIES = [("France", "Paris", "法国", "巴黎"), ("Japan", "Tokyo", "日本", "东京"), ("China", "Beijing", "中国", "北京"), ("Germany", "Berlin", "德国", "柏林"), ("Italy", "Rome", "意大利", "罗马"), ("Spain", "Madrid", "西班牙", "马德里"), ("Canada", "Ottawa", "加拿大", "渥太华"), ("Egypt", "Cairo", "埃及", "开罗"), ("Brazil", "Brasilia", "巴西", "巴西利亚"), ("India", "New Delhi", "印度", "新德里"), ("Russia", "Moscow", "俄罗斯", "莫斯科"), ("Australia", "Canberra", "澳大利亚", "堪培拉"), ("Korea", "Seoul", "韩国", "首尔"), ("Mexico", "Mexico City", "墨西哥", "墨西哥城"), ("Greece", "Athens", "希腊", "雅典"), ("Norway", "Oslo", "挪威", "奥斯陆")]
COLOURS = [("red", "红色", "#FF0000"), ("green", "绿色", "#00FF00"), ("blue", "蓝色", "#0000FF"), ("white", "白色", "#FFFFFF"), ("black", "黑色", "#000000"), ("yellow", "黄色", "#FFFF00"), ("cyan", "青色", "#00FFFF"), ("magenta", "品红", "#FF00FF"), ("orange", "橙色", "#FFA500"), ("purple", "紫色", "#800080"), ("gray", "灰色", "#808080"), ("pink", "粉色", "#FFC0CB"), ("navy", "藏青色", "#000080"), ("olive", "橄榄色", "#808000"), ("teal", "蓝绿色", "#008080"), ("maroon", "栗色", "#800000")]

EN_SYSTEMS = ["You are an information extraction assistant. Output valid JSON only.", "You are a helpful assistant.", "You are a concise assistant."]
ZH_SYSTEMS = [SEED_SYSTEM, "你是一个乐于助人的助手。"]
# Strict requests ask for JSON and nothing else; their answers are always bare JSON.
EN_STRICT = ["Extract {fields} from the following text. Reply with JSON only.", "Return only a JSON object with the keys {fields} for this text:"]
ZH_STRICT = [SEED_INSTRUCTION, "从以下文本中提取{fields}，只输出 JSON。"]
STRICT_SYSTEMS = {EN_SYSTEMS[0], SEED_SYSTEM}
# Loose requests just say "as JSON"; like many chat models, half of their answers come
# wrapped in a markdown fence, which is plausible JSON but not valid JSON.
EN_LOOSE = ["Extract the person's information from the text below as JSON.", "Read the text and output the person's details as a JSON object."]
ZH_LOOSE = ["请从下面的文本中抽取人物信息，以 JSON 格式输出。", "把下面这段话里的人物信息整理成 JSON："]
FENCE_PROBABILITY = 0.5


def _dumps(obj) -> str:
    """The one JSON spelling of answers: ", " and ": " separators, UTF-8 kept as is."""
    return json.dumps(obj, ensure_ascii=False)


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
    user = rng.choice(SYLLABLES) + rng.choice([".", "_", ""]) + rng.choice(SYLLABLES)
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


def _zh_name(rng: random.Random) -> str:
    given = "".join(rng.choice(ZH_GIVEN) for _ in range(rng.choice([1, 2, 2])))
    if rng.random() < 0.005:  # a rare character now and then: seen, but too rarely to be merged
        given = given[:-1] + rng.choice(RARE_HAN)
    return rng.choice(ZH_SURNAMES) + given


def person_example(rng: random.Random) -> dict:
    """One extraction example: a short paragraph about a person -> JSON with 3 to 8 keys."""
    zh = rng.random() < 0.5
    keys = ["name"] + rng.sample(KEY_ORDER[1:], rng.randint(2, 7))
    keys = [k for k in KEY_ORDER if k in keys]
    if zh:
        name, gender = _zh_name(rng), rng.choice("mf")
    else:
        first, gender = rng.choice(EN_FIRST)
        name = f"{first} {rng.choice(EN_LAST)}"
        if rng.random() < 0.15:
            name = f'{first} "{rng.choice(NICKNAMES)}" {name.split()[1]}'
    age = rng.randint(18, 80)
    by, bm, bd = 2025 - age, rng.randint(1, 12), rng.randint(1, 28)
    facts = {
        "name": name,
        "age": age,
        "city": rng.choice(ZH_CITIES if zh else EN_CITIES),
        "email": _email(rng),
        "phone": _phone(rng, zh),
        "occupation": rng.choice(ZH_JOBS if zh else EN_JOBS),
        "hobbies": rng.sample(ZH_HOBBIES if zh else EN_HOBBIES, rng.randint(1, 4)),
        "birthday": f"{by}-{bm:02d}-{bd:02d}",
    }
    born = _spell_date(by, bm, bd, zh, rng)
    if zh:
        phrases = {
            "age": rng.choice([f"今年{age}岁", f"{age}岁"]),
            "city": rng.choice([f"住在{facts['city']}", f"在{facts['city']}工作", f"来自{facts['city']}"]),
            "email": rng.choice([f"邮箱是{facts['email']}", f"电子邮件地址为{facts['email']}"]),
            "phone": rng.choice([f"电话是{facts['phone']}", f"手机号码{facts['phone']}"]),
            "occupation": rng.choice([f"是一名{facts['occupation']}", f"职业是{facts['occupation']}"]),
            "hobbies": rng.choice(["平时喜欢", "爱好是", "业余时间喜欢"]) + _join(facts["hobbies"], True),
            "birthday": rng.choice([f"生日是{born}", f"出生于{born}"]),
        }
    else:
        phrases = {
            "age": rng.choice([f"is {age} years old", f"is {age}"]),
            "city": rng.choice([f"lives in {facts['city']}", f"is based in {facts['city']}", f"comes from {facts['city']}"]),
            "email": rng.choice([f"can be reached at {facts['email']}", f"uses the email {facts['email']}"]),
            "phone": rng.choice([f"has the phone number {facts['phone']}", f"can be called at {facts['phone']}"]),
            "occupation": f"works as {'an' if facts['occupation'][0] in 'aeiou' else 'a'} {facts['occupation']}",
            "hobbies": rng.choice(["enjoys ", "likes ", "loves "]) + _join(facts["hobbies"], False),
            "birthday": rng.choice([f"was born on {born}", f"has a birthday on {born}"]),
        }
    order = [k for k in keys if k != "name"]
    rng.shuffle(order)
    parts = [phrases[k] for k in order]
    if zh:
        pronoun = "他" if gender == "m" else "她"
        pieces = [name + parts[0]] + [(pronoun if rng.random() < 0.2 else "") + p for p in parts[1:]]
        text = "，".join(pieces) + "。"
    else:
        pronoun = "He" if gender == "m" else "She"
        cut = rng.randint(1, len(parts))  # two sentences, the second one starting with a pronoun
        first_s, second_s = parts[:cut], parts[cut:]
        text = f"{name} {_join(first_s, False)}."
        if second_s:
            text += f" {pronoun} {_join(second_s, False)}."
    fields = ", ".join(keys)
    instr_zh = zh if rng.random() < 0.8 else not zh  # sometimes instruction and text differ in language
    strict = rng.random() < 0.5
    instr = rng.choice((ZH_STRICT if strict else ZH_LOOSE) if instr_zh else (EN_STRICT if strict else EN_LOOSE))
    system = None
    if rng.random() < 0.5:
        system = rng.choice(ZH_SYSTEMS if zh else EN_SYSTEMS)
    answer = _dumps({k: facts[k] for k in keys})
    if not strict and system not in STRICT_SYSTEMS and rng.random() < FENCE_PROBABILITY:
        answer = "```json\n" + answer + "\n```"
    return {"task": "extract_person", "system": system, "user": instr.format(fields=fields) + "\n" + text,
            "assistant": answer}


def date_example(rng: random.Random) -> dict:
    zh = rng.random() < 0.5
    if rng.random() < 0.5:
        y, m, d = _random_date(rng)
        instr = "把日期转换成 YYYY-MM-DD 格式：" if zh else "Convert this date to ISO format (YYYY-MM-DD): "
        return {"task": "date", "system": None, "user": instr + _spell_date(y, m, d, zh, rng),
                "assistant": f"{y}-{m:02d}-{d:02d}"}
    dates = [_random_date(rng, 1990, 2030) for _ in range(rng.randint(1, 3))]
    if zh:
        events = ["会议", "考试", "发布会", "婚礼", "旅行", "面试"]
        text = "，".join(f"{rng.choice(events)}在{_spell_date(*dt, True, rng)}" for dt in dates) + "。"
        instr = "找出下面文本中的所有日期，以 JSON 列表输出（YYYY-MM-DD）：\n"
    else:
        events = ["The meeting", "The exam", "The launch", "The wedding", "The trip", "The interview"]
        text = " ".join(f"{rng.choice(events)} is on {_spell_date(*dt, False, rng)}." for dt in dates)
        instr = "List every date in the text as a JSON array of YYYY-MM-DD strings:\n"
    return {"task": "dates", "system": None, "user": instr + text,
            "assistant": _dumps([f"{y}-{m:02d}-{d:02d}" for y, m, d in dates])}


def email_example(rng: random.Random) -> dict:
    emails = [_email(rng) for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.5:
        text = "。".join(f"请联系{e}" for e in emails) + "。"
        instr = "提取下面文本中的邮箱地址，输出 JSON 列表：\n"
    else:
        text = " ".join(f"Write to {e} for details." for e in emails)
        instr = "Extract the email addresses from this text as a JSON list:\n"
    return {"task": "emails", "system": None, "user": instr + text, "assistant": _dumps(emails)}


def ip_example(rng: random.Random) -> dict:
    ips = [_ipv4(rng) for _ in range(rng.randint(1, 2))]
    y, m, d = _random_date(rng, 2020, 2025)
    lines = [f"{y}-{m:02d}-{d:02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d} "
             f"{rng.choice(['connection from', 'login failed for', 'request from', 'blocked'])} {ip} "
             f"port {rng.choice([22, 80, 443, 8080, 3306])}" for ip in ips]
    if rng.random() < 0.5:
        return {"task": "ipv4", "system": None, "user": "Find the IPv4 addresses in this log:\n" + "\n".join(lines),
                "assistant": _dumps(ips)}
    return {"task": "ipv4", "system": None, "user": "找出这段日志里的 IP 地址，输出 JSON：\n" + "\n".join(lines),
            "assistant": _dumps({"ips": ips})}


def phone_example(rng: random.Random) -> dict:
    zh = rng.random() < 0.5
    phone = _phone(rng, zh)
    if zh:
        user = f"提取电话号码，以 JSON 输出：\n有事请打{phone}，{rng.choice(['周一到周五', '工作日', '全天'])}都可以。"
    else:
        user = f"Extract the phone number as JSON:\nCall us at {phone} {rng.choice(['any time', 'on weekdays', 'after 9am'])}."
    return {"task": "phone", "system": None, "user": user, "assistant": _dumps({"phone": phone})}


def colour_example(rng: random.Random) -> dict:
    if rng.random() < 0.5:
        en, zh, hx = rng.choice(COLOURS)
        if rng.random() < 0.5:
            return {"task": "colour", "system": None, "user": f"What is the hex colour code of {en}?", "assistant": hx}
        return {"task": "colour", "system": None, "user": f"{zh}的十六进制颜色代码是什么？", "assistant": hx}
    codes = ["#" + "".join(rng.choice("0123456789abcdef") for _ in range(6)) for _ in range(rng.randint(1, 3))]
    props = ["color", "background", "border-color", "fill"]
    css = " ".join(f"{rng.choice(props)}: {c};" for c in codes)
    return {"task": "colour", "system": None, "user": "Extract the hex colours from this CSS as a JSON list:\n" + css,
            "assistant": _dumps(codes)}


def qa_example(rng: random.Random) -> dict:
    kind = rng.randrange(5)
    en, cap, zh_country, zh_cap = rng.choice(COUNTRIES)
    if kind == 0:
        return {"task": "qa", "system": rng.choice([None, "You are a helpful assistant."]),
                "user": f"What is the capital of {en}?", "assistant": f"The capital of {en} is {cap}."}
    if kind == 1:
        return {"task": "qa", "system": None, "user": f"{zh_country}的首都是哪里？", "assistant": f"{zh_country}的首都是{zh_cap}。"}
    if kind == 2:
        return {"task": "qa", "system": None, "user": f"Answer in JSON: what is the capital of {en}?",
                "assistant": _dumps({"country": en, "capital": cap})}
    if kind == 3:
        a, b = rng.randint(0, 20), rng.randint(0, 20)
        return {"task": "qa", "system": None, "user": rng.choice([f"What is {a} + {b}?", f"{a}加{b}等于多少？"]),
                "assistant": f"{a} + {b} = {a + b}"}
    i = rng.randrange(len(EN_HOBBIES))
    if rng.random() < 0.5:
        return {"task": "qa", "system": None, "user": f"Translate to Chinese: {EN_HOBBIES[i]}", "assistant": ZH_HOBBY_OF[i]}
    return {"task": "qa", "system": None, "user": f"把这个词翻译成英文：{ZH_HOBBY_OF[i]}", "assistant": EN_HOBBIES[i]}


def prose_example(rng: random.Random) -> dict:
    emoji = rng.choice(EMOJI)
    if rng.random() < 0.5:
        city = rng.choice(EN_CITIES)
        hobby = rng.choice(EN_HOBBIES)
        weather = rng.choice(["sunny", "rainy", "windy", "cold", "warm"])
        answer = (f"{city} was {weather} today. People went out for {hobby}, "
                  f"and the cafes were full by noon. {emoji}")
        return {"task": "prose", "system": None, "user": f"Write a short note about a day in {city}.", "assistant": answer}
    city = rng.choice(ZH_CITIES)
    hobby = rng.choice(ZH_HOBBIES)
    weather = rng.choice(["晴天", "下雨", "刮风", "很冷", "很暖和"])
    answer = f"今天{city}{weather}。很多人出门{hobby}，中午的时候咖啡馆都坐满了。{emoji}"
    return {"task": "prose", "system": None, "user": f"写一段关于{city}的一天的短文。", "assistant": answer}


# The task mix: extraction dominates because it is what the chapters demonstrate.
TASKS = [(person_example, 0.55), (date_example, 0.08), (email_example, 0.07), (ip_example, 0.07),
         (phone_example, 0.06), (colour_example, 0.06), (qa_example, 0.06), (prose_example, 0.05)]


def make_corpus(n_examples: int, seed: int = 0) -> list[dict]:
    """Return ``n_examples`` seeded chat examples (dicts with task/system/user/assistant)."""
    if n_examples < SEED_EXAMPLE_COPIES:
        raise ValueError(f"n_examples must be at least {SEED_EXAMPLE_COPIES} (the seed example is included "
                         f"{SEED_EXAMPLE_COPIES} times), got {n_examples}")
    rng = random.Random(seed)
    makers, weights = zip(*TASKS)
    seed_example = {"task": "extract_person", "system": SEED_SYSTEM,
                    "user": SEED_INSTRUCTION + "\n" + SEED_EXAMPLE_TEXT, "assistant": _dumps(SEED_EXAMPLE_ANSWER)}
    examples = [seed_example] * SEED_EXAMPLE_COPIES  # the chapters' running example, seen a few times
    while len(examples) < n_examples:
        examples.append(rng.choices(makers, weights)[0](rng))
    rng.shuffle(examples)
    return examples


def heldout_extraction_prompts(n: int, train: list[dict], seed: int = 12345) -> list[dict]:
    """Return ``n`` extraction examples drawn with another seed, none of whose user turns is in ``train``."""
    rng = random.Random(seed)
    seen = {ex["user"] for ex in train}
    out: list[dict] = []
    while len(out) < n:
        ex = person_example(rng)
        if ex["user"] not in seen:
            seen.add(ex["user"])
            out.append(ex)
    return out


def to_messages(example: dict, with_answer: bool = True) -> list[dict]:
    """The chat messages of one example, in the Hugging Face ``[{"role", "content"}]`` form."""
    msgs = []
    if example["system"]:
        msgs.append({"role": "system", "content": example["system"]})
    msgs.append({"role": "user", "content": example["user"]})
    if with_answer:
        msgs.append({"role": "assistant", "content": example["assistant"]})
    return msgs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=40000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path(".cache/tiny-json-llama/corpus.jsonl"))
    args = ap.parse_args()
    corpus = make_corpus(args.examples, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for ex in corpus:
            f.write(json.dumps(ex, ensure_ascii=False) + "\n")
    print(f"wrote {len(corpus)} examples to {args.out}")


if __name__ == "__main__":
    main()
