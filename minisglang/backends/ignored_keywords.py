"""What a library's JSON Schema support ignores, and the refusal that keeps a grammar whole.

A library that compiles a schema but skips a keyword hands back a WEAKER grammar: its
outputs may break the schema (xgrammar's `uniqueItems` -> `[1, 1]`). So each library
adapter (xgrammar_backend.py, outlines_backend.py, llguidance_backend.py) lists what its
library ignores, as `IgnoredKeyword` rules built from the predicates here, and refuses such
a schema by name (`IgnoredKeywordError`, with the keyword's JSON pointer) before compiling.
The shared schema rewrites the adapters use (a `format` as a `pattern`, a bare type as an
object schema) live here too. Read with chapters/05-backends.md.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ..constrained.json_pointer import resolve_pointer
from ..constrained.json_schema import FORMATS
from ..constrained.json_schema.keywords import _NUMBER_BOUNDS, ANNOTATION_KEYWORDS
from ..constrained.json_schema.string_chars import RAW_STRING_CHARACTERS, _intersect
from ..constrained.json_schema.values import _decimal as checked_number
from ..constrained.python_regex import complement, normalize, nullable
from ..constrained.regex_ast import Regex, alt, chars, concat, lit, repeat
from ..constrained.regex_dfa import RegexError, shown_regex
from ..constrained.regex_search import searches
from ..constrained.structural_tag import TriggerPrefixes
from ..constrained.work_slices import checkpoint
from .base import GrammarError

try:  # Python's own regex parser, to read a `pattern` as jsonschema's `re` does
    import re._parser as sre_parse  # Python >= 3.11
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse


class IgnoredKeywordError(GrammarError):
    """A schema refused because the backend's library would not enforce one of its keywords."""


# A schema object as `load_schema` reads it: keyword -> any JSON value (checked where used).
SchemaObject = dict[str, Any]
# The keywords that bound a number (the JSON Schema compiler's list, for the adapters' rules).
NUMBER_BOUNDS = _NUMBER_BOUNDS

# Keywords that say nothing about which values are valid: they may sit beside anything. Our
# compiler's annotations but two, which change how other keywords are read (`$dynamicAnchor`
# what a `$dynamicRef` resolves to, `$vocabulary` which keywords apply): not counted here.
ANNOTATIONS = (ANNOTATION_KEYWORDS - {"$dynamicAnchor", "$vocabulary"}) | {
    "discriminator"  # OpenAPI's, beside Pydantic's tagged unions: JSON Schema ignores it
}
# Where subschemas live: a map of them, one of them, or a list of them (draft 2020-12 and 7).
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas", "dependencies")
_SCHEMA_ONE = (
    "items",
    "additionalItems",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
)
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems", "items")


@dataclass(frozen=True)
class IgnoredKeyword:
    """`keyword` is compiled but not enforced where `applies(subschema)` holds (the subschema
    that holds the keyword); `how` finishes the sentence "does not enforce 'keyword' ..."."""

    keyword: str
    how: str = ""
    applies: Callable[[SchemaObject], bool] = lambda schema: True
    below_root: bool = False  # applies only in subschemas, not at the root


def json_pointer(pointer: str, name: str | int) -> str:
    """`pointer` + one more step, escaped as RFC 6901 says (`~` -> `~0`, `/` -> `~1`)."""
    return f"{pointer}/{str(name).replace('~', '~0').replace('/', '~1')}"


def subschemas(schema: SchemaObject, pointer: str) -> Iterator[tuple[SchemaObject, str]]:
    """(subschema, its JSON pointer) for each schema object directly inside `schema`."""
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            for name, sub in value.items():
                if isinstance(sub, dict):  # (draft 7 `dependencies` maps to lists too)
                    yield sub, json_pointer(json_pointer(pointer, key), name)
        elif key in _SCHEMA_ONE and isinstance(value, dict):
            yield value, json_pointer(pointer, key)
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            for i, sub in enumerate(value):
                if isinstance(sub, dict):
                    yield sub, json_pointer(json_pointer(pointer, key), i)


