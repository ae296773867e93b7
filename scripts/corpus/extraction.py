"""The extraction examples: a paragraph about a person and a request for some of its facts,
answered in JSON with the keys in one fixed order."""

from __future__ import annotations

import random

from .example_format import _dumps
from .paragraphs import _paragraph
from .phrasings import EN_LOOSE, EN_STRICT, EN_SYSTEMS, STRICT_SYSTEMS, ZH_LOOSE, ZH_STRICT, ZH_SYSTEMS, _pick
from .values import _join, person_facts, person_name

# The one key order every extraction answer uses; a prompt mentions a subset of these keys.
KEY_ORDER = ["name", "age", "city", "email", "phone", "occupation", "hobbies", "birthday"]
# The JSON Schema of each field, as the evaluation and the long prompts state them.
FIELD_SCHEMAS = {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "city": {"type": "string"},
    "email": {"type": "string"},
    "phone": {"type": "string"},
    "occupation": {"type": "string"},
    "hobbies": {"type": "array", "items": {"type": "string"}},
    "birthday": {"type": "string"},
}

# Loose requests (phrasings.EN_LOOSE, ZH_LOOSE) are answered in a markdown fence this often.
FENCE_PROBABILITY = 0.5

# A share of training requests that list their fields asks for one or two keys only
# ("name and age"): without them a model has never closed an answer after two keys, and
# asked for name and age it writes `"age": 24, "age": 24, ...` or an age that runs on in
# digits (issue 33). Held-out requests keep 3+ keys, so eval_extraction's sets stay the same.
SHORT_REQUEST = 0.3  # 0.2 until stage 17 (stage 19 tried 0.45: no better)


def person_example(rng: random.Random, held_out: bool = False) -> dict:
    """One extraction example: a short paragraph about a person -> JSON of some of its facts.

    The paragraph mentions 3 to 8 facts; an instruction that lists fields asks for some of
    them (the rest are distractors; in training, sometimes only one or two: SHORT_REQUEST),
    one that does not asks for all of them.
    """
    zh = rng.random() < 0.5
    mentioned = ["name"] + rng.sample(KEY_ORDER[1:], rng.randint(2, 7))
    age = rng.randint(18, 90)
    by, bm, bd = 2025 - age, rng.randint(1, 12), rng.randint(1, 28)
    facts = {
        "name": person_name(rng, zh, held_out),
        "age": age,
        **person_facts(rng, zh, max_hobbies=4),
        "birthday": f"{by}-{bm:02d}-{bd:02d}",
    }
    text = _paragraph(rng, facts, mentioned, zh, held_out)
    return extraction_request(rng, facts, mentioned, text, zh, held_out)


def extraction_request(
    rng: random.Random, facts: dict, mentioned: list[str], text: str, zh: bool, held_out: bool
) -> dict:
    """The request and answer around a ``text`` that states the ``mentioned`` facts: an
    instruction (strict or loose, in the text's language 4 times in 5) that lists some of
    the keys or asks for all of them, maybe a system prompt, and the JSON answer in
    KEY_ORDER (fenced half the time when the request is loose); person_example and
    document_kinds.document_example both end with it."""
    strict = rng.random() < 0.5
    instr_zh = zh if rng.random() < 0.8 else not zh  # sometimes instruction and text differ in language
    instr = _pick(
        rng, (ZH_STRICT if strict else ZH_LOOSE) if instr_zh else (EN_STRICT if strict else EN_LOOSE), held_out
    )
    keys = mentioned
    if "{fields}" in instr and len(mentioned) > 3 and rng.random() < 0.7:
        keys = ["name"] + rng.sample([k for k in mentioned if k != "name"], rng.randint(2, len(mentioned) - 2))
    if not held_out and "{fields}" in instr and rng.random() < SHORT_REQUEST:
        # one or two keys (training only, so the held-out sets stay as they were)
        others = [k for k in mentioned if k != "name"]
        keys = ["name", rng.choice(others)] if rng.random() < 0.75 else [rng.choice(mentioned)]
    keys = [k for k in KEY_ORDER if k in keys]
    system = None
    if rng.random() < 0.4:
        system = rng.choice(ZH_SYSTEMS if zh else EN_SYSTEMS)
    answer = _dumps({k: facts[k] for k in keys})
    if not strict and system not in STRICT_SYSTEMS and rng.random() < FENCE_PROBABILITY:
        answer = "```json\n" + answer + "\n```"
    return {
        "task": "extract_person",
        "system": system,
        "user": instr.format(fields=_join(keys, False)) + "\n" + text,
        "assistant": answer,
    }
