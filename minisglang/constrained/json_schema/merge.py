"""allOf: merging two schemas into one with the meaning of both."""

from __future__ import annotations

import json
from typing import Any, Literal

from minisglang.constrained.json_schema.errors import InvalidSchemaError, UnsupportedSchemaError
from minisglang.constrained.json_schema.keywords import (
    ANNOTATION_KEYWORDS,
    BRANCHES_AT,
    CONSTRAINING_KEYWORDS,
    DEPENDENCY_KEYWORDS,
    EXCLUDED_STRINGS,
    LISTED_PATTERNS,
    MORE_PATTERNS,
    NOT_AT,
    NOT_PATTERNS,
    _types_overlap,
)
from minisglang.constrained.json_schema.patterns import _searches
from minisglang.constrained.json_schema.values import _count, _json_equal

# contains and the counts that mean nothing without it beside them (merged by _merge_contains).
_CONTAINS = ("contains", "minContains", "maxContains")
_PROPERTIES = ("properties", "additionalProperties", "patternProperties", LISTED_PATTERNS)
# Keywords merged together with the others of their group (_merge_properties, _merge_items, _merge_contains).
_MERGED_BY_GROUP = (*_PROPERTIES, "prefixItems", "items", *_CONTAINS)
_TAKE_MAX = ("minLength", "minItems", "minimum", "exclusiveMinimum", "minProperties")
_TAKE_MIN = ("maxLength", "maxItems", "maximum", "exclusiveMaximum", "maxProperties")


def _merge(
    a: dict[str, Any] | Literal[False], b: dict[str, Any] | Literal[False], path: str
) -> dict[str, Any] | Literal[False]:
    """One schema that accepts exactly the values both accept (False: none), or an error.
    `a` and `b` are flattened or plain schemas: `true` is written {}."""
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
        elif keyword == "uniqueItems" and all(isinstance(x, bool) for x in (merged[keyword], value)):
            merged[keyword] = True  # (false constrains nothing: the other one's true holds)
        elif keyword == "enum":
            merged["enum"] = [x for x in merged["enum"] if any(_json_equal(x, y) for y in value)]
        elif keyword == "const":
            return False  # two different constants
        elif keyword in (EXCLUDED_STRINGS, MORE_PATTERNS, NOT_PATTERNS):
            merged[keyword] = sorted(set(merged[keyword]) | set(value))
        elif keyword == "pattern":  # both must match: kept for the string's intersection
            merged[MORE_PATTERNS] = sorted(set(merged.get(MORE_PATTERNS, [])) | {value})
        elif keyword in (NOT_AT, BRANCHES_AT):
            pass  # the first `not` names the place; anyOf's labels are settled below
        elif keyword == "anyOf":  # (a1 or a2) and (b1 or b2) = any of the pairs
            merged["anyOf"] = _anyof_pairs(merged["anyOf"], value, path)
            if not merged["anyOf"]:
                return False  # every pair contradicts
        elif keyword not in CONSTRAINING_KEYWORDS:
            pass  # an annotation or unknown keyword: ignored, whatever its values
        elif keyword not in _MERGED_BY_GROUP:
            raise UnsupportedSchemaError(
                f"'allOf' at {path}: two subschemas give '{keyword}' different values "
                f"({merged[keyword]!r} and {value!r}), which we cannot merge"
            )
    if "anyOf" in a and "anyOf" in b:  # the branches are pairs now: no one label names one
        merged.pop(BRANCHES_AT, None)
    for keywords, merge in (
        (_PROPERTIES, _merge_properties),
        (("prefixItems", "items"), _merge_items),
        (_CONTAINS, _merge_contains),
    ):
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
_NEEDS_COMPILER = frozenset(
    {
        "$ref",
        "$id",
        "allOf",
        "not",
        "if",
        "then",
        "else",
        "unevaluatedProperties",
        "unevaluatedItems",
        *DEPENDENCY_KEYWORDS,
    }
)


