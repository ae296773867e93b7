"""`minisglang demo`: the main job. Extraction prompts on the bundled model, with and
without a constraint, so you can see what constrained decoding buys.

For each prompt it prints the greedy unconstrained output and the constrained one, whether
each is valid (the grammar's job) and right (the model's), and then the valid-JSON rate of
both when sampling at temperature 1.0 over many seeds.
"""

from __future__ import annotations

import json
from typing import Any

# Seed 004's schema for its example (§5.2). Stages before s5 have no JSON Schema compiler,
# so for them the same shape is written as a regex by hand.
PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 200},
        "hobbies": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age", "hobbies"],
    "additionalProperties": False,
}
PERSON_REGEX = (
    r'\{"name": "[^"\\\x00-\x1f]{1,20}", "age": (0|[1-9][0-9]{0,2}), '
    r'"hobbies": \[("[^"\\\x00-\x1f]{1,20}"(, "[^"\\\x00-\x1f]{1,20}"){0,4})?\]\}'
)

# Each text with the answer a reader would write: validity is the grammar's job, being
# right is the model's, and the demo shows both.
EXAMPLES = [
    (
        "张三是一名软件工程师，今年28岁，平时喜欢编程、摄影和爬山。",
        {"name": "张三", "age": 28, "hobbies": ["编程", "摄影", "爬山"]},
    ),
    (
        "Maria Lopez is a 41-year-old nurse from Madrid who enjoys painting, cycling and chess.",
        {"name": "Maria Lopez", "age": 41, "hobbies": ["painting", "cycling", "chess"]},
    ),
    ("李小龙今年三十五岁，爱好是武术和读书。", {"name": "李小龙", "age": 35, "hobbies": ["武术", "读书"]}),
]
TEXTS = [text for text, _ in EXAMPLES]
INSTRUCTION = "Extract name, age and hobbies from the text as JSON."


def is_valid_person(text: str) -> bool:
    """Parses as a JSON object with the three keys and the right types."""
    try:
        obj = json.loads(text)
    except ValueError:
        return False
    return (
        isinstance(obj, dict)
        and set(obj) == {"name", "age", "hobbies"}
        and isinstance(obj["name"], str)
        and isinstance(obj["age"], int)
        and 0 <= obj["age"] <= 200
        and isinstance(obj["hobbies"], list)
        and all(isinstance(h, str) for h in obj["hobbies"])
    )


def is_right(text: str, expected: dict) -> bool:
    """Parses as JSON and equals the expected answer exactly."""
    try:
        return json.loads(text) == expected
    except ValueError:
        return False


def run_demo(model_path: str | None = None, stage: str | None = None, samples: int = 16) -> int:
    from .engine import Engine
    from .tokenizer import ChatPrompt

    engine = Engine(model_path=model_path, stage=stage)
    print(f"minisglang demo: stage {engine.stage.tag}, model {engine.model_path}\n")
    prompts: list[str | ChatPrompt] = [
        engine.tokenizer.encode_chat([{"role": "user", "content": f"{INSTRUCTION}\n{t}"}]) for t in TEXTS
    ]
    free = {"temperature": 0, "max_new_tokens": 96}
    constraint: dict[str, Any]
    if "json_schema" in engine.stage.supports:
        constraint = {"json_schema": PERSON_SCHEMA}
        print("constraint: json_schema", json.dumps(PERSON_SCHEMA, ensure_ascii=False), "\n")
    else:
        constraint = {"regex": PERSON_REGEX}
        print("constraint: regex", PERSON_REGEX, "\n")
    constrained = dict(free, **constraint)
    for (text, expected), a, b in zip(EXAMPLES, engine.generate(prompts, free), engine.generate(prompts, constrained)):
        print(f"text:          {text}")
        for label, out in (("unconstrained", a), ("constrained", b)):
            print(
                f"{label + ':':14s} {out['text']!r}  valid={is_valid_person(out['text'])} "
                f"right={is_right(out['text'], expected)}"
            )
        print()

    print(f"sampling at temperature 1.0, {samples} seeds per prompt:")
    for name, extra in (("unconstrained", {}), ("constrained", constraint)):
        params = [dict(temperature=1.0, max_new_tokens=96, seed=s, **extra) for _ in prompts for s in range(samples)]
        outs = engine.generate([p for p in prompts for _ in range(samples)], params)
        valid = sum(is_valid_person(o["text"]) for o in outs)
        print(f"  {name:14s} valid JSON {valid}/{len(outs)}")
    engine.shutdown()
    return 0
