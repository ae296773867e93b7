"""The main corpus: every task's maker drawn by its weight, from one seed."""

from __future__ import annotations

import random

from .copy_requests import copy_example
from .document_kinds import document_example
from .extraction import person_example
from .long_documents import long_document_example
from .numerals import numeral_drill_example
from .small_tasks import (
    colour_example,
    date_example,
    email_example,
    ip_example,
    phone_example,
    prose_example,
    qa_example,
)
from .tool_calls import tool_example

# The task mix: extraction dominates because it is what the chapters demonstrate; tool
# calls are chapter 07's; copying is the skill both need. (Stage 17 moved 0.03 from copying
# to tool calls: tool arguments fell 45 -> 37 of 70 from stage 12 to 14.)
TASKS = [
    (person_example, 0.35),
    # texts in other kinds of document (e-mails, chats, forms, notices...): a model trained
    # on paragraphs alone fails on them even for plain common names
    (document_example, 0.10),
    (long_document_example, 0.08),
    (tool_example, 0.25),
    (copy_example, 0.07),
    (numeral_drill_example, 0.02),
    (date_example, 0.025),
    (email_example, 0.025),
    (ip_example, 0.025),
    (phone_example, 0.025),
    (colour_example, 0.015),
    (qa_example, 0.02),
    (prose_example, 0.015),
]


def make_corpus(n_examples: int, seed: int = 0) -> list[dict]:
    """Return ``n_examples`` seeded chat examples (dicts with task/system/user/assistant)."""
    if n_examples < 1:
        raise ValueError(f"n_examples must be at least 1, got {n_examples}")
    rng = random.Random(seed)
    makers, weights = zip(*TASKS)
    return [rng.choices(makers, weights)[0](rng) for _ in range(n_examples)]
