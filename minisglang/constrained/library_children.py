"""The grammar libraries' compiles, as they run in a kept child process (child_process.py).

outlines-core's `Index` and xgrammar's compiles are native code that no thread can stop:
outlines-core's DFA grows exponentially on some 25-character regexes, and xgrammar's compile
doubles with each level of a nested `anyOf` that repeats its subschema (13 levels, a 1.2 MB
schema: minutes). So their backends compile in kept children, killed at `compile_timeout`
or when the compile's requests leave. This module is what a child imports: plain functions
of picklable arguments, and no torch (a child that imported the backends would load torch,
a second or more per child).

Each child starts with a setup call that builds the library's vocabulary once (`_LIBRARY`);
its compiles then use it. Results go back pickled: an outlines-core `Index` pickles itself,
an xgrammar `CompiledGrammar` as its JSON (`serialize_json`), read back in the parent with
the backend's own TokenizerInfo. xgrammar imports torch (a second): the forkserver that
forks the children imports it once (`start_ahead`'s preload).
"""

from __future__ import annotations

from typing import Any

# In a child: the library's vocabulary (outlines-core) or compiler (xgrammar), made by setup.
_LIBRARY: dict[str, Any] = {}


def outlines_setup(eos_token_id: int, ids_by_bytes: dict[bytes, list[int]]) -> None:
    from outlines_core import Vocabulary

    _LIBRARY["outlines"] = Vocabulary(eos_token_id, ids_by_bytes)


def outlines_index(regex: str) -> bytes:
    """outlines-core's `Index` of `regex` over the child's vocabulary, pickled (the parent
    reads its size before it reads it back)."""
    import pickle

    from outlines_core import Index

    return pickle.dumps(Index(regex, _LIBRARY["outlines"]))


def xgrammar_setup(tokenizer_info_json: str) -> None:
    import xgrammar as xgr

    info = xgr.TokenizerInfo.deserialize_json(tokenizer_info_json)
    _LIBRARY["xgrammar"] = xgr.GrammarCompiler(info, max_threads=2, cache_enabled=False)


# A compiled grammar bigger than this is not sent back: its JSON can be 100x its size (a
# 20-way anyOf of 20 properties, 5 MB compiled, wrote 574 MB); the child then only shows
# that the compile ends in time.
XGRAMMAR_SEND_BYTES = 1 << 20


def xgrammar_compile(method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """`GrammarCompiler.<method>(*args, **kwargs)` in the child, as `serialize_json` text;
    None when the compiled grammar is over XGRAMMAR_SEND_BYTES, or its JSON would not fit
    in the child's memory (the parent compiles it again, knowing now that it ends in time)."""
    try:
        compiled = getattr(_LIBRARY["xgrammar"], method)(*args, **kwargs)
    except RuntimeError as e:
        if "bad_alloc" in str(e):  # (C++'s out-of-memory, under the child's address-space limit)
            raise MemoryError from e
        raise
    if compiled.memory_size_bytes > XGRAMMAR_SEND_BYTES:
        return None
    try:
        return str(compiled.serialize_json())
    except RuntimeError as e:
        if "bad_alloc" in str(e):
            return None
        raise
