"""The keywords the compiler knows: JSON's types, the keywords of each type, the annotations it
ignores, the ones it refuses, and the private keywords it adds itself while rewriting `not`;
the types a schema's keywords allow."""

from __future__ import annotations

from typing import Any

from minisglang.constrained.json_schema.errors import InvalidSchemaError, UnsupportedSchemaError
from minisglang.constrained.json_schema.values import _json_type_of, _type_allows

JSON_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
# Keywords that only describe (or only hold subschemas for $ref): nothing to constrain.
ANNOTATION_KEYWORDS = frozenset(
    {
        "$schema",
        "$id",
        "$anchor",
        "$dynamicAnchor",
        "$comment",
        "$vocabulary",
        "$defs",
        "definitions",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "contentMediaType",
        "contentEncoding",
        "contentSchema",
    }
)
# Keywords that constrain values and that we do not implement: always an error.
UNSUPPORTED_KEYWORDS = frozenset(
    {
        "unevaluatedItems",
        "unevaluatedProperties",
        "$dynamicRef",
        "$recursiveRef",
        "$recursiveAnchor",
    }
)
# The keywords of each type; a schema without "type" gets the types whose keywords it uses.
TYPE_KEYWORDS = {
    "object": (
        "properties",
        "required",
        "additionalProperties",
        "minProperties",
        "maxProperties",
        "patternProperties",
        "propertyNames",
    ),
    "array": ("items", "prefixItems", "minItems", "maxItems", "contains"),
    "string": ("minLength", "maxLength", "pattern", "format"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
}


# The keywords that bound a number.
_NUMBER_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
DEPENDENCY_KEYWORDS = ("dependentRequired", "dependentSchemas", "dependencies")


# Strings excluded by a `not` of const/enum: an internal keyword, never in a user's schema.
EXCLUDED_STRINGS = "$minisglang:excludedStrings"


# Numbers with a fraction (not integers), for "not integer": an internal keyword too.
FRACTIONAL = "$minisglang:fractional"
# Where the `not` behind the two keywords above is, for error messages.
NOT_AT = "$minisglang:notAt"
# Where each branch of an anyOf the compiler wrote (if/then/else, dependencies) is in the
# user's schema, for error messages: `#/then/...`, not the internal `#/anyOf/0/...`.
BRANCHES_AT = "$minisglang:branchesAt"
# Patterns a string must also match (allOf of two `pattern`s), and must not match (`not`
# of a `pattern`): only the lazy automaton can write these (intersection, difference).
MORE_PATTERNS = "$minisglang:morePatterns"
NOT_PATTERNS = "$minisglang:notPatterns"
# The patternProperties that hold for a merged schema's listed properties: its own
# patternProperties may carry another allOf subschema's additionalProperties, which holds
# only for keys that subschema does not list (merge.py's _merge_properties).
LISTED_PATTERNS = "$minisglang:listedPatterns"


# Every keyword that constrains a value (the rest are annotations or unknown: ignored).
CONSTRAINING_KEYWORDS = frozenset(
    {
        *(k for keywords in TYPE_KEYWORDS.values() for k in keywords),
        *UNSUPPORTED_KEYWORDS,
        *DEPENDENCY_KEYWORDS,
        "type",
        "enum",
        "const",
        "uniqueItems",
        "minContains",
        "maxContains",
        "anyOf",
        "oneOf",
        "allOf",
        "not",
        "if",
        "then",
        "else",
        "$ref",
        EXCLUDED_STRINGS,
        FRACTIONAL,
        NOT_AT,
        BRANCHES_AT,
        MORE_PATTERNS,
        NOT_PATTERNS,
        LISTED_PATTERNS,
    }
)


def _check_keywords(schema: dict[str, Any], path: str) -> None:
    """Refuse every keyword we do not implement."""
    for keyword in schema:
        if keyword in UNSUPPORTED_KEYWORDS:
            raise UnsupportedSchemaError(f"keyword '{keyword}' at {path} is not supported")


def _declared_types(schema: dict[str, Any], path: str) -> set[str] | None:
    """The types a value of `schema` can have, as far as "type", const or enum say, and an
    anyOf/oneOf whose every branch says (the union of theirs); None: any."""
    types = None
    if "type" in schema:
        types = set(_types(schema, path))
    values = _finite_values(schema)
    if values is not None:
        value_types = {_json_type_of(v) for v in values}
        types = value_types if types is None else {t for t in value_types if _type_allows(types, t)}
    for keyword in ("anyOf", "oneOf"):
        branches = schema.get(keyword)
        if not isinstance(branches, list) or not branches or not all(isinstance(b, dict) for b in branches):
            continue
        union: set[str] = set()
        for i, branch in enumerate(branches):
            found = _declared_types(branch, f"{path}/{keyword}/{i}")
            if found is None:
                break
            union |= found
        else:
            # (both sides hold: an integer is a number, so {number} and {integer} leave {integer})
            types = (
                union
                if types is None
                else {t for t in union if _type_allows(types, t)} | {t for t in types if _type_allows(union, t)}
            )
    return types


def _types_overlap(a: set[str], b: set[str]) -> bool:
    return bool(a & b) or ("integer" in a and "number" in b) or ("number" in a and "integer" in b)


def _finite_values(schema: dict[str, Any]) -> list[Any] | None:
    if "const" in schema:
        return [schema["const"]]
    enum = schema.get("enum")
    if isinstance(enum, list):
        return enum
    return None


def _types(schema: dict[str, Any], path: str) -> list[str]:
    """The types to generate, in a fixed order: "type", or inferred from the keywords used."""
    if "type" in schema:
        declared = schema["type"]
        names = [declared] if isinstance(declared, str) else declared
        if not isinstance(names, list) or not all(isinstance(n, str) and n in JSON_TYPES for n in names):
            raise InvalidSchemaError(
                f"'type' at {path} must be one of {', '.join(JSON_TYPES)} or an array of them, got {declared!r}"
            )
        return [t for t in JSON_TYPES if t in names]
    used = [t for t, keywords in TYPE_KEYWORDS.items() if any(k in schema for k in keywords)]
    if not used:
        return [t for t in JSON_TYPES if t != "integer"]
    return used
