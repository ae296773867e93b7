"""JSON Schema -> regex: the JSON texts of a schema's valid values, as one regular expression.

`build_regex_from_schema(schema)` returns a regex in the dialect of `regex_dfa.compile_regex`
that means the same in Python's `re` (so `re.fullmatch` is a second oracle). The regex is
SOUND: every string it matches parses with `json.loads` to a value the schema accepts. It
is not complete: a generator only needs one way to write each value, so some valid JSON
texts (other key orders, other whitespace, `1.0` for an integer) are not matched.

What the matched JSON text looks like:
- Whitespace is allowed only after `{`, `[`, `,`, `:` and before `}`, `]`, and each place
  takes one `whitespace` regex, by default `[ ]?` (at most one space): both
  `json.dumps(x)` and `json.dumps(x, separators=(",", ":"))` match. Free whitespace
  (`[ \\t\\n]*`) lets a model loop on spaces until max_new_tokens (outlines #839,
  vllm #44619), so it is bounded by default and configurable.
- Object members come in the order of the schema's `properties` (option any_order: any
  order), then the keys of `patternProperties` or of a map. For the lazy automaton
  (option automaton="lazy", what our fsm backend asks for by default) any order is one
  `(?@members...)` group of lazy_regex.py (the members written so far are the state, so
  its size is linear in the members, and unlisted keys may come anywhere); for a plain
  regex (automaton="eager", this function's default) every order is written out, for
  objects of at most max_any_order_properties members.
- Strings: raw characters except `"`, `\\` and control characters; JSON escapes; every
  non-ASCII character either raw or as `\\uXXXX` (how `json.dumps` writes it by default),
  except in strings with minLength/maxLength: raw characters and short escapes only, so
  that counting stays cheap (see COUNTED_STRING_CHAR).

Policies where the schema allows more than we generate (each one keeps soundness; the
options of SchemaOptions change some of them):
- `additionalProperties` absent: an object with `properties` or `patternProperties` gets
  no other keys (most generation tools do this: extra keys are rarely wanted; option
  extra_properties: unlisted keys after the listed ones); an object without them is a
  free map. `additionalProperties` with a schema or `true` next to `properties` also adds
  no other keys; without `properties` it is a map of that schema.
- Numbers the schema does not bound have at most max_integer_digits (18) integer,
  max_fraction_digits (20) fraction and max_exponent_digits (3) exponent digits, so a
  model cannot write digits until max_new_tokens; one bound makes the other a power of
  ten; fractions are always limited (option bound_numbers=False: no digit limits). The
  seconds of a `time` / `date-time` have at most 9 fraction digits, for the same reason.
- `format`s we do not know are an error (option unknown_formats="annotation": any string).
  A format with minLength/maxLength is written when every string of it, or of its short
  form (SHORT_FORMATS: e.g. `https://` URIs of at most 143 characters), fits the bounds.
- `prefixItems` without `items`: no items after the prefix (a tuple).
- No `type`: the type comes from the type-specific keywords present (`properties` ->
  object, `minLength` -> string, ...); with none of them, any JSON value.
- Any JSON value (`{}`, `true`, a free map or list) nests at most ANY_VALUE_NESTING levels
  (LAZY_ANY_VALUE_NESTING with automaton="lazy").
- A `$ref` is expanded at most `max_ref_depth` times along one path; deeper, the
  recursive choice is removed (a tree's children list must then be empty).
- Integers are written without fraction or exponent; numbers with bounds without exponent.
- Strings with minLength/maxLength (and `pattern` intersected with them) write
  non-ASCII characters raw.
- `pattern` follows JSON Schema (a search, not a full match: `^...$` pins both ends);
  `\\d`, `\\w`, `\\s`, `.` and negated classes are narrowed to what both ECMA-262 and
  Python's `re` (which `jsonschema` uses) agree on: ASCII for the shorthand classes.

Combinations: allOf is merged into one schema with the meaning of both (properties and
items exactly, min/max bounds, enum intersection, several patterns: intersected by the
lazy automaton); two different values of a keyword we cannot intersect (format, ...) are
an error. anyOf merges each branch with the
sibling keywords. oneOf is accepted only when the branches are provably disjoint (by
type, by const/enum, or by a property both require with disjoint schemas): only then is
"exactly one" the same as "at least one". The other applicators become these, exactly:
- `not`: its negation written with positive keywords (other types, values outside
  const/enum, a required property absent, the opposite bound, a property that fails,
  not anyOf = allOf of nots, a string a pattern does not match: lazy automaton only);
  other forms are an error.
- if/then/else: anyOf [(if and then), (not if and else)] (two disjoint cases).
- dependentRequired/dependentSchemas/dependencies: per property, anyOf [absent, present
  and the rest]. unevaluatedProperties/Items without other applicators: additionalProperties/items.
- contains: the items N* (Y N*){minContains,maxContains} with Y = contains, N = not contains;
  with maxItems, a walk over (items so far, matches so far).
Intersection and difference (automaton="lazy"): lazy_regex's private `(?@and(A)(B))` and
`(?@diff(A)(B))` groups make these exact in every shape: a string's format, pattern,
minLength/maxLength and excluded values together; patternProperties keys split by the
set of patterns they match (minus every writing of the other patterns' keys, never a
listed name), and the keys of additionalProperties (no pattern's). A plain regex
(automaton="eager") has them in restricted shapes only, else an error naming the keyword:
pattern with minLength/maxLength (a pattern of fixed-width parts), patternProperties
(patterns whose keys cannot meet a listed name or each other, no additionalProperties).
Keywords exact in restricted shapes: propertyNames, min/maxProperties, uniqueItems (at most
MAX_UNIQUE_VALUES possible items), multipleOf (listed within bounds, or by last digits),
$ref to any $id/$anchor of the document.

Every keyword or shape we cannot enforce exactly raises UnsupportedSchemaError naming the
keyword and where it is: never a silently weaker grammar. Annotations (title,
description, default, ...) are ignored, and so are unknown keywords, as JSON Schema
itself does.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import re
import sys
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, fields
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from fractions import Fraction
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

from minisglang.constrained.lazy_regex import (
    DEF_SYNTAX,
    MEMBERS_SYNTAX,
    REF_SYNTAX,
    LazyByteDFA,
    RegexPool,
    parse_regex,
)
from minisglang.constrained.python_regex import MAX_CODE_POINT
from minisglang.constrained.regex_dfa import (
    SURROGATES,
    RegexError,
    _complement,
    _escape_char,
    _remove_surrogates,
    compile_regex,
    shown_regex,
)

try:  # Python's own regex parser, used to read (and check) `pattern` keywords
    import re._parser as sre_parse  # Python >= 3.11
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse  # type: ignore[no-redef]

# One optional space: json.dumps' ", " and ": " and the compact "," and ":" both match,
# and a model cannot loop on whitespace (outlines #839, vllm #44619).
DEFAULT_WHITESPACE = r"[ ]?"
# How lazy_regex's private groups ((?@members...), (?@and...), (?@diff...)) begin: only
# regexes built with automaton="lazy" hold them, and only `parse_regex` reads them.
PRIVATE_SYNTAX = "(?@"
# A subschema's regex at least this long is written once and referred to (automaton="lazy").
SHARE_MIN_CHARS = 64
_REF_NAMES = re.compile(r"\(\?@ref:([0-9a-f]+)\)")
# How deep a free JSON value ({}, true, a list without `items`) may nest: 1 allows a
# list or object of scalars. Each level makes the regex 4x longer (a container writes its
# element pattern twice) and the automaton about 2.5x larger and slower to build.
ANY_VALUE_NESTING = 1
# For the lazy automaton a free value may nest deeper: each level is written once (a
# shared sub-expression, a few hundred characters) and only the states generation reaches
# are built (real objects carry {"labels": {...}}, lists of lists, objects in lists).
LAZY_ANY_VALUE_NESTING = 5
# Numbers without bounds in the schema get these digit limits, so that generation ends
# (a model can write digits until max_new_tokens: "384597965934907183.44247..."). 18
# integer digits always fit an int64; 20 fraction and 3 exponent digits hold every
# double as json.dumps writes it (17 significant digits, up to 3 zeros after the point
# before Python switches to exponent notation, exponents up to 308).
DEFAULT_MAX_INTEGER_DIGITS = 18
DEFAULT_MAX_FRACTION_DIGITS = 20
DEFAULT_MAX_EXPONENT_DIGITS = 3
# any_order writes every permutation of the present members: n! grows fast.
DEFAULT_MAX_ANY_ORDER_PROPERTIES = 4
# The longest regex a schema may compile to. Nested $refs, allOf and anyOf multiply a
# regex (JSON Schema Store's 2.3 KB jsonld.json made 3.3 billion characters and 13.5 GB);
# sizes are checked as the parts are composed, so such a schema fails in milliseconds.
DEFAULT_MAX_REGEX_CHARS = 1_000_000

JSON_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
# Keywords that only describe (or only hold subschemas for $ref): nothing to constrain.
ANNOTATION_KEYWORDS = frozenset({
    "$schema", "$id", "$anchor", "$dynamicAnchor", "$comment", "$vocabulary", "$defs",
    "definitions", "title", "description", "default", "examples", "deprecated", "readOnly",
    "writeOnly", "contentMediaType", "contentEncoding", "contentSchema",
})
# Keywords that constrain values and that we do not implement: always an error.
UNSUPPORTED_KEYWORDS = frozenset({
    "unevaluatedItems", "unevaluatedProperties", "$dynamicRef", "$recursiveRef",
    "$recursiveAnchor",
})
# The keywords of each type; a schema without "type" gets the types whose keywords it uses.
TYPE_KEYWORDS = {
    "object": ("properties", "required", "additionalProperties", "minProperties", "maxProperties",
               "patternProperties", "propertyNames"),
    "array": ("items", "prefixItems", "minItems", "maxItems", "contains"),
    "string": ("minLength", "maxLength", "pattern", "format"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
}


@dataclass(frozen=True)
class SchemaOptions:
    """How build_regex_from_schema writes the JSON texts of a schema (each field documented).

    - whitespace: the regex allowed at each place JSON allows whitespace (None: `[ ]?`).
    - max_ref_depth: how often one `$ref` is expanded along a path.
    - max_integer_digits, max_fraction_digits, max_exponent_digits: the longest numerals
      written, for numbers the schema does not bound (a minimum and a maximum bound the
      integer digits; the fraction is always limited).
    - bound_numbers: apply those digit limits (off: JSON's own number grammar, any number
      of digits, as before issue 17; a model may then write digits until max_new_tokens;
      fractions next to a bound stay limited).
    - any_order: object members in any order, not only the schema's. With
      automaton="eager" an object may have at most max_any_order_properties members (more
      is an error: the alternatives grow as n!); with "lazy" any number (one
      `(?@members...)` group), and unlisted keys (extra_properties, patternProperties) may
      come between the listed ones.
    - extra_properties: an object with `properties` and no `additionalProperties` also
      takes unlisted keys with any value (JSON Schema's own meaning; off: no extra keys,
      as xgrammar's strict mode).
    - unknown_formats: "error" (a format we cannot check is refused, naming it) or
      "annotation" (JSON Schema's default meaning: an unknown format does not constrain,
      the string is any string).
    - max_regex_chars: the longest regex allowed; a longer one is refused
      (SchemaTooLargeError naming the schema part) before it is built.
    - automaton: which automaton reads the regex. "eager" (the default here): plain
      Python syntax, for s1-s4's DFA and for `re.fullmatch`; "lazy": it may also use
      lazy_regex.py's private groups, which only `parse_regex` reads (our fsm backend
      passes its own automaton): `(?@members...)`, `(?@and...)`/`(?@diff...)`
      (intersection, difference), and `(?@def:NAME(R))`/`(?@ref:NAME)`: a subschema's
      regex of SHARE_MIN_CHARS or more is written once, so the text grows with the schema,
      not with its nesting.
    """

    whitespace: str | None = None
    max_ref_depth: int = 5
    max_integer_digits: int = DEFAULT_MAX_INTEGER_DIGITS
    max_fraction_digits: int = DEFAULT_MAX_FRACTION_DIGITS
    max_exponent_digits: int = DEFAULT_MAX_EXPONENT_DIGITS
    bound_numbers: bool = True
    any_order: bool = False
    max_any_order_properties: int = DEFAULT_MAX_ANY_ORDER_PROPERTIES
    extra_properties: bool = False
    unknown_formats: str = "error"
    max_regex_chars: int = DEFAULT_MAX_REGEX_CHARS
    automaton: str = "eager"

    def __post_init__(self) -> None:
        for name in ("max_ref_depth", "max_integer_digits", "max_fraction_digits", "max_exponent_digits",
                     "max_any_order_properties", "max_regex_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "max_ref_depth" else 1):
                raise ValueError(f"option {name} must be a positive integer, got {value!r}")
        for name in ("bound_numbers", "any_order", "extra_properties"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"option {name} must be true or false, got {getattr(self, name)!r}")
        if self.unknown_formats not in ("error", "annotation"):
            raise ValueError(f"option unknown_formats must be 'error' or 'annotation', got {self.unknown_formats!r}")
        if self.automaton not in ("eager", "lazy"):
            raise ValueError(f"option automaton must be 'eager' or 'lazy', got {self.automaton!r}")


class UnsupportedSchemaError(ValueError):
    """The schema is valid but uses a keyword or construct this compiler does not support."""


class SchemaTooLargeError(UnsupportedSchemaError):
    """The schema's regex would be longer than the option max_regex_chars."""


class InvalidSchemaError(ValueError):
    """The input is not a valid JSON Schema (bad JSON, wrong keyword value types, bad $ref)."""


