"""The real tokenizers available offline, each loaded once per test session.

Used by tests/test_tokenizer.py and by other tests that need real vocabularies (e.g. the
token-index brute-force oracle):

    from real_tokenizers import ALL_REAL, load
    tok = load("anthropic_65k")            # or anthropic_65k()

Each loader fails with a clear message naming the missing file.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import minisglang
from minisglang.tokenizer import Tokenizer

REPO = Path(__file__).resolve().parents[1]
# Fetched by scripts/setup.sh (the tokenizer.json inside the anthropic==0.3.11 wheel).
ANTHROPIC_TOKENIZER_JSON = REPO / ".cache" / "tokenizers" / "anthropic-0.3.11" / "tokenizer.json"
# Inside mistral-common's package data: Mistral-7B-Instruct-v0.3's SentencePiece BPE
# (32768 ids, `▁`, <0xNN> byte fallback, control and user-defined pieces) and Mistral
# NeMo's tekken (131072 ids, tiktoken-style byte-level BPE).
MISTRAL_SENTENCEPIECE_FILE = "mistral_instruct_tokenizer_240323.model.v3"
MISTRAL_TEKKEN_FILE = "tekken_240718.json"

ALL_REAL = ["bundled", "anthropic_65k", "mistral_sentencepiece", "mistral_tekken"]


def _require(path: Path, how: str) -> Path:
    if not path.is_file():
        raise FileNotFoundError(f"real tokenizer file missing: {path} ({how})")
    return path


def mistral_data_file(name: str) -> Path:
    """Path of a file in mistral-common's package data directory."""
    # find_spec locates the package without importing it (importing takes seconds).
    spec = importlib.util.find_spec("mistral_common")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "mistral-common is not installed; install the extra: pip install -e '.[tokenizers-extra]'"
        )
    return _require(Path(spec.submodule_search_locations[0]) / "data" / name, "it ships with mistral-common>=1.5")


@functools.cache
def anthropic_65k() -> Tokenizer:
    """65k byte-level BPE with an NFKC normalizer (anthropic==0.3.11's tokenizer.json)."""
    return Tokenizer.from_pretrained(_require(ANTHROPIC_TOKENIZER_JSON, "run scripts/setup.sh first"))


@functools.cache
def mistral_sentencepiece() -> Tokenizer:
    return Tokenizer.from_sentencepiece(mistral_data_file(MISTRAL_SENTENCEPIECE_FILE))


@functools.cache
def mistral_tekken() -> Tokenizer:
    return Tokenizer.from_tekken(mistral_data_file(MISTRAL_TEKKEN_FILE))


@functools.cache
def bundled() -> Tokenizer:
    """The bundled tiny model's byte-level BPE (minisglang.DEFAULT_MODEL_PATH)."""
    folder = Path(minisglang.DEFAULT_MODEL_PATH)
    _require(folder / "tokenizer.json", "the bundled model is built by scripts/train_tiny_model.py")
    return Tokenizer.from_pretrained(folder)


def load(name: str) -> Tokenizer:
    """The real tokenizer called ``name`` (one of ALL_REAL)."""
    if name not in ALL_REAL:
        raise ValueError(f"unknown real tokenizer {name!r}; choose one of {ALL_REAL}")
    return globals()[name]()
