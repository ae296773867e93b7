"""The held-out evaluation sets: extraction and tool examples with held-out names and
phrasings, none of whose user turns is in the training corpus."""

from __future__ import annotations

import random

from .extraction import person_example
from .long_documents import long_document_example
from .tool_calls import tool_example


def _heldout(maker, n: int, train: list[dict], seed: int) -> list[dict]:
    rng = random.Random(seed)
    seen = {ex["user"] for ex in train}
    out: list[dict] = []
    while len(out) < n:
        ex = maker(rng, held_out=True)
        if ex["user"] not in seen:
            seen.add(ex["user"])
            out.append(ex)
    return out


def heldout_extraction_prompts(n: int, train: list[dict], seed: int = 12345) -> list[dict]:
    """``n`` extraction examples with held-out names and phrasings, none of whose user turns is in ``train``."""
    return _heldout(person_example, n, train, seed)


def heldout_tool_prompts(n: int, train: list[dict], seed: int = 12345) -> list[dict]:
    """``n`` tool conversations with held-out request phrasings and names, none of whose user turns is in ``train``."""
    return _heldout(tool_example, n, train, seed)


def heldout_long_prompts(n: int, train: list[dict], seed: int = 12345) -> list[dict]:
    """``n`` long extraction prompts (long_documents.py: rules and a schema, the facts among
    filler) with held-out names and phrasings, none of whose user turns is in ``train``."""
    return _heldout(long_document_example, n, train, seed)
