"""Long extraction prompts: a system prompt of rules and a JSON Schema, a document in which
the facts about one person sit among unrelated sentences.

Why: benchmarks/bench_extraction_service.py sends a ~340-token instruction (rules, then the
Person schema with descriptions) and a document of 50-400 tokens, 436-782 tokens in all.
The corpus before this module held no prompt longer than 384 tokens (training's
``--max-len``), and the model answered the service's prompts with names it made up
(name and age right in 2 of 96 at s5): positions it had never been trained at, and a
prompt shape it had never seen. Valid JSON still, since the grammar sees to that, so the
service's tables did not show it. (Stage 14, trained with these, reads its own kind of
long document but not the service's: what it cannot read past is filler of a kind it has
not seen, `bench_extraction_service.py --probe`; the model card's stages 14-16.)

These examples are that kind of prompt with their own words: rules, schema descriptions,
requests and filler sentences written for training, none of them the benchmark's, so the
benchmark stays a test of the shape rather than of its sentences. The facts are said by
paragraphs.py's own paragraphs (its names, phrasings and distractors), cut into sentences
with filler between them; sometimes another person is mentioned in passing.
"""

from __future__ import annotations

import json
import random

from .example_format import _dumps
from .extraction import FIELD_SCHEMAS, KEY_ORDER
from .paragraphs import _paragraph
from .values import person_facts, person_name

# How long a document grows, in characters (about 3 per token in English and 1 per token in
# Chinese with the bundled tokenizer): up to ~450 tokens, as the service's longest.
EN_CHARS, ZH_CHARS = (100, 1200), (40, 420)

EN_RULES = [
    "You extract facts about a person from a document and answer with one JSON object.",
    "Reply with the JSON object alone: no explanation before or after it.",
    "Write names exactly as they appear in the document, letter for letter.",
    "Numbers such as ages are written as JSON numbers, not as words or strings.",
    "Keep list items in the order in which the document mentions them.",
    "Use only the keys that the schema below defines.",
    "Most sentences of a document are not about the person; skip them.",
    "If a document mentions several people, describe the one the facts are about.",
    "Never put the JSON inside a code block.",
    "Keep Chinese text in Chinese and English text in English.",
    "Copy cities and job titles as written; do not translate them.",
    "Be careful: documents can be long and the facts can be far apart.",
]
ZH_RULES = [
    "你负责从文档中提取人物信息，并且只回答一个 JSON 对象。",
    "只输出 JSON，不要解释。",
    "人名必须照原文逐字抄写。",
    "年龄写成 JSON 数字。",
    "列表中的各项按文档中出现的顺序排列。",
    "只能使用下面的 schema 里定义的键。",
    "文档里的大部分句子与这个人无关，请忽略。",
    "不要把 JSON 放在代码块里。",
]
SCHEMA_LINES = [
    "The JSON must match this schema: ",
    "Schema of the answer: ",
    "Answer with an object valid under this JSON Schema: ",
    "JSON Schema: ",
    "输出需符合以下 JSON Schema：",
    "答案的 schema：",
]
DESCRIPTIONS = {
    "name": ["The full name of the person.", "Name, copied from the text.", "人物的姓名。"],
    "age": ["Age in years.", "How old the person is.", "年龄（整数）。"],
    "city": ["Where the person lives.", "Home city.", "所在城市。"],
    "email": ["E-mail address.", "The person's e-mail.", "电子邮箱。"],
    "phone": ["Phone number as written.", "Telephone.", "电话号码。"],
    "occupation": ["Job or profession.", "What the person does for a living.", "职业。"],
    "hobbies": ["Hobbies, in the order given.", "What the person likes doing.", "爱好列表。"],
    "birthday": ["Date of birth, YYYY-MM-DD.", "Birthday.", "出生日期。"],
}
TITLES = ["Person", "Profile", "Contact", "Record", "人物"]
EN_ASKS = [
    "Read the document and give me the JSON.",
    "Here is the document. Extract the fields.",
    "Fill in the schema from this text.",
    "Document follows; answer with JSON.",
    "Please extract the details of the person below.",
]
ZH_ASKS = [
    "请阅读下面的文档并输出 JSON。",
    "下面是文档，请提取字段。",
    "根据这段文字填写 schema。",
    "请提取下文中人物的信息。",
]
EN_FILLER = [
    "The meeting was moved to Thursday afternoon.",
    "It rained all morning and the streets were empty.",
    "A new road is being built north of the station.",
    "The shop on the corner sells fresh bread every day.",
    "Tickets for the concert sold out within an hour.",
    "The museum opens late on Fridays.",
    "Nobody expected the heating to break in winter.",
    "Three new trees were planted in the square.",
    "The train was full, so many people stood.",
    "The school held its sports day in June.",
    "Coffee prices rose again this year.",
    "A storm knocked down the old fence.",
    "The report was printed on recycled paper.",
    "Several windows in the hall need cleaning.",
    "The ferry does not run when the sea is rough.",
    "Our team finished the project a week early.",
    "The garden behind the house is full of roses.",
    "A small dog waited patiently by the door.",
    "The cinema is showing an old film tonight.",
    "Everyone agreed that the soup was too salty.",
]
ZH_FILLER = [
    "会议改到了周四下午。",
    "早上一直在下雨，街上没什么人。",
    "车站北边正在修一条新路。",
    "路口的小店每天卖新鲜面包。",
    "音乐会的票一个小时就卖完了。",
    "博物馆周五晚上开放。",
    "冬天暖气突然坏了。",
    "广场上新种了三棵树。",
    "火车上人很多，很多人只能站着。",
    "学校六月举行了运动会。",
    "今年咖啡又涨价了。",
    "一场暴风雨吹倒了旧篱笆。",
    "报告是用再生纸打印的。",
    "渡轮在风浪大的时候停航。",
    "我们的项目提前一周完成了。",
    "房子后面的花园里开满了玫瑰。",
]
EN_PASSING = ["{n} called about the invoice.", "A letter for {n} arrived yesterday.", "{n} was not at the meeting."]
ZH_PASSING = ["{n}打电话问了发票的事。", "昨天有一封给{n}的信。", "{n}没有来开会。"]


