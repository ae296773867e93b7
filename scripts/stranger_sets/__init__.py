"""The name sets that scripts/eval_stranger_names.py can run: each module of this package holds one
outsider's families, templates and wording (its docstring says who wrote it and what they had not
read); the runner turns any of them into texts the same way.

    from stranger_sets import load_set
    first = load_set("first")
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable
from dataclasses import dataclass

# The set's name -> its module in this package. A set is added here and nowhere else.
SETS = {"first": "stranger_sets.first", "second": "stranger_sets.second", "third": "stranger_sets.third"}


@dataclass(frozen=True)
class StrangerSet:
    """What the runner needs from a set; every dict is keyed by language ("en" or "zh").

    ``templates[lang][group]`` are format strings with ``{n}`` (the name), ``{a}`` (the age),
    ``{h}`` (the hobbies) and optionally ``{d}`` (a second person: such a template always gets
    one); ``group`` is where the name sits or what kind of text it is, and ``grouped_by`` names
    that (the runner's examples carry it under that key and pool their scores by it).
    ``distractors[lang]`` are sentences with ``{d}`` appended to half the texts whose template has
    no ``{d}``. ``spell[lang](n)`` writes an age 18-90 in words."""

    families: dict[str, tuple[str, Callable[[random.Random], str]]]
    grouped_by: str
    templates: dict[str, dict[str, list[str]]]
    distractors: dict[str, list[str]]
    instructions: dict[str, list[str]]
    hobbies: dict[str, list[str]]
    spell: dict[str, Callable[[int], str]]


def load_set(name: str) -> StrangerSet:
    """The set called ``name``; a ValueError that lists the known ones otherwise."""
    if name not in SETS:
        raise ValueError(f"unknown name set {name!r}: choose one of {', '.join(SETS)}")
    return importlib.import_module(SETS[name]).SET
