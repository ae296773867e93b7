"""xgrammar behind the s5 interface: backend "xgrammar" (regex, json_schema, ebnf).

xgrammar (what SGLang uses by default since v0.4) compiles every grammar, regexes and JSON
schemas included, into a pushdown automaton, and precomputes for each automaton position
which tokens are always, never or sometimes allowed ("adaptive token mask cache"), so a
mask costs little even for context-free grammars. It writes our packed int32 mask format
natively.

What this adapter adds:
- the vocabulary comes from OUR exact token bytes (`Tokenizer.token_bytes`) as a RAW
  vocabulary, so byte-level, SentencePiece and plain tokenizers all work the same way;
  special tokens get empty strings, which xgrammar treats as never allowed;
- a `regex` reads as Python's `re` reads it (constrained/python_regex.py): xgrammar's own
  `\\d \\w \\s` are ASCII and its `.` matches a newline, so it is handed the regex with
  every character set spelled out (`portable_regex`), and `(?i)` and the like are refused;
- `ebnf` is xgrammar's EBNF (the GBNF dialect of llama.cpp: `root ::= "yes" | "no"`);
- `json_schema` output is laid out like `json.dumps`: `", "` and `": "`, no other
  whitespace (free whitespace lets a small model loop on spaces);
- a request ends as soon as nothing but EOS can follow, like our fsm backend: xgrammar
  itself only calls a matcher terminated after it has accepted the stop token;
- a `json_schema` that uses a keyword xgrammar compiles but does not enforce (IGNORED,
  found by running the JSON-Schema-Test-Suite through this adapter) is refused, naming it,
  rather than turned into a weaker grammar; and a string's minLength/maxLength become a
  `pattern`, because xgrammar's length-counted strings let raw control characters in;
- a `pattern` is rewritten over the string's JSON text (our compiler's translation): xgrammar
  puts its characters between the quotes as they are (a `\\n` in it wrote a raw newline);
  and it is read as a plain regex over that text, not with xgrammar's JSON-string reader,
  which lets no escape into an optional part (library_children.xgrammar_compiled);
- a known `format` becomes the fsm backend's pattern for it (`format_as_pattern`): xgrammar's
  `ipv4` allows leading zeros, and beside a `pattern` it enforced only the format.
"""

from __future__ import annotations

import functools
import json
import math
import re
import string
import threading
from collections.abc import Callable
from dataclasses import replace
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import xgrammar as xgr

from ..constrained import library_children
from ..constrained.bitmask import allows, pack_bits
from ..constrained.compile_service import ChildKilled, CompileTimeout
from ..constrained.json_schema import InvalidSchemaError, UnsupportedSchemaError, load_schema