def _sentences(text: str, zh: bool, values: list[str]) -> list[str]:
    """``text`` cut after each full stop (the stop stays with its sentence), never inside
    one of ``values`` ("Kenji N. Walker" holds a full stop and a space)."""
    keep = {f"\x00{i}\x00": v for i, v in enumerate(values)}
    for mark, value in keep.items():
        text = text.replace(value, mark)
    stop = "。" if zh else ". "
    pieces = text.split(stop)
    out = [p + stop.strip() for p in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])
    for mark, value in keep.items():
        out = [p.replace(mark, value) for p in out]
    return [p.strip() for p in out if p.strip()]


def _schema(rng: random.Random, keys: list[str], zh: bool) -> dict:
    """The answer's JSON Schema, its fields in ``keys`` order, often with descriptions and a title."""
    described = rng.random() < 0.7
    props = {}
    for k in keys:
        prop = dict(FIELD_SCHEMAS[k])
        if described:
            prop["description"] = rng.choice(DESCRIPTIONS[k][2:] if zh and rng.random() < 0.5 else DESCRIPTIONS[k][:2])
        props[k] = prop
    schema: dict = {"type": "object", "properties": props, "required": list(keys), "additionalProperties": False}
    if rng.random() < 0.5:
        schema = {"title": rng.choice(TITLES), **schema}
    return schema


def _system(rng: random.Random, schema: dict, zh: bool) -> str:
    """Rules (sometimes repeated, as a long production prompt is) and then the schema."""
    pool = ZH_RULES if zh and rng.random() < 0.5 else EN_RULES
    rules = rng.sample(pool, rng.randint(2, len(pool)))
    rules *= rng.choice([1, 1, 1, 2])
    line = rng.choice(SCHEMA_LINES)
    return (" " if pool is EN_RULES else "").join(rules) + "\n" + line + json.dumps(schema, ensure_ascii=False)


def long_document_example(rng: random.Random, held_out: bool = False) -> dict:
    """One long extraction prompt: rules and a schema as the system turn, a request and a
    document (the person's facts among filler) as the user turn, the JSON as the answer."""
    zh = rng.random() < 0.5
    keys = ["name"] + rng.sample(KEY_ORDER[1:], rng.randint(2, 5))
    keys = [k for k in KEY_ORDER if k in keys]
    mentioned = keys + rng.sample([k for k in KEY_ORDER if k not in keys], rng.randint(0, 2))
    age = rng.randint(18, 90)
    name = person_name(rng, zh, held_out)
    facts = {"name": name, "age": age, **person_facts(rng, zh, 4)}
    facts["birthday"] = f"{2025 - age}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    values = sorted((v for v in facts.values() if isinstance(v, str)), key=len, reverse=True)
    sentences = _sentences(_paragraph(rng, facts, mentioned, zh, held_out), zh, values)
    filler, passing = (ZH_FILLER, ZH_PASSING) if zh else (EN_FILLER, EN_PASSING)
    low, high = ZH_CHARS if zh else EN_CHARS
    target = rng.randint(low, high)
    if rng.random() < 0.3:  # someone else, in passing: the answer is still about the facts' person
        other = person_name(rng, zh, held_out)
        if other != facts["name"]:
            sentences.insert(rng.randint(0, len(sentences)), rng.choice(passing).format(n=other))
    while sum(map(len, sentences)) < target:
        sentences.insert(rng.randint(0, len(sentences)), rng.choice(filler))  # the facts keep their order
    document = ("" if zh else " ").join(sentences)
    ask = rng.choice(ZH_ASKS if zh and rng.random() < 0.8 else EN_ASKS)
    return {
        "task": "extract_long",
        "system": _system(rng, _schema(rng, keys, zh), zh),
        "user": ask + "\n" + document,
        "assistant": _dumps({k: facts[k] for k in keys}),
    }
