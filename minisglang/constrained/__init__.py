"""Constrained decoding building blocks: regex -> DFA -> token index."""
from minisglang.constrained.regex_dfa import ByteDFA, CharClass, CharDFA, RegexError, compile_regex
from minisglang.constrained.token_index import (
    LazyTokenIndex,
    TokenIndex,
    VocabularyCannotSpellError,
    allowed_tokens_table,
    build_index_fast,
    build_index_reference,
)

__all__ = [
    "ByteDFA",
    "CharClass",
    "CharDFA",
    "LazyTokenIndex",
    "RegexError",
    "TokenIndex",
    "VocabularyCannotSpellError",
    "allowed_tokens_table",
    "build_index_fast",
    "build_index_reference",
    "compile_regex",
]