def rewrite_subschemas(schema: Any, rewrite: Callable[[SchemaObject, str], SchemaObject], pointer: str = "#") -> Any:
    """A copy of `schema` in which every schema object, innermost first, is replaced by
    `rewrite(its copy, its JSON pointer)`; `schema` itself is left as it was."""
    if not isinstance(schema, dict):
        return schema
    checkpoint()
    out = dict(schema)
    for key, value in schema.items():
        where = json_pointer(pointer, key)
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {
                name: rewrite_subschemas(sub, rewrite, json_pointer(where, name)) for name, sub in value.items()
            }
        elif key in _SCHEMA_ONE and isinstance(value, dict):
            out[key] = rewrite_subschemas(value, rewrite, where)
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [rewrite_subschemas(sub, rewrite, json_pointer(where, i)) for i, sub in enumerate(value)]
    return rewrite(out, pointer)


def find_ignored_keyword(
    schema: Any, ignored: tuple[IgnoredKeyword, ...], pointer: str = "#", root: Any = None
) -> tuple[IgnoredKeyword, str] | None:
    """The first (rule, JSON pointer) of `ignored` that applies somewhere in `schema`, or None.

    Every subschema counts, `$defs` included: a walk, not a text search, so a property
    named "uniqueItems" or an enum value "not" is not mistaken for the keyword. A rule reads
    a subschema with its `oneOf` branches' local `$ref`s followed (`branches_followed`)."""
    if not isinstance(schema, dict):
        return None
    checkpoint()  # (a compile thread's timeout and cancel stop here)
    root = schema if root is None else root
    view = branches_followed(schema, root)
    for rule in ignored:
        if rule.keyword in schema and (pointer != "#" or not rule.below_root) and rule.applies(view):
            return rule, pointer
    for sub, where in subschemas(schema, pointer):
        found = find_ignored_keyword(sub, ignored, where, root)
        if found:
            return found
    return None


def branches_followed(schema: SchemaObject, root: Any) -> SchemaObject:
    """`schema` with each `oneOf` branch that is only a local `$ref` (annotations aside)
    replaced by what it points to in `root`, following up to 8 such hops: Pydantic writes a
    tagged union's branches as `$ref`s into `$defs`, and a rule that compares branches
    (`overlapping_branches`) saw no tags in them (xgrammar refused every such model)."""
    branches = schema.get("oneOf")
    if not isinstance(branches, list):
        return schema

    def follow(branch: Any) -> Any:
        for _ in range(8):
            ref = branch.get("$ref") if isinstance(branch, dict) else None
            if not (isinstance(ref, str) and ref.startswith("#") and set(branch) - ANNOTATIONS == {"$ref"}):
                break
            target = resolve_pointer(root, ref)
            if not isinstance(target, dict):
                break
            branch = target
        return branch

    return {**schema, "oneOf": [follow(b) for b in branches]}


# Conditions the adapters' lists share (each takes the subschema holding the keyword).
def beside(*others: str) -> Callable[[SchemaObject], bool]:
    """The keyword sits beside one of `others`."""
    return lambda schema: any(k in schema for k in others)


def beside_validation(keyword: str, allowed: frozenset[str] = frozenset()) -> Callable[[SchemaObject], bool]:
    """The keyword sits beside a keyword that validates (not an annotation, not in `allowed`)."""
    return lambda schema: any(k not in ANNOTATIONS and k not in allowed and k != keyword for k in schema)


def value_holds(keyword: str, test: Callable[[Any], bool]) -> Callable[[SchemaObject], bool]:
    """The keyword's value passes `test` (`"anyOf": []` for an empty list)."""
    return lambda schema: test(schema[keyword])


def _empty_list(value: Any) -> bool:
    return isinstance(value, list) and not value


# An empty enum, anyOf, oneOf, allOf or type list accepts no value (or is not a schema at
# all), and a library that compiles it anyway writes some text: `""`, `{"a": }` or a whole
# object with finish_reason "stop" (a stranger's attack, 2026-12-04). The fsm backend and
# llguidance refuse these themselves; the adapters of the others list them as ignored.
EMPTY_ARRAYS = tuple(
    IgnoredKeyword(
        k, "when its array is empty (it accepts no value; the library writes one anyway)", value_holds(k, _empty_list)
    )
    for k in ("enum", "anyOf", "oneOf", "allOf", "type")
)