def build_regex_from_schema(schema: dict | str | bool, whitespace: str | None = None,
                            max_ref_depth: int = 5, **options) -> str:
    """The regex of the JSON texts of the values `schema` accepts (see the module doc).

    `schema` is a dict or its JSON text; `whitespace` is the regex allowed at each place
    JSON allows whitespace (default DEFAULT_WHITESPACE; it must match the empty string and
    only JSON whitespace); `max_ref_depth` bounds how often one `$ref` is expanded along a
    path; `options` are the other fields of SchemaOptions (an unknown name is a
    ValueError). Raises InvalidSchemaError, UnsupportedSchemaError, or ValueError for a
    bad option.
    """
    known = {f.name for f in fields(SchemaOptions)} - {"whitespace", "max_ref_depth"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown JSON Schema option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    opts = SchemaOptions(whitespace=whitespace, max_ref_depth=max_ref_depth, **options)
    if isinstance(schema, str):
        schema = load_schema(schema)
    if not isinstance(schema, (dict, bool)):
        raise InvalidSchemaError(
            f"a schema must be a JSON object or a boolean, got {type(schema).__name__}")
    ws = _checked_whitespace(DEFAULT_WHITESPACE if whitespace is None else whitespace)
    compiler = _SchemaCompiler(schema, ws, opts)
    try:
        regex = compiler.value(schema, "#")
        if regex is None and compiler.empty_because is not None:
            raise UnsupportedSchemaError(f"the schema has no value that minisglang writes: "
                                         f"{compiler.empty_because}; there is nothing to generate")
        if regex is None:
            raise UnsupportedSchemaError(f"the schema accepts no JSON value{_why_empty(compiler.empty_parts)}: "
                                         "there is nothing to generate")
        regex = compiler.with_definitions(regex)
    except RecursionError:   # the compiler follows the schema's nesting (hundreds of levels)
        raise InvalidSchemaError(f"the schema nests too deeply: the compiler follows each level, and this one "
                                 f"goes past Python's recursion limit ({sys.getrecursionlimit()})") from None
    compiler.check_size(len(regex), "#")
    return regex


def load_schema(text: str) -> Any:
    """A schema's JSON text -> the schema. InvalidSchemaError when it is not JSON, when one
    object gives a key twice (parsers disagree on which copy counts, so the request body
    refuses it too: `{"type": "string", "type": "integer"}` must not quietly mean integers),
    or when it nests deeper than Python's parser can follow."""
    def refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        twice = repeated_key(pairs)
        if twice is not None:
            raise InvalidSchemaError(f"the schema gives the key {twice!r} twice in one object; give each key once")
        return dict(pairs)

    def refuse_underflow(numeral: str) -> float:
        value = float(numeral)
        if underflows(numeral, value):
            raise InvalidSchemaError(f"the schema holds the number {shown_numeral(numeral)}, which is below the "
                                     f"smallest double ({5e-324}) and reads as 0; write 0 or a larger number")
        return value

    try:
        return json.loads(text, object_pairs_hook=refuse_duplicates, parse_float=refuse_underflow)
    except json.JSONDecodeError as e:
        raise InvalidSchemaError(f"the schema is not valid JSON: {e}") from None
    except RecursionError:
        raise InvalidSchemaError("the schema is not valid JSON: it nests too deeply for the parser") from None


def underflows(numeral: str, value: float) -> bool:
    """Whether a JSON numeral that is not zero read as 0.0 (`1e-400`: below the smallest
    double). Such a bound would silently become 0: `minimum: 1e-400` would allow 0."""
    return value == 0.0 and any(c in "123456789" for c in re.split("[eE]", numeral)[0])


def shown_numeral(numeral: str) -> str:
    """A numeral (or a value's JSON text) for an error message, cut after 40 characters."""
    return numeral if len(numeral) <= 40 else numeral[:37] + "..."


def repeated_key(pairs: list[tuple[str, Any]]) -> str | None:
    """The first key given twice in one JSON object's (key, value) pairs (what json.loads
    hands an `object_pairs_hook`), or None."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            return key
        seen.add(key)
    return None


@functools.lru_cache(maxsize=64)
def _checked_whitespace(ws: str) -> str:
    """Check that `ws` matches "" and nothing but JSON whitespace; return it as one unit.

    Cached: every schema compile checks the same few patterns, and the check builds a DFA
    (0.2 ms, a sixth of compiling bench_backends.py's schema). A refused pattern raises
    again each time (lru_cache keeps no exceptions)."""
    try:
        dfa = compile_regex(ws) if ws else None
    except RegexError as e:
        raise ValueError(f"whitespace regex {shown_regex(ws)} is invalid: {e}") from None
    if dfa is None:
        return ""
    if not dfa.accepts(""):
        raise ValueError(f"whitespace regex {shown_regex(ws)} must match the empty string: JSON whitespace is optional")
    for row in dfa.transitions.values():
        for cls in row:
            if cls.negated or not cls.chars <= set(" \t\n\r"):
                raise ValueError(f"whitespace regex {shown_regex(ws)} matches {cls.label()}, which is not JSON "
                                 "whitespace (only space, \\t, \\n and \\r are)")
    return ws if re.fullmatch(r"\[[^\]]*\][?*+]?|\\?.[?*+]?", ws) else f"(?:{ws})"


# ---------------------------------------------------------------------------------------
# Regex building blocks. Every helper returns a regex that is safe to concatenate (an
# alternation is always wrapped in a group), or None for "matches nothing".
# ---------------------------------------------------------------------------------------
def _alt(options: list[str | None]) -> str | None:
    """Alternation of the options that match something; None if none does."""
    unique = list(dict.fromkeys(o for o in options if o is not None))
    if not unique:
        return None
    if "" in unique:  # the empty option makes the rest optional
        rest = _alt([o for o in unique if o != ""])
        return "" if rest is None else _repeat(rest, 0, 1)
    return unique[0] if len(unique) == 1 else "(?:" + "|".join(unique) + ")"


def _is_atom(regex: str) -> bool:
    """Whether a quantifier may follow `regex` directly: one (escaped) char or one class."""
    return bool(re.fullmatch(r"\\?.|\\x[0-9a-f]{2}|\\u[0-9a-f]{4}|\[(\\.|[^\]\\])*\]", regex, re.S))


def _repeat(regex: str | None, lo: int, hi: int | None) -> str | None:
    """`regex` repeated lo..hi times (hi None: unbounded)."""
    if regex is None or regex == "":
        return "" if lo == 0 or regex == "" else None
    if hi == 0:
        return ""
    if lo == hi == 1:
        return regex
    atom = regex if _is_atom(regex) else f"(?:{regex})"
    if hi is None:
        return atom + ("*" if lo == 0 else "+" if lo == 1 else f"{{{lo},}}")
    if lo == hi:
        return f"{atom}{{{lo}}}"
    return atom + ("?" if (lo, hi) == (0, 1) else f"{{{lo},{hi}}}")


def _digit_class(lo: int, hi: int) -> str:
    """A class for the decimal digits lo..hi: 5, [89], [2-5]."""
    return str(lo) if lo == hi else f"[{lo}{hi}]" if hi == lo + 1 else f"[{lo}-{hi}]"


def _concat(*parts: str | None) -> str | None:
    """Concatenation; None if any part matches nothing."""
    return None if any(p is None for p in parts) else "".join(parts)


# ---------------------------------------------------------------------------------------
# Characters inside JSON strings
# ---------------------------------------------------------------------------------------
Ranges = list[tuple[int, int]]  # sorted, disjoint, inclusive code point ranges

ALL_CHARACTERS: Ranges = _remove_surrogates([(0, MAX_CODE_POINT)])
NUM_CHARACTERS = sum(hi - lo + 1 for lo, hi in ALL_CHARACTERS)
# Characters a JSON string may hold raw: not `"`, not `\`, no control characters.
RAW_STRING_CHARACTERS: Ranges = _remove_surrogates([(0x20, 0x21), (0x23, 0x5B), (0x5D, MAX_CODE_POINT)])
# Characters json.dumps writes as \uXXXX (control characters and DEL, non-ASCII of the BMP).
BMP_ESCAPED_CHARACTERS: Ranges = [(0x00, 0x1F), (0x7F, SURROGATES[0] - 1), (SURROGATES[1] + 1, 0xFFFF)]
# Characters JSON lets any writer escape as \uXXXX (every BMP character but a surrogate).
BMP_CHARACTERS: Ranges = [(0x00, SURROGATES[0] - 1), (SURROGATES[1] + 1, 0xFFFF)]
SHORT_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t"}


def _normalize(ranges: Ranges) -> Ranges:
    """Sort and merge overlapping or adjacent ranges."""
    out: Ranges = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(hi, out[-1][1]))
        else:
            out.append((lo, hi))
    return out


def _intersect(a: Ranges, b: Ranges) -> Ranges:
    """The code points in both range lists."""
    return [(max(lo1, lo2), min(hi1, hi2)) for lo1, hi1 in a for lo2, hi2 in b
            if max(lo1, lo2) <= min(hi1, hi2)]


def _class_regex(ranges: Ranges) -> str:
    """A character class for `ranges`, negated when that names fewer characters."""
    size = sum(hi - lo + 1 for lo, hi in ranges)
    if size == 1:
        return _escape_char(chr(ranges[0][0]), in_class=False)
    negated = size > NUM_CHARACTERS // 2
    listed = _remove_surrogates(_complement(ranges)) if negated else ranges
    body = "".join(_escape_char(chr(lo), True) if lo == hi else
                   f"{_escape_char(chr(lo), True)}-{_escape_char(chr(hi), True)}" for lo, hi in listed)
    return f"[^{body}]" if negated else f"[{body}]"


def _hex_digits(lo: int, hi: int) -> str:
    """A class for the hex digits with values lo..hi, in either case: (8, 11) -> [89a-bA-B]."""
    if lo == hi and lo < 10:
        return str(lo)
    parts = []
    if lo <= 9:
        parts.append(_digit_class(lo, min(hi, 9)).strip("[]"))
    if hi >= 10:
        a, b = "abcdef"[max(lo, 10) - 10], "abcdef"[hi - 10]
        parts.append(f"{a}{a.upper()}" if a == b else f"{a}-{b}{a.upper()}-{b.upper()}")
    return "[" + "".join(parts) + "]"


def _hex_range(lo: int, hi: int, width: int = 4) -> str:
    """A regex for the `width`-digit hex numerals (any case) with values lo..hi."""
    if width == 0:
        return ""
    shift = 4 * (width - 1)
    low_mask = (1 << shift) - 1
    first_lo, first_hi = lo >> shift, hi >> shift
    if first_lo == first_hi:
        return _hex_digits(first_lo, first_lo) + _hex_range(lo & low_mask, hi & low_mask, width - 1)
    parts = []
    if lo & low_mask:  # the lowest first digit is followed by the tail of lo only
        parts.append(_hex_digits(first_lo, first_lo) + _hex_range(lo & low_mask, low_mask, width - 1))
        first_lo += 1
    last = None
    if hi & low_mask != low_mask:  # the highest first digit is followed by the head of hi only
        last = _hex_digits(first_hi, first_hi) + _hex_range(0, hi & low_mask, width - 1)
        first_hi -= 1
    if first_lo <= first_hi:
        parts.append(_hex_digits(first_lo, first_hi) + (_repeat("[0-9a-fA-F]", width - 1, width - 1)))
    return _alt(parts + [last])


def _surrogate_pairs(lo: int, hi: int) -> list[str]:
    """Regexes for the `\\uD8xx\\uDCxx` escapes of the code points lo..hi (all above 0xFFFF)."""
    first_high, first_low = divmod(lo - 0x10000, 0x400)
    last_high, last_low = divmod(hi - 0x10000, 0x400)

    def pairs(high_lo: int, high_hi: int, low_lo: int, low_hi: int) -> str:
        return (r"\\u" + _hex_range(0xD800 + high_lo, 0xD800 + high_hi)
                + r"\\u" + _hex_range(0xDC00 + low_lo, 0xDC00 + low_hi))

    if first_high == last_high:
        return [pairs(first_high, first_high, first_low, last_low)]
    out = []
    if first_low > 0:  # the first high surrogate with only the top of the low ones
        out.append(pairs(first_high, first_high, first_low, 0x3FF))
        first_high += 1
    tail = None
    if last_low < 0x3FF:  # the last high surrogate with only the bottom of the low ones
        tail = pairs(last_high, last_high, 0, last_low)
        last_high -= 1
    if first_high <= last_high:
        out.append(pairs(first_high, last_high, 0, 0x3FF))
    return out + ([tail] if tail else [])


def _json_string_chars(ranges: Ranges, counted: bool = False, every: bool = False) -> str | None:
    """One character of a JSON string's content, for the characters in `ranges`.

    Every form json.dumps may write a character in is matched: raw, a short escape
    (`\\"`, `\\n`, also `\\/`), or `\\uXXXX` for control and non-ASCII characters (a
    surrogate pair for characters above U+FFFF). `counted`: non-ASCII raw only, as in
    COUNTED_STRING_CHAR (a smaller automaton to repeat). `every`: also `\\u0041` for `A`,
    every form JSON allows (what a set we take away from another must hold). None if
    `ranges` is empty.
    """
    ranges = _normalize(ranges)
    if counted:
        ranges_escaped = _intersect(ranges, [(0x00, 0x1F)])
        raw = _intersect(ranges, RAW_STRING_CHARACTERS)
        letters = [letter for ch, letter in SHORT_ESCAPES.items() if _intersect(ranges, [(ord(ch), ord(ch))])]
        return _alt([_class_regex(raw) if raw else None,
                     r"\\" + _class_regex(_normalize([(ord(c), ord(c)) for c in letters])) if letters else None,
                     r"\\u" + _alt([_hex_range(lo, hi) for lo, hi in ranges_escaped]) if ranges_escaped else None])
    options = []
    raw = _intersect(ranges, RAW_STRING_CHARACTERS)
    if raw:
        options.append(_class_regex(raw))
    letters = [letter for ch, letter in SHORT_ESCAPES.items() if _intersect(ranges, [(ord(ch), ord(ch))])]
    if letters:
        options.append(r"\\" + _class_regex(_normalize([(ord(c), ord(c)) for c in letters])))
    escaped = BMP_CHARACTERS if every else BMP_ESCAPED_CHARACTERS
    hex_codes = _alt([_hex_range(lo, hi) for lo, hi in _intersect(ranges, escaped)])
    if hex_codes is not None:
        options.append(r"\\u" + hex_codes)
    for lo, hi in _intersect(ranges, [(0x10000, MAX_CODE_POINT)]):
        options.extend(_surrogate_pairs(lo, hi))
    return _alt(options)


# Any one character of a string: raw, a short escape, a \uXXXX escape that is not a
# surrogate, or a surrogate pair (one character above U+FFFF, as Python's len counts it).
# Written out by hand: `_json_string_chars(ALL_CHARACTERS)` means nearly the same (it
# leaves out escapes json.dumps never writes, such as \u0041) but gives a larger automaton.
STRING_CHAR = (r'(?:[^\x00-\x1f"\\]|\\["/\\bfnrt]|\\u(?:[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2})'
               r'|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})')
STRING = f'"{STRING_CHAR}*"'
# One character of a string with minLength/maxLength: raw or a short escape only. Counting
# repeats the character automaton once per position; with \uXXXX escapes it has 13 states
# instead of 2, and interegular's build time grows quadratically with the states
# (maxLength 200 took minutes). Non-ASCII is written raw, as a model writes it anyway.
COUNTED_STRING_CHAR = r'(?:[^\x00-\x1f"\\]|\\["/\\bfnrt])'


def _string_except(words: list[str]) -> str:
    """A JSON string whose decoded text is none of `words` (a trie: at each node the
    string ends, or takes a character no word continues with, or follows a word)."""
    def rest(suffixes: frozenset[str]) -> str:
        if not suffixes:
            return f"{STRING_CHAR}*"
        options = [] if "" in suffixes else [""]
        nexts = sorted({w[0] for w in suffixes if w})
        others = _remove_surrogates(_complement([(ord(c), ord(c)) for c in nexts]))
        options.append(_concat(_json_string_chars(others), f"{STRING_CHAR}*"))
        for c in nexts:
            tails = frozenset(w[1:] for w in suffixes if w[:1] == c)
            options.append(_json_string_chars([(ord(c), ord(c))]) + rest(tails))
        return _alt(options)
    return f'"{rest(frozenset(words))}"'


def _string_literal(text: str) -> str:
    """The JSON string `text`, each character in any form json.dumps may write it."""
    return '"' + "".join(map(_json_char, text)) + '"'


@functools.lru_cache(maxsize=4096)
def _json_char(ch: str) -> str:
    """`_json_string_chars` of the one character `ch`, remembered: keys and enum values
    repeat a few letters, and the range arithmetic per character was the slowest part
    of compiling a 240-value enum."""
    return _json_string_chars([(ord(ch), ord(ch))])


# ---------------------------------------------------------------------------------------
# Numbers: exact ranges over decimal numerals
# ---------------------------------------------------------------------------------------
def _unbounded_number(options: SchemaOptions, integer: bool) -> str:
    """Any integer (or number, with fraction and exponent) within the options' digit limits
    (none with bound_numbers off)."""
    def digits(lo: int, limit: int) -> str:
        return _repeat("[0-9]", lo, limit if options.bound_numbers else None)
    nonzero = "[1-9]" + digits(0, options.max_integer_digits - 1)
    if integer:
        return f"(?:0|-?{nonzero})"
    whole = f"(?:0|{nonzero})"
    fraction = digits(1, options.max_fraction_digits)
    exponent = digits(1, options.max_exponent_digits)
    return rf"-?{whole}(?:\.{fraction})?(?:[eE][+-]?{exponent})?"


def _at_most_digits_with_a_nonzero(k: int) -> str | None:
    """1..k digits, not all zeros: `0{j}[1-9][0-9]{0,k-1-j}` for each count j of leading zeros."""
    return _alt(["0" * j + "[1-9]" + _repeat("[0-9]", 0, k - 1 - j) for j in range(k)])


def _decimal_digits(x: Decimal) -> tuple[tuple[int, ...], int]:
    """A non-negative Decimal -> (its digits, fraction zeros dropped; number of integer digits)."""
    whole, _, fraction = format(x, "f").partition(".")  # plain notation: 1E+2 -> "100"
    return tuple(int(c) for c in whole + fraction.rstrip("0")), len(whole)


def _magnitude_range(low: Decimal, low_strict: bool, high: Decimal | None, high_strict: bool,
                     fraction: bool, max_fraction: int) -> str | None:
    """Unsigned numerals `(0|[1-9][0-9]*)(\\.[0-9]{1,max_fraction})?` with low <(=) value <(=) high.

    Numerals are split by their count n of integer digits; for each n the digits are
    read left to right, comparing with the bounds' digits (bounds padded with zeros), as
    long as the numeral so far equals a bound's prefix ("tight"). The fraction is
    optional (`fraction=False`: integers only, no fraction at all). Digit i (from 0) is
    a fraction digit when i >= n; at most n + max_fraction digits in all.
    """
    lo_digits, lo_len = _decimal_digits(low)
    hi_digits, hi_len = _decimal_digits(high) if high is not None else ((), None)
    frac_any = rf"(?:\.{_repeat('[0-9]', 1, max_fraction)})?" if fraction else ""

    def digit(ds: tuple[int, ...], i: int) -> int:
        return ds[i] if i < len(ds) else 0

    def left(n: int, i: int) -> int:
        """How many fraction digits may still follow, from digit position i > n - 1 on."""
        return n + max_fraction - i

    def free(n: int, i: int) -> str:
        """The rest of a numeral that is strictly inside the bounds already."""
        if i > n:
            return _repeat("[0-9]", 0, left(n, i))
        if i == 0 and n > 1:  # no leading zeros
            return "[1-9]" + _repeat("[0-9]", n - 1, n - 1) + frac_any
        return _repeat("[0-9]", n - i, n - i) + frac_any

    def rest(n: int, i: int, tight_lo: bool, tight_hi: bool) -> str | None:
        """The rest of a numeral with n integer digits, from digit position i on."""
        lo_rest_zero = not any(lo_digits[i:])
        if tight_lo and lo_rest_zero and not low_strict:
            tight_lo = False  # equal to `low` so far, and `low` ends here: any rest is >= low
        if not tight_lo and not tight_hi:
            return free(n, i)
        if tight_hi and not any(hi_digits[i:]):  # equal to `high`, which ends here: only zeros
            if tight_lo or high_strict:
                return None
            zeros = rf"(?:\.{_repeat('0', 1, max_fraction)})?" if fraction else ""
            return _repeat("0", 0, left(n, i)) if i > n else "0" * (n - i) + zeros
        if tight_lo and not tight_hi and lo_rest_zero and i >= n:  # equal to `low`: need more
            if not fraction:
                return None
            return _concat(r"\." if i == n else "", _at_most_digits_with_a_nonzero(left(n, i)))
        options: list[str | None] = []
        if i >= n and not tight_lo:  # may end here: the value is below `high`, above `low`
            options.append("")
        if i < n or (fraction and left(n, i) > 0):
            first = 1 if i == 0 and n > 1 else 0  # no leading zeros
            a = digit(lo_digits, i) if tight_lo else 0
            b = digit(hi_digits, i) if tight_hi else 9
            steps: list[list] = []  # [first digit, last digit, rest of the numeral]
            for d in range(max(a, first), b + 1):
                after = rest(n, i + 1, tight_lo and d == a, tight_hi and d == b)
                if steps and steps[-1][2] == after:  # neighbouring digits with the same rest
                    steps[-1][1] = d
                else:
                    steps.append([d, d, after])
            step = _alt([_concat(_digit_class(lo, hi), after) for lo, hi, after in steps])
            options.append(None if step is None else (r"\." if i == n else "") + step)
        return _alt(options)

    options = [rest(n, 0, n == lo_len, n == hi_len)
               for n in range(lo_len, (hi_len if high is not None else lo_len) + 1)]
    if high is None:  # numerals with more integer digits than `low`
        options.append(f"[1-9][0-9]{{{lo_len},}}{frac_any}")
    return _alt(options)


def _number_range(lo: Decimal | None, lo_strict: bool, hi: Decimal | None, hi_strict: bool,
                  fraction: bool, max_fraction: int) -> str | None:
    """Decimal numerals (no exponent; no fraction if `fraction` is False; at most
    `max_fraction` fraction digits) in the bounds."""
    # -0 (a bound of -0.0, or -0.5 rounded up for an integer) is 0: drop the sign.
    lo = lo.copy_abs() if lo is not None and lo == 0 else lo
    hi = hi.copy_abs() if hi is not None and hi == 0 else hi
    if lo is not None and hi is not None and (lo > hi or (lo == hi and (lo_strict or hi_strict))):
        return None
    options = []
    if hi is None or hi > 0 or (hi == 0 and not hi_strict):  # numerals without a sign
        low, low_strict = (lo, lo_strict) if lo is not None and lo >= 0 else (Decimal(0), False)
        options.append(_magnitude_range(low, low_strict, hi, hi_strict, fraction, max_fraction))
    if lo is None or lo < 0:  # numerals with a minus sign: value < 0 (we never write -0)
        low, low_strict = (-hi, hi_strict) if hi is not None and hi < 0 else (Decimal(0), True)
        high, high_strict = (None, False) if lo is None else (-lo, lo_strict)
        options.append(_concat("-", _magnitude_range(low, low_strict, high, high_strict, fraction, max_fraction)))
    return _alt(options)


# ---------------------------------------------------------------------------------------
# String formats (strict enough that jsonschema's FormatChecker accepts every match)
# ---------------------------------------------------------------------------------------
_YEAR = r"(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"  # 0001..9999
_LEAP_YEAR = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_DATE = (rf"(?:{_YEAR}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
         r"|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
         rf"|{_LEAP_YEAR}-02-29)")
# Fractions of a second: at most 9 digits (nanoseconds), or a model can write digits until
# max_new_tokens (the bundled one did, 4 runs out of 4, for a greedy `format: "time"`).
_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"  # RFC 5322 atom characters
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"  # a DNS label
_PCT = r"%[0-9A-Fa-f]{2}"
_PCHAR = rf"(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|{_PCT})"  # RFC 3986 path character
_AUTHORITY = (rf"(?:(?:[A-Za-z0-9._~!$&'()*+,;=:-]|{_PCT})*@)?"  # userinfo@
              rf"(?:[A-Za-z0-9._~!$&'()*+,;=-]|{_PCT})*(?::[0-9]*)?")  # host:port
_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,60}[A-Za-z0-9])?"  # at most 62 characters
_SEGMENT_NC = rf"(?:[A-Za-z0-9._~!$&'()*+,;=@-]|{_PCT})"  # a path character but ':' (RFC 3986 segment-nz-nc)
_QUERY_FRAGMENT = rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
_HEX4 = r"[0-9a-fA-F]{1,4}"
_DUR_DATE = r"(?:[0-9]{1,4}Y(?:[0-9]{1,4}M)?(?:[0-9]{1,4}D)?|[0-9]{1,4}M(?:[0-9]{1,4}D)?|[0-9]{1,4}D)"
_DUR_TIME = r"(?:[0-9]{1,4}H(?:[0-9]{1,4}M)?(?:[0-9]{1,4}S)?|[0-9]{1,4}M(?:[0-9]{1,4}S)?|[0-9]{1,4}S)"
FORMATS = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"{_DATE}T{_TIME}",
    "email": rf"{_ATOM}(?:\.{_ATOM})*@{_LABEL}(?:\.{_LABEL})+",
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "ipv4": r"(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])",
    "uri": (rf"[A-Za-z][A-Za-z0-9+.-]*:(?://{_AUTHORITY}(?:/{_PCHAR}*)*|/?(?:{_PCHAR}+(?:/{_PCHAR}*)*)?)"
            rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"),
    # at most 4 labels of at most 62 characters: within the 253 that a host name may have
    "hostname": rf"{_HOST_LABEL}(?:\.{_HOST_LABEL}){{0,3}}",
    # the full form, or "::" with up to 7 groups on one side
    "ipv6": rf"(?:{_HEX4}(?::{_HEX4}){{7}}|::|{_HEX4}(?::{_HEX4}){{0,6}}::|::{_HEX4}(?::{_HEX4}){{0,6}})",
    # ISO 8601 durations, components in order, at most 4 digits each
    "duration": rf"P(?:{_DUR_DATE}(?:T{_DUR_TIME})?|T{_DUR_TIME}|[0-9]{{1,4}}W)",
    "json-pointer": r"(?:/(?:[A-Za-z0-9._ -]|~[01])*)*",
}
# A relative reference: a network path, an absolute path, or a path whose first segment has no ':'.
FORMATS["uri-reference"] = (rf"(?:{FORMATS['uri']}|(?://{_AUTHORITY}(?:/{_PCHAR}*)*|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?"
                            rf"|{_SEGMENT_NC}+(?:/{_PCHAR}*)*)?{_QUERY_FRAGMENT})")
# Shorter forms of the formats whose strings have no length limit, for a format with
# maxLength: a sound subset (every match is valid) of at most a known length.
_SHORT_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,14}[a-z0-9])?"  # at most 16 characters
_SHORT_PATH = r"(?:/[A-Za-z0-9._~-]{0,16}){0,4}"
SHORT_FORMATS = {
    "time": r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])",
    "email": rf"[A-Za-z0-9._+-]{{1,32}}@{_SHORT_LABEL}(?:\.{_SHORT_LABEL}){{1,3}}",
    "uri": rf"https?://{_SHORT_LABEL}(?:\.{_SHORT_LABEL}){{0,3}}{_SHORT_PATH}",
    "hostname": rf"{_SHORT_LABEL}(?:\.{_SHORT_LABEL}){{0,3}}",
}
SHORT_FORMATS["date-time"] = f"{_DATE}T{SHORT_FORMATS['time']}"
SHORT_FORMATS["uri-reference"] = SHORT_FORMATS["uri"]


@functools.cache
def _length_range(regex: str) -> tuple[int, int | None]:
    """The shortest and longest (None: unbounded) match of a regex, as Python's parser
    measures it (our regexes mean the same in `re`)."""
    lo, hi = sre_parse.parse(regex).getwidth()
    return lo, None if hi >= sre_parse.MAXREPEAT else hi


def _format_with_length(fmt: str, min_length: int, max_length: int | None, path: str) -> str:
    """A format's strings within minLength..maxLength: the format itself when all its
    strings fit, else its short form (SHORT_FORMATS) when all of those fit; else an error."""
    for regex in (FORMATS[fmt], SHORT_FORMATS.get(fmt)):
        if regex is None:
            continue
        lo, hi = _length_range(regex)
        if lo >= min_length and (max_length is None or (hi is not None and hi <= max_length)):
            return regex
    raise UnsupportedSchemaError(f"'format': {fmt!r} together with 'minLength'/'maxLength' at {path} is supported "
                                 "only when every string of the format (or of its short form) has a length within "
                                 "the bounds")


# ---------------------------------------------------------------------------------------
# `pattern`: Python's regex parser reads it; we write the same language over JSON text
# ---------------------------------------------------------------------------------------
_P = sre_parse
_ASCII_CATEGORIES: dict = {  # \d \w \s, ASCII only: what ECMA-262 and Python both accept
    _P.CATEGORY_DIGIT: [(0x30, 0x39)],
    _P.CATEGORY_WORD: [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    _P.CATEGORY_SPACE: [(0x09, 0x0D), (0x20, 0x20)],
}
# The ASCII characters EITHER engine puts in a class (Python's \s also has \x1c-\x1f):
# what a negated class `[^\s]` must leave out. So `\S` is ASCII minus these.
_EITHER_ASCII_CATEGORIES: dict = {**_ASCII_CATEGORIES, _P.CATEGORY_SPACE: [(0x09, 0x0D), (0x1C, 0x20)]}
for _cat, _neg in ((_P.CATEGORY_DIGIT, _P.CATEGORY_NOT_DIGIT), (_P.CATEGORY_WORD, _P.CATEGORY_NOT_WORD),
                   (_P.CATEGORY_SPACE, _P.CATEGORY_NOT_SPACE)):
    _ASCII_CATEGORIES[_neg] = _intersect(_complement(_EITHER_ASCII_CATEGORIES[_cat]), [(0, 0x7F)])
    _EITHER_ASCII_CATEGORIES[_neg] = _intersect(_complement(_ASCII_CATEGORIES[_cat]), [(0, 0x7F)])
# `.`: every character but the line terminators of ECMA-262 (Python's `.` excludes only \n)
_DOT: Ranges = _complement([(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)])
_UNSUPPORTED_REGEX_OPS = {
    _P.GROUPREF: "backreferences", _P.ASSERT: "lookaround assertions",
    _P.ASSERT_NOT: "lookaround assertions", _P.GROUPREF_EXISTS: "conditional groups",
    _P.AT: "anchors (^, $, \\b) other than a leading ^ and a trailing $",
}
for _name, _what in (("ATOMIC_GROUP", "atomic groups"), ("POSSESSIVE_REPEAT", "possessive repeats")):
    if hasattr(_P, _name):
        _UNSUPPORTED_REGEX_OPS[getattr(_P, _name)] = _what


def _parsed_pattern(pattern: str, path: str):
    """Python's parse of `pattern`, or UnsupportedSchemaError if it is unreadable or sets flags."""
    try:
        tree = sre_parse.parse(pattern)
    except re.error as e:
        raise UnsupportedSchemaError(f"'pattern' {shown_regex(pattern)} at {path} is not a regex we can read: "
                                     f"{e}") from None
    flags = getattr(tree, "state", getattr(tree, "pattern", None)).flags
    if flags & (re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE):
        raise UnsupportedSchemaError(f"'pattern' {shown_regex(pattern)} at {path}: inline flags such as (?i) "
                                     "are not supported")
    return tree


def _top_branches(items: list) -> list[list]:
    """The alternatives of a parsed regex, looking into a group that is a whole alternative
    (so `^$|(^a+$)` has the anchored branches `^$` and `^a+$`). Python's parser moves a
    prefix every branch shares in front (`^$|^a$` -> `^(?:$|a$)`): it is put back."""
    if items and items[-1][0] is _P.BRANCH:
        branches = [items[:-1] + list(branch) for branch in items[-1][1][1]]
    else:
        branches = [items]
    out = []
    for branch in map(list, branches):
        if len(branch) == 1 and branch[0][0] is _P.SUBPATTERN and not (branch[0][1][1] or branch[0][1][2]):
            out.extend(_top_branches(list(branch[0][1][3])))
        else:
            out.append(branch)
    return out


_STARTS = ((_P.AT, _P.AT_BEGINNING), (_P.AT, _P.AT_BEGINNING_STRING))
_ENDS = ((_P.AT, _P.AT_END), (_P.AT, _P.AT_END_STRING))


def _pattern_regex(pattern: str, path: str, wide: bool = False) -> str | None:
    """The string contents (JSON text, no quotes) in which `pattern` finds a match.

    By default a subset of those (what we may write: `\\d` is ASCII, one writing of most
    characters); `wide`: a superset, every JSON writing of every string Python's `re.search`
    matches in (what we may take away from another set: a key set minus a pattern's keys).
    """
    any_text = _repeat(STRING_CHAR, 0, None)
    options = []
    for branch in _top_branches(list(_parsed_pattern(pattern, path))):  # unanchored ends: any text around
        starts = bool(branch) and branch[0] in _STARTS
        ends = bool(branch) and branch[-1] in _ENDS
        body = _translate_regex(branch[int(starts):len(branch) - int(ends)], pattern, path, wide)
        # Python's `$` also matches before a last "\n"; a superset must hold that string too.
        end = any_text if not ends else _repeat(_json_string_chars([(10, 10)], every=True), 0, 1) \
            if wide and branch[-1] == (_P.AT, _P.AT_END) else ""
        options.append(_concat("" if starts else any_text, body, end))
    return _alt(options)


def _translate_regex(items: list, pattern: str, path: str, wide: bool = False) -> str | None:
    """Python's parse of a regex -> our regex for the same characters written as JSON text
    (`wide`: see _pattern_regex)."""
    out = []
    for op, arg in items:
        if op in (_P.LITERAL, _P.NOT_LITERAL, _P.ANY, _P.IN):
            part = _json_string_chars(_item_ranges(op, arg, wide), every=wide)
        elif op in (_P.MAX_REPEAT, _P.MIN_REPEAT):  # laziness does not change the language
            lo, hi, sub = arg
            part = _repeat(_translate_regex(list(sub), pattern, path, wide), lo, None if hi == _P.MAXREPEAT else hi)
        elif op is _P.SUBPATTERN:
            _, add_flags, del_flags, sub = arg
            if add_flags or del_flags:
                raise UnsupportedSchemaError(
                    f"'pattern' {shown_regex(pattern)} at {path}: inline flags such as (?i:...) are not supported")
            part = _translate_regex(list(sub), pattern, path, wide)
            part = part if part is None or _is_atom(part) else f"(?:{part})"
        elif op is _P.BRANCH:
            part = _alt([_translate_regex(list(b), pattern, path, wide) for b in arg[1]])
        else:
            what = _UNSUPPORTED_REGEX_OPS.get(op, str(op))
            raise UnsupportedSchemaError(f"'pattern' {shown_regex(pattern)} at {path}: {what} are not supported")
        if part is None:
            return None
        out.append(part)
    return "".join(out)


def _class_ranges(items: list, wide: bool = False) -> Ranges:
    """A parsed character class `[...]` -> its code point ranges (`wide`: a superset of
    what Python's class holds, else a subset that ECMA-262's holds too)."""
    negate = any(op is _P.NEGATE for op, _ in items)
    # A negated class leaves out what either engine's categories hold; a plain one holds
    # what both agree on (wide: the other way round, and any non-ASCII character).
    categories = _EITHER_ASCII_CATEGORIES if negate != wide else _ASCII_CATEGORIES
    has_category, ranges = False, []
    for op, arg in items:
        if op is _P.LITERAL:
            ranges.append((arg, arg))
        elif op is _P.RANGE:
            ranges.append(arg)
        elif op is _P.CATEGORY:
            ranges.extend(categories[arg])
            has_category = True
    if wide and has_category and not negate:  # Python's \d, \w, \s are Unicode-wide
        ranges.append((0x80, MAX_CODE_POINT))
    ranges = _normalize(ranges)
    if negate:
        ranges = _complement(ranges)
        if has_category and not wide:  # Python's \d, \w, \s are Unicode-wide: only the ASCII part is sure
            ranges = _intersect(ranges, [(0, 0x7F)])
    return ranges


# ---------------------------------------------------------------------------------------
# `pattern` with minLength/maxLength: the pattern's matches of a length in the window
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Piece:
    """`unit` (a regex of characters, each match `width` characters long) repeated lo..hi
    times (hi None: unbounded)."""

    unit: str
    width: int
    lo: int
    hi: int | None


MAX_LENGTH_WINDOW_REGEX = 100_000  # characters; a pattern whose windowed regex grows beyond is refused


def _pattern_with_length(pattern: str, path: str, min_length: int, max_length: int | None) -> str | None:
    """The string contents that `pattern` finds a match in AND whose length (in characters)
    is min_length..max_length, exactly; UnsupportedSchemaError when the pattern is not a
    sequence of fixed-width parts and repeats of fixed-width parts (e.g. `(ab|c)+`).

    Each branch is a list of pieces; `window` walks them left to right, choosing how
    often the first piece repeats, and asks the rest for the remaining length window.
    """
    anything = _Piece(COUNTED_STRING_CHAR, 1, 0, None)
    options = []
    for branch in _top_branches(list(_parsed_pattern(pattern, path))):
        starts = bool(branch) and branch[0] in _STARTS
        ends = bool(branch) and branch[-1] in _ENDS
        middle = branch[int(starts):len(branch) - int(ends)]
        body = _pieces(middle, pattern, path)
        if body is None:
            continue  # this branch matches nothing
        pieces = body + ([] if ends else [anything])
        if not starts:
            pieces = _search_prefix(middle, ends) + pieces
            counted = max_length is not None or min_length > sum(p.width * p.lo for p in pieces)
            if counted and (pieces[0] == anything or max_length is not None):
                # Counting the text before the match makes one alternative per start, and
                # interegular's automaton tracks every start that may still match (2^n
                # states for `any{n} P`; n^2 even for "no C, then C").
                raise UnsupportedSchemaError(
                    f"'pattern' {shown_regex(pattern)} with 'minLength'/'maxLength' at {path}: a pattern without a "
                    "leading ^ can be intersected with a length only when it is one character class "
                    "and there is no maxLength")
        options.append(_window(tuple(pieces), min_length, max_length, {}))
    regex = _alt(options)
    if regex is not None and len(regex) > MAX_LENGTH_WINDOW_REGEX:
        raise UnsupportedSchemaError(f"'pattern' {shown_regex(pattern)} with 'minLength'/'maxLength' at {path}: the "
                                     f"exact intersection needs a regex of {len(regex)} characters (limit "
                                     f"{MAX_LENGTH_WINDOW_REGEX})")
    return regex


def _search_prefix(items: list, ends: bool) -> list[_Piece]:
    """The text before an unanchored match of the parsed regex `items`. "Contains a
    character of class C" is written as "no C, then the first C" (one way to match: the
    automaton stays small); otherwise any text."""
    if not ends and len(items) == 1 and items[0][0] in (_P.LITERAL, _P.NOT_LITERAL, _P.ANY, _P.IN):
        others = _json_string_chars(_remove_surrogates(_complement(_item_ranges(*items[0]))), counted=True)
        return [] if others is None else [_Piece(others, 1, 0, None)]
    return [_Piece(COUNTED_STRING_CHAR, 1, 0, None)]


def _item_ranges(op, arg, wide: bool = False) -> Ranges:
    """The characters of one parsed single-character item (literal, negated literal, ., class)."""
    if op is _P.LITERAL:
        return [(arg, arg)]
    if op is _P.NOT_LITERAL:
        return _complement([(arg, arg)])
    if op is _P.ANY:   # Python's `.`: all but "\n"
        return _complement([(10, 10)]) if wide else _DOT
    return _class_ranges(arg, wide)


def _pieces(items: list, pattern: str, path: str) -> list[_Piece] | None:
    """A parsed regex as pieces (None: it matches nothing), or UnsupportedSchemaError."""
    out = []
    for op, arg in items:
        if op in (_P.MAX_REPEAT, _P.MIN_REPEAT):
            lo, hi, sub = arg
            unit = _fixed_width(list(sub), pattern, path)
            if unit is None:
                raise UnsupportedSchemaError(
                    f"'pattern' {shown_regex(pattern)} with 'minLength'/'maxLength' at {path}: only repeats of "
                    "fixed-width parts can be intersected with a length exactly")
            if unit[0] is None:  # the repeated part matches nothing: only zero times
                if lo > 0:
                    return None
                continue
            out.append(_Piece(unit[0], unit[1], lo, None if hi == _P.MAXREPEAT else hi))
        elif op is _P.SUBPATTERN and not (arg[1] or arg[2]):
            sub = _pieces(list(arg[3]), pattern, path)
            if sub is None:
                return None
            out.extend(sub)
        else:
            unit = _fixed_width([(op, arg)], pattern, path)
            if unit is None:
                raise UnsupportedSchemaError(
                    f"'pattern' {shown_regex(pattern)} with 'minLength'/'maxLength' at {path}: alternatives of "
                    "different widths cannot be intersected with a length exactly")
            if unit[0] is None:
                return None
            out.append(_Piece(unit[0], unit[1], 1, 1))
    return out


def _fixed_width(items: list, pattern: str, path: str) -> tuple[str | None, int] | None:
    """(regex, width) when every match of the parsed regex has the same number of
    characters (regex None: no match at all); None when widths vary."""
    parts, width = [], 0
    for op, arg in items:
        if op in (_P.LITERAL, _P.NOT_LITERAL, _P.ANY, _P.IN):
            part, w = _json_string_chars(_item_ranges(op, arg), counted=True), 1
        elif op in (_P.MAX_REPEAT, _P.MIN_REPEAT) and arg[0] == arg[1]:
            sub = _fixed_width(list(arg[2]), pattern, path)
            if sub is None:
                return None
            part, w = _repeat(sub[0], arg[0], arg[0]), sub[1] * arg[0]
        elif op is _P.SUBPATTERN:
            if arg[1] or arg[2]:
                raise UnsupportedSchemaError(
                    f"'pattern' {shown_regex(pattern)} at {path}: inline flags such as (?i:...) are not supported")
            sub = _fixed_width(list(arg[3]), pattern, path)
            if sub is None:
                return None
            part, w = sub
        elif op is _P.BRANCH:
            subs = [_fixed_width(list(b), pattern, path) for b in arg[1]]
            live = [sub for sub in subs if sub is not None and sub[0] is not None]
            if None in subs or len({w for _, w in live}) > 1:
                return None
            part, w = _alt([r for r, _ in live]), (live[0][1] if live else 0)
        elif op in (_P.MAX_REPEAT, _P.MIN_REPEAT):
            return None  # a repeat with a count range: widths vary
        else:
            what = _UNSUPPORTED_REGEX_OPS.get(op, str(op))
            raise UnsupportedSchemaError(f"'pattern' {shown_regex(pattern)} at {path}: {what} are not supported")
        if part is None:
            return None, 0
        parts.append(part)
        width += w
    return "".join(parts), width


def _window(pieces: tuple[_Piece, ...], lo: int, hi: int | None, memo: dict) -> str | None:
    """The concatenation of `pieces` restricted to total widths lo..hi (hi None: no limit)."""
    key = (len(pieces), lo, hi)
    if key in memo:
        return memo[key]
    least = sum(p.width * p.lo for p in pieces)
    most = None if any(p.hi is None and p.width for p in pieces) else sum(p.width * (p.hi or 0) for p in pieces)
    if (hi is not None and least > hi) or (most is not None and most < lo):
        result = None
    elif least >= lo and (hi is None or (most is not None and most <= hi)):  # every width fits
        result = "".join(_repeat(p.unit, p.lo, p.hi) for p in pieces)
    elif pieces[0].width == 0:  # repeating it changes no width
        first, rest = pieces[0], pieces[1:]
        result = _concat(_repeat(first.unit, first.lo, first.hi), _window(rest, lo, hi, memo))
    else:
        first, rest = pieces[0], pieces[1:]
        rest_least = least - first.width * first.lo
        steps: list[list] = []  # [fewest, most repeats, regex of the rest]
        count = first.lo
        while first.hi is None or count <= first.hi:
            used = count * first.width
            if hi is not None and used + rest_least > hi:
                break
            after = _window(rest, lo - used, None if hi is None else hi - used, memo)
            if steps and steps[-1][2] == after:
                steps[-1][1] = count
            else:
                steps.append([count, count, after])
            if hi is None and lo - used <= rest_least:  # longer prefixes leave the rest free
                steps[-1][1] = first.hi
                break
            count += 1
        result = _alt([_concat(_repeat(first.unit, a, b), after) for a, b, after in steps])
    memo[key] = result
    return result


# ---------------------------------------------------------------------------------------
# Schema values
# ---------------------------------------------------------------------------------------
def _json_type_of(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}[type(value)]


def _type_allows(types: set[str], value_type: str) -> bool:
    return value_type in types or (value_type == "integer" and "number" in types)


def _json_equal(a, b) -> bool:
    """JSON equality: 1 == 1.0, but true != 1, and lists/objects compare element-wise."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, dict, str)) or isinstance(b, (list, dict, str)):
        return type(a) is type(b) and a == b
    return a == b


def _decimal(value, keyword: str, path: str) -> Decimal:
    """A number keyword's value, exactly. Within a double's range only: a JSON number
    beyond it (1e999, or an integer of 310 digits) reads as infinity in most parsers
    (Python's json makes 1e999 inf, JavaScript both), so validators disagree on it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidSchemaError(f"'{keyword}' at {path} must be a number, got {short_value(value)}")
    if isinstance(value, int):   # exact, however long: no float(value), which overflows
        if abs(value) > sys.float_info.max:
            try:
                digits = str(len(str(abs(value))))
            except ValueError:   # past sys.get_int_max_str_digits()
                digits = f"more than {sys.get_int_max_str_digits()}"
            raise UnsupportedSchemaError(
                f"'{keyword}' at {path} is out of range: an integer of {digits} digits, beyond the largest "
                f"double ({sys.float_info.max:.17g}), which most JSON parsers read as infinity")
        return Decimal(value)
    if not math.isfinite(value):
        raise InvalidSchemaError(f"'{keyword}' at {path} must be a finite number, got {value!r} (a JSON number "
                                 f"beyond the largest double, {sys.float_info.max:.17g}, such as 1e999, reads "
                                 "as infinity)")
    return Decimal(repr(value))


def short_value(value) -> str:
    """A value for an error message (a keyword's, a request field's): its JSON text, cut after 40 characters."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return shown_numeral(text)


def _count(schema: dict, keyword: str, path: str) -> int | None:
    """A non-negative integer keyword (minLength, ...), None when absent."""
    value = schema.get(keyword)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != int(value):
        raise InvalidSchemaError(f"'{keyword}' at {path} must be a non-negative integer, got {value!r}")
    return int(value)


def _literal(value, ws: str) -> str:
    """The JSON text of one value; numbers equal to an integer also as `n` and `n.0`."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, (int, float)):
        texts = [json.dumps(value)]
        if value == int(value) and abs(value) < 2**53:
            texts += [str(int(value)), f"{int(value)}.0"]
        return _alt(["".join(_escape_char(c, in_class=False) for c in t) for t in texts])
    if isinstance(value, str):
        return _string_literal(value)
    if isinstance(value, list):
        items = f",{ws}".join(_literal(v, ws) for v in value)
        return rf"\[{ws}{items}{ws}\]"
    members = f",{ws}".join(f"{_string_literal(k)}:{ws}{_literal(v, ws)}" for k, v in value.items())
    return rf"\{{{ws}{members}{ws}\}}"


class _SchemaCompiler:
    """Compiles the subschemas of one root schema; remembers which $refs are being expanded."""

    def __init__(self, root: dict | bool, ws: str, options: SchemaOptions):
        self.root = root
        self.ws = ws
        self.options = options
        self.max_ref_depth = options.max_ref_depth
        self.active_refs: Counter[str] = Counter()  # $ref target -> expansions on the current path
        self.any_values: dict[int, str] = {}
        self.empty_because: str | None = None   # see note_empty
        # (path, flattened schema) of the innermost parts with no value, while their parents
        # have none either: why a schema with no value has none (see `value`).
        self.empty_parts: list[tuple[str, dict | bool]] = []
        self.nesting = LAZY_ANY_VALUE_NESTING if options.automaton == "lazy" else ANY_VALUE_NESTING
        # automaton="lazy": shared sub-expressions, name -> regex text (see `shared`), and
        # their total length (checked against max_regex_chars as they are made).
        self.definitions: dict[str, str] = {}
        self.definitions_chars = 0
        # The regex of each `$ref` compiled so far (see `_ref_key`): a target used many
        # times, or by every level of a recursion, is compiled once per expansion depth.
        self.ref_values: dict[tuple, str | None] = {}
        self.ref_targets: dict[tuple[str, str], str] = {}   # (base URI, $ref) -> the target's pointer
        self.matchers: dict[str, Callable[[str], bool]] = {}   # regex -> its `_matcher`
        # Schema resources: absolute URI ($id) -> its pointer; (URI, $anchor) -> pointer.
        self.resources: dict[str, str] = {}
        self.anchors: dict[tuple[str, str], str] = {}
        self.resources[ROOT_URI] = "#"
        self._index(root, ROOT_URI, "#")

    # -- entry point ------------------------------------------------------------------
    def value(self, schema, path: str) -> str | None:
        """The regex of the JSON texts of the values `schema` accepts; None if there are none."""
        key = self._ref_key(schema, path)
        if key is not None and key in self.ref_values:
            return self.ref_values[key]
        flat, refs = self.flatten(schema, path)
        mark = len(self.empty_parts)
        with self.expanding(refs):
            regex = self._flat_value(flat, path)
        if regex is not None:
            del self.empty_parts[mark:]   # its empty parts were optional or alternatives: not why
        elif len(self.empty_parts) == mark:
            self.empty_parts.append((path, flat))   # empty, and no part of it is: the cause is here
        self.check_size(0 if regex is None else len(regex), path)
        regex = self.shared(regex)
        self.check_size(self.definitions_chars, path)
        if key is not None:
            self.ref_values[key] = regex
        return regex

    def _ref_key(self, schema, path: str) -> tuple | None:
        """For a schema that is a `$ref` and nothing else (annotations aside), what its regex
        depends on: the target, the base URI at `path` (the target's own relative $refs are
        resolved against it) and how often each $ref is being expanded on the way here (the
        max_ref_depth cut). None for any other schema.

        Without this, each use of a $ref compiled its target again: 500 properties referring
        to a 2,000-value enum took 6 s, and a recursion compiled its target once per path,
        not once per depth: 3 object definitions that refer to each other (a 429-character
        schema) ran for minutes at max_ref_depth 5 on the lazy automaton, whose shared
        regex never grew past max_regex_chars to stop it."""
        if not isinstance(schema, dict) or "$ref" not in schema or \
                any(k != "$ref" and k not in ANNOTATION_KEYWORDS for k in schema):
            return None
        base, ref = self.base_uri(path), schema["$ref"]
        target_path = self.ref_targets.get((base, ref)) if isinstance(ref, str) else None
        if target_path is None:
            target_path = self.resolve(ref, path)[1]
            self.ref_targets[base, ref] = target_path
        depths = tuple(sorted((r, n) for r, n in self.active_refs.items() if n > 0))
        return target_path, base, depths

    def shared(self, regex: str | None) -> str | None:
        """For the lazy automaton, a subschema's long regex is written once: `(?@ref:NAME)`
        where it is used, and `(?@def:NAME(regex))` in front of the whole (with_definitions).

        Without, an array writes its item's regex twice (`[I(,I)*]`) and an object a member
        in several alternatives, so nested arrays and objects grow the text exponentially
        (a 10 MB regex for a 40 KB Kubernetes schema); shared, the text grows with the
        schema. A plain regex (automaton="eager") has no such syntax: it stays written out.
        """
        if regex is None or self.options.automaton != "lazy" or len(regex) < SHARE_MIN_CHARS:
            return regex
        name = hashlib.blake2b(regex.encode("utf-8"), digest_size=8).hexdigest()
        if name not in self.definitions:
            self.definitions[name] = regex
            self.definitions_chars += len(regex)
        return f"{REF_SYNTAX}{name})"

    def with_definitions(self, regex: str) -> str:
        """`regex` preceded by the definitions its `(?@ref:...)` groups need, each after
        the ones it uses (the order they were made in)."""
        needed, todo = set(), [regex]
        while todo:
            for name in _REF_NAMES.findall(todo.pop()):
                if name not in needed:
                    needed.add(name)
                    todo.append(self.definitions[name])
        return "".join(f"{DEF_SYNTAX}{name}({text}))" for name, text in self.definitions.items()
                       if name in needed) + regex

    def key_except(self, names: list[str]) -> str:
        """A JSON string that decodes to none of `names` (an unlisted key). For the lazy
        automaton any string minus every JSON writing of each name (`(?@diff...)`: its size
        is the names'), else _string_except's trie (a few hundred characters per name)."""
        if self.options.automaton != "lazy":
            return _string_except(names)
        writings = _alt(['"' + "".join(_json_string_chars([(ord(c), ord(c))], every=True) for c in name) + '"'
                         for name in names])
        return self.shared(f"(?@diff({STRING})({writings}))")

    def matches(self, regex: str, text: str) -> bool:
        """Whether `text` matches all of one of this compiler's regexes (its automaton is
        built once per regex: an enum checks every value against the same one)."""
        matcher = self.matchers.get(regex)
        if matcher is None:
            matcher = self.matchers[regex] = _matcher(self.with_definitions(regex))
        return matcher(text)

    def intersection(self, parts: list[str | None], path: str) -> str | None:
        """The texts every part matches (lazy automaton only: `(?@and(A)(B))` groups); None
        when there is none, decided on the lazy automaton (so no branch hides an empty
        language). Parts are whole regexes, a None part matches nothing."""
        if any(part is None for part in parts):
            return None
        regex = parts[0]
        for part in parts[1:]:
            regex = f"(?@and({regex})({part}))"
        return regex if len(parts) == 1 or not self.language_empty(regex, path) else None

    def language_empty(self, regex: str, path: str) -> bool:
        """Whether one of our lazy regexes (with private groups) matches nothing."""
        pool = RegexPool()
        try:  # `(?:R)|` is the empty string alone exactly when R's node is EMPTY
            return parse_regex(f"(?:{self.with_definitions(regex)})|", pool, members=True) is pool.epsilon
        except RegexError as e:
            raise UnsupportedSchemaError(f"the schema at {path}: the intersection cannot be built: {e}") from None

    def check_size(self, chars: int, path: str) -> None:
        """Refuse a regex (or the parts of one collected so far) longer than max_regex_chars.

        Called on every subschema's regex and on the running total where several are put
        together, so that a blow-up stops at the first part over the limit: its size is
        then at most a few times the limit, never the product of every level.
        """
        limit = self.options.max_regex_chars
        if chars > limit:
            raise SchemaTooLargeError(
                f"the schema at {path} needs a regex of more than max_regex_chars={limit:,} characters "
                f"({chars:,} so far): its parts are repeated (nested $ref, allOf, anyOf, many optional "
                "properties); simplify the schema, lower max_ref_depth, or raise max_regex_chars")

    @contextmanager
    def expanding(self, refs: list[str]):
        self.active_refs.update(refs)
        try:
            yield
        finally:
            self.active_refs.subtract(refs)

    # -- $ref and allOf ---------------------------------------------------------------
    def flatten(self, schema, path: str, cut_deep_refs: bool = True) -> tuple[dict | bool, list[str]]:
        """Resolve top-level $ref and allOf by merging; return (schema or False, refs expanded).

        With `cut_deep_refs`, a $ref expanded max_ref_depth times already gives False (the
        recursion stops there); without, the result is the schema's exact meaning.
        """
        refs: list[str] = []
        return self._flatten(schema, path, refs, frozenset(), cut_deep_refs), refs

    def _flatten(self, schema, path: str, refs: list[str], chain: frozenset, cut: bool) -> dict | bool:
        if schema is True or schema is False:
            return {} if schema else False
        if not isinstance(schema, dict):
            raise InvalidSchemaError(f"the schema at {path} must be an object or a boolean, got {schema!r}")
        schema = _unevaluated_as_additional(schema)
        parts = [{k: v for k, v in schema.items() if k not in ANNOTATION_KEYWORDS
                  and k not in ("$ref", "allOf", "not", "if", "then", "else") and k not in DEPENDENCY_KEYWORDS}]
        if "if" in schema:  # (if and then) or (not if and else): two disjoint cases
            condition = self._flatten(schema["if"], f"{path}/if", [], chain, False)
            otherwise = self.negation(condition, f"{path}/if")
            cases = {"anyOf": [_both(schema["if"], schema.get("then", True)),
                               _both(otherwise, schema.get("else", True))]}
            parts.append(self._flatten(cases, path, refs, chain, cut))
        if "not" in schema:
            negated = self._flatten(schema["not"], f"{path}/not", [], chain, False)
            parts.append(self._flatten(self.negation(negated, f"{path}/not"), path, refs, chain, cut))
        parts.extend(self._flatten(s, path, refs, chain, cut) for s in _dependency_cases(schema, path))
        if "$ref" in schema:
            ref = schema["$ref"]
            target, target_path = self.resolve(ref, path)
            if target_path in chain:
                raise InvalidSchemaError(f"'$ref' {ref!r} at {path} refers to itself without any keyword in between")
            # Only the $refs on the way down count: one flatten never meets a target twice
            # along a path (`chain` refuses that), so repeats in `refs` are siblings (allOf
            # of two equal $refs), one expansion at this level, not a deeper recursion.
            if cut and self.active_refs[target_path] >= self.max_ref_depth:
                return False  # recursion unrolled max_ref_depth times: stop here
            if target_path not in refs:
                refs.append(target_path)
            parts.append(self._flatten(target, target_path, refs, chain | {target_path}, cut))
        if "allOf" in schema:
            subschemas = schema["allOf"]
            if not isinstance(subschemas, list) or not subschemas:
                raise InvalidSchemaError(f"'allOf' at {path} must be a non-empty array of schemas")
            parts.extend(self._flatten(s, f"{path}/allOf/{i}", refs, chain, cut) for i, s in enumerate(subschemas))
        merged: dict | bool = parts[0]
        for part in parts[1:]:
            merged = _merge(merged, part, path)
        return merged

    def negation(self, flat: dict | bool, path: str) -> dict | bool:
        """A schema for "not `flat`" (an exact, flattened schema), or UnsupportedSchemaError.

        not (k1 and k2 ...) = (not k1) or (not k2) ...: each keyword's negation is written
        with positive keywords: other types; values outside const/enum; a required
        property absent; the opposite bound; not (A or B) = (not A) and (not B).
        """
        if flat is False:
            return {}
        cases: list = []
        for keyword, value in flat.items():
            if keyword == "type":
                cases.append(_not_types(_types({"type": value}, path), path))
            elif keyword == FRACTIONAL:  # (other types satisfy it: their negation fails)
                cases.append({"type": "integer"})
            elif keyword == EXCLUDED_STRINGS:
                cases.append({"enum": list(value)})
            elif keyword == NOT_AT:
                continue
            elif keyword in ("pattern", MORE_PATTERNS):  # a string none of them... one of them misses
                for pattern in [value] if keyword == "pattern" else value:
                    cases.append({"type": "string", NOT_PATTERNS: [pattern], NOT_AT: path})
            elif keyword == NOT_PATTERNS:
                cases.extend({"type": "string", "pattern": pattern} for pattern in value)
            elif keyword in ("const", "enum"):
                cases.append(_excluding(_finite_values({keyword: value}), path))
            elif keyword == "required":  # (other types satisfy `required`: their negation fails)
                cases.extend({"type": "object", "properties": {name: False}} for name in value)
            elif keyword in _OPPOSITE_BOUNDS:  # a value of the bound's type on the other side
                kind, opposite = _OPPOSITE_BOUNDS[keyword]
                if keyword in _NUMBER_BOUNDS:   # refused in the schema's own words, not the opposite's
                    _decimal(value, keyword, path)
                bound = opposite(value)
                if bound is not None:
                    cases.append({"type": kind, **bound})
            elif keyword == "properties" and isinstance(value, dict):  # an object with one of them failing
                for name, sub in value.items():
                    where = f"{path}/properties/{_pointer_token(name)}"
                    failing = self.negation(self._flatten(sub, where, [], frozenset(), False), where)
                    if failing is not False:
                        cases.append({"type": "object", "required": [name], "properties": {name: failing}})
            elif keyword == "anyOf" and isinstance(value, list):
                cases.append({"allOf": [self.negation(self._flatten(b, f"{path}/anyOf/{i}", [], frozenset(), False),
                                                      f"{path}/anyOf/{i}") for i, b in enumerate(value)]})
            else:
                raise UnsupportedSchemaError(f"keyword 'not' at {path}: the negation of '{keyword}' cannot be "
                                             "written exactly (supported: type, const, enum, required, bounds, "
                                             "anyOf, pattern)")
        if not cases:
            return False  # not {} (or of a keyword that every value satisfies): nothing
        return cases[0] if len(cases) == 1 else {"anyOf": cases}

    def _index(self, node, base: str, pointer: str) -> None:
        """Record every schema resource ($id, resolved against its parent's) and $anchor
        under `node`; values of const/enum/default/examples are data, not schemas."""
        if isinstance(node, list):
            for i, item in enumerate(node):
                self._index(item, base, f"{pointer}/{i}")
            return
        if not isinstance(node, dict):
            return
        if isinstance(node.get("$id"), str):
            base = urldefrag(urljoin(base, node["$id"]))[0]
            self.resources.setdefault(base, pointer)
        if isinstance(node.get("$anchor"), str):
            self.anchors.setdefault((base, node["$anchor"]), pointer)
        for key, value in node.items():
            if key not in ("const", "enum", "default", "examples") and isinstance(value, (dict, list)):
                self._index(value, base, f"{pointer}/{_pointer_token(key)}")

    def base_uri(self, path: str) -> str:
        """The base URI at a JSON pointer: the innermost $id on the way from the root."""
        node, base = self.root, ROOT_URI
        if isinstance(node, dict) and isinstance(node.get("$id"), str):
            base = urldefrag(urljoin(base, node["$id"]))[0]
        for token in path[2:].split("/") if len(path) > 1 else []:
            node = _step(node, unquote(token).replace("~1", "/").replace("~0", "~"))
            if node is None:
                break
            if isinstance(node, dict) and isinstance(node.get("$id"), str):
                base = urldefrag(urljoin(base, node["$id"]))[0]
        return base

    def resolve(self, ref, path: str) -> tuple[object, str]:
        """A $ref -> (target, its JSON pointer from the root). The ref is resolved against
        the base URI at `path`; it may name a resource of this document ($id), an anchor
        in it ($anchor) and a JSON pointer inside it. Other documents are not fetched."""
        if not isinstance(ref, str):
            raise InvalidSchemaError(f"'$ref' at {path} must be a string, got {ref!r}")
        uri, fragment = urldefrag(urljoin(self.base_uri(path), ref))
        if uri not in self.resources:
            raise UnsupportedSchemaError(f"'$ref' {ref!r} at {path}: {uri!r} is not a schema resource of this "
                                         "document (only local refs, $id and $anchor in it are supported)")
        pointer = self.resources[uri]
        if fragment and not fragment.startswith("/"):
            if (uri, unquote(fragment)) not in self.anchors:
                raise InvalidSchemaError(f"'$ref' {ref!r} at {path}: no $anchor {unquote(fragment)!r} in {uri!r}")
            pointer = self.anchors[(uri, unquote(fragment))]
        elif fragment:
            pointer = pointer + fragment if pointer != "#" else "#" + fragment
        target = self.root
        for token in pointer[2:].split("/") if len(pointer) > 1 else []:
            target = _step(target, unquote(token).replace("~1", "/").replace("~0", "~"))
            if target is None:
                raise InvalidSchemaError(f"'$ref' {ref!r} at {path} points to nothing in this schema")
        return target, pointer

    # -- one flattened schema -----------------------------------------------------------
    def _flat_value(self, schema: dict | bool, path: str) -> str | None:
        if schema is False:
            return None
        if not schema:  # {} or true: any value
            return self._any_value(self.nesting)
        _check_keywords(schema, path)
        if "anyOf" in schema or "oneOf" in schema:
            return self._combination(schema, path)
        types = _types(schema, path)
        if "const" in schema or "enum" in schema:
            return self._enum(schema, path)
        if "number" in types:  # the number regex writes integers too
            types = [t for t in types if t != "integer"]
        builders = {"object": self._object, "array": self._array, "string": self._string,
                    "number": self._number, "integer": self._number,
                    "boolean": lambda s, p: "(?:true|false)", "null": lambda s, p: "null"}
        return _alt([builders[t](schema, path) for t in types])

    def _combination(self, schema: dict, path: str) -> str | None:
        """anyOf: any branch (each merged with the sibling keywords); oneOf: disjoint branches."""
        keyword = "anyOf" if "anyOf" in schema else "oneOf"
        branches = schema[keyword]
        if not isinstance(branches, list) or not branches:
            raise InvalidSchemaError(f"'{keyword}' at {path} must be a non-empty array of schemas")
        rest = {k: v for k, v in schema.items() if k != keyword}
        merged = [self.flatten({"allOf": [rest, b]}, f"{path}/{keyword}/{i}") for i, b in enumerate(branches)]
        if keyword == "oneOf":  # "exactly one" = "at least one" only when no value fits two branches
            exact = [self.flatten({"allOf": [rest, b]}, f"{path}/oneOf/{i}", cut_deep_refs=False)[0]
                     for i, b in enumerate(branches)]
            overlapping = [(i, j) for i in range(len(exact)) for j in range(i + 1, len(exact))
                           if not self._disjoint(exact[i], exact[j], path)]
            if overlapping:  # branch i and not each branch it may overlap: exact when negatable
                try:
                    merged = [self.flatten({"allOf": [rest, b] + [
                        self.negation(self._flatten(branches[j], f"{path}/oneOf/{j}", [], frozenset(), False),
                                      f"{path}/oneOf/{j}") for j in range(len(branches)) if (min(i, j), max(i, j))
                        in overlapping]}, f"{path}/oneOf/{i}") for i, b in enumerate(branches)]
                except UnsupportedSchemaError as e:
                    i, j = overlapping[0]
                    raise UnsupportedSchemaError(
                        f"'oneOf' at {path}: branches {i} and {j} may both accept a value, and we can "
                        "only prove disjointness by type, const/enum, or a required property with "
                        f"disjoint schemas, or negate a branch exactly ({e}); use anyOf if overlaps are fine") \
                        from None
        options, chars = [], 0
        for i, (flat, refs) in enumerate(merged):
            with self.expanding(refs):
                options.append(self._flat_value(flat, f"{path}/{keyword}/{i}"))
            chars += len(options[-1] or "")
            self.check_size(chars, f"{path}/{keyword}/{i}")
        return _alt(options)

    def _disjoint(self, a: dict | bool, b: dict | bool, path: str, depth: int = 0) -> bool:
        """Whether no value can be valid for both exact (uncut) flattened schemas: a proof, or False."""
        if a is False or b is False:
            return True
        if depth > 10:  # deep recursive schemas: give up proving
            return False
        types_a, types_b = _declared_types(a, path), _declared_types(b, path)
        if types_a is not None and types_b is not None and not _types_overlap(types_a, types_b):
            return True
        values_a, values_b = _finite_values(a), _finite_values(b)
        for values, types in ((values_a, types_b), (values_b, types_a)):
            if values is not None and types is not None and \
                    not any(_type_allows(types, _json_type_of(v)) for v in values):
                return True
        if values_a is not None and values_b is not None:
            if not any(_json_equal(x, y) for x in values_a for y in values_b):
                return True
        if types_a == {"object"} and types_b == {"object"}:
            required = set(a.get("required", [])) & set(b.get("required", []))
            props_a, props_b = a.get("properties", {}), b.get("properties", {})
            for name in sorted(required & props_a.keys() & props_b.keys()):
                sub_a = self.flatten(props_a[name], f"{path}/properties/{name}", cut_deep_refs=False)[0]
                sub_b = self.flatten(props_b[name], f"{path}/properties/{name}", cut_deep_refs=False)[0]
                if self._disjoint(sub_a, sub_b, path, depth + 1):
                    return True
        return False

    def _enum(self, schema: dict, path: str) -> str | None:
        """const / enum: the listed values that the other keywords accept too."""
        values = None
        if "enum" in schema:
            if not isinstance(schema["enum"], list):
                raise InvalidSchemaError(f"'enum' at {path} must be an array, got {schema['enum']!r}")
            values = schema["enum"]
        if "const" in schema:
            values = [v for v in (values if values is not None else [schema["const"]])
                      if _json_equal(v, schema["const"])]
        rest = {k: v for k, v in schema.items() if k not in ("enum", "const")}
        if set(rest) == {"type"}:  # the common case, exactly
            types = set(_types(rest, path))
            values = [v for v in values if _type_allows(types, _json_type_of(v))]
        elif rest:  # keep the values the rest of the schema accepts (its regex is sound)
            rest_regex = self._flat_value(rest, path)
            values = [v for v in values if rest_regex is not None and
                      self.matches(rest_regex, json.dumps(v, separators=(",", ":"), ensure_ascii=False))]
        return _alt([_literal(v, self.ws) for v in values])

    # -- types --------------------------------------------------------------------------
    def _number(self, schema: dict, path: str) -> str | None:
        """integer or number with minimum/maximum/exclusive bounds, as an exact numeral range."""
        integer = "number" not in _types(schema, path)
        if FRACTIONAL in schema:  # `not integer`: a nonzero last fraction digit, no exponent
            if integer:
                return None
            if any(k in schema for k in _NUMBER_BOUNDS):
                raise UnsupportedSchemaError(f"keyword 'not' at {schema[NOT_AT]}: 'not integer' together with "
                                             "minimum/maximum bounds is not supported")
            whole = "[1-9]" + _repeat("[0-9]", 0, self.options.max_integer_digits - 1)
            return rf"-?(?:0|{whole})\.{_repeat('[0-9]', 0, self.options.max_fraction_digits - 1)}[1-9]"
        step, decimal_step = 1, None
        if "multipleOf" in schema:  # m = p/q: integers -> multiples of p; numbers: listed multiples of m
            m = _decimal(schema["multipleOf"], "multipleOf", path)
            if m <= 0:
                raise InvalidSchemaError(f"'multipleOf' at {path} must be greater than 0, got {schema['multipleOf']!r}")
            p, q = Fraction(m).as_integer_ratio()
            if integer or q == 1:
                integer, step = True, p
            else:
                decimal_step = m
        lo, lo_strict, hi, hi_strict = None, False, None, False
        lo_keyword = hi_keyword = None
        for keyword, strict in (("minimum", False), ("exclusiveMinimum", True)):
            if keyword in schema:
                bound = _decimal(schema[keyword], keyword, path)
                if lo is None or bound > lo or (bound == lo and strict):
                    lo, lo_strict, lo_keyword = bound, strict, keyword
        for keyword, strict in (("maximum", False), ("exclusiveMaximum", True)):
            if keyword in schema:
                bound = _decimal(schema[keyword], keyword, path)
                if hi is None or bound < hi or (bound == hi and strict):
                    hi, hi_strict, hi_keyword = bound, strict, keyword
        if step > 1:  # a number (not integer) type may also write them as json.dumps writes 4.0
            whole = "number" in _types(schema, path)
            return _concat(self._multiples(step, lo, lo_strict, hi, hi_strict, path), r"(?:\.0)?" if whole else "")
        if decimal_step is not None:
            return _decimal_multiples(decimal_step, schema["multipleOf"], lo, lo_strict, hi, hi_strict, path,
                                      self.note_empty)
        if lo is None and hi is None:
            return _unbounded_number(self.options, integer)
        if integer:  # integer bounds: round inwards, then they are inclusive
            if lo is not None:
                lo = lo.to_integral_value(ROUND_FLOOR) + 1 if lo_strict else lo.to_integral_value(ROUND_CEILING)
            if hi is not None:
                hi = hi.to_integral_value(ROUND_CEILING) - 1 if hi_strict else hi.to_integral_value(ROUND_FLOOR)
            lo_strict = hi_strict = False
        # One bound only: the other is the digit limit, a power of ten (exclusive) beyond the
        # given bound, so that numerals have at most max_integer_digits integer digits.
        limit = Decimal(10) ** self.options.max_integer_digits
        while abs(lo if hi is None else hi) >= limit:
            limit *= 10
        if lo is None and self.options.bound_numbers:
            lo, lo_strict = -limit, True
        if hi is None and self.options.bound_numbers:
            hi, hi_strict = limit, True
        regex = _number_range(lo, lo_strict, hi, hi_strict, not integer, self.options.max_fraction_digits)
        nonempty = lo is None or hi is None or lo < hi or (lo == hi and not (lo_strict or hi_strict))
        if regex is None and not integer and nonempty:
            # Numbers lie in the range, but none with the fraction digits we write: our policy, not the schema's.
            given = " and ".join(f"{k} {short_value(schema[k])}" for k in (lo_keyword, hi_keyword) if k)
            self.note_empty(f"no number with at most {self.options.max_fraction_digits} fraction digits (the "
                            f"option max_fraction_digits) lies in the range {given} at {path}")
        return regex

    def note_empty(self, reason: str) -> None:
        """Remember why a part has no values we write although the schema gives it some (a
        policy of ours, not the schema's meaning): an error for a schema with no values names it."""
        if self.empty_because is None:
            self.empty_because = reason

    def _multiples(self, step: int, lo: Decimal | None, lo_strict: bool, hi: Decimal | None, hi_strict: bool,
                   path: str) -> str | None:
        """The integer multiples of `step` in the bounds: listed when both bounds leave at
        most MAX_LISTED_MULTIPLES; without bounds, when step divides 10^j (j <= 3), by
        their last j digits."""
        if lo is not None and hi is not None:
            first, last = _multiple_span(step, lo, lo_strict, hi, hi_strict)
            if last - first + 1 <= MAX_LISTED_MULTIPLES:
                return _alt([str(n * step) for n in range(first, last + 1)])
        elif (lo is None or lo == 0) and (hi is None or hi == 0) and not (lo == 0 and hi == 0):
            j = next((j for j in range(1, 4) if 10**j % step == 0), None)
            digits = self.options.max_integer_digits
            if j is not None and digits > j:
                small = [str(n) for n in range(step, 10**j, step)]  # fewer than j+1 digits
                endings = _alt([str(n).zfill(j) for n in range(0, 10**j, step)])
                nonzero = _alt(small + ["[1-9]" + _repeat("[0-9]", 0, digits - 1 - j) + endings])
                sign = "-?" if lo is None and hi is None else "" if hi is None else "-"
                zero = [] if (lo == 0 and lo_strict) or (hi == 0 and hi_strict) else ["0"]
                return _alt(zero + [sign + nonzero])
        raise UnsupportedSchemaError(
            f"keyword 'multipleOf' at {path}: multiples of {step} are supported within bounds holding at most "
            f"{MAX_LISTED_MULTIPLES} of them, or with no bound other than 0 when {step} divides 1000")

    def _string(self, schema: dict, path: str) -> str | None:
        """A JSON string: `format`, `pattern`, minLength/maxLength characters, values a `not`
        excludes. For the lazy automaton any of them together is their intersection (one
        `(?@and...)` group); a plain regex has exact forms for some pairs only."""
        min_length, max_length = _count(schema, "minLength", path), _count(schema, "maxLength", path)
        has_length = bool(min_length) or max_length is not None
        for keyword in ("format", "pattern"):
            if keyword in schema and not isinstance(schema[keyword], str):
                raise InvalidSchemaError(f"'{keyword}' at {path} must be a string, got {schema[keyword]!r}")
        if "format" in schema and schema["format"] not in FORMATS:
            if self.options.unknown_formats == "error":
                raise UnsupportedSchemaError(
                    f"'format': {schema['format']!r} at {path} is not supported (supported: "
                    f"{', '.join(sorted(FORMATS))}; the option unknown_formats='annotation' ignores it)")
            schema = {k: v for k, v in schema.items() if k != "format"}  # an annotation: any string
        if self.options.automaton == "lazy":
            if max_length is not None and max_length < (min_length or 0):
                return None
            parts = []  # whole string regexes; the string must match each
            if "format" in schema:
                parts.append(f'"{FORMATS[schema["format"]]}"')
            if "pattern" in schema:
                parts.append(_concat('"', _pattern_regex(schema["pattern"], f"{path}/pattern"), '"'))
            if has_length:
                parts.append(f'"{_repeat(COUNTED_STRING_CHAR, min_length or 0, max_length)}"')
            if EXCLUDED_STRINGS in schema:
                parts.append(_string_except(schema[EXCLUDED_STRINGS]))
            for pattern in schema.get(MORE_PATTERNS, []):
                parts.append(_concat('"', _pattern_regex(pattern, f"{path}/allOf"), '"'))
            for pattern in schema.get(NOT_PATTERNS, []):  # minus every writing of what it matches
                wide = _pattern_regex(pattern, schema[NOT_AT], wide=True)
                parts.append(STRING if wide is None else f'(?@diff({STRING})("{wide}"))')
            return self.intersection(parts, path) if parts else STRING
        if MORE_PATTERNS in schema:
            shown = ", ".join(shown_regex(p) for p in [schema["pattern"], *schema[MORE_PATTERNS]])
            raise UnsupportedSchemaError(f"'allOf' at {path}: a string must match several 'pattern's "
                                         f"([{shown}]); only automaton='lazy' intersects them")
        if NOT_PATTERNS in schema:
            raise UnsupportedSchemaError(f"keyword 'not' at {schema[NOT_AT]}: the negation of 'pattern' is written "
                                         "only for automaton='lazy'")
        if EXCLUDED_STRINGS in schema:  # `not` of string values: only for otherwise free strings
            if any(k in schema for k in ("format", "pattern")) or has_length:
                raise UnsupportedSchemaError(f"keyword 'not' at {schema[NOT_AT]}: excluding string values from a "
                                             "string with pattern, format or length bounds cannot be written exactly "
                                             "(with automaton='lazy' it can)")
            return _string_except(schema[EXCLUDED_STRINGS])
        if "format" in schema:
            fmt = schema["format"]
            if "pattern" in schema:
                raise UnsupportedSchemaError(f"'format' together with 'pattern' at {path} is not supported")
            if has_length:
                return f'"{_format_with_length(fmt, min_length or 0, max_length, path)}"'
            return f'"{FORMATS[fmt]}"'
        if "pattern" in schema:
            if has_length:
                return _concat('"', _pattern_with_length(schema["pattern"], f"{path}/pattern",
                                                         min_length or 0, max_length), '"')
            return _concat('"', _pattern_regex(schema["pattern"], f"{path}/pattern"), '"')
        if max_length is not None and max_length < (min_length or 0):
            return None
        if not has_length:
            return STRING
        return f'"{_repeat(COUNTED_STRING_CHAR, min_length or 0, max_length)}"'

    def _array(self, schema: dict, path: str) -> str | None:
        """A JSON array: prefixItems, then items (absent: a tuple after prefixItems, else any
        values), minItems/maxItems; or with `contains`, see _contains_array."""
        if "contains" in schema and (_count(schema, "minContains", path) != 0 or "maxContains" in schema):
            return self._contains_array(schema, path)
        items, prefix = schema.get("items"), schema.get("prefixItems")
        if isinstance(items, list) and prefix is None:  # draft 7 tuples: items [...], additionalItems
            prefix, items = items, schema.get("additionalItems")
            path_items = f"{path}/additionalItems"
        else:
            path_items = f"{path}/items"
        if prefix is not None and not isinstance(prefix, list):
            raise InvalidSchemaError(f"'prefixItems' at {path} must be an array of schemas")
        min_items, max_items = _count(schema, "minItems", path) or 0, _count(schema, "maxItems", path)
        prefix_regexes = []
        for i, sub in enumerate(prefix or []):
            regex = self.value(sub, f"{path}/prefixItems/{i}")
            if regex is None:  # no value fits position i: arrays end before it
                max_items = i if max_items is None else min(max_items, i)
                break
            prefix_regexes.append(regex)
            self.check_size(sum(map(len, prefix_regexes)), f"{path}/prefixItems/{i}")
        if schema.get("uniqueItems") is True and not (max_items is not None and max_items <= 1):
            if prefix is not None:
                raise UnsupportedSchemaError(f"keyword 'uniqueItems' at {path} together with prefixItems "
                                             "is not supported")
            return self._unique_array(True if items is None else items, min_items, max_items, path)
        if items is not None:
            item_regex = self.value(items, path_items)
        elif prefix is not None:
            item_regex = None  # a tuple: nothing after the prefix
        else:
            item_regex = self._any_value(self.nesting - 1)
        return self._array_regex(prefix_regexes, item_regex, min_items, max_items)

    def _unique_array(self, items, min_items: int, max_items: int | None, path: str) -> str | None:
        """uniqueItems over an item schema with a few possible values (const, enum,
        boolean, null): every arrangement of distinct values, as a tree of choices."""
        flat = self._flatten(items, f"{path}/items", [], frozenset(), False)
        values = _finite_values(flat) if isinstance(flat, dict) else None
        if values is None and isinstance(flat, dict) and set(flat) == {"type"}:
            types = set(_types(flat, path))
            values = [None] * ("null" in types) + [True, False] * ("boolean" in types) \
                if types <= {"null", "boolean"} else None
        if flat is False:
            values = []
        if values is None:
            raise UnsupportedSchemaError(f"keyword 'uniqueItems' at {path} is supported only for items with at most "
                                         f"{MAX_UNIQUE_VALUES} possible values (const, enum, boolean, null)")
        distinct: list = []
        for v in values:
            if not any(_json_equal(v, d) for d in distinct):
                distinct.append(v)
        regexes = [self.value(_both(items, {"const": v}), f"{path}/items") for v in distinct]
        regexes = [r for r in regexes if r is not None]
        if len(regexes) > MAX_UNIQUE_VALUES:
            raise UnsupportedSchemaError(f"keyword 'uniqueItems' at {path}: {len(regexes)} possible item values, "
                                         f"more than {MAX_UNIQUE_VALUES} (every arrangement is written out)")
        ws, sep = self.ws, f",{self.ws}"

        @functools.cache
        def rest(used: frozenset[int], lead: str) -> str | None:
            options = [""] if len(used) >= min_items else []
            if max_items is None or len(used) < max_items:
                options += [_concat(lead + regexes[i], rest(used | {i}, sep))
                            for i in range(len(regexes)) if i not in used]
            return _alt(options)

        elements = rest(frozenset(), "")
        return None if elements is None else rf"\[{ws}{elements}{ws}\]"

    def _contains_array(self, schema: dict, path: str) -> str | None:
        """An array with minContains..maxContains items that match `contains` (default 1..):

        with Y = an item matching `contains` and N = one that does not (`not contains`,
        which must be writable exactly), the items are N* (Y N*){lo,hi}.
        """
        lo, hi = _count(schema, "minContains", path), _count(schema, "maxContains", path)
        lo = 1 if lo is None else lo
        min_items, max_items = _count(schema, "minItems", path) or 0, _count(schema, "maxItems", path)
        other = [k for k in ("prefixItems", "uniqueItems") if k in schema and schema[k] is not False]
        if other or isinstance(schema.get("items"), list) or (min_items > lo and max_items is None):
            raise UnsupportedSchemaError(f"keyword 'contains' at {path} together with "
                                         f"{', '.join(other) or 'minItems (without maxItems) or a tuple'} "
                                         "is not supported")
        if hi is not None and hi < lo:
            return None
        items = schema.get("items", True)
        where = f"{path}/contains"
        missing = self.negation(self._flatten(schema["contains"], where, [], frozenset(), False), where)
        yes = self.value(_both(items, schema["contains"]), where)
        no = self.value(_both(items, missing), where) if missing is not False else None
        if len(yes or "") + len(no or "") > MAX_CONTAINS_ITEM_CHARS:
            # Y and N are repeated and interleaved; interegular takes minutes on big ones
            # (`contains: {const: 1}` without `items` makes N any value but 1).
            raise UnsupportedSchemaError(
                f"keyword 'contains' at {path}: the item regexes with and without a match take "
                f"{len(yes or '') + len(no or '')} characters (limit {MAX_CONTAINS_ITEM_CHARS}); give 'items' a "
                "narrower schema")
        ws, sep = self.ws, f",{self.ws}"
        if max_items is not None:
            elements = self._counted_contains(yes, no, lo, hi, min_items, max_items, path)
            return None if elements is None else rf"\[{ws}{elements}{ws}\]"
        no_tail = "" if no is None else _repeat(sep + no, 0, None)
        options = [""] if lo == 0 else []
        if yes is not None:
            more_yes = _repeat(_concat(sep, yes, no_tail), max(lo - 1, 0), None if hi is None else hi - 1)
            if no is not None:
                options.append(_concat(no, no_tail, _repeat(_concat(sep, yes, no_tail), lo, hi)))
            if hi is None or hi >= 1:
                options.append(_concat(yes, no_tail, more_yes))
        elif lo == 0 and no is not None:
            options.append(no + no_tail)
        elements = _alt(options)
        return None if elements is None else rf"\[{ws}{elements}{ws}\]"

    def _counted_contains(self, yes: str | None, no: str | None, lo: int, hi: int | None, min_items: int,
                          max_items: int, path: str) -> str | None:
        """The elements of an array of min_items..max_items items, lo..hi of them Y (`yes`),
        the others N (`no`): a walk over (items so far, Ys so far). Where Y and N lead to
        the same count (enough Ys and no maxContains) they share one tail, so the text
        grows with the ways to place the first lo Ys, not 2**max_items."""
        sep = f",{self.ws}"

        @functools.cache
        def rest(i: int, j: int) -> str | None:
            options = [""] if i >= min_items and j >= lo else []
            if i < max_items:
                lead = sep if i else ""
                after_yes = None if yes is None or (hi is not None and j >= hi) else \
                    (min(j + 1, lo) if hi is None else j + 1)
                if after_yes == j:  # Y and N both keep the count: one tail for both
                    options.append(_concat(lead, _alt([yes, no]), rest(i + 1, j)))
                else:
                    if after_yes is not None:
                        options.append(_concat(lead, yes, rest(i + 1, after_yes)))
                    if no is not None:
                        options.append(_concat(lead, no, rest(i + 1, j)))
            regex = _alt(options)
            self.check_size(len(regex or ""), f"{path}/contains")
            return regex
        return rest(0, 0)

    def _array_regex(self, prefix: list[str], items: str | None, min_items: int, max_items: int | None) -> str | None:
        """`[` elements `]`: element i matches prefix[i], later ones `items` (None: no more)."""
        # BEGIN SOLUTION task5_2
        ws, sep = self.ws, f",{self.ws}"
        if items is None:
            max_items = len(prefix) if max_items is None else min(max_items, len(prefix))
        if max_items is not None and min_items > max_items:
            return None

        def after(i: int) -> str:
            """The elements after the first i (i >= 1), each behind a comma."""
            if max_items is not None and i >= max_items:
                return ""
            if i >= len(prefix):
                hi = None if max_items is None else max_items - i
                return _repeat(sep + items, max(min_items - i, 0), hi)
            more = sep + prefix[i] + after(i + 1)
            return more if i < min_items else _repeat(more, 0, 1)

        if max_items == 0:
            elements = ""
        else:
            elements = (prefix[0] if prefix else items) + after(1)
            if min_items == 0:
                elements = _repeat(elements, 0, 1)
        return rf"\[{ws}{elements}{ws}\]"
        # END SOLUTION

    def _object(self, schema: dict, path: str) -> str | None:
        """A JSON object: `properties` in order (required ones always), keys of
        `patternProperties` after them, or a map (see the additionalProperties policy in the
        module doc); `propertyNames` limits every key."""
        properties = schema.get("properties", {})
        required = schema.get("required", [])
        patterns = schema.get("patternProperties", {})
        if not isinstance(properties, dict):
            raise InvalidSchemaError(f"'properties' at {path} must be an object")
        if not isinstance(patterns, dict):
            raise InvalidSchemaError(f"'patternProperties' at {path} must be an object")
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise InvalidSchemaError(f"'required' at {path} must be an array of strings")
        additional = schema.get("additionalProperties")
        names = schema.get("propertyNames", True)
        names_free = names is True or names == {}
        # The keys propertyNames allows (a string regex; None: no key at all).
        key_regex = None if names_free else self.value(_both({"type": "string"}, names), f"{path}/propertyNames")

        def name_allowed(name: str) -> bool:  # our regex is sound: a match is a valid name
            return names_free or (key_regex is not None and any(
                self.matches(key_regex, json.dumps(name, ensure_ascii=a)) for a in (True, False)))

        def member(name: str, subschemas: list, where: str) -> str | None:
            """`"name": value` with a value valid for every subschema; None: no value fits."""
            value = self.value(subschemas[0] if len(subschemas) == 1 else {"allOf": subschemas}, where) \
                if name_allowed(name) else None
            return None if value is None else f"{_string_literal(name)}:{self.ws}{value}"

        members = []  # (regex of `"key": value`, required)
        for name, sub in properties.items():
            matching = [s for p, s in patterns.items() if _searches(p, name, f"{path}/patternProperties")]
            regex = member(name, [sub, *matching], f"{path}/properties/{name}")
            if regex is None:  # no value fits: the property must be absent
                if name in required:
                    return None
                continue
            members.append((regex, name in required))
            self.check_size(sum(len(m) for m, _ in members), f"{path}/properties/{name}")
        for name in dict.fromkeys(required):
            if name not in properties:  # required, not listed: patternProperties or additionalProperties
                matching = [s for p, s in patterns.items() if _searches(p, name, f"{path}/patternProperties")]
                regex = member(name, matching or [True if additional is None else additional],
                               f"{path}/additionalProperties")
                if regex is None:
                    return None
                members.append((regex, True))
        listed = list(properties) + [r for r in required if r not in properties]
        counts = (_count(schema, "minProperties", path) or 0, _count(schema, "maxProperties", path))
        if patterns and self.options.automaton == "lazy":
            entries = self._key_regions(patterns, listed, additional, None if names_free else key_regex,
                                        "properties" in schema, path)
        elif patterns:
            entries = self._pattern_entries(patterns, listed, additional, names_free, path)
        elif additional is False or ("properties" in schema and not self.options.extra_properties):
            entries = []
        else:
            extra_value = self._any_value(self.nesting - 1) if additional is None or additional is True \
                else self.value(additional, f"{path}/additionalProperties")
            if "properties" in schema:  # extra_properties: unlisted keys after the listed ones
                if not names_free:
                    raise UnsupportedSchemaError(f"keyword 'propertyNames' at {path} is not supported together "
                                                 "with the option extra_properties")
                key = self.key_except(listed)
            else:  # a map
                key = STRING if names_free else key_regex
            entries = [] if extra_value is None or key is None else [f"{key}:{self.ws}{extra_value}"]
        if not entries:
            return self._members_regex(members, path, counts=counts)
        one_entry = not members and "properties" not in schema and counts[0] == 1  # one key is distinct
        if counts[0] > len(members) and not one_entry:  # a repeated key counts once: entries do not prove the count
            raise UnsupportedSchemaError(
                f"keyword 'minProperties' at {path} is not supported on an object with unlisted keys "
                "(a regex cannot keep keys distinct)")
        if "properties" not in schema or (counts[1] is not None and all(req for _, req in members)):
            # every member is required: a map (the entries counted against maxProperties)
            return self._map_regex(members, self.shared(_alt(entries)), counts[1], at_least_one=one_entry)
        if counts[1] is not None:
            raise UnsupportedSchemaError(f"keyword 'maxProperties' at {path} is not supported on an object with "
                                         "both optional listed properties and unlisted keys")
        return self._members_regex(members, path, self.shared(_alt(entries)))

    def _key_regions(self, patterns: dict, listed: list[str], additional, key_regex: str | None,
                     has_properties: bool, path: str) -> list[str]:
        """The `"key": value` regexes of the unlisted keys, for the lazy automaton, exactly.

        A key gets the value of every pattern it matches, and additionalProperties' when it
        matches none (let in by the policy of the module doc). So the keys are split by the
        set S of patterns they match: the keys we write for each pattern in S, intersected
        (`(?@and...)`), minus every JSON writing of the keys of the other patterns
        (`(?@diff...)` with their wide translation); never a listed name (written as a
        listed member), and within propertyNames' `key_regex`. Empty regions are skipped.
        """
        if len(patterns) > MAX_KEY_PATTERNS:
            raise UnsupportedSchemaError(f"keyword 'patternProperties' at {path}: more than {MAX_KEY_PATTERNS} "
                                         "patterns (their keys are split into 2^n regions)")
        where = [f"{path}/patternProperties/{_pointer_token(p)}" for p in patterns]
        narrow = [_concat('"', _pattern_regex(p, w), '"') for p, w in zip(patterns, where)]
        wide = [_concat('"', _pattern_regex(p, w, wide=True), '"') for p, w in zip(patterns, where)]
        # Our key strings never decode to a listed name (`_string_except` writes no other form of one).
        base = [self.key_except(listed)] if listed else []
        base += [key_regex] if key_regex is not None else []
        regions = []  # (key regex, value schemas, where)
        for size in range(1, len(patterns) + 1):
            for chosen in itertools.combinations(range(len(patterns)), size):
                others = [wide[j] for j in range(len(patterns)) if j not in chosen and wide[j] is not None]
                regions.append(([narrow[i] for i in chosen] + base, others,
                                [list(patterns.values())[i] for i in chosen], where[chosen[0]]))
        extra_allowed = self.options.extra_properties or (additional is not None and not has_properties)
        if additional is not False and extra_allowed:
            value = True if additional is None else additional
            regions.append((base or [STRING], [w for w in wide if w is not None], [value],
                            f"{path}/additionalProperties"))
        entries = []
        for keys, others, values, at in regions:
            key = self.intersection(keys, at)
            if key is not None and others:
                key = f"(?@diff({key})({_alt(others)}))"
                key = None if self.language_empty(key, at) else key
            if key is None:
                continue
            if values == [True]:  # any value, nested as an unlisted key's may be
                value = self._any_value(self.nesting - 1)
            else:
                value = self.value(values[0] if len(values) == 1 else {"allOf": values}, at)
            if value is not None:  # (None: no value fits, so these keys stay absent)
                entries.append(f"{key}:{self.ws}{value}")
        return entries

    def _pattern_entries(self, patterns: dict, listed: list[str], additional, names_free: bool,
                         path: str) -> list[str]:
        """The `"key": value` regexes of patternProperties, one per pattern, for a plain
        regex (the lazy automaton: _key_regions).

        Exact only when no key has two rules: each pattern's keys must miss the listed
        names and every other pattern's keys (checked on the automata); the keys of no
        pattern get no entry, so additionalProperties must not allow any (false or absent).
        """
        if additional not in (None, False) or (additional is None and self.options.extra_properties):
            raise UnsupportedSchemaError(f"keyword 'patternProperties' at {path} together with "
                                         "additionalProperties is not supported (the keys no pattern matches; "
                                         "with automaton='lazy' it is)")
        if not names_free:
            raise UnsupportedSchemaError(f"keyword 'patternProperties' at {path} together with propertyNames "
                                         "is not supported (with automaton='lazy' it is)")
        keys, entries = [], []  # keys: (pattern, key regex, its wide form, whether it has an entry)
        for pattern, sub in patterns.items():
            where = f"{path}/patternProperties/{_pointer_token(pattern)}"
            key = _concat('"', _pattern_regex(pattern, where), '"')
            if key is None:
                continue
            wide = _concat('"', _pattern_regex(pattern, where, wide=True), '"')
            value = self.value(sub, where)  # None: keys matching the pattern must be absent
            for name in listed if value is not None else []:
                if any(re.fullmatch(key, json.dumps(name, ensure_ascii=a)) for a in (True, False)):
                    raise UnsupportedSchemaError(
                        f"keyword 'patternProperties' at {where}: the pattern also matches the listed property "
                        f"{name!r}, and a regex cannot keep that key from being written twice "
                        "(with automaton='lazy' it can)")
            for other_pattern, other, other_wide, other_written in keys:
                # A key one of them writes that the other matches too (in Python's reading).
                if (value is not None and not self.language_empty(f"(?@and({key})({other_wide}))", where)) or \
                        (other_written and not self.language_empty(f"(?@and({other})({wide}))", where)):
                    raise UnsupportedSchemaError(
                        f"keyword 'patternProperties' at {where}: some key matches both {shown_regex(pattern)} and "
                        f"{shown_regex(other_pattern)}, and its value would have to fit both "
                        "(with automaton='lazy' it can)")
            keys.append((pattern, key, wide, value is not None))
            if value is not None:
                entries.append(f"{key}:{self.ws}{value}")
        return entries

    def _members_regex(self, members: list[tuple[str, bool]], path: str, extra: str | None = None,
                       counts: tuple[int, int | None] = (0, None)) -> str | None:
        """`{` the members, optional ones may be left out, then any number of `extra`
        entries (None: none) `}`. Members come in schema order (O(n^2) regex size), or in
        any order with the any_order option: for the lazy automaton one `(?@members...)`
        group (O(n), extras anywhere), else every order (O(n! n): at most
        max_any_order_properties).
        `counts`: minProperties/maxProperties, how many members are written (no extras).
        """
        ws, sep = self.ws, f",{self.ws}"
        if self.options.any_order and self.options.automaton == "lazy" and counts == (0, None):
            groups = "".join(f"({'!' if req else '~'}{m})" for m, req in members)
            extra_group = "" if extra is None else f"(&{extra})"
            return rf"\{{{ws}{MEMBERS_SYNTAX}({sep}){groups}{extra_group}){ws}\}}"
        if self.options.any_order:
            firsts = self._any_order_firsts(members, path, counts)
        elif counts != (0, None):
            inner = self._counted_members(members, counts, path)
            return None if inner is None else rf"\{{{ws}{inner}{ws}\}}"
        else:
            firsts = self._ordered_firsts(members, path)
        if not firsts:
            return None
        if extra is not None:  # after the members (or alone), each behind a comma
            more = _repeat(sep + extra, 0, None)
            firsts = [option for first in firsts for option in ([extra + more, ""] if first == "" else [first + more])]
        return rf"\{{{ws}{_alt(firsts)}{ws}\}}"

    def _ordered_firsts(self, members: list[tuple[str, bool]], path: str) -> list[str]:
        """The object's contents in schema order, split by which member is written first
        (one of the optional ones before the first required one, or that one; "": none)."""
        sep = f",{self.ws}"

        def behind_comma(member: str, req: bool) -> str:
            return sep + member if req else _repeat(sep + member, 0, 1)

        # rest(k): members[k:], each behind a comma.
        if self.options.automaton == "lazy":  # each rest one shared sub-expression: O(n) text, not O(n^2)
            tails = [""]
            for member, req in reversed(members):
                tails.append(self.shared(behind_comma(member, req) + tails[-1]))
            rest = tails[::-1].__getitem__
        else:  # joined on demand, so a huge object meets the size bound before all of it is written
            def rest(k: int) -> str:
                return "".join(behind_comma(m, req) for m, req in members[k:])

        firsts, chars = [], 0
        for k, (member, req) in enumerate(members):
            firsts.append(member + rest(k + 1))
            chars += len(firsts[-1])
            self.check_size(chars, path)  # each member is repeated in later alternatives: O(n^2)
            if req:
                break
        else:
            firsts.append("")  # all optional: the object may be empty
        return firsts

    def _counted_members(self, members: list[tuple[str, bool]], counts: tuple[int, int | None],
                         path: str) -> str | None:
        """The object's contents in schema order with lo..hi members written (counts).

        `rest(k, n, started)`: members[k:] after n written (n stops counting at lo when
        there is no hi); a member that may be present or absent with the same rest after
        it is written `(,member)?`, so without active counts the size stays O(n^2).
        """
        lo, hi = counts
        sep = f",{self.ws}"

        @functools.cache
        def rest(k: int, n: int, started: bool) -> str | None:
            if k == len(members):
                return "" if n >= lo else None
            member, req = members[k]
            lead = sep if started else ""
            after = None if hi is not None and n >= hi else rest(k + 1, n + 1 if hi is not None or n < lo else n, True)
            skip = None if req else rest(k + 1, n, started)
            if after is not None and skip is not None and started and after == skip:
                return _repeat(lead + member, 0, 1) + skip
            regex = _alt([_concat(lead + member, after), skip])
            self.check_size(len(regex or ""), path)
            return regex

        return rest(0, 0, False)

    def _any_order_firsts(self, members: list[tuple[str, bool]], path: str,
                          counts: tuple[int, int | None] = (0, None)) -> list[str]:
        """The object's contents with the members in any order, split by the first one
        (with lo..hi members written: counts)."""
        limit = self.options.max_any_order_properties
        if len(members) > limit:
            raise UnsupportedSchemaError(
                f"option any_order at {path}: the object has {len(members)} properties, more than "
                f"max_any_order_properties={limit} (every order is written out: n! alternatives)")
        sep = f",{self.ws}"

        lo, hi = counts

        @functools.cache
        def rest(left: frozenset[int]) -> str | None:
            """The members in `left` that follow, in any order, each behind a comma."""
            written = len(members) - len(left)
            done = not any(members[i][1] for i in left) and written >= lo
            options = [""] if done else []
            if hi is None or written < hi:
                options += [_concat(sep + members[i][0], rest(left - {i})) for i in sorted(left)]
            return _alt(options)

        everyone = frozenset(range(len(members)))
        firsts = [_concat(members[i][0], rest(everyone - {i})) for i in sorted(everyone)] if hi != 0 else []
        firsts = [f for f in firsts if f is not None]
        return firsts + ([""] if not any(req for _, req in members) and lo == 0 else [])

    def _map_regex(self, members: list[tuple[str, bool]], entry: str, most: int | None = None,
                   at_least_one: bool = False) -> str | None:
        """`{` the required members, then any number of `entry` (at most `most` entries in
        all: maxProperties; a repeated key only lowers the count; `at_least_one`: without
        members, one entry or more: minProperties 1) `}`."""
        ws, sep = self.ws, f",{self.ws}"
        if most is not None and most < len(members):
            return None
        more = None if most is None else most - len(members)
        if members:
            body = sep.join(m for m, _ in members) + _repeat(sep + entry, 0, more)
        elif more == 0:
            body = ""
        else:
            body = _repeat(entry + _repeat(sep + entry, 0, None if more is None else more - 1),
                           1 if at_least_one else 0, 1)
        return rf"\{{{ws}{body}{ws}\}}"

    def _any_value(self, nesting: int) -> str:
        """Any JSON value with containers nested at most `nesting` levels deep."""
        if nesting not in self.any_values:
            options = [STRING, _unbounded_number(self.options, False), "true", "false", "null"]
            if nesting > 0:
                inner = self._any_value(nesting - 1)
                options.append(self._array_regex([], inner, 0, None))
                options.append(self._map_regex([], f"{STRING}:{self.ws}{inner}"))
            self.any_values[nesting] = self.shared(_alt(options))
        return self.any_values[nesting]


DEPENDENCY_KEYWORDS = ("dependentRequired", "dependentSchemas", "dependencies")
# The base URI of a root schema without $id (relative refs resolve against it).
ROOT_URI = "https://minisglang.invalid/root.json"  # hierarchical: urljoin resolves paths against it


def _pointer_token(key: str) -> str:
    """A key as a JSON pointer token (~ and / escaped)."""
    return key.replace("~", "~0").replace("/", "~1")


def _step(node, token: str):
    """node[token] for a JSON pointer token (an object key or a list index); None if absent."""
    if isinstance(node, dict):
        return node.get(token)
    if isinstance(node, list) and token.isdigit() and int(token) < len(node):
        return node[int(token)]
    return None
# contains interleaves the items with and without a match: their regexes' total size.
MAX_CONTAINS_ITEM_CHARS = 3000
# multipleOf within bounds lists the multiples: at most this many.
MAX_LISTED_MULTIPLES = 256
# uniqueItems writes every arrangement of the distinct item values: n! of them.
MAX_UNIQUE_VALUES = 4
# patternProperties' keys are split by the set of patterns they match: 2^n - 1 regions.
MAX_KEY_PATTERNS = 6
# Strings excluded by a `not` of const/enum: an internal keyword, never in a user's schema.
EXCLUDED_STRINGS = "$minisglang:excludedStrings"


# Numbers with a fraction (not integers), for "not integer": an internal keyword too.
FRACTIONAL = "$minisglang:fractional"
# Where the `not` behind the two keywords above is, for error messages.
NOT_AT = "$minisglang:notAt"
# Patterns a string must also match (allOf of two `pattern`s), and must not match (`not`
# of a `pattern`): only the lazy automaton can write these (intersection, difference).
MORE_PATTERNS = "$minisglang:morePatterns"
NOT_PATTERNS = "$minisglang:notPatterns"


def _other_types(types: list[str]) -> list[str]:
    """The JSON types not in `types`, where `types` holds number whenever it holds integer."""
    assert "integer" not in types or "number" in types
    return [t for t in JSON_TYPES if t not in types and t != "integer" or (t == "integer" and "number" not in types)]


def _not_types(types: list[str], path: str) -> dict:
    """A schema for the values whose type is none of `types`."""
    if "integer" in types and "number" not in types:  # the numbers with a fraction remain
        return {"anyOf": [{"type": _other_types([*types, "number"])},
                          {"type": "number", FRACTIONAL: True, NOT_AT: path}]}
    return {"type": _other_types(types)}


_NUMBER_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
# keyword -> (the type it constrains, its opposite bound as keywords; None: no value)
_OPPOSITE_BOUNDS = {
    "minLength": ("string", lambda n: None if n <= 0 else {"maxLength": n - 1}),
    "maxLength": ("string", lambda n: {"minLength": n + 1}),
    "minItems": ("array", lambda n: None if n <= 0 else {"maxItems": n - 1}),
    "maxItems": ("array", lambda n: {"minItems": n + 1}),
    "minProperties": ("object", lambda n: None if n <= 0 else {"maxProperties": n - 1}),
    "maxProperties": ("object", lambda n: {"minProperties": n + 1}),
    "minimum": ("number", lambda v: {"exclusiveMaximum": v}),
    "maximum": ("number", lambda v: {"exclusiveMinimum": v}),
    "exclusiveMinimum": ("number", lambda v: {"maximum": v}),
    "exclusiveMaximum": ("number", lambda v: {"minimum": v}),
}


def _excluding(values: list, path: str) -> dict:
    """A schema for every JSON value except `values` (scalars): per type, what is left."""
    if any(isinstance(v, (list, dict)) for v in values):
        raise UnsupportedSchemaError(f"keyword 'not' at {path}: excluding array or object values "
                                     "cannot be written exactly")
    numbers = sorted({v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)})
    strings = sorted({v for v in values if isinstance(v, str)})
    booleans = [b for b in (True, False) if not any(v is b for v in values)]
    branches: list[dict] = [{"type": "object"}, {"type": "array"}]
    if not any(v is None for v in values):
        branches.append({"type": "null"})
    if booleans:
        branches.append({"enum": booleans})
    branches.append({"type": "string", EXCLUDED_STRINGS: strings, NOT_AT: path} if strings else {"type": "string"})
    # numbers: the open ranges between the excluded ones
    edges = [None, *numbers, None]
    for low, high in zip(edges, edges[1:]):
        branches.append({"type": "number", **({} if low is None else {"exclusiveMinimum": low}),
                         **({} if high is None else {"exclusiveMaximum": high})})
    return {"anyOf": branches}


def _dependency_cases(schema: dict, path: str) -> list[dict]:
    """dependentRequired/dependentSchemas/dependencies as anyOf schemas to AND with the rest.

    "if `a` is present, then S" is exactly anyOf [`a` absent, `a` present and S]; the two
    cases are disjoint, and each is made of keywords we compile exactly.
    """
    cases = []
    for keyword in DEPENDENCY_KEYWORDS:
        value = schema.get(keyword)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise InvalidSchemaError(f"'{keyword}' at {path} must be an object")
        for name, then in value.items():
            where = f"{path}/{keyword}/{name}"
            if isinstance(then, list):  # dependentRequired, or dependencies with a list
                if keyword == "dependentSchemas" or not all(isinstance(r, str) for r in then):
                    raise InvalidSchemaError(f"'{keyword}' at {where} must be a schema")
                present = {"required": [name, *then]}
            elif isinstance(then, (dict, bool)) and keyword != "dependentRequired":
                present = {"required": [name], "allOf": [then]}
            else:
                raise InvalidSchemaError(f"'{keyword}' at {where} must be an array of property names"
                                         + ("" if keyword == "dependentRequired" else " or a schema"))
            cases.append({"anyOf": [{"properties": {name: False}}, present]})
    return cases


# Keywords that apply subschemas to the same value: they may evaluate properties or items.
IN_PLACE_APPLICATORS = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref", "$dynamicRef",
                        "dependentSchemas", "dependencies")


def _unevaluated_as_additional(schema: dict) -> dict:
    """unevaluatedProperties/unevaluatedItems where they mean additionalProperties/items.

    Without in-place applicators, the properties (items) a schema evaluates are exactly
    those of its own properties/patternProperties/additionalProperties (prefixItems/items):
    unevaluated* then applies to what additionalProperties (items) would, or to nothing
    if that keyword is present. With applicators (or contains) it stays unsupported.
    """
    if any(k in schema for k in IN_PLACE_APPLICATORS):
        return schema
    out = dict(schema)
    if "unevaluatedProperties" in out:
        value = out.pop("unevaluatedProperties")
        out.setdefault("additionalProperties", value)
    if "unevaluatedItems" in out and "contains" not in out and not isinstance(out.get("items"), list):
        value = out.pop("unevaluatedItems")
        out.setdefault("items", value)
    return out


def _multiple_span(step: Decimal | int, lo: Decimal, lo_strict: bool, hi: Decimal, hi_strict: bool) -> tuple[int, int]:
    """(first, last): the multiples of `step` within the bounds are first*step ... last*step
    (none when first > last)."""
    first = (lo / step).to_integral_value(ROUND_CEILING)
    first += 1 if lo_strict and first * step <= lo else 0
    last = (hi / step).to_integral_value(ROUND_FLOOR)
    last -= 1 if hi_strict and last * step >= hi else 0
    return int(first), int(last)


def _decimal_multiples(step: Decimal, given, lo: Decimal | None, lo_strict: bool, hi: Decimal | None,
                       hi_strict: bool, path: str, note_empty: Callable[[str], None] | None = None) -> str | None:
    """The multiples of a fractional `step` between both bounds, listed (at most
    MAX_LISTED_MULTIPLES). Only those that a validator's float division also accepts
    (x / step an integer in binary floating point, as jsonschema computes it: 0.29 / 0.01
    is 28.999999999999996) are written: valid both exactly and in floats. `note_empty`
    hears why when there are multiples but none of them passes that division."""
    if lo is None or hi is None:
        raise UnsupportedSchemaError(f"keyword 'multipleOf' at {path}: a fractional multipleOf ({given!r}) is "
                                     "supported only between a minimum and a maximum")
    first, last = _multiple_span(step, lo, lo_strict, hi, hi_strict)
    if last - first + 1 > MAX_LISTED_MULTIPLES:
        raise UnsupportedSchemaError(f"keyword 'multipleOf' at {path}: more than {MAX_LISTED_MULTIPLES} multiples "
                                     f"of {given!r} between the bounds")
    texts = []
    for n in range(int(first), int(last) + 1):
        text = format((n * step).normalize(), "f")
        quotient = float(text) / float(given)
        if math.isfinite(quotient) and int(quotient) == quotient:
            # a whole multiple is also written as json.dumps writes a float: 3.0
            texts.append(text.replace(".", r"\.") if "." in text else ("0" if text == "-0" else text) + r"(?:\.0)?")
    if not texts and last >= first and note_empty is not None:
        note_empty(f"keyword 'multipleOf' at {path}: no multiple of {given!r} between the bounds divides by it "
                   "exactly in binary floating point (x / multipleOf, as validators compute it)")
    return _alt(texts)


def _matcher(regex: str) -> Callable[[str], bool]:
    """Whether a text matches all of one of our regexes: `re`, or the lazy automaton for
    one with our private `(?@...)` groups."""
    if PRIVATE_SYNTAX not in regex:
        return lambda text: re.fullmatch(regex, text) is not None
    dfa = LazyByteDFA.from_regex(regex, members=True)
    return lambda text: dfa.matches(text.encode("utf-8"))


def _searches(pattern: str, name: str, path: str) -> bool:
    """Whether `pattern` finds a match in `name`, as the jsonschema validator decides (re.search)."""
    try:
        return re.search(pattern, name) is not None
    except re.error as e:
        raise UnsupportedSchemaError(f"'patternProperties' at {path}: {shown_regex(pattern)} is not a regex we "
                                     f"can read: {e}") from None


def _check_keywords(schema: dict, path: str) -> None:
    """Refuse every keyword we do not implement."""
    for keyword in schema:
        if keyword in UNSUPPORTED_KEYWORDS:
            raise UnsupportedSchemaError(f"keyword '{keyword}' at {path} is not supported")


def _declared_types(schema: dict, path: str) -> set[str] | None:
    """The types a value of `schema` can have, as far as "type", const or enum say; None: any."""
    types = None
    if "type" in schema:
        types = set(_types(schema, path))
    values = _finite_values(schema)
    if values is not None:
        value_types = {_json_type_of(v) for v in values}
        types = value_types if types is None else {t for t in value_types if _type_allows(types, t)}
    return types


def _why_empty(parts: list[tuple[str, dict | bool]]) -> str:
    """" (at PATH: WHY)" for the first part with no value, its commonest causes named; ""
    when no part was found (a cached $ref)."""
    if not parts:
        return ""
    path, schema = parts[0]
    why = ("nothing matches it (false, parts of allOf/not/if that exclude each other, or a $ref cut at "
           "max_ref_depth)") if schema is False else "; ".join(_contradictions(schema)) or "no value matches it"
    more = f", and {len(parts) - 1} more part(s)" if len(parts) > 1 else ""
    return f" (at {path}: {why}{more})"


def _contradictions(schema: dict) -> list[str]:
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
        elif type(step) in (int, float) and step > 0 and none_between(_decimal(step, "multipleOf", "#")):
            found.append(f"no multiple of {short_value(step)} lies between {between}")
    for low, high, what in (("minLength", "maxLength", "string length"), ("minItems", "maxItems", "item count"),
                            ("minProperties", "maxProperties", "property count")):
        if isinstance(schema.get(low), int) and isinstance(schema.get(high), int) and schema[low] > schema[high]:
            found.append(f"{low} {schema[low]} is above {high} {schema[high]}: no {what} fits")
    values = _finite_values(schema)
    if values is not None and "type" in schema:
        if not any(_type_allows(types, _json_type_of(v)) for v in values):
            found.append(f"none of its enum/const values has type {' or '.join(sorted(types))}")
    elif values == []:
        found.append("its enum is empty")
    return found


def _types_overlap(a: set[str], b: set[str]) -> bool:
    return bool(a & b) or ("integer" in a and "number" in b) or ("number" in a and "integer" in b)


def _finite_values(schema: dict) -> list | None:
    if "const" in schema:
        return [schema["const"]]
    if isinstance(schema.get("enum"), list):
        return schema["enum"]
    return None


def _types(schema: dict, path: str) -> list[str]:
    """The types to generate, in a fixed order: "type", or inferred from the keywords used."""
    if "type" in schema:
        declared = schema["type"]
        names = [declared] if isinstance(declared, str) else declared
        if not isinstance(names, list) or not all(isinstance(n, str) and n in JSON_TYPES for n in names):
            raise InvalidSchemaError(f"'type' at {path} must be one of {', '.join(JSON_TYPES)} "
                                     f"or an array of them, got {declared!r}")
        return [t for t in JSON_TYPES if t in names]
    used = [t for t, keywords in TYPE_KEYWORDS.items() if any(k in schema for k in keywords)]
    if not used:
        return [t for t in JSON_TYPES if t != "integer"]
    return used


# ---------------------------------------------------------------------------------------
# allOf: merging two schemas into one with the meaning of both
# ---------------------------------------------------------------------------------------
_TAKE_MAX = ("minLength", "minItems", "minimum", "exclusiveMinimum", "minProperties")
_TAKE_MIN = ("maxLength", "maxItems", "maximum", "exclusiveMaximum", "maxProperties")


def _merge(a: dict | bool, b: dict | bool, path: str) -> dict | bool:
    """One schema that accepts exactly the values both accept (False: none), or an error."""
    if a is False or b is False:
        return False
    merged = dict(a)
    for keyword, value in b.items():
        if keyword not in merged or _json_equal(merged[keyword], value):
            merged[keyword] = value
        elif keyword == "type":
            names_a = [merged["type"]] if isinstance(merged["type"], str) else merged["type"]
            names_b = [value] if isinstance(value, str) else value
            both = [t for t in names_a if t in names_b]
            if "integer" not in both and all(_types_overlap({"integer"}, set(n)) for n in (names_a, names_b)):
                both.append("integer")  # integer and number: integer
            if not both:
                return False
            merged["type"] = both
        elif keyword == "required":
            merged["required"] = list(dict.fromkeys(merged["required"] + value))
        elif keyword in _TAKE_MAX or keyword in _TAKE_MIN:
            if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (merged[keyword], value)):
                raise InvalidSchemaError(f"'{keyword}' at {path} must be a number, got {value!r}")
            merged[keyword] = (max if keyword in _TAKE_MAX else min)(merged[keyword], value)
        elif keyword == "enum":
            merged["enum"] = [x for x in merged["enum"] if any(_json_equal(x, y) for y in value)]
        elif keyword == "const":
            return False  # two different constants
        elif keyword in (EXCLUDED_STRINGS, MORE_PATTERNS, NOT_PATTERNS):
            merged[keyword] = sorted(set(merged[keyword]) | set(value))
        elif keyword == "pattern":  # both must match: kept for the string's intersection
            merged[MORE_PATTERNS] = sorted(set(merged.get(MORE_PATTERNS, [])) | {value})
        elif keyword == NOT_AT:
            pass  # the first `not` names the place
        elif keyword == "anyOf":  # (a1 or a2) and (b1 or b2) = any of the pairs
            merged["anyOf"] = _anyof_pairs(merged["anyOf"], value, path)
            if not merged["anyOf"]:
                return False  # every pair contradicts
        elif keyword not in CONSTRAINING_KEYWORDS:
            pass  # an annotation or unknown keyword: ignored, whatever its values
        elif keyword not in ("properties", "additionalProperties", "prefixItems", "items"):
            raise UnsupportedSchemaError(f"'allOf' at {path}: two subschemas give '{keyword}' different values "
                                         f"({merged[keyword]!r} and {value!r}), which we cannot merge")
    for keywords, merge in ((("properties", "additionalProperties"), _merge_properties),
                            (("prefixItems", "items"), _merge_items)):
        if any(k in a for k in keywords) and any(k in b for k in keywords):  # they interact
            for k in keywords:
                merged.pop(k, None)
            merged.update(merge(a, b, path))
    return merged