def _anyof_pairs(a: object, b: object, path: str) -> list[dict[str, Any]]:
    """The branches of (anyOf a) and (anyOf b): every pair, less the pairs that accept nothing.

    Pairs of plain branches (type, bounds, const, properties...) are merged at once, so a
    contradiction (string and integer, two consts) drops the pair here instead of
    multiplying the branches of the next anyOf; other pairs stay {"allOf": [x, y]}.
    Raises UnsupportedSchemaError past MAX_ANYOF_COMBINATIONS pairs.
    """
    if not isinstance(a, list) or not isinstance(b, list):
        raise InvalidSchemaError(f"'anyOf' at {path} must be a non-empty array of schemas")
    pairs, seen = [], set()
    for x in a:
        for y in b:
            pair = _plain_merge(x, y, path)
            if pair is False:
                continue
            # Two pairs that merged into one schema are one branch (A or A is A): the
            # negations of an if/then/else chain give many (codeship-steps.json's 156 pairs
            # were 40 schemas, and the next anyOf multiplied all 156).
            text = json.dumps(pair, sort_keys=True, default=repr)
            if text in seen:
                continue
            seen.add(text)
            pairs.append(pair)
            if len(pairs) > MAX_ANYOF_COMBINATIONS:
                raise UnsupportedSchemaError(
                    f"'allOf' at {path}: its 'anyOf's combine into more than {MAX_ANYOF_COMBINATIONS} "
                    "branches (each anyOf multiplies the others); write the allowed combinations as one anyOf"
                )
    return pairs


def _plain_merge(x: Any, y: Any, path: str) -> dict[str, Any] | Literal[False]:
    """x and y merged when both are plain schemas (False if they contradict), else {"allOf": [x, y]}."""
    plain = [
        {}
        if s is True
        else s
        if s is False
        else {k: v for k, v in s.items() if k not in ANNOTATION_KEYWORDS}
        if isinstance(s, dict) and not _NEEDS_COMPILER & s.keys()
        else None
        for s in (x, y)
    ]
    if plain[0] is None or plain[1] is None:
        return {"allOf": [x, y]}
    try:
        return _merge(plain[0], plain[1], path)
    except UnsupportedSchemaError:  # e.g. two patterns: refused when (and if) the pair is compiled
        return {"allOf": [x, y]}


def _both(x: Any, y: Any) -> Any:
    """The schema {allOf: [x, y]}, simplified when one of them is `true`. x and y are
    subschemas as the schema writes them: JSON values, checked when compiled."""
    if x is True or x == {}:
        return y
    if y is True or y == {}:
        return x
    return {"allOf": [x, y]}


def _merge_properties(a: dict[str, Any], b: dict[str, Any], path: str) -> dict[str, Any]:
    """properties/additionalProperties/patternProperties of both: a key's value must satisfy both schemas.

    A listed name gets what each schema asks of it: its `properties` entry there; else the
    schema's patternProperties that match it, if any; else its additionalProperties (absent:
    anything). Both schemas give the same patterns (a key then fits both schemas' values for
    each pattern it matches; other sets are refused, _same_patterns), or one gives none: then
    a key its patterns match and neither schema lists falls
    under the other's additionalProperties too (found by a stranger's differential fuzzing:
    allOf of {"additionalProperties": false} and {"patternProperties": {"^[0-9]+$": {}}} wrote
    {"1": 1}). That additionalProperties does not hold for the other schema's listed names,
    so the patterns without it are kept for them (LISTED_PATTERNS): with it, allOf of
    {"properties": {"x1": {}}, "additionalProperties": false} and {"patternProperties": {"^x": {}}}
    left x1 no value (schema_fuzz).
    """
    props_a, props_b = a.get("properties", {}), b.get("properties", {})
    extra_a, extra_b = a.get("additionalProperties", True), b.get("additionalProperties", True)
    patterns_a, patterns_b = a.get("patternProperties"), b.get("patternProperties")
    # the patterns that hold for listed names (without the other schema's additionalProperties)
    listed_a, listed_b = a.get(LISTED_PATTERNS, patterns_a), b.get(LISTED_PATTERNS, patterns_b)

    def asked(name: str, props: Any, patterns: Any, extra: Any) -> Any:
        """What one schema asks of the value of `name` beyond the patterns kept for listed names."""
        if name in props:
            return props[name]
        if isinstance(patterns, dict):
            matching = [s for p, s in patterns.items() if _searches(p, name, f"{path}/patternProperties")]
            if matching:  # (a merged schema's patterns for unlisted keys: its other extras too)
                return matching[0] if len(matching) == 1 else {"allOf": matching}
        return extra

    properties = {
        name: _both(asked(name, props_a, patterns_a, extra_a), asked(name, props_b, patterns_b, extra_b))
        for name in list(props_a) + [n for n in props_b if n not in props_a]
    }
    out: dict[str, Any] = {"properties": properties} if properties else {}
    if patterns_a is not None and patterns_b is not None:
        out["patternProperties"] = _same_patterns(patterns_a, patterns_b, path)
        listed = _same_patterns(listed_a, listed_b, path)
    elif isinstance(patterns_a, dict):
        out["patternProperties"] = {p: _both(schema, extra_b) for p, schema in patterns_a.items()}
        listed = listed_a
    elif isinstance(patterns_b, dict):
        out["patternProperties"] = {p: _both(schema, extra_a) for p, schema in patterns_b.items()}
        listed = listed_b
    else:
        listed = listed_a if listed_a is not None else listed_b
    if listed is not None and listed != out.get("patternProperties"):
        out[LISTED_PATTERNS] = listed
    extra = _both(extra_a, extra_b)
    if extra is not True and extra != {}:
        out["additionalProperties"] = extra
    return out