def holds_inexact_integer(value: Any) -> bool:
    """Whether `value` (a number, or a const/enum value) holds an integer past 2**53, where
    not every integer is a double."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return abs(value) > 2**53
    if isinstance(value, list):
        return any(map(holds_inexact_integer, value))
    if isinstance(value, dict):
        return any(map(holds_inexact_integer, value.values()))
    return False


def holds_inexact_bound(value: Any) -> bool:
    """Whether a number bound is an integer past 2**53 or a float of at least 2**53: the
    integers near it are not all doubles (llguidance held `exclusiveMaximum: 1e16` on an
    integer as inclusive and wrote 10000000000000000; a stranger's fuzzer)."""
    return holds_inexact_integer(value) or (isinstance(value, float) and math.isfinite(value) and abs(value) >= 2**53)


# xgrammar and llguidance read a schema's numbers as doubles: `const 9007199254740993` came
# out 9007199254740992, a const past int64 `9.223372036854776e+18` (a stranger's fuzzing).
INEXACT_INTEGERS = tuple(
    IgnoredKeyword(
        k, "holding an integer past 2**53 (it reads the number as a double)", value_holds(k, holds_inexact_integer)
    )
    for k in ("const", "enum", *NUMBER_BOUNDS, "multipleOf")
)
INEXACT_BOUNDS = tuple(
    IgnoredKeyword(
        k, "of at least 2**53 (the integers near it are not all doubles)", value_holds(k, holds_inexact_bound)
    )
    for k in NUMBER_BOUNDS
)


def requires_unlisted(schema: SchemaObject) -> bool:
    """`required` names a property that `properties` does not list."""
    listed = set(listed_names(schema))
    return isinstance(schema["required"], list) and any(name not in listed for name in schema["required"])


def listed_names(schema: SchemaObject) -> list[str]:
    """The names `properties` lists (none where it is not a map)."""
    properties = schema.get("properties")
    return list(properties) if isinstance(properties, dict) else []


def allows_keys(schema: SchemaObject, keyword: str, absent: bool = False) -> bool:
    """Whether `keyword` (additionalProperties, unevaluatedProperties) lets some key through:
    anything but `false` (`absent`: what the library reads when it is not written)."""
    return schema.get(keyword, absent) is not False


def is_raw_name(name: str) -> bool:
    """Whether JSON writes `name` with no escape: none of `"`, `\\`, U+0000-U+001F in it."""
    return all(any(lo <= ord(c) <= hi for lo, hi in RAW_STRING_CHARACTERS) for c in name)


def escaped_name_as_extra_key(schema: SchemaObject) -> bool:
    """A name JSON writes only escaped that an object here must take as an extra key: one that
    this object or an `allOf` branch of it requires, where an object that lists properties,
    not that name, allows extra keys. The adapters keep such an object's extra keys to raw
    names (`unlisted_raw_names`), so the name could not be written (llguidance then called
    the schema unsatisfiable: a stranger's fuzzer, `"required": ["\\n"]` beside `properties`)."""
    branches = schema.get("allOf")
    objects = [schema, *(b for b in branches if isinstance(b, dict))] if isinstance(branches, list) else [schema]
    needed = {
        name
        for o in objects
        if isinstance(o.get("required"), list)
        for name in o["required"]
        if isinstance(name, str) and not is_raw_name(name)
    }
    return any(
        listed_names(o) and allows_keys(o, "additionalProperties", absent=True) and not needed <= set(listed_names(o))
        for o in objects
    )


_Trie = dict[str, "_Trie"]  # (a letter -> the names' trie below it; "" -> {}: a name ends here)


def unlisted_raw_names(names: list[str], longest: int) -> Regex:
    """Every name of raw characters (none of `"`, `\\`, U+0000-U+001F, which JSON writes only
    escaped) but `names`, as a regex over the name, which is also its JSON text: the extra keys
    the xgrammar and llguidance adapters let through, as their libraries matched a key against
    the listed names as spelled (`"\\u0061"` was an extra key, read as `a` by every JSON
    parser: a stranger's fuzzer). A trie of the names: each node's options a step off the trie
    (then any raw characters) or down one letter, and the node itself where no name ends there.
    (A name that needs an escape no raw name equals.) The pattern nests a few groups per letter
    of a name: a listed name longer than `longest` (the library's limit) is refused by name,
    not in words about a regex the user never wrote."""
    long = next((name for name in names if len(name) > longest and is_raw_name(name)), None)
    if long is not None:
        raise GrammarError(
            f"the property name {shown_regex(long, 40)} is longer than the {longest} characters "
            "this backend's pattern for the object's other keys can leave out (they are kept to names written "
            "without escapes); set 'additionalProperties' to false there, or use the 'fsm' grammar backend"
        )
    trie: _Trie = {}
    for name in names:
        if is_raw_name(name):
            node = trie
            for c in name:
                node = node.setdefault(c, {})
            node[""] = {}  # (a name ends here)
    rest = repeat(chars(RAW_STRING_CHARACTERS), 0, None)

    def body(node: _Trie) -> Regex | None:
        letters = sorted(c for c in node if c)
        off = _intersect(RAW_STRING_CHARACTERS, list(complement(normalize((ord(c), ord(c)) for c in letters))))
        options = [concat(chars(off), rest) if off else None, *(concat(lit(c), body(node[c])) for c in letters)]
        return alt(options) if "" in node else repeat(alt(options), 0, 1)

    whole = body(trie)
    assert whole is not None  # (a raw name off the trie is always left)
    return whole


def pattern_meets_listed_name(schema: SchemaObject) -> bool:
    """A `patternProperties` pattern matches a name `properties` lists (both then apply to
    it), or cannot be read by our automata (so we cannot tell). Decided by our automaton, not
    Python's `re`, which backtracked for minutes on one name (regex_search.py)."""
    listed = listed_names(schema)
    patterns = schema["patternProperties"] if isinstance(schema["patternProperties"], dict) else {}
    for pattern in patterns:
        try:
            if any(searches(pattern, name) for name in listed):
                return True
        except RegexError:
            return True
    return False


_JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "object": dict,
    "array": list,
    "null": type(None),
}