# allOf of n anyOfs of k branches each is an anyOf of k**n pairs: past this many (after
# dropping the pairs that contradict), the schema is refused rather than built for minutes.
MAX_ANYOF_COMBINATIONS = 512
# Keywords a branch may only mean something through the compiler ($ref targets, negation,
# ...): pairs holding one stay {"allOf": [x, y]}, merged (and checked) when compiled.
_NEEDS_COMPILER = frozenset({"$ref", "$id", "allOf", "not", "if", "then", "else", "unevaluatedProperties",
                             "unevaluatedItems", *DEPENDENCY_KEYWORDS})


def _anyof_pairs(a: list, b: list, path: str) -> list:
    """The branches of (anyOf a) and (anyOf b): every pair, less the pairs that accept nothing.

    Pairs of plain branches (type, bounds, const, properties...) are merged at once, so a
    contradiction (string and integer, two consts) drops the pair here instead of
    multiplying the branches of the next anyOf; other pairs stay {"allOf": [x, y]}.
    Raises UnsupportedSchemaError past MAX_ANYOF_COMBINATIONS pairs.
    """
    if not isinstance(a, list) or not isinstance(b, list):
        raise InvalidSchemaError(f"'anyOf' at {path} must be a non-empty array of schemas")
    pairs = []
    for x in a:
        for y in b:
            pair = _plain_merge(x, y, path)
            if pair is False:
                continue
            pairs.append(pair)
            if len(pairs) > MAX_ANYOF_COMBINATIONS:
                raise UnsupportedSchemaError(
                    f"'allOf' at {path}: its 'anyOf's combine into more than {MAX_ANYOF_COMBINATIONS} "
                    "branches (each anyOf multiplies the others); write the allowed combinations as one anyOf")
    return pairs


