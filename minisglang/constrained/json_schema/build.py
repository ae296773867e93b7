"""The top-level compile: `build_schema_tree` checks the options and the whitespace regex, runs
the compiler and says why a schema with no value has none; `build_regex_from_schema` is the
same as regex text."""

from __future__ import annotations

import functools
import sys
from dataclasses import fields
from decimal import Decimal
from typing import Any

from minisglang.constrained.json_schema.budget import CpuBudget
from minisglang.constrained.json_schema.compiler import _SchemaCompiler
from minisglang.constrained.json_schema.errors import InvalidSchemaError, UnsupportedSchemaError
from minisglang.constrained.json_schema.keywords import JSON_TYPES, _finite_values, _types
from minisglang.constrained.json_schema.loading import load_schema
from minisglang.constrained.json_schema.numbers import _multiple_span
from minisglang.constrained.json_schema.options import DEFAULT_WHITESPACE, SchemaOptions
from minisglang.constrained.json_schema.values import _decimal, _json_type_of, _type_allows, short_value
from minisglang.constrained.lazy_regex_parser import parse_tree
from minisglang.constrained.regex_ast import Regex, render, text_size
from minisglang.constrained.regex_dfa import RegexError, compile_regex, shown_regex


def build_regex_from_schema(
    schema: dict[str, Any] | str | bool, whitespace: str | None = None, max_ref_depth: int = 5, **options: Any
) -> str:
    """The regex text of the JSON texts of the values `schema` accepts: `build_schema_tree`
    rendered (regex_ast.render) in Python's syntax, or with automaton="lazy" in the lazy
    dialect (its private groups: only `parse_regex(..., members=True)` reads those)."""
    tree = build_schema_tree(schema, whitespace, max_ref_depth, **options)
    return render(tree, "lazy" if options.get("automaton") == "lazy" else "python")


