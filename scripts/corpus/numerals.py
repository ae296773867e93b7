"""Numbers in words: an age spelled in Chinese numerals (三十五) or English words (forty-two), and
the drill that reads Chinese numerals back to digits."""

from __future__ import annotations

import random

from .example_format import _dumps
from .values import person_name

ZH_DIGITS = "零一二三四五六七八九"


def zh_number(n: int) -> str:
    """A number below 100 in Chinese numerals: 35 -> 三十五, 10 -> 十, 7 -> 七."""
    if not 0 <= n < 100:
        raise ValueError(f"zh_number handles 0..99, got {n}")
    tens, ones = divmod(n, 10)
    if tens == 0:
        return ZH_DIGITS[ones]
    return ("" if tens == 1 else ZH_DIGITS[tens]) + "十" + (ZH_DIGITS[ones] if ones else "")


EN_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen"
).split()
EN_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def en_number(n: int) -> str:
    """A number below 100 in English words: 42 -> "forty-two", 18 -> "eighteen"."""
    if not 0 <= n < 100:
        raise ValueError(f"en_number handles 0..99, got {n}")
    if n < 20:
        return EN_ONES[n]
    tens, ones = divmod(n, 10)
    return EN_TENS[tens] + (f"-{EN_ONES[ones]}" if ones else "")


def numeral_drill_example(rng: random.Random, held_out: bool = False) -> dict:
    """Chinese-numeral ages to digits, the one conversion an extraction answer needs
    (三十五岁 -> 35): 1-4 ages, alone or in a short sentence about a named person (whose
    name may itself hold a numeral, 张三), answered as a JSON list or ``{"age": N}``."""
    ages = [rng.randint(1, 99) for _ in range(rng.randint(1, 4))]
    if rng.random() < 0.5:
        question = rng.choice(["把中文数字写成阿拉伯数字，输出 JSON 列表：", "这些数字是多少？用 JSON 列表回答："])
        return {
            "task": "zh_number",
            "system": None,
            "user": question + "\n" + "、".join(zh_number(a) for a in ages),
            "assistant": _dumps(ages),
        }
    name, age = person_name(rng, True, held_out), ages[0]
    sentence = rng.choice(["{n}今年{a}岁。", "{n}{a}岁了。", "{n}，{a}岁。", "{n}已经{a}岁了。"]).format(
        n=name, a=zh_number(age)
    )
    question = rng.choice(["这个人几岁？以 JSON 输出：", "How old is this person? Answer as JSON:"])
    return {"task": "zh_number", "system": None, "user": question + "\n" + sentence, "assistant": _dumps({"age": age})}