def number_bound(schema: SchemaObject, *keywords: str) -> float | None:
    """The first of `keywords` (minimum, exclusiveMaximum, ...) that `schema` has as a JSON
    number (not a boolean), or None."""
    for k in keywords:
        value = schema.get(k)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
    return None


def parsed_pattern(pattern: str) -> Any:
    """Python's parse of `pattern` (sre's items; its FutureWarnings about other engines'
    syntax ignored), or None when Python cannot read it: a rule then leaves it to the
    library's compile, which says what is wrong with it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return sre_parse.parse(pattern)
    except (re.error, OverflowError, RecursionError):
        return None


def repeats_a_nullable_part(pattern: str) -> bool:
    """Whether `pattern` repeats (more than once) a part that can match the empty string,
    `(?:[a-z]?)+` or `(?:[a-z]?b?)*` (xgrammar's mask then slows with every token)."""

    def visit(items: Any) -> bool:
        for op, arg in items:
            if op in (sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT):
                if arg[1] > 1 and nullable(arg[2]):  # (python_regex's reading, which xgrammar's rewrite uses)
                    return True
                if visit(arg[2]):
                    return True
            elif op is sre_parse.SUBPATTERN and visit(arg[3]):
                return True
            elif op is sre_parse.BRANCH and any(visit(b) for b in arg[1]):
                return True
        return False

    items = parsed_pattern(pattern)
    return items is not None and visit(items)


def pattern_rules(keyword_how: str, test: Callable[[str], bool]) -> tuple[IgnoredKeyword, IgnoredKeyword]:
    """The rules for a `pattern`, and a `patternProperties` key, that `test` says a library
    gets wrong (`keyword_how`: how, as IgnoredKeyword's `how`)."""
    return (
        IgnoredKeyword("pattern", keyword_how, lambda s: isinstance(s["pattern"], str) and test(s["pattern"])),
        IgnoredKeyword(
            "patternProperties",
            keyword_how,
            lambda s: isinstance(s["patternProperties"], dict) and any(map(test, s["patternProperties"])),
        ),
    )


def inclusive_number_bounds(
    schema: SchemaObject, pointer: str, inner: Callable[[float, bool], Decimal], held: str
) -> SchemaObject:
    """`rewrite_subschemas` step (with `functools.partial` for `inner` and `held`): a number
    schema's bounds as inclusive ones a library holds as validators do. A library compares a
    number's decimal TEXT with a bound, validators its DOUBLE: a text with more digits than a
    double keeps can round onto an exclusive bound (1.00000000000000001 under exclusiveMinimum
    1 reads as 1.0; xgrammar's 100000000000.000001 under exclusiveMinimum 1e11). So an exclusive
    bound becomes the next double inwards, inclusive; `inner(value, upwards)` then writes a
    bound as the decimal the library holds exactly, rounded inwards (`upwards` for a lower
    bound). Every text on the inner side of it reads as a double inside the schema's bound.
    A schema of integers only keeps its bounds: an integer's text reads exactly in Python.
    Bounds that leave no number the library can hold are refused (`held` says which)."""
    types = schema.get("type", "number")
    if "number" not in (types if isinstance(types, list) else [types]):
        return schema

    def tightest(inclusive: str, exclusive: str, upwards: bool) -> Decimal | None:
        found = []
        for keyword in (inclusive, exclusive):
            if (value := number_bound(schema, keyword)) is None:
                continue
            checked_number(value, keyword, pointer)  # (1e999 reads as infinity: refused by name, as the fsm does)
            if keyword == exclusive:
                value = math.nextafter(float(value), math.inf if upwards else -math.inf)
            found.append(inner(float(value), upwards))
        return (max if upwards else min)(found) if found else None

    low = tightest("minimum", "exclusiveMinimum", upwards=True)
    high = tightest("maximum", "exclusiveMaximum", upwards=False)
    if low is not None and high is not None and low > high:
        raise GrammarError(
            f"the number bounds at {pointer} leave no number between them {held}; use the 'fsm' grammar "
            f"backend for this schema"
        )
    for keyword, value in (("minimum", low), ("maximum", high)):
        if value is not None:
            exclusive = "exclusiveM" + keyword[1:]
            if number_bound(schema, exclusive) is not None:  # (a draft-4 `true` stays for the library to read)
                del schema[exclusive]
            schema[keyword] = float(value)  # (`inner` gives decimals whose double's shortest text is themselves)
    return schema


def is_whole(value: object) -> bool:
    """A JSON number with no fraction (2 and 2.0; not true)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer()


def values_outside_type(schema: SchemaObject) -> bool:
    """`enum`/`const` beside anything but `type`, or a value of another type (libraries
    write the listed values and skip the rest of the schema)."""
    if any(k not in ANNOTATIONS and k not in ("type", "enum", "const") for k in schema):
        return True
    if "type" not in schema:
        return False
    types = [schema["type"]] if isinstance(schema["type"], str) else schema["type"]
    values = [schema["const"]] if "const" in schema else schema.get("enum") or []

    def has(value: object, t: str) -> bool:
        if t == "integer":
            return is_whole(value)
        return isinstance(value, _JSON_TYPES.get(t, ())) and (t == "boolean" or not isinstance(value, bool))

    return not all(any(has(v, t) for t in types) for v in values)


def repeated_keys_may_count(schema: SchemaObject, absent_open: bool = False) -> bool:
    """`minProperties` asks for more keys than the required ones while keys the schema does
    not list may be written: a grammar counts `{"a": 1, "a": 2}` as two, a parser keeps one
    (xgrammar and llguidance allowed it; the fsm backend refuses the same shape itself).
    Where `additionalProperties` is not written, an object that lists properties takes no
    other key in xgrammar, and any key in llguidance (`absent_open`), as JSON Schema says."""
    least, required = schema["minProperties"], schema.get("required", [])
    unlisted = "patternProperties" in schema or allows_keys(
        schema, "additionalProperties", absent=absent_open or "properties" not in schema
    )
    # (one key is one key, repeated or not: only two or more can be miscounted)
    return isinstance(least, int) and isinstance(required, list) and least > max(1, len(set(required))) and unlisted


_REPEATED_KEYS_HOW = "beyond the required properties where unlisted keys may be written (a repeated key counts twice)"
REPEATED_KEYS = IgnoredKeyword("minProperties", _REPEATED_KEYS_HOW, repeated_keys_may_count)
# (llguidance writes unlisted keys where additionalProperties is not written: `{"a": 1, "x": 1,
# "x": 2}` met minProperties 3 beside one listed property, a stranger's fuzzer found)
REPEATED_KEYS_ABSENT_OPEN = IgnoredKeyword(
    "minProperties", _REPEATED_KEYS_HOW, lambda schema: repeated_keys_may_count(schema, absent_open=True)
)


def not_a_local_pointer(schema: SchemaObject) -> bool:
    """`$ref` is not `#` or a `#/...` JSON pointer (an anchor, a relative or remote URI)."""
    ref = schema["$ref"]
    return not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/"))


def recursive_ref(schema: Any) -> str | None:
    """The JSON pointer of a local `$ref` that leads back into itself (a recursive schema:
    a tree, a linked list), or None. Each `#...` target's subtree is followed through the
    `$ref`s inside it; a target met again on the way closes a cycle."""
    if not isinstance(schema, dict):
        return None
    refs: dict[str, list[tuple[str, str]]] = {}  # pointer -> (pointer of each local $ref below it, its target)

    def collect(node: SchemaObject, pointer: str) -> list[tuple[str, str]]:
        found = []
        ref = node.get("$ref")
        if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
            found.append((json_pointer(pointer, "$ref"), ref))
        for sub, at in subschemas(node, pointer):
            found += collect(sub, at)
        refs[pointer] = found
        return found

    collect(schema, "#")
    on_path: set[str] = set()
    done: set[str] = set()

    def follow(target: str) -> str | None:
        if target in done or target not in refs:  # (a pointer to no schema: the compiler's to refuse)
            return None
        on_path.add(target)
        for where, next_target in refs[target]:
            if next_target in on_path:
                return where
            closing = follow(next_target)
            if closing is not None:
                return closing
        on_path.discard(target)
        done.add(target)
        return None

    return follow("#")


def _value_key(value: Any) -> str:
    """Equal JSON values get equal keys (1 and 1.0 are one number, inside arrays and objects
    too: `[1]` and `[1.0]` are one value, a stranger found; true is not 1)."""
    return json.dumps(_numbers_as_floats(value), sort_keys=True)


def _numbers_as_floats(value: Any) -> Any:
    """`value` with every number a float (and tagged, so the string "1.0" stays apart)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return ["number", float(value) + 0.0]  # (+ 0.0: -0.0 is 0, one number to JSON Schema)
        except OverflowError:  # an integer past the double's range: itself
            return ["number", value]
    if isinstance(value, list):
        return [_numbers_as_floats(v) for v in value]
    if isinstance(value, dict):
        return {k: _numbers_as_floats(v) for k, v in value.items()}
    return value


def _branch_values(branch: Any) -> frozenset[str] | None:
    """The keys of the only values `branch` allows (its const or enum), or None."""
    if not isinstance(branch, dict):
        return None
    if "const" in branch:
        return frozenset([_value_key(branch["const"])])
    if isinstance(branch.get("enum"), list):
        return frozenset(_value_key(v) for v in branch["enum"])
    return None


def _declared_types(schema: Any) -> set[str] | None:
    """The types `schema`'s `type` names, as written (None: no `type`)."""
    if not isinstance(schema, dict) or "type" not in schema:
        return None
    return {schema["type"]} if isinstance(schema["type"], str) else set(schema["type"])


def _branch_types(branch: Any) -> frozenset[str] | None:
    """The JSON types `branch` allows (from `type`; an integer is a number), or None."""
    types = _declared_types(branch)
    if types is None:
        return None
    return frozenset(types | {"number"} if "integer" in types else types)


@dataclass(frozen=True)
class _Branch:
    """What `_disjoint` reads of one `oneOf` branch, computed once per branch: its types,
    its values, and the values of each required property that has a const or enum (a tag)."""

    types: frozenset[str] | None
    values: frozenset[str] | None
    tags: dict[str, frozenset[str]]

    @staticmethod
    def of(branch: Any) -> _Branch:
        tags: dict[str, frozenset[str]] = {}
        types = _branch_types(branch)
        # A required property tells objects apart only: a branch that allows another type
        # has values no tag reads (two `"type": "string"` branches with different tags
        # both hold every string; a stranger's xgrammar wrote `", "` under such a oneOf).
        if types == frozenset(["object"]) and isinstance(branch, dict) and isinstance(branch.get("properties"), dict):
            for name in branch.get("required") or []:
                values = _branch_values(branch["properties"].get(name)) if isinstance(name, str) else None
                if values is not None:
                    tags[name] = values
        return _Branch(types, _branch_values(branch), tags)


def _disjoint(a: _Branch, b: _Branch) -> bool:
    """True if no value can satisfy both branches, by their types, their values, or a
    required property whose values differ (a tagged union: {"kind": {"const": "a"}})."""
    if a.types is not None and b.types is not None and not a.types & b.types:
        return True
    if a.values is not None and b.values is not None and not a.values & b.values:
        return True
    return any(not a.tags[name] & b.tags[name] for name in a.tags.keys() & b.tags.keys())


def type_outside_branches(schema: SchemaObject) -> bool:
    """`type` beside `anyOf` or `oneOf` with a branch that allows a type outside it: the
    libraries read the branches alone (`{"type": "string", "anyOf": [{"type": "integer"}, ...]}`
    wrote 18 on xgrammar and outlines-core)."""
    outer = _declared_types(schema)
    if outer is None:
        return False
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        for branch in branches if isinstance(branches, list) else []:
            inner = None if branch is True else set() if branch is False else _declared_types(branch)
            if inner is None or any(t not in outer and not (t == "integer" and "number" in outer) for t in inner):
                return True
    return False


def type_is_not(kind: str) -> Callable[[SchemaObject], bool]:
    """The keyword sits beside a `type` that is not exactly `kind`."""
    return lambda schema: "type" in schema and _declared_types(schema) != {kind}


# A `oneOf` of more branches than this whose values or tags do not tell them apart is not
# compared pair by pair (it is taken as overlapping, so refused): a stranger's 3,000 consts
# took 30 s of a compile thread, 20,000 would have taken 50 minutes.
MAX_COMPARED_BRANCHES = 256
# How the adapters' rule for `oneOf` reads ("does not enforce 'oneOf' ...").
ONE_OF_OVERLAP = (
    f"with branches that may overlap, or more than {MAX_COMPARED_BRANCHES} that no value or required "
    "const tells apart (it checks 'anyOf' instead)"
)


def overlapping_branches(schema: SchemaObject) -> bool:
    """`oneOf` has two branches we cannot show disjoint: "exactly one" is then not "any".

    Linear where the branches' values or one tag set them apart (consts, enums, a tagged
    union): only branches sharing a value or a tag value can overlap, found by an index of
    them. Else pair by pair, up to MAX_COMPARED_BRANCHES branches."""
    branches = [_Branch.of(b) for b in (schema["oneOf"] if isinstance(schema["oneOf"], list) else [])]
    checkpoint()
    tags = set.intersection(*(set(b.tags) for b in branches)) if branches else set()
    separators: list[list[frozenset[str] | None]] = [[b.values for b in branches]]
    separators += [[b.tags[name] for b in branches] for name in sorted(tags)]
    for keys in separators:
        if all(k is not None for k in keys):
            for n, (i, j) in enumerate(_sharing(keys)):
                if n > MAX_COMPARED_BRANCHES**2 // 2 or not _disjoint(branches[i], branches[j]):
                    return True
            return False
    if len(branches) > MAX_COMPARED_BRANCHES:
        return True
    for i, a in enumerate(branches):
        checkpoint()
        if any(not _disjoint(a, b) for b in branches[i + 1 :]):
            return True
    return False


def _sharing(keys: Sequence[frozenset[str] | None]) -> Iterator[tuple[int, int]]:
    """The pairs (i, j), i < j, whose key sets share a key (each pair once, or more)."""
    holders: dict[str, list[int]] = {}
    for i, own in enumerate(keys):
        for key in own or ():
            for j in holders.setdefault(key, []):
                checkpoint()
                yield j, i
            holders[key].append(i)


def refuse_ignored_keywords(schema: Any, ignored: tuple[IgnoredKeyword, ...], library: str, backend: str) -> None:
    """Raise GrammarError naming the keyword, where it is and the backend, if `library`
    would ignore a keyword of `schema`; the fsm backend enforces or refuses every keyword itself."""
    found = find_ignored_keyword(schema, ignored)
    if found:
        raise ignored_keyword_error(*found, library, backend)


def ignored_keyword_error(rule: IgnoredKeyword, pointer: str, library: str, backend: str) -> IgnoredKeywordError:
    """The refusal of a schema whose `rule.keyword` at `pointer` `library` would not enforce."""
    how = f" {rule.how}" if rule.how else ""
    return IgnoredKeywordError(
        f"{library} does not enforce {rule.keyword!r}{how} (at {pointer}), so the "
        f"{backend!r} backend refuses this schema rather than generate output that breaks "
        f"it; use the 'fsm' grammar backend for this schema"
    )


def refuse_unused_triggers(
    triggers: Sequence[str], begins: Sequence[str], library: str, noun: str = "structure", where: str = ""
) -> None:
    """Raise GrammarError if a trigger starts none of `begins` (the tags' begin strings): the
    libraries' grammars keep only the triggers that start a tag out of the free text
    (llguidance wrote the unused trigger " " into free text under finish_reason stop; xgrammar
    failed an internal check). `where`: the field path of the triggers (v2's format)."""
    prefixes = TriggerPrefixes(triggers)
    used = {t for b in begins for t in prefixes.starting(b)}
    unused = [t for t in triggers if t not in used]
    if unused:
        raise GrammarError(
            f"{where + '.triggers: ' if where else ''}trigger {unused[0]!r} begins no {noun}: {library} cannot "
            "keep it out of the free text; drop it from 'triggers', or use the 'fsm' grammar backend"
        )


def as_object_schema(schema: Any) -> Any:
    """A boolean schema as an object (`true` as `{}`, `false` as `{"not": {}}`), for libraries
    that read only objects; any other schema as it is."""
    return {"not": {}} if schema is False else {} if schema is True else schema


def format_as_pattern(schema: SchemaObject, pointer: str) -> SchemaObject:
    """`rewrite_subschemas` step: a `format` the fsm backend knows becomes the `pattern` of
    its strings (FORMATS, ASCII, each match accepted by jsonschema's FormatChecker). The
    libraries' own formats let through what the format forbids (outlines-core: a raw `"` in a
    `uri`, Unicode digits in a `date`; xgrammar: an `ipv4` with leading zeros; llguidance:
    a leap second at any minute), so every backend writes the same, checked, strings. Any
    other format is refused where a string may carry it, as the fsm backend refuses it."""
    fmt = schema.get("format")
    if not isinstance(fmt, str):
        return schema
    if fmt not in FORMATS:
        types = schema.get("type")
        if types is not None and "string" not in (types if isinstance(types, list) else [types]):
            del schema["format"]  # on no string it asserts nothing (OpenAPI's `int32`), as in the fsm backend
            return schema
        # refused as the fsm backend refuses it (xgrammar read `idn-email` as an annotation and
        # wrote `": {"` under stop: a stranger's fuzzer)
        raise GrammarError(f"'format': {fmt!r} at {pointer} is not supported (supported: {', '.join(sorted(FORMATS))})")
    if "pattern" in schema:
        raise GrammarError(
            f"'format' {fmt!r} beside 'pattern' (at {pointer}) needs both enforced at once, "
            "which this backend cannot do; use the 'fsm' grammar backend for this schema"
        )
    del schema["format"]
    schema["pattern"] = f"^(?:{FORMATS[fmt]})$"
    return schema
