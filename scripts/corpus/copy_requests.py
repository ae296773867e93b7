"""The main corpus's copy requests: a person's name asked for after a paragraph, or a list of
generated names, words and numbers repeated verbatim."""

from __future__ import annotations

import random

from .paragraphs import _paragraph
from .values import _city, _email, _word, person_facts, person_name


def copy_example(rng: random.Random, held_out: bool = False) -> dict:
    """A short request whose whole answer is copied from it: a person's name, or a list of
    generated names, words and numbers repeated verbatim. Dense copying teaches the model
    the mechanism (attend to the earlier occurrence, emit the next token) that every
    extraction answer relies on; a tiny model learns it far sooner from these than from
    a few copied tokens per paragraph."""
    zh = rng.random() < 0.5
    if rng.random() < 0.5:
        facts = {
            "name": person_name(rng, zh, held_out),
            "age": rng.randint(18, 90),
            **person_facts(rng, zh, max_hobbies=3),
            "birthday": "2000-01-01",
        }
        text = _paragraph(rng, facts, ["name"] + rng.sample(["age", "city", "occupation", "hobbies"], 2), zh, held_out)
        question = rng.choice(
            ["这段话里的人叫什么名字？只回答名字。", "名字是什么？"]
            if zh
            else ["What is the person's name? Answer with the name only.", "Who is this text about?"]
        )
        return {"task": "copy", "system": None, "user": question + "\n" + text, "assistant": facts["name"]}
    items = []
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(5)
        items.append(
            [
                lambda: person_name(rng, zh, held_out),
                lambda: _word(rng, (1, 3)),
                lambda: str(rng.randint(0, 9999)),
                lambda: _city(rng, zh),
                lambda: _email(rng),
            ][kind]()
        )
    sep = "、" if zh else ", "
    question = rng.choice(["照抄下面的内容：", "重复一遍："] if zh else ["Repeat exactly:", "Copy this:"])
    return {"task": "copy", "system": None, "user": question + "\n" + sep.join(items), "assistant": sep.join(items)}