def _plain_merge(x, y, path: str):
    """x and y merged when both are plain schemas (False if they contradict), else {"allOf": [x, y]}."""
    plain = [{} if s is True else s if s is False else
             {k: v for k, v in s.items() if k not in ANNOTATION_KEYWORDS}
             if isinstance(s, dict) and not _NEEDS_COMPILER & s.keys() else None for s in (x, y)]
    if plain[0] is None or plain[1] is None:
        return {"allOf": [x, y]}
    try:
        return _merge(plain[0], plain[1], path)
    except UnsupportedSchemaError:  # e.g. two patterns: refused when (and if) the pair is compiled
        return {"allOf": [x, y]}


# Every keyword that constrains a value (the rest are annotations or unknown: ignored).
CONSTRAINING_KEYWORDS = frozenset({
    *(k for keywords in TYPE_KEYWORDS.values() for k in keywords), *UNSUPPORTED_KEYWORDS, *DEPENDENCY_KEYWORDS,
    "type", "enum", "const", "uniqueItems", "minContains", "maxContains", "anyOf", "oneOf", "allOf", "not", "if",
    "then", "else", "$ref", EXCLUDED_STRINGS, FRACTIONAL, NOT_AT, MORE_PATTERNS, NOT_PATTERNS})


def _both(x, y):
    """The schema {allOf: [x, y]}, simplified when one of them is `true`."""
    if x is True or x == {}:
        return y
    if y is True or y == {}:
        return x
    return {"allOf": [x, y]}


