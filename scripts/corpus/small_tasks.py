"""The small tasks beside extraction and tool calls: dates, e-mails, IPv4 addresses, phone
numbers and hex colours to pull out of a text, questions and answers, short prose."""

from __future__ import annotations

import random

from .example_format import _dumps
from .pools import COLOURS, COUNTRIES, EMOJI, EN_CITIES, EN_HOBBIES, HOBBY_TRANSLATIONS, ZH_CITIES, ZH_HOBBIES
from .values import _email, _ipv4, _phone, _random_date, _spell_date


def date_example(rng: random.Random) -> dict:
    zh = rng.random() < 0.5
    if rng.random() < 0.5:
        y, m, d = _random_date(rng)
        instr = "把日期转换成 YYYY-MM-DD 格式：" if zh else "Convert this date to ISO format (YYYY-MM-DD): "
        return {
            "task": "date",
            "system": None,
            "user": instr + _spell_date(y, m, d, zh, rng),
            "assistant": f"{y}-{m:02d}-{d:02d}",
        }
    dates = [_random_date(rng, 1990, 2030) for _ in range(rng.randint(1, 3))]
    if zh:
        events = ["会议", "考试", "发布会", "婚礼", "旅行", "面试"]
        text = "，".join(f"{rng.choice(events)}在{_spell_date(*dt, True, rng)}" for dt in dates) + "。"
        instr = "找出下面文本中的所有日期，以 JSON 列表输出（YYYY-MM-DD）：\n"
    else:
        events = ["The meeting", "The exam", "The launch", "The wedding", "The trip", "The interview"]
        text = " ".join(f"{rng.choice(events)} is on {_spell_date(*dt, False, rng)}." for dt in dates)
        instr = "List every date in the text as a JSON array of YYYY-MM-DD strings:\n"
    return {
        "task": "dates",
        "system": None,
        "user": instr + text,
        "assistant": _dumps([f"{y}-{m:02d}-{d:02d}" for y, m, d in dates]),
    }


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
    lines = [
        f"{y}-{m:02d}-{d:02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d} "
        f"{rng.choice(['connection from', 'login failed for', 'request from', 'blocked'])} {ip} "
        f"port {rng.choice([22, 80, 443, 8080, 3306])}"
        for ip in ips
    ]
    if rng.random() < 0.5:
        return {
            "task": "ipv4",
            "system": None,
            "user": "Find the IPv4 addresses in this log:\n" + "\n".join(lines),
            "assistant": _dumps(ips),
        }
    return {
        "task": "ipv4",
        "system": None,
        "user": "找出这段日志里的 IP 地址，输出 JSON：\n" + "\n".join(lines),
        "assistant": _dumps({"ips": ips}),
    }


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
    return {
        "task": "colour",
        "system": None,
        "user": "Extract the hex colours from this CSS as a JSON list:\n" + css,
        "assistant": _dumps(codes),
    }


def qa_example(rng: random.Random) -> dict:
    kind = rng.randrange(5)
    en, cap, zh_country, zh_cap = rng.choice(COUNTRIES)
    if kind == 0:
        return {
            "task": "qa",
            "system": rng.choice([None, "You are a helpful assistant."]),
            "user": f"What is the capital of {en}?",
            "assistant": f"The capital of {en} is {cap}.",
        }
    if kind == 1:
        return {
            "task": "qa",
            "system": None,
            "user": f"{zh_country}的首都是哪里？",
            "assistant": f"{zh_country}的首都是{zh_cap}。",
        }
    if kind == 2:
        return {
            "task": "qa",
            "system": None,
            "user": f"Answer in JSON: what is the capital of {en}?",
            "assistant": _dumps({"country": en, "capital": cap}),
        }
    if kind == 3:
        a, b = rng.randint(0, 20), rng.randint(0, 20)
        return {
            "task": "qa",
            "system": None,
            "user": rng.choice([f"What is {a} + {b}?", f"{a}加{b}等于多少？"]),
            "assistant": f"{a} + {b} = {a + b}",
        }
    en_word, zh_word = rng.choice(HOBBY_TRANSLATIONS)
    if rng.random() < 0.5:
        return {"task": "qa", "system": None, "user": f"Translate to Chinese: {en_word}", "assistant": zh_word}
    return {"task": "qa", "system": None, "user": f"把这个词翻译成英文：{zh_word}", "assistant": en_word}


def prose_example(rng: random.Random) -> dict:
    emoji = rng.choice(EMOJI)
    if rng.random() < 0.5:
        city = rng.choice(EN_CITIES)
        hobby = rng.choice(EN_HOBBIES)
        weather = rng.choice(["sunny", "rainy", "windy", "cold", "warm"])
        answer = f"{city} was {weather} today. People went out for {hobby}, and the cafes were full by noon. {emoji}"
        return {
            "task": "prose",
            "system": None,
            "user": f"Write a short note about a day in {city}.",
            "assistant": answer,
        }
    city = rng.choice(ZH_CITIES)
    hobby = rng.choice(ZH_HOBBIES)
    weather = rng.choice(["晴天", "下雨", "刮风", "很冷", "很暖和"])
    answer = f"今天{city}{weather}。很多人出门{hobby}，中午的时候咖啡馆都坐满了。{emoji}"
    return {"task": "prose", "system": None, "user": f"写一段关于{city}的一天的短文。", "assistant": answer}