def build_schema_tree(
    schema: dict[str, Any] | str | bool,
    whitespace: str | None = None,
    max_ref_depth: int = 5,
    budget: CpuBudget | None = None,
    **options: Any,
) -> Regex:
    """The regex (regex_ast.py's tree) of the JSON texts of the values `schema` accepts (see
    the package doc). The lazy automaton reads it directly (regex_ast.lower).

    `schema` is a dict or its JSON text; `whitespace` is the regex allowed at each place
    JSON allows whitespace (default DEFAULT_WHITESPACE; it must match the empty string and
    only JSON whitespace); `max_ref_depth` bounds how often one `$ref` is expanded along a
    path; `budget` bounds the compile's CPU time (budget.py: CompileBudgetError past it);
    `options` are the other fields of SchemaOptions (an unknown name is a ValueError).
    Raises InvalidSchemaError, UnsupportedSchemaError, or ValueError for a bad option.
    """
    known = {f.name for f in fields(SchemaOptions)} - {"whitespace", "max_ref_depth"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown JSON Schema option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    opts = SchemaOptions(whitespace=whitespace, max_ref_depth=max_ref_depth, **options)
    if isinstance(schema, str):
        schema = load_schema(schema)
    if not isinstance(schema, (dict, bool)):
        raise InvalidSchemaError(f"a schema must be a JSON object or a boolean, got {type(schema).__name__}")
    ws = _checked_whitespace(DEFAULT_WHITESPACE if whitespace is None else whitespace)
    compiler = _SchemaCompiler(schema, ws, opts, budget)
    try:
        regex = compiler.value(schema, "#")
        if regex is None and compiler.empty_because is not None:
            raise UnsupportedSchemaError(
                f"the schema has no value that minisglang writes: "
                f"{compiler.empty_because}; there is nothing to generate"
            )
        if regex is None:
            why, ours = _why_empty(compiler.empty_parts)
            root_note = None if ours or not isinstance(schema, dict) else _untyped_note(schema, "#")
            if root_note is not None:  # (the cause lies deeper, in a typed part)
                why, ours = f"{why}; {root_note}", True
            head = "has no value that minisglang writes" if ours else "accepts no JSON value"
            raise UnsupportedSchemaError(f"the schema {head}{why}: there is nothing to generate")
    except RecursionError:  # the compiler follows the schema's nesting (hundreds of levels)
        # (a wide schema can nest its pattern without nesting itself: minProperties over
        # hundreds of optional properties builds one level per property)
        raise InvalidSchemaError(
            f"the schema nests too deeply, or its pattern does (hundreds of optional properties "
            f"under minProperties nest one level each): the compiler follows each level, and "
            f"this one goes past Python's recursion limit ({sys.getrecursionlimit()})"
        ) from None
    compiler.check_size(text_size(regex), "#")
    return regex


@functools.lru_cache(maxsize=64)
def _checked_whitespace(ws: str) -> Regex:
    """Check that `ws` matches "" and nothing but JSON whitespace; return its tree.

    Cached: every schema compile checks the same few patterns, and the check builds a DFA
    (0.2 ms, a sixth of compiling bench_backends.py's schema). A refused pattern raises
    again each time (lru_cache keeps no exceptions)."""
    try:
        dfa = compile_regex(ws) if ws else None
    except RegexError as e:
        raise ValueError(f"whitespace regex {shown_regex(ws)} is invalid: {e}") from None
    if dfa is None:
        return parse_tree("")
    if not dfa.accepts(""):
        raise ValueError(f"whitespace regex {shown_regex(ws)} must match the empty string: JSON whitespace is optional")
    for row in dfa.transitions.values():
        for cls in row:
            if cls.negated or not cls.chars <= set(" \t\n\r"):
                raise ValueError(
                    f"whitespace regex {shown_regex(ws)} matches {cls.label()}, which is not JSON "
                    "whitespace (only space, \\t, \\n and \\r are)"
                )
    return parse_tree(ws)


def _why_empty(parts: list[tuple[str, dict[str, Any] | bool]]) -> tuple[str, bool]:
    """(" (at PATH: WHY)" for the first part with no value, its commonest causes named, or ""
    when no part was found (a cached $ref); whether that part is empty by our policy only:
    without `type`, the types its keywords name)."""
    if not parts:
        return "", False
    path, schema = parts[0]
    why = (
        "; ".join(_contradictions(schema)) or "no value matches it"
        if isinstance(schema, dict)
        else "nothing matches it (false, parts of allOf/not/if that exclude each other, or a $ref cut at max_ref_depth)"
    )
    note = _untyped_note(schema, path) if isinstance(schema, dict) else None
    why += "" if note is None else f"; {note}"
    more = f", and {len(parts) - 1} more part(s)" if len(parts) > 1 else ""
    return f" (at {path}: {why}{more})", note is not None


def _untyped_note(schema: dict[str, Any], path: str) -> str | None:
    """Why a schema without `type` may have values we do not write (the package doc's policy:
    only the types its keywords name; JSON Schema also accepts the others, 1 for
    {"minItems": 1, "maxItems": 0}: schema_fuzz), or None when it names every type."""
    if "type" in schema or _finite_values(schema) is not None:
        return None
    written = _types(schema, path)
    if len(written) >= len(JSON_TYPES) - 1:  # (no type keyword: every type but integer, which number holds)
        return None
    return (
        f"without 'type' at {path}, only {' or '.join(written)} values are written (the types its keywords "
        "name), though values of other types would pass them: give 'type' to allow those"
    )


def _contradictions(schema: dict[str, Any]) -> list[str]:
    """The keywords of one flattened schema that leave no value: a lower bound above the
    upper one (numbers, lengths, items, properties), a range with no integer in it, an
    enum with no value of the schema's types."""
    found, types = [], set(_types(schema, "#"))

    def given(*keywords: str) -> list[tuple[str, Decimal]]:
        return [(k, _decimal(schema[k], k, "#")) for k in keywords if type(schema.get(k)) in (int, float)]

    lows, highs = given("minimum", "exclusiveMinimum"), given("maximum", "exclusiveMaximum")
    if lows and highs:
        (lk, lo), (hk, hi) = max(lows, key=lambda kv: kv[1]), min(highs, key=lambda kv: kv[1])
        lo_strict, hi_strict = lk.startswith("exclusive"), hk.startswith("exclusive")

        def none_between(step: Decimal | int) -> bool:
            first, last = _multiple_span(step, lo, lo_strict, hi, hi_strict)
            return first > last

        between = f"{lk} {short_value(schema[lk])} and {hk} {short_value(schema[hk])}"
        step = schema.get("multipleOf")
        if lo > hi or (lo == hi and (lo_strict or hi_strict)):
            found.append(f"no number lies between {between}")
        elif "integer" in types and "number" not in types and none_between(1):
            found.append(f"no integer lies between {between}")
        elif (
            isinstance(step, (int, float))
            and not isinstance(step, bool)
            and step > 0
            and none_between(_decimal(step, "multipleOf", "#"))
        ):
            found.append(f"no multiple of {short_value(step)} lies between {between}")
    for low, high, what in (
        ("minLength", "maxLength", "string length"),
        ("minItems", "maxItems", "item count"),
        ("minProperties", "maxProperties", "property count"),
    ):
        if isinstance(schema.get(low), int) and isinstance(schema.get(high), int) and schema[low] > schema[high]:
            found.append(f"{low} {schema[low]} is above {high} {schema[high]}: no {what} fits")
    values = _finite_values(schema)
    if values is not None and "type" in schema:
        if not any(_type_allows(types, _json_type_of(v)) for v in values):
            found.append(f"none of its enum/const values has type {' or '.join(sorted(types))}")
    elif values == []:
        found.append("its enum is empty")
    return found
