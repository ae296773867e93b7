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

import re
from typing import Any

# In a child: the library's vocabulary (outlines-core) or compiler (xgrammar), made by setup.
_LIBRARY: dict[str, Any] = {}


def outlines_setup(eos_token_id: int, ids_by_bytes: dict[bytes, list[int]]) -> None:
    from outlines_core import Vocabulary

    _LIBRARY["outlines"] = Vocabulary(eos_token_id, ids_by_bytes)


def outlines_schema_regex(schema_text: str, whitespace: str | None, max_chars: int | None) -> tuple[int, str]:
    """outlines-core's regex of a JSON schema and its length, with "" for the regex when it
    is longer than `max_chars` (the parent refuses it): a stranger's 3.8 KB schema of
    optional properties four `$ref`s deep wrote a regex of ~1.8 billion characters, whose
    building in the server's own process held its GIL for seconds and then ended it.

    outlines-core follows `$ref`s at most `max_recursion_depth` (3) deep and writes `{}`
    below (a non-recursive chain of four required objects came out as three, and an invalid
    output): the backend refuses recursive `$ref`s, so every chain is at most as long as the
    schema has `$ref`s, and that is the depth it is given."""
    from outlines_core.json_schema import build_regex_from_schema

    depth = max(3, schema_text.count('"$ref"') + 1)
    regex = build_regex_from_schema(schema_text, whitespace, depth)
    return len(regex), regex if max_chars is None or len(regex) <= max_chars else ""


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
    """`xgrammar_compiled(<the child's compiler>, method, args, kwargs)` in the child, as
    `serialize_json` text; None when the compiled grammar is over XGRAMMAR_SEND_BYTES, or its
    JSON would not fit in the child's memory (the parent compiles it again, knowing now that
    it ends in time)."""
    try:
        compiled = xgrammar_compiled(_LIBRARY["xgrammar"], method, args, kwargs)
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


# The GrammarCompiler methods whose grammar can hold a JSON string's `pattern`, and the
# Grammar constructor that builds that grammar uncompiled.
_GRAMMAR_OF = {"compile_json_schema": "from_json_schema", "compile_structural_tag": "from_structural_tag"}
_JSON_STRING = ", json_string=true)"
_HEX2 = re.compile(r"[0-9A-Fa-f]{2}")


def xgrammar_compiled(compiler: Any, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`compiler.<method>(*args, **kwargs)`, except that a JSON string's `pattern` is read as
    a plain regex over the string's JSON text. Our adapter already writes each pattern over
    that text (backslash escapes spelled out), but xgrammar 0.2.9 reads a pattern it cannot
    inline with its `json_string` reader, which never lets a `"`, a `\\` or a control
    character's escape into an optional part or an alternation: under `^[^a]*$` or `.` a
    string never held a quote, and `^(?:b\\n)?$` after `"b` allowed nothing (the request
    aborted). So the grammar is built, printed, and read back with those regexes plain."""
    import xgrammar as xgr

    build = _GRAMMAR_OF.get(method)
    if build is None:
        return getattr(compiler, method)(*args, **kwargs)
    grammar = getattr(xgr.Grammar, build)(*args, **kwargs)
    printed = str(grammar)
    if _JSON_STRING in printed:
        grammar = xgr.Grammar.from_ebnf(plain_regexes(printed))
    return compiler.compile_grammar(grammar)


def plain_regexes(ebnf: str) -> str:
    """xgrammar's printed grammar `ebnf` in a form its reader reads back to the same grammar,
    with each `Regex("...", json_string=true)` written `Regex("...")`. Read token by token: a
    string literal or a character class is copied whole (a `\\` escapes the character after
    it), so a pattern's own text never matches; in them, a `\\xHH` is written `\\u00HH`: the
    printer writes U+007F-U+00FF so, and the reader takes every hex digit after `\\x` (a const
    "éa" came back as U+0E9A; a stranger's fuzzing)."""
    out, start, i = [], 0, 0
    while i < len(ebnf):
        opening = ebnf[i]
        if opening not in '"[':
            i += 1
            continue
        closing = '"' if opening == '"' else "]"
        out.append(ebnf[start:i])
        token, j = [opening], i + 1
        while j < len(ebnf) and ebnf[j] != closing:
            if ebnf[j] != "\\":
                token.append(ebnf[j])
                j += 1
            elif ebnf[j + 1 : j + 2] == "x" and _HEX2.fullmatch(ebnf[j + 2 : j + 4]):
                token.append("\\u00" + ebnf[j + 2 : j + 4])
                j += 4
            else:
                token.append(ebnf[j : j + 2])
                j += 2
        end = j + 1
        token.append(ebnf[j:end])
        out.append("".join(token))
        if opening == '"' and ebnf.endswith("Regex(", 0, i) and ebnf.startswith(_JSON_STRING, end):
            out.append(")")
            end += len(_JSON_STRING)
        start = i = end
    out.append(ebnf[start:])
    return "".join(out)