def _same_patterns(x: Any, y: Any, path: str) -> Any:
    """patternProperties of two schemas over the same patterns: a key a pattern matches must fit
    both schemas' values for it. (An allOf of a schema with additionalProperties and two with
    the same patterns was refused: the first merge had written that additionalProperties into
    its patterns, schema_fuzz.) Other sets of patterns are refused by name."""
    if x == y:
        return x
    if not isinstance(x, dict) or not isinstance(y, dict) or x.keys() != y.keys():
        raise UnsupportedSchemaError(
            f"'allOf' at {path}: two subschemas give 'patternProperties' different values "
            f"({x!r} and {y!r}), which we cannot merge"
        )
    return {p: _both(x[p], y[p]) for p in x}


def _merge_items(a: dict[str, Any], b: dict[str, Any], path: str) -> dict[str, Any]:
    """prefixItems/items of both: element i must satisfy both schemas' rule for position i."""
    for s in (a, b):
        if isinstance(s.get("items"), list):
            raise UnsupportedSchemaError(f"'allOf' at {path}: merging draft-7 tuple 'items' arrays is not supported")
    prefix_a, prefix_b = a.get("prefixItems", []), b.get("prefixItems", [])
    items_a, items_b = a.get("items", True), b.get("items", True)
    n = max(len(prefix_a), len(prefix_b))
    prefix = [
        _both(prefix_a[i] if i < len(prefix_a) else items_a, prefix_b[i] if i < len(prefix_b) else items_b)
        for i in range(n)
    ]
    out = {"prefixItems": prefix} if prefix else {}
    items = _both(items_a, items_b)
    if items is not True and items != {}:
        out["items"] = items
    return out


def _merge_contains(a: dict[str, Any], b: dict[str, Any], path: str) -> dict[str, Any]:
    """contains/minContains/maxContains of both: the count of items matching the one `contains`
    must fit both schemas' bounds (minContains 1 where a schema gives none).

    A minContains or maxContains without `contains` beside it constrains nothing (JSON
    Schema ignores it), so it is dropped, not applied to the other schema's `contains`:
    {"allOf": [{"minContains": 0}, {"contains": {"const": 1}}]} allowed [] (schema_fuzz).
    """
    sides = [s for s in (a, b) if "contains" in s]
    if not sides:
        return {}
    if len(sides) == 2 and not _json_equal(a["contains"], b["contains"]):
        raise UnsupportedSchemaError(
            f"'allOf' at {path}: two subschemas give 'contains' different values "
            f"({a['contains']!r} and {b['contains']!r}), which we cannot merge"
        )
    out: dict[str, Any] = {"contains": sides[0]["contains"]}
    lows = [_count(s, "minContains", path) for s in sides]
    if any(low is not None for low in lows):
        out["minContains"] = max(1 if low is None else low for low in lows)
    highs = [high for high in (_count(s, "maxContains", path) for s in sides) if high is not None]
    if highs:
        out["maxContains"] = min(highs)
    return out