def _merge_properties(a: dict, b: dict, path: str) -> dict:
    """properties/additionalProperties of both: a key's value must satisfy both schemas.

    A key that one schema does not list falls under that schema's additionalProperties
    (absent: anything).
    """
    props_a, props_b = a.get("properties", {}), b.get("properties", {})
    extra_a, extra_b = a.get("additionalProperties", True), b.get("additionalProperties", True)
    properties = {name: _both(props_a.get(name, extra_a), props_b.get(name, extra_b))
                  for name in list(props_a) + [n for n in props_b if n not in props_a]}
    out = {"properties": properties} if properties else {}
    extra = _both(extra_a, extra_b)
    if extra is not True and extra != {}:
        out["additionalProperties"] = extra
    return out


def _merge_items(a: dict, b: dict, path: str) -> dict:
    """prefixItems/items of both: element i must satisfy both schemas' rule for position i."""
    for s in (a, b):
        if isinstance(s.get("items"), list):
            raise UnsupportedSchemaError(f"'allOf' at {path}: merging draft-7 tuple 'items' arrays is not supported")
    prefix_a, prefix_b = a.get("prefixItems", []), b.get("prefixItems", [])
    items_a, items_b = a.get("items", True), b.get("items", True)
    n = max(len(prefix_a), len(prefix_b))
    prefix = [_both(prefix_a[i] if i < len(prefix_a) else items_a, prefix_b[i] if i < len(prefix_b) else items_b)
              for i in range(n)]
    out = {"prefixItems": prefix} if prefix else {}
    items = _both(items_a, items_b)
    if items is not True and items != {}:
        out["items"] = items
    return out
