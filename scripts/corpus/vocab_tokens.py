"""The bundled model's tokenizer's letter tokens, which the copy drills and the made-up
connectors are written in."""

from __future__ import annotations

import functools
from pathlib import Path

import name_generators

from .phrasings import EN_GENERALISATION_OPENERS, ZH_GENERALISATION_OPENERS

# The bundled model's tokenizer (every stage after the first keeps it): vocab_string copies its tokens.
TOKENIZER_FILE = Path(__file__).resolve().parents[2] / "minisglang" / "assets" / "tiny-json-llama" / "tokenizer.json"


@functools.cache
def vocab_letter_tokens() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The tokenizer's tokens that are letters, decoded: (Latin-letter tokens such as "Book" or
    "urant", single Han characters). Left out: the held-out openers' words and characters and
    the held-out given-name characters (as in drills.DRILL_HAN), so a drill never writes them."""
    from tokenizers import Tokenizer  # only the corpus's drills need it

    tok = Tokenizer.from_file(str(TOKENIZER_FILE))
    pieces = [tok.decode([i]) for i in range(tok.get_vocab_size())]
    opener_text = " ".join(EN_GENERALISATION_OPENERS).lower()
    latin = [p for p in pieces if p.isascii() and p.isalpha() and (len(p) < 3 or p.lower() not in opener_text)]
    excluded_han = set(name_generators.HELD_OUT_HAN) | set("".join(ZH_GENERALISATION_OPENERS).replace("{n}", ""))
    han = [p for p in pieces if len(p) == 1 and "\u4e00" <= p <= "\u9fff" and p not in excluded_han]
    return tuple(sorted(set(latin))), tuple(sorted(set(han)))
