"""Make the seeded synthetic chat corpus that the bundled tiny model is trained on.

Most examples are information extraction into JSON (English and Chinese, keys always in the
fixed order of ``KEY_ORDER``); then tool calls, and small tasks (dates, emails, IPv4
addresses, phone numbers, hex colours, prose, Q&A). Each is a small chat dict
(corpus/example_format.py).

The corpus forces copying: people's names are generated from syllables and from a few
hundred Chinese characters, cities partly too, ages and numbers are random, and a text
mentions more facts than the request asks for. A tenth of all names (by hash) and a few
phrasings of every fact and instruction never occur in training: the held-out
evaluation (``heldout_extraction_prompts``, ``heldout_tool_prompts``) uses only those.

The code is the package scripts/corpus/, one module per job (its ``__init__.py`` lists
them). This script writes a corpus to a file, and it is the one name the other scripts,
the tests and the benchmarks import the corpus by: ``make_corpus.make_corpus(n, seed)``,
``make_corpus.copy_drill_corpus(n, seed)``, ``make_corpus.ZH_GIVEN``; each name below says
which module it lives in.

Usage:
    python scripts/make_corpus.py --examples 40000 --seed 0 --out .cache/tiny-json-llama/corpus.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus.copy_requests import copy_example  # noqa: E402
from corpus.document_kinds import DOCUMENT_KINDS, document_example  # noqa: E402
from corpus.drills import (  # noqa: E402
    DRILL_HAN,
    NUMERAL_DRILL_SHARE,
    copy_drill_corpus,
    copy_drill_example,
    random_string,
    rare_letter_tokens,
    vocab_string,
)
from corpus.example_format import _dumps, to_messages, unfence  # noqa: E402
from corpus.extraction import FENCE_PROBABILITY, FIELD_SCHEMAS, KEY_ORDER, SHORT_REQUEST, person_example  # noqa: E402
from corpus.heldout import heldout_extraction_prompts, heldout_long_prompts, heldout_tool_prompts  # noqa: E402
from corpus.long_documents import long_document_example  # noqa: E402
from corpus.made_up_phrasings import (  # noqa: E402
    MADE_UP_CONNECTOR,
    MADE_UP_PHRASING,
    OPENER_SUBJECTS,
    ZH_FILLER,
    ZH_OPENER_CONNECTORS,
    composed_opener,
    made_up_connector,
)
from corpus.mix import make_corpus  # noqa: E402
from corpus.numerals import en_number, numeral_drill_example, zh_number  # noqa: E402
from corpus.paragraphs import _paragraph  # noqa: E402
from corpus.phrasings import (  # noqa: E402
    EN_FACTS,
    EN_GENERALISATION_OPENERS,
    EN_LOOSE,
    EN_OPENERS,
    EN_STRICT,
    SEED_EXAMPLE_TEXT,
    SEED_INSTRUCTION,
    SEED_SYSTEM,
    STRICT_SYSTEMS,
    ZH_FACTS,
    ZH_GENERALISATION_OPENERS,
    ZH_LOOSE,
    ZH_OPENERS,
    ZH_STRICT,
    _pick,
)
from corpus.pools import (  # noqa: E402
    DEMO_NAMES,
    EN_FIRST,
    EN_HOBBIES,
    EN_LAST,
    NUMERAL_NAME_SHARE,
    RARE_HAN,
    ZH_CITIES,
    ZH_GIVEN,
    ZH_HOBBIES,
    ZH_NUMERAL_GIVEN,
    ZH_SURNAMES,
)
from corpus.tool_calls import TOOL_ECHO_REQUESTS, TOOL_FAMILIES, tool_example  # noqa: E402
from corpus.values import _city, _join, is_held_out, person_facts, person_name  # noqa: E402
from corpus.vocab_tokens import TOKENIZER_FILE, vocab_letter_tokens  # noqa: E402

# What the other scripts, the tests and the benchmarks use (and the model card names).
__all__ = [
    "FIELD_SCHEMAS",
    "heldout_long_prompts",
    "long_document_example",
    "DEMO_NAMES",
    "DOCUMENT_KINDS",
    "DRILL_HAN",
    "EN_FACTS",
    "EN_FIRST",
    "EN_GENERALISATION_OPENERS",
    "EN_HOBBIES",
    "EN_LAST",
    "EN_LOOSE",
    "EN_OPENERS",
    "EN_STRICT",
    "FENCE_PROBABILITY",
    "KEY_ORDER",
    "MADE_UP_CONNECTOR",
    "MADE_UP_PHRASING",
    "NUMERAL_DRILL_SHARE",
    "NUMERAL_NAME_SHARE",
    "OPENER_SUBJECTS",
    "RARE_HAN",
    "SEED_EXAMPLE_TEXT",
    "SEED_INSTRUCTION",
    "SEED_SYSTEM",
    "SHORT_REQUEST",
    "STRICT_SYSTEMS",
    "TOKENIZER_FILE",
    "TOOL_ECHO_REQUESTS",
    "TOOL_FAMILIES",
    "ZH_CITIES",
    "ZH_FACTS",
    "ZH_FILLER",
    "ZH_GENERALISATION_OPENERS",
    "ZH_GIVEN",
    "ZH_HOBBIES",
    "ZH_LOOSE",
    "ZH_NUMERAL_GIVEN",
    "ZH_OPENERS",
    "ZH_OPENER_CONNECTORS",
    "ZH_STRICT",
    "ZH_SURNAMES",
    "_city",
    "_dumps",
    "_join",
    "_paragraph",
    "_pick",
    "composed_opener",
    "copy_drill_corpus",
    "copy_drill_example",
    "copy_example",
    "document_example",
    "heldout_extraction_prompts",
    "heldout_tool_prompts",
    "is_held_out",
    "made_up_connector",
    "make_corpus",
    "numeral_drill_example",
    "person_example",
    "person_facts",
    "person_name",
    "random_string",
    "rare_letter_tokens",
    "to_messages",
    "tool_example",
    "unfence",
    "vocab_letter_tokens",
    "vocab_string",
    "zh_number",
    "en_number",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=40000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path(".cache/tiny-json-llama/corpus.jsonl"))
    args = ap.parse_args()
    corpus = make_corpus(args.examples, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for ex in corpus:
            f.write(json.dumps(ex, ensure_ascii=False) + "\n")
    print(f"wrote {len(corpus)} examples to {args.out}")


if __name__ == "__main__":
    main()
