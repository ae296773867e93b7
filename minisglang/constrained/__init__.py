"""Constrained decoding building blocks: regex -> DFA -> token index."""

from minisglang.constrained import compiled_build

# The lazy automaton's hot modules may also exist compiled by mypyc (scripts/setup.sh builds
# them from these same files); `compiled_build` decides, before any of them is imported,
# whether this package loads those builds or the pure-Python files (MINISGLANG_PURE=1).
compiled_build.use(__path__)

from minisglang.constrained.regex_dfa import (  # noqa: E402  (after the choice of build)
    ByteDFA,
    CharClass,
    CharDFA,
    RegexError,
    compile_regex,
)
from minisglang.constrained.token_index import (  # noqa: E402
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