# The string contents (JSON text) in which a pattern finds a match: our fsm compiler's own
# translation, so every backend reads a `pattern` alike.
from ..constrained.json_schema.patterns import _pattern_regex as pattern_over_json_text
from ..constrained.json_schema.string_chars import COUNTED_STRING_CHAR
from ..constrained.python_regex import WrittenTooLong, portable_regex
from ..constrained.regex_ast import Regex, render
from ..constrained.work_slices import CompileCancelled, outside
from .base import (
    CHILD_OPTIONS,
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarError,
    register_backend,
)
from .forced_text import JUMP_MAX_FORCED_CHARS, format_bound, gbnf_bound, pattern_bound, schema_bound
from .ignored_keywords import (
    EMPTY_ARRAYS,
    INEXACT_INTEGERS,
    NUMBER_BOUNDS,
    ONE_OF_OVERLAP,
    REPEATED_KEYS,
    IgnoredKeyword,
    SchemaObject,
    allows_keys,
    beside,
    beside_validation,
    format_as_pattern,
    inclusive_number_bounds,
    is_whole,
    json_pointer,
    listed_names,
    not_a_local_pointer,
    number_bound,
    overlapping_branches,
    pattern_meets_listed_name,
    refuse_ignored_keywords,
    refuse_unused_triggers,
    repeats_a_nullable_part,
    requires_unlisted,
    rewrite_subschemas,
    type_outside_branches,
    unlisted_raw_names,
    values_outside_type,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..constrained.structural_tag import StructuralTag
    from ..constrained.structural_tag_format import StructuralTagFormat
    from ..tokenizer import Tokenizer

# xgrammar's C++ errors start with "[15:34:26] /project/cpp/regex_converter.cc:94: " and
# sometimes "Check failed: (error.empty()) is false: ": noise for the person who sent it.
_CPP_NOISE = re.compile(r"^\s*\[[\d:.]+\] \S+:\d+: |Check failed: \(.*?\) is false: ")


# A line only a Lark grammar writes (Outlines', vLLM's and llguidance's grammars are Lark): a
# rule or terminal `name:` (`?name:`, `!name:`, `NAME.2:`), not GBNF's `name ::=`, or a
# `%import` / `%ignore` / `%declare` / `%llguidance` line. xgrammar's refusal of one said
# only "EBNF lexer error at line 2, column 6: Unexpected character: ':'".
_LARK_LINE = re.compile(
    r"(?m)^[ \t]*([?!]?[A-Za-z_][A-Za-z_0-9]*(\.-?\d+)?[ \t]*:(?!:=)|%(import|ignore|declare|llguidance)\b)"
)


def _clean_error(e: Exception) -> str:
    """The library's message without the C++ source location."""
    return _CPP_NOISE.sub("", str(e)).strip()


# --------------------------------------------------------- JSON Schema: what xgrammar ignores
# Keywords xgrammar 0.2.9 reads only when the schema says its type (or, for objects and
# arrays, has `properties`/`additionalProperties` or `items`/`prefixItems`); without, any value.
_TYPE_KEYWORDS = {
    "string": ("minLength", "maxLength", "pattern", "format"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
    "array": ("minItems", "maxItems", "uniqueItems", "contains"),
    "object": ("required", "minProperties", "maxProperties", "patternProperties", "propertyNames", "dependentRequired"),
}
_TYPE_FROM = {"object": ("properties", "additionalProperties"), "array": ("items", "prefixItems")}


# The field of a v2 format that the xgrammar backend rewrites, for an error's path.
_FIELD = {"json_schema": "json_schema", "regex": "pattern", "grammar": "grammar"}


def _untyped(kind: str) -> Callable[[SchemaObject], bool]:
    return lambda schema: "type" not in schema and not any(k in schema for k in _TYPE_FROM.get(kind, ()))


# xgrammar is handed each repetition of one character set with its last required copy alone,
# the copies before it spelled out up to this many (beyond, groups of this many counted, then the
# rest spelled: `X{17}X` was wrong too, `[c-я]{18}` forbade `function`), the rest counted from 0
# (portable_regex): its mask for `X{m,n}` (m >= 1), `X+`, `X*` or `X?` followed by a class of
# multi-byte characters is wrong where a token crosses the repetition's end. Over the bundled
# vocabulary `[a-z]{2}[\u0400-\u04ff]x` allowed 548 tokens its matcher then refused (`acc`: the
# request aborted), `[a-z]{1,3}[c-я]` forbade 383 valid ones (`able`), `[A-Z]+\d\d` allowed `He`
# and `"*\w\w` after `"` allowed `":`; written `[a-z][a-z][\u0400-\u04ff]x`,
# `[a-z][a-z]{0,2}[c-я]`, `[A-Z][A-Z]{0,}\d\d` and `"{0,}\w\w` they read right (strangers'
# vocabularies and regex fuzzing).
XGRAMMAR_SPELLED_COUNTS = 16

# xgrammar (0.2) writes a bounded number with at most this many fraction digits.
XGRAMMAR_FRACTION_DIGITS = 6


def _bounds_hold_no_short_number(schema: SchemaObject) -> bool:
    """A number (not integer) schema whose bounds hold no numeral of at most
    XGRAMMAR_FRACTION_DIGITS fraction digits: xgrammar's number then matches nothing, and the
    object around it closed with no value (`{"x": }`, finish_reason "stop": a stranger's
    attack, minimum 1e-7 and maximum 5e-7)."""
    if schema.get("type", "number") != "number":
        return False
    scale = Decimal(10) ** XGRAMMAR_FRACTION_DIGITS
    lows, highs = [], []  # the bounds in units of the last fraction digit, rounded inwards
    for keyword in NUMBER_BOUNDS:
        value = number_bound(schema, keyword)
        if value is None or not math.isfinite(value):
            continue
        units = Decimal(repr(value)) * scale  # the number as the schema writes it (1e-6, not its double)
        if keyword == "minimum":
            lows.append(units.to_integral_value(ROUND_CEILING))
        elif keyword == "exclusiveMinimum":
            lows.append(units.to_integral_value(ROUND_FLOOR) + 1)
        elif keyword == "maximum":
            highs.append(units.to_integral_value(ROUND_FLOOR))
        else:
            highs.append(units.to_integral_value(ROUND_CEILING) - 1)
    low, high = (max(lows) if lows else None), (min(highs) if highs else None)
    return low is not None and high is not None and low > high


def _shortest_text(value: float, upwards: bool) -> Decimal:
    """A bound as the shortest text of its double: xgrammar holds a bound of 17 digits exactly."""
    return Decimal(repr(value))


# xgrammar compares a number's decimal text with an exclusive bound, and a text of 6 fraction
# digits can round onto a bound past ~1e10 (it wrote 100000000000.000001 under exclusiveMinimum
# 1e11, which reads as 1e11): an exclusive bound becomes the next double inwards, inclusive.
EXACT_BOUNDS = functools.partial(inclusive_number_bounds, inner=_shortest_text, held="that a double can hold")


# A stranger's regex fuzzing: on `(?:[a-z]?)+!` xgrammar's mask took 6 ms at the first token and 230
# ms at the 60th (one random regex's mask passed 2 minutes), on the thread every request shares;
# `[a-z]*!`, the same language, stays under a millisecond. So a regex, a `pattern` or a key
# pattern is handed over with each repeated part written without its empty match
# (portable_regex's nonempty_repeats; 75 of JSONSchemaBench's 10,285 patterns repeat one, most a
# url's `([\/\w \.-]*)*`); one whose rewrite grows past REWRITE_GROWTH times is refused.
_NULLABLE_REPEAT = (
    "repeats a part which can match the empty string, such as (?:[a-z]?)+, in too many ways to write "
    "without it (xgrammar's mask then slows with every token; write the part without its empty match, "
    "[a-z]*, or use the 'fsm' backend)"
)
REWRITE_GROWTH = 4


def xgrammar_regex(regex: str) -> str:
    """The regex xgrammar is given: `portable_regex` with counts spelled out and repeated
    parts without their empty match (`_without_empty_repeats`)."""
    return _without_empty_repeats(regex, portable_regex(regex, XGRAMMAR_SPELLED_COUNTS), "a regex")


def _without_empty_repeats(regex: str, written: str, what: str, json_text: bool = False) -> str:
    """`written` (xgrammar's form of `regex`), or where `regex` repeats a part that can match
    the empty string, its form with that part written without it; GrammarError naming `what`
    if that form grows past REWRITE_GROWTH times (or still repeats such a part). `json_text`:
    `regex` is a pattern over a JSON string's text, which xgrammar reads with its own reader."""
    if not repeats_a_nullable_part(regex):
        return written
    bound = REWRITE_GROWTH * len(written) + 1_000
    try:  # (refused while it is written, once its character sets alone pass the bound: written
        # whole, a 4 KB regex took 8 s before its length was refused)
        nonempty = portable_regex(
            regex,
            XGRAMMAR_SPELLED_COUNTS,
            nonempty_repeats=True,
            max_chars=bound,
            raw_astral=json_text,
        )
    except WrittenTooLong:
        raise GrammarError(f"{what} {_NULLABLE_REPEAT}") from None
    if len(nonempty) > bound or repeats_a_nullable_part(nonempty):
        raise GrammarError(f"{what} {_NULLABLE_REPEAT}")
    return nonempty


_SHORT_NUMBERS = (
    f"when no number of at most {XGRAMMAR_FRACTION_DIGITS} fraction digits lies in the bounds (it writes none)"
)

# The keywords through which an object takes keys 'properties' does not list.
_EXTRA_KEYS = ("additionalProperties", "unevaluatedProperties")


IGNORED = (
    *EMPTY_ARRAYS,
    *INEXACT_INTEGERS,
    *(IgnoredKeyword(k, _SHORT_NUMBERS, _bounds_hold_no_short_number) for k in ("minimum", "exclusiveMinimum")),
    *(
        IgnoredKeyword(k, f"in a schema without 'type' (xgrammar then allows any {kind})", _untyped(kind))
        for kind, keywords in _TYPE_KEYWORDS.items()
        for k in keywords
    ),
    IgnoredKeyword("minLength", "beside 'pattern' or 'format'", beside("pattern", "format")),
    IgnoredKeyword("maxLength", "beside 'pattern' or 'format'", beside("pattern", "format")),
    IgnoredKeyword(
        "multipleOf",
        # (beside a bound it logs "ignoring multipleOf"; past 1024 it ignores it too: a stranger's fuzzing)
        "unless the type is 'integer', the multiple a whole number up to 1024, and no bound beside it",
        lambda s: (
            s.get("type") != "integer"
            or not is_whole(s["multipleOf"])
            or s["multipleOf"] > 1024
            or any(k in s for k in NUMBER_BOUNDS)
        ),
    ),
    IgnoredKeyword("uniqueItems", "", lambda s: s["uniqueItems"] is True),
    IgnoredKeyword("contains"),
    IgnoredKeyword("dependentRequired"),
    IgnoredKeyword("dependentSchemas"),
    IgnoredKeyword("dependencies"),
    IgnoredKeyword("required", "for a property 'properties' does not list", requires_unlisted),
    # (it refuses the whole schema with "Schema 'false' cannot accept any value", where `false`
    # only forbids that key: a stranger's tool fuzzing saw the raw text 8 times)
    IgnoredKeyword(
        "properties",
        "holding a property whose schema is false (a key the object may not have)",
        lambda s: isinstance(s["properties"], dict) and any(v is False for v in s["properties"].values()),
    ),
    IgnoredKeyword("patternProperties", "for a name 'properties' lists", pattern_meets_listed_name),
    # (`{"b": "x"}` came out under `"^b"` integers beside `additionalProperties` strings)
    IgnoredKeyword(
        "patternProperties",
        "beside 'additionalProperties' or 'unevaluatedProperties' that allows keys (a key a pattern "
        "matches may take their schema)",
        lambda s: any(allows_keys(s, k) for k in _EXTRA_KEYS),
    ),
    # (`{"abcd": 1}` came out under `maxLength: 3` names; and the escape-free rule below is one)
    IgnoredKeyword(
        "propertyNames",
        "beside 'properties' (it checks only the keys 'properties' does not list)",
        lambda s: bool(listed_names(s)),
    ),
    # (found by a stranger's fuzzer: `{"xy": 1}` under `^x` strings and `y$` integers)
    IgnoredKeyword(
        "patternProperties",
        "with more than one pattern (a key two patterns match must meet both schemas)",
        lambda s: isinstance(s["patternProperties"], dict) and len(s["patternProperties"]) > 1,
    ),
    REPEATED_KEYS,
    IgnoredKeyword(
        "allOf",
        "with more than one subschema or beside other keywords",
        lambda s: not isinstance(s["allOf"], list) or len(s["allOf"]) > 1 or beside_validation("allOf")(s),
    ),
    IgnoredKeyword("anyOf", "beside keywords other than 'type'", beside_validation("anyOf", frozenset({"type"}))),
    IgnoredKeyword("oneOf", "beside keywords other than 'type'", beside_validation("oneOf", frozenset({"type"}))),
    IgnoredKeyword("oneOf", ONE_OF_OVERLAP, overlapping_branches),
    IgnoredKeyword("type", "beside 'anyOf' or 'oneOf' with a branch of another type", type_outside_branches),
    IgnoredKeyword("not"),
    IgnoredKeyword("if"),
    IgnoredKeyword("enum", "beside keywords other than 'type', or with values of another type", values_outside_type),
    IgnoredKeyword("const", "beside keywords other than 'type', or of another type", values_outside_type),
    IgnoredKeyword("$ref", "other than a '#/...' JSON pointer", not_a_local_pointer),
    IgnoredKeyword("$ref", "beside other keywords", beside_validation("$ref")),
    IgnoredKeyword("$dynamicRef"),
    IgnoredKeyword("$dynamicAnchor"),
    # A subschema with its own `$id` is a new base for the `$ref`s inside it; xgrammar
    # resolves every `#/...` against the root document.
    IgnoredKeyword("$id", "inside a subschema (a new base for its '$ref's)", below_root=True),
)
# Longest minLength/maxLength written as a pattern: compiling `(?:C){0,n}` grows with n
# (1,000: about 1 s; 5,000: 25 s).
MAX_LENGTH_AS_PATTERN = 1000


def _without_false_branches(schema: SchemaObject, pointer: str) -> SchemaObject:
    """anyOf / oneOf without their `false` branches, which no value meets (so neither "any"
    nor "exactly one" changes): xgrammar refused `{"anyOf": [{"type": "integer"}, false]}`
    with "Schema 'false' cannot accept any value" (a stranger's fuzzer). A list of nothing
    but `false` stays, and is refused as what it is."""
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and any(b is False for b in branches) and any(b is not False for b in branches):
            schema[key] = [b for b in branches if b is not False]
    return schema


def _whole_integer_bounds(schema: SchemaObject, pointer: str) -> SchemaObject:
    """An integer's bounds with a fraction as the whole bounds they mean (`minimum: 1.5` is
    `minimum: 2`, `exclusiveMaximum: 3.5` is `maximum: 3`): xgrammar refused them, saying
    "Integer constraint must be a whole number" (a stranger's fuzzer). Exact: no integer lies
    between a bound with a fraction and the whole number it rounds to, inwards."""
    if schema.get("type") != "integer":
        return schema
    for key, inwards, inclusive in (
        ("minimum", math.ceil, "minimum"),
        ("exclusiveMinimum", math.ceil, "minimum"),
        ("maximum", math.floor, "maximum"),
        ("exclusiveMaximum", math.floor, "maximum"),
    ):
        value = schema.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not is_whole(value):
            bound = inwards(schema.pop(key))
            if inclusive in schema:  # a bound of each kind: the tighter one holds
                bound = max(bound, schema[inclusive]) if inclusive == "minimum" else min(bound, schema[inclusive])
            schema[inclusive] = bound
    return schema


def _length_as_pattern(schema: SchemaObject, pointer: str) -> SchemaObject:
    """A string's minLength/maxLength written as a `pattern` over the string's JSON text
    (lengths beside a pattern or format are refused before): xgrammar's length-counted
    strings allow raw U+0000-U+001F, which JSON forbids inside a string. Each counted
    character is the fsm backend's COUNTED_STRING_CHAR, raw or a short escape (`\\u` escapes
    would make the repeated automaton several times larger: at maxLength 1000 a 0.7 s compile
    took 4.4 s), read as xgrammar reads a `regex` request."""
    if "minLength" not in schema and "maxLength" not in schema:
        return schema
    low, high = schema.pop("minLength", 0), schema.pop("maxLength", None)
    if high is not None and low > high:
        raise GrammarError(f"minLength {low} is greater than maxLength {high} (at {pointer}): no string fits")
    if max(low, high or 0) > MAX_LENGTH_AS_PATTERN:
        raise GrammarError(
            f"xgrammar lets raw control characters into a string counted by minLength/maxLength, "
            f"and as a pattern a bound above {MAX_LENGTH_AS_PATTERN} (at {pointer}) is too slow to "
            "compile; use the 'fsm' grammar backend for this schema"
        )
    counted = f"(?:{COUNTED_STRING_CHAR}){{{int(low)},{'' if high is None else int(high)}}}"
    schema["pattern"] = f"^(?:{xgrammar_regex(counted)})$"
    return schema


def _json_text_regex(regex: Regex, what: str) -> str:
    """`regex` (over a string's JSON text) as anchored regex text that xgrammar reads right."""
    text = optional_as_count(render(regex))  # (a rewrite below writes `{0,1}` itself)
    return f"^(?:{_without_empty_repeats(text, text, what, json_text=True)})$"


def _over_json_text(pattern: str, where: str, what: str, thing: str) -> str:
    """`pattern` (over a decoded string) as an anchored regex over the string's JSON text:
    our compiler's translation, which writes each character the way JSON allows and refuses
    what it cannot read exactly. Anchored: xgrammar searches a pattern (as JSON Schema says),
    the translation is whole. `what` and `thing` name the pattern and its strings in errors."""
    try:
        translated = pattern_over_json_text(pattern, where)
    except UnsupportedSchemaError as e:
        raise GrammarError(str(e)) from e
    if translated is None:
        raise GrammarError(f"{what} {pattern!r} at {where} matches no {thing}")
    return _json_text_regex(translated, f"{what} {pattern!r} at {where}")


def _pattern_properties_as_json_text(schema: SchemaObject, pointer: str) -> SchemaObject:
    """`patternProperties`' name patterns rewritten over the names' JSON text, as `pattern` is:
    xgrammar wrote a `"` of `^\"` raw inside a name (invalid JSON) and dropped a lookahead
    without a word (a stranger's fuzzing)."""
    names = schema.get("patternProperties")
    if not isinstance(names, dict):
        return schema
    where = json_pointer(pointer, "patternProperties")
    rewritten = {
        _over_json_text(name_pattern, json_pointer(where, name_pattern), "the name pattern", "name"): sub
        for name_pattern, sub in names.items()
    }
    return {**schema, "patternProperties": rewritten}


# The longest listed name the extra keys' pattern leaves out: it nests a few groups per letter,
# and our check of the regex (the lazy automaton) refused one of ~85 letters as "too complex".
LONGEST_EXCLUDED_NAME = 80


def _escape_free_extra_keys(schema: SchemaObject, pointer: str) -> SchemaObject:
    """An object's extra keys kept to `unlisted_raw_names`, where it lists properties: xgrammar
    matched a key against the listed names as spelled, so `{"\\u0061": "x"}` broke `a`'s integer
    schema (a stranger's fuzzer). As a `propertyNames` pattern, which xgrammar checks on extra
    keys only (a user's own beside `properties` is refused before) and which takes the place of
    its own "not a listed name" (so it leaves the listed names out), read over the key's JSON
    text, which for raw characters is the name itself."""
    names = listed_names(schema)
    if names and any(allows_keys(schema, k) for k in _EXTRA_KEYS):
        pattern = _json_text_regex(
            unlisted_raw_names(names, LONGEST_EXCLUDED_NAME), f"the extra keys' pattern at {pointer}"
        )
        return {**schema, "propertyNames": {"type": "string", "pattern": pattern}}
    return schema


def _pattern_as_json_text(schema: SchemaObject, pointer: str) -> SchemaObject:
    """`pattern` rewritten over the JSON text of the string (as the outlines adapter does):
    xgrammar puts a pattern's characters between the quotes as they are, so `[\\x00-\\x1f]`
    or a `\\n` wrote a raw control character (invalid JSON), and it read `\\A`, `\\Z` as
    letters and skipped a `$` in the middle."""
    if isinstance(schema.get("pattern"), str):
        schema["pattern"] = _over_json_text(schema["pattern"], pointer, "'pattern'", "string")
    return schema


def optional_as_count(regex: str) -> str:
    """`regex` with each `?` quantifier written `{0,1}`: in a JSON string's pattern xgrammar
    lets an optional group's first character be skipped when a repeat follows it
    (`^y(x[0-9]+)?y$` took "y5y"); `{0,1}` reads right. (Our renderer writes no lazy
    quantifier, so a `?` outside a class is a quantifier unless it opens `(?:`.)"""
    out, i, in_class = [], 0, False
    while i < len(regex):
        c = regex[i]
        if c == "\\":
            out.append(regex[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if regex[i + 1 : i + 2] == "]":  # a `]` first in a class is a character
                out.append("[]")
                i += 2
                continue
        elif c == "?" and not (out and out[-1] == "("):
            c = "{0,1}"
        out.append(c)
        i += 1
    return "".join(out)


def gbnf_for_xgrammar(text: str) -> str:
    """GBNF `text` as llama.cpp reads it, written for xgrammar's parser, the same language:
    an empty alternative as `""` (llama.cpp reads `ws ::= | " "`, its own json.gbnf, `("a" | )`,
    `"a" | ` ending the text and an empty rule `r ::=` ending its line; xgrammar expects an
    element after `::=`, `|` and `(`: "Expect element"), and
    `.` as the class of every character (llama.cpp's any character, a newline too; xgrammar
    took it for a rule named "."), `\\[` / `\\]` in a string as the bracket itself (escapes
    llama.cpp reads everywhere, xgrammar only in a class: "Invalid escape"), and `\\xHH` as
    `\\u00HH` (llama.cpp reads two hex digits after `\\x`, xgrammar every hex digit that follows:
    `"\\x41B"` was U+041B, not "AB"). Otherwise strings, classes and comments are copied as they are."""
    out: list[str] = []
    # The last thing read: "::=", "|", "(", "x" (an element), or "" (nothing yet: a comment or
    # a blank line before the first rule is no empty rule).
    last = ""
    depth = 0  # open parentheses: outside them a newline ends the rule
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if last == "::=" and depth == 0 and c in "#\n":  # an empty rule
            out.append('"" ')
            last = "x"
        if c in '"[':  # a string or a character class, to its unescaped end
            close, j = ('"' if c == '"' else "]"), i + 1
            piece = [c]
            while j < n and text[j] != close:
                step = 2 if text[j] == "\\" else 1
                escape = text[j : j + step]
                if escape == "\\x" and j + 4 <= n and all(d in string.hexdigits for d in text[j + 2 : j + 4]):
                    escape, step = "\\u00" + text[j + 2 : j + 4], 4
                piece.append(escape[1] if c == '"' and escape in ("\\[", "\\]") else escape)
                j += step
            out.append("".join(piece) + text[j : j + 1])
            i, last = j + 1, "x"
            continue
        if c == "#":  # a comment, to the end of its line
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(text[i:j])
            i = j
            continue
        if text.startswith("::=", i):
            out.append("::=")
            i, last = i + 3, "::="
            continue
        if c == ".":
            out.append("[\\u0000-\\U0010FFFF]")
            i, last = i + 1, "x"
            continue
        if (c == "|" and last in ("::=", "|", "(")) or (c == ")" and last in ("|", "(")):
            out.append('"" ')
        if c == "|" or c == "(":
            last = c
        elif not c.isspace():
            last = "x"
        depth += (c == "(") - (c == ")")
        out.append(c)
        i += 1
    # (a `|` ending the text is an empty alternative; one ending a line is not: llama.cpp reads
    # on after `|` across newlines)
    return "".join(out) + ('""' if last in ("::=", "|") else "")


# UTF-8's decoder between two bytes (RFC 3629): at a character's boundary (state 0), or
# inside one, where the next byte must lie in [lo, hi] and `more` continuation bytes follow
# it. After E0 and F0 the second byte is narrower (no overlong form), after ED (no
# surrogate) and F4 (nothing past U+10FFFF).
UTF8_STATES: tuple[tuple[int, int, int] | None, ...] = (
    None,
    (0x80, 0xBF, 0),
    (0x80, 0xBF, 1),
    (0x80, 0xBF, 2),
    (0xA0, 0xBF, 1),  # after E0
    (0x80, 0x9F, 1),  # after ED
    (0x90, 0xBF, 2),  # after F0
    (0x80, 0x8F, 2),  # after F4
)
_AFTER_LEAD = {0xE0: 4, 0xED: 5, 0xF0: 6, 0xF4: 7}


def utf8_step(state: int, byte: int) -> int:
    """The decoder's state after `byte` (-1: not UTF-8)."""
    inside = UTF8_STATES[state]
    if inside is not None:
        lo, hi, more = inside
        return more if lo <= byte <= hi else -1  # (state k reads one byte, then k - 1 more)
    if byte < 0x80:
        return 0
    if byte in _AFTER_LEAD:
        return _AFTER_LEAD[byte]
    if 0xC2 <= byte <= 0xDF:
        return 1
    if 0xE1 <= byte <= 0xEF:
        return 2
    if 0xF1 <= byte <= 0xF3:
        return 3
    return -1  # a continuation byte with no lead, C0, C1, F5-FF


class Utf8Guard:
    """The rows that keep an output UTF-8 where xgrammar does not. It reads a character class
    such as `[\\s\\S]`, `.` or a JSON string's character as every code point, surrogates
    included, and so lets the byte ED (a lead) be followed by A0-BF: the bytes of U+D800-DFFF,
    which no UTF-8 decoder accepts. And a structural tag's free text is any bytes there: a
    lone continuation byte, a lead followed by "a", EOS after a lead (the text read U+FFFD).
    `rows[state]` (int32 [W], packed) allows the tokens whose bytes go on as UTF-8 from the
    decoder's `state` (UTF8_STATES), and, at a character's boundary only, those without
    bytes (special tokens, EOS: the grammar decides). A token's own bytes are read through the
    decoder too: a stranger's vocabulary held a token `ED A0 80` (U+D800's bytes), which
    xgrammar allowed wherever `.` or `[^"]` was."""

    def __init__(self, token_bytes: list[bytes], width: int):
        self.token_bytes = token_bytes
        # after[state, token]: the state after the token's bytes (-1: not UTF-8 from there).
        after = np.full((len(UTF8_STATES), len(token_bytes)), -1, dtype=np.int8)
        has_bytes = np.zeros(len(token_bytes), dtype=bool)
        for token, data in enumerate(token_bytes):
            if not data:
                continue
            has_bytes[token] = True
            if data.isascii():
                after[0, token] = 0
                continue
            # A token that starts with a continuation byte goes on from inside a character only.
            starts = range(1, len(UTF8_STATES)) if 0x80 <= data[0] <= 0xBF else (0,)
            for start in starts:
                state = start
                for byte in data:
                    state = utf8_step(state, byte)
                    if state < 0:
                        break
                after[start, token] = state
        after[0, ~has_bytes] = 0  # a special token adds no byte
        self.after = after
        allowed = np.zeros((len(UTF8_STATES), width), dtype=bool)
        allowed[:, : len(token_bytes)] = after >= 0
        allowed[1:, : len(token_bytes)] &= has_bytes  # inside a character: no EOS, no special token
        self.rows = pack_bits(torch.from_numpy(allowed))  # [states, W]
        # The same words through numpy: one row's AND there costs ~2 us, torch's `mask[i] &=
        # rows[s]` ~13 us (two views and an op), more than xgrammar's own fill of the row.
        self.words = self.rows.numpy()

    def state_after(self, state: int, token_id: int) -> int:
        """The decoder's state after `token_id` (a token the row did not allow: read from a
        boundary, as a decoder starts again)."""
        if token_id >= len(self.token_bytes) or not self.token_bytes[token_id]:
            return state  # a special token adds no byte
        after = int(self.after[state, token_id])
        return after if after >= 0 else max(int(self.after[0, token_id]), 0)


class XGrammarGrammar(BaseGrammarObject):
    """One request's `xgr.GrammarMatcher` over a shared `xgr.CompiledGrammar`."""

    _batch_filler: xgr.BatchGrammarMatcher | None = None  # one thread pool for all batches
    _batch_lock = threading.Lock()

    def __init__(
        self,
        compiled: xgr.CompiledGrammar,
        stop_only_row: torch.Tensor,
        guard: Utf8Guard,
        jumps: bool | list[bool] = True,
    ):
        self.compiled = compiled
        # [False]: find_jump_forward_string is never asked (forced_text.py); one list for every
        # copy, so a search found slow stops them all (`search_was_slow`)
        self._jumps = jumps if isinstance(jumps, list) else [jumps]
        self.matcher = xgr.GrammarMatcher(compiled)
        self.stop_only_row = stop_only_row  # [W] int32: the row that allows only EOS
        self.only_stop_left = False
        self.guard = guard
        self.states = [0]  # per accepted token: UTF-8's decoder state after it (Utf8Guard)

    def nbytes(self) -> int:
        """The compiled grammar's size as xgrammar counts it (a 300-string schema: 45-70 MB;
        counted as 0, a client filled the 128-entry cache at ~53 MB an entry)."""
        return int(self.compiled.memory_size_bytes)

    def accept_token(self, token_id: int) -> None:
        if not self.matcher.accept_token(token_id):
            raise GrammarError(f"token {token_id} is not allowed by the grammar here{self._mask_disagrees(token_id)}")
        self.states.append(self.guard.state_after(self.states[-1], token_id))
        self.only_stop_left = self._nothing_but_stop_can_follow()

    def _mask_disagrees(self, token_id: int) -> str:
        """A refused token's explanation when xgrammar's own mask allows it here: xgrammar
        0.2.9's mask and matcher disagree on some regexes (a stranger's fuzzing: `[A-Z]+\\d\\d`
        masked `He` in, then refused it), and a request that samples such a token is aborted
        for the library's inconsistency, not its own."""
        row = self._row_now()
        if not allows(row[0], token_id):
            return ""
        return (
            " (xgrammar's own mask allowed it: its mask and its matcher disagree on this grammar, a "
            "library fault; the 'fsm' grammar backend serves it)"
        )

    def _nothing_but_stop_can_follow(self) -> bool:
        # Only a complete match can be followed by EOS alone; only then pay for a mask.
        if self.matcher.is_terminated() or not self.matcher.is_completed():
            return False
        return torch.equal(self._row_now()[0], self.stop_only_row)

    def _row_now(self) -> torch.Tensor:
        """int32 [1, W]: this state's row as fill_vocab_mask serves it (guarded)."""
        row = torch.empty((1, self.stop_only_row.numel()), dtype=torch.int32)
        self.fill_vocab_mask(row, 0)
        return row

    def _guard_row(self, vocab_mask: torch.Tensor, idx: int) -> None:
        words = vocab_mask.numpy()  # (the masks are CPU tensors; a view, no copy)
        np.bitwise_and(words[idx], self.guard.words[self.states[-1]], out=words[idx])

    def rollback(self, k: int) -> None:
        if k == 0:
            return
        self.matcher.rollback(k)
        del self.states[-k:]
        # The state rolled back to may leave only EOS (a speculative draft went past it).
        self.only_stop_left = self._nothing_but_stop_can_follow()

    def is_terminated(self) -> bool:
        return self.matcher.is_terminated() or self.only_stop_left

    def copy(self) -> XGrammarGrammar:
        return XGrammarGrammar(self.compiled, self.stop_only_row, self.guard, self._jumps)

    @property
    def jumps(self) -> bool:
        return self._jumps[0]

    def search_was_slow(self) -> None:
        self._jumps[0] = False

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        self.matcher.fill_next_token_bitmask(vocab_mask, idx)
        self._guard_row(vocab_mask, idx)

    @classmethod
    def fill_vocab_mask_batched(cls, entries: list[tuple[XGrammarGrammar, int]], vocab_mask: torch.Tensor) -> None:
        """All rows in one call to xgrammar's multithreaded batch filler."""
        if not entries:
            return
        with cls._batch_lock:
            if cls._batch_filler is None:
                cls._batch_filler = xgr.BatchGrammarMatcher()
        cls._batch_filler.batch_fill_next_token_bitmask(
            [g.matcher for g, _ in entries], vocab_mask, [idx for _, idx in entries]
        )
        # Every row's guard in one numpy operation (rows of one batch are distinct).
        rows = np.array([idx for _, idx in entries], dtype=np.int64)
        words = vocab_mask.numpy()
        words[rows] &= np.stack([g.guard.words[g.states[-1]] for g, _ in entries])

    # -- jump forward: xgrammar finds the forced string itself --------------------------
    def try_jump_forward(self, tokenizer: Tokenizer) -> str | None:
        # Trailing spaces stay with the model: byte-level vocabularies glue a space to the
        # next word (" 31"), and a model handed "age": " must write "31" the unusual way.
        if not self.jumps or self.matcher.is_terminated():  # past EOS nothing is forced (and xgrammar raises)
            return None
        return self.matcher.find_jump_forward_string().rstrip(" ") or None

    def jump_forward_str_state(self, helper: str) -> tuple[bytes, None]:
        # The matcher is not moved here: jump_and_retokenize feeds it the new tokens.
        return helper.encode("utf-8"), None


@register_backend("xgrammar")
class XGrammarBackend(BaseGrammarBackend):
    kinds = frozenset({"regex", "json_schema", "ebnf", "structural_tag"})
    own_options = CHILD_OPTIONS

    def __init__(self, tokenizer: Tokenizer, vocab_size: int, **kwargs: Any):
        super().__init__(tokenizer, vocab_size, **kwargs)
        # Built once per engine: for a 65k vocabulary this takes a noticeable moment.
        vocab = [b"" if data is None else data for data in tokenizer.token_bytes]
        info = xgr.TokenizerInfo(
            vocab, xgr.VocabType.RAW, vocab_size=vocab_size, stop_token_ids=[tokenizer.eos_token_id]
        )
        # Our base class caches compiled grammars (LRU), so xgrammar's own cache is off.
        self.info = info
        self.compiler = xgr.GrammarCompiler(info, max_threads=2, cache_enabled=False)
        # Grammars compile in a kept child process (constrained/library_children.py), killed
        # at compile_timeout: a nested anyOf that repeats its subschema doubles xgrammar's
        # compile at every level (13 levels, a 1.2 MB schema: minutes), a 3 KB schema of 60
        # strings with maxLength 1000 takes over 30 s, and no thread can be stopped. (The
        # forkserver imports xgrammar, and torch with it, once: a child then starts at once.)
        self.start_children(setup=(library_children.xgrammar_setup, (info.serialize_json(),)), preload=("xgrammar",))
        only_eos = torch.zeros(vocab_size, dtype=torch.bool)
        only_eos[tokenizer.eos_token_id] = True
        self.stop_only_row = pack_bits(only_eos)
        self.guard = Utf8Guard(vocab, vocab_size)

    def compile(self, kind: str, text: str) -> XGrammarGrammar:
        try:
            if kind == "regex":  # (a RegexError says what is wrong with it, in Python's terms)
                compiled = self._compiled("compile_regex", xgrammar_regex(text))
                jumps = pattern_bound(text) <= JUMP_MAX_FORCED_CHARS  # (`a{100000}`: no jumps)
                return XGrammarGrammar(compiled, self.stop_only_row, self.guard, jumps=jumps)
            elif kind == "json_schema":
                enforced = self.enforced_schema(text)
                enforced_text = json.dumps(enforced, ensure_ascii=False)
                compiled = self._compiled("compile_json_schema", enforced_text, any_whitespace=False)
                jumps = schema_bound(enforced) <= JUMP_MAX_FORCED_CHARS
                return XGrammarGrammar(compiled, self.stop_only_row, self.guard, jumps=jumps)
            else:
                compiled = self._compiled("compile_grammar", gbnf_for_xgrammar(text))
                # (rules that double, `r1 ::= r0 r0` twenty times, forced 8 MB in 321 bytes)
                jumps = gbnf_bound(text) <= JUMP_MAX_FORCED_CHARS
        except (GrammarError, CompileTimeout, CompileCancelled, ChildKilled):
            raise
        except Exception as e:  # xgrammar raises RuntimeError/ValueError with a parser message
            message = _clean_error(e)
            if kind == "json_schema" and "but additional properties aren't allowed" in message:
                # (said where additionalProperties is not written too: a stranger's fuzzer)
                message += (
                    "; where 'additionalProperties' is not written, xgrammar writes no key that "
                    "'properties' does not list, so minProperties can ask for more keys than it writes"
                )
            if kind == "ebnf" and _LARK_LINE.search(text):
                message += (
                    "; this looks like a Lark grammar (`start: ...`, `%import`), and xgrammar reads "
                    "GBNF (`root ::= ...`): the 'llguidance' grammar backend reads both"
                )
            raise GrammarError(message) from e
        return XGrammarGrammar(compiled, self.stop_only_row, self.guard, jumps=jumps)

    @staticmethod
    def enforced_schema(text: str) -> Any:
        """The schema xgrammar is given (as JSON text): refused if it uses a keyword xgrammar
        ignores, string lengths rewritten as patterns."""
        try:
            schema = load_schema(text)
        except InvalidSchemaError as e:
            raise GrammarError(str(e)) from e
        schema = rewrite_subschemas(schema, _without_false_branches)
        schema = rewrite_subschemas(schema, _whole_integer_bounds)  # (before the rules, which read whole bounds)
        refuse_ignored_keywords(schema, IGNORED, "xgrammar", "xgrammar")
        schema = rewrite_subschemas(schema, EXACT_BOUNDS)  # (after the rules, which name the user's bounds)
        # (lengths after patterns: their pattern is written over the string's JSON text already,
        # and a length beside a pattern or format was refused above; the extra keys' pattern
        # last, written over JSON text by its own step)
        steps = (
            format_as_pattern,
            _pattern_as_json_text,
            _pattern_properties_as_json_text,
            _length_as_pattern,
            _escape_free_extra_keys,
        )
        for step in steps:
            schema = rewrite_subschemas(schema, step)
        return schema

    def compile_structural_tag(self, spec: StructuralTag) -> XGrammarGrammar:
        """xgrammar's "triggered_tags" format: the same semantics as ours (at_least_one: the
        output starts with a tag). Its JSON allows any whitespace character between tokens,
        at most one in a row (ours: an optional space), so a small model cannot loop on them."""
        # Each schema refused or rewritten as for a json_schema request: a tool's parameters
        # once reached xgrammar unchecked (`{"anyOf": []}` wrote `"arguments": }`).
        refuse_unused_triggers(spec.triggers, [s.begin for s in spec.structures], "xgrammar")
        spec = spec.with_schemas(lambda schema: self.enforced_schema(json.dumps(schema)))
        tags = [
            {
                "begin": s.begin,
                "end": s.end,
                "content": {"type": "json_schema", "json_schema": s.schema, "max_whitespace_cnt": 1},
            }
            for s in spec.structures
        ]
        fmt = {
            "type": "triggered_tags",
            "triggers": list(spec.triggers),
            "tags": tags,
            "at_least_one": spec.at_least_one,
            "stop_after_first": spec.stop_after_first,
        }
        try:
            compiled = self._compiled("compile_structural_tag", {"type": "structural_tag", "format": fmt})
        except (CompileTimeout, CompileCancelled, ChildKilled):
            raise
        except Exception as e:  # (its error names no tag: a stranger's fuzzer read "Schema 'false' ...")
            raise self.structure_at_fault(spec, GrammarError(_clean_error(e))) from e
        jumps = all(schema_bound(s.schema, len(s.begin) + len(s.end)) <= JUMP_MAX_FORCED_CHARS for s in spec.structures)
        return XGrammarGrammar(compiled, self.stop_only_row, self.guard, jumps=jumps)

    def compile_structural_tag_format(self, spec: StructuralTagFormat) -> XGrammarGrammar:
        """A v2 structural tag handed to xgrammar as v2 JSON, each part read as every backend
        reads it: a `json_schema` refused or rewritten as for a json_schema request (at most
        one whitespace character in a row unless `max_whitespace_cnt` says), a `regex` as
        Python's `re` reads it (`portable_regex`), a `grammar` as llama.cpp's GBNF; a
        trigger that begins no tag refused by name (xgrammar fails an internal check); and
        any_text's `max_chars` refused by name: xgrammar 0.2.9 does not count characters
        (with max_chars 3 it refuses `abé` and accepts `中中` and `a` + the first byte of `é`,
        after which no token is allowed: a request aborted midway)."""
        from ..constrained.structural_tag_format import (
            AnyTextFormat,
            ConstStringFormat,
            GrammarFormat,
            JSONSchemaFormat,
            RegexFormat,
            TriggeredTagsFormat,
            rewrite,
        )

        def change(path: str, fmt: Any) -> Any:
            where = f"structural_tag.{path}"
            if isinstance(fmt, AnyTextFormat) and fmt.max_chars is not None:
                raise GrammarError(
                    f"{where}.max_chars: xgrammar does not count an any_text's characters exactly (a "
                    "character of several bytes can end it midway); the 'fsm' and 'llguidance' backends "
                    "serve max_chars, and xgrammar serves max_tokens"
                )
            if isinstance(fmt, JSONSchemaFormat) and fmt.max_whitespace_cnt == 0:
                raise GrammarError(
                    f"{where}.max_whitespace_cnt: xgrammar takes a count of 1 or more (0, no whitespace "
                    "at all, is served by the 'fsm' and 'llguidance' backends)"
                )
            try:
                if isinstance(fmt, JSONSchemaFormat):
                    cnt = 1 if fmt.max_whitespace_cnt is None else fmt.max_whitespace_cnt
                    schema = self.enforced_schema(json.dumps(fmt.json_schema, ensure_ascii=False))
                    return replace(fmt, json_schema=schema, max_whitespace_cnt=cnt)
                if isinstance(fmt, RegexFormat):
                    pattern = xgrammar_regex(fmt.pattern)
                    # (xgrammar refuses an empty pattern; it matches the empty string only)
                    return replace(fmt, pattern=pattern) if pattern else ConstStringFormat("")
                if isinstance(fmt, GrammarFormat) and fmt.syntax == "ebnf":
                    return replace(fmt, grammar=gbnf_for_xgrammar(fmt.grammar))
            except ValueError as e:  # (GrammarError, a RegexError: one message each)
                raise GrammarError(f"{where}.{_FIELD[fmt.TYPE]}: {e}") from e
            if isinstance(fmt, TriggeredTagsFormat):
                begins = [str(tag.begin) for tag in fmt.tags]
                refuse_unused_triggers(fmt.triggers, begins, "xgrammar", noun="tag", where=where)
            return fmt

        enforced = rewrite(spec, change)
        try:
            compiled = self._compiled("compile_structural_tag", enforced.to_json())
        except (CompileTimeout, CompileCancelled, ChildKilled):
            raise
        except Exception as e:  # xgrammar's message, without its C++ source location
            raise GrammarError(f"structural_tag.format: {_clean_error(e)}") from e
        # (a `repeat` counted as often as its minimum: three nested repeats of 1,000 forced 8 GB)
        jumps = format_bound(enforced.format) <= JUMP_MAX_FORCED_CHARS
        return XGrammarGrammar(compiled, self.stop_only_row, self.guard, jumps=jumps)

    def _compiled(self, method: str, grammar: Any, **kwargs: Any) -> xgr.CompiledGrammar:
        """`self.compiler.<method>(grammar, **kwargs)` (as `library_children.xgrammar_compiled`
        reads it: JSON strings' patterns as plain regexes), in a kept child (unless the backend
        compiles on threads), whose grammar comes back as JSON. One too big to send back is
        compiled again here, the child having shown that it ends in time; meanwhile this
        thread steps out of the pool (`outside`), so it holds no thread another client needs."""
        if self.children is None:
            made: xgr.CompiledGrammar = library_children.xgrammar_compiled(self.compiler, method, (grammar,), kwargs)
            return made
        sent = self.children.call(
            library_children.xgrammar_compile,
            (method, (grammar,), kwargs),
            timeout=self.compile_timeout,
            what=f"xgrammar's {method}",
        )
        if sent is not None:
            return xgr.CompiledGrammar.deserialize_json(sent, self.info)
        with outside():
            again: xgr.CompiledGrammar = library_children.xgrammar_compiled(self.compiler, method, (grammar,), kwargs)
        return again
