"""In-place applicators rewritten into one flat schema: $ref and allOf merged, `not` written
with positive keywords, if/then/else and dependencies as anyOf, unevaluated* as additional*."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from minisglang.constrained.json_pointer import pointer_token
from minisglang.constrained.json_schema.compiler_base import _CompilerBase
from minisglang.constrained.json_schema.errors import InvalidSchemaError, UnsupportedSchemaError
from minisglang.constrained.json_schema.keywords import (
    _NUMBER_BOUNDS,
    ANNOTATION_KEYWORDS,
    BRANCHES_AT,
    CONSTRAINING_KEYWORDS,
    DEPENDENCY_KEYWORDS,
    EXCLUDED_STRINGS,
    FRACTIONAL,
    JSON_TYPES,
    MORE_PATTERNS,
    NOT_AT,
    NOT_PATTERNS,
    _finite_values,
    _types,
)
from minisglang.constrained.json_schema.merge import _both, _merge
from minisglang.constrained.json_schema.values import _decimal


def _other_types(types: list[str]) -> list[str]:
    """The JSON types not in `types`, where `types` holds number whenever it holds integer."""
    assert "integer" not in types or "number" in types
    return [t for t in JSON_TYPES if t not in types and t != "integer" or (t == "integer" and "number" not in types)]


def _not_types(types: list[str], path: str) -> dict[str, Any]:
    """A schema for the values whose type is none of `types`."""
    if "integer" in types and "number" not in types:  # the numbers with a fraction remain
        return {
            "anyOf": [{"type": _other_types([*types, "number"])}, {"type": "number", FRACTIONAL: True, NOT_AT: path}]
        }
    return {"type": _other_types(types)}


# keyword -> (the type it constrains, its opposite bound as keywords; None: no value)
_OPPOSITE_BOUNDS: dict[str, tuple[str, Callable[[float], dict[str, float] | None]]] = {
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


def _excluding(values: list[object], path: str) -> dict[str, Any]:
    """A schema for every JSON value except `values` (scalars): per type, what is left."""
    if any(isinstance(v, (list, dict)) for v in values):
        raise UnsupportedSchemaError(
            f"keyword 'not' at {path}: excluding array or object values cannot be written exactly"
        )
    numbers = sorted({v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)})
    strings = sorted({v for v in values if isinstance(v, str)})
    booleans = [b for b in (True, False) if not any(v is b for v in values)]
    branches: list[dict[str, Any]] = [{"type": "object"}, {"type": "array"}]
    if not any(v is None for v in values):
        branches.append({"type": "null"})
    if booleans:
        branches.append({"enum": booleans})
    branches.append({"type": "string", EXCLUDED_STRINGS: strings, NOT_AT: path} if strings else {"type": "string"})
    # numbers: the open ranges between the excluded ones
    edges = [None, *numbers, None]
    for low, high in zip(edges, edges[1:]):
        branches.append(
            {
                "type": "number",
                **({} if low is None else {"exclusiveMinimum": low}),
                **({} if high is None else {"exclusiveMaximum": high}),
            }
        )
    return {"anyOf": branches}


def _dependency_cases(schema: dict[str, Any], path: str) -> list[dict[str, Any]]:
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
                raise InvalidSchemaError(
                    f"'{keyword}' at {where} must be an array of property names"
                    + ("" if keyword == "dependentRequired" else " or a schema")
                )
            cases.append({"anyOf": [{"properties": {name: False}}, present], BRANCHES_AT: [where, where]})
    return cases


# Keywords that apply subschemas to the same value: they may evaluate properties or items.
IN_PLACE_APPLICATORS = (
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "$ref",
    "$dynamicRef",
    "dependentSchemas",
    "dependencies",
)


def _unevaluated_as_additional(schema: dict[str, Any]) -> dict[str, Any]:
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


class _ApplicatorRules(_CompilerBase):
    """$ref, allOf, not, if/then/else and dependencies flattened (mixed into _SchemaCompiler)."""

    def flatten(
        self, schema: object, path: str, cut_deep_refs: bool = True
    ) -> tuple[dict[str, Any] | Literal[False], list[str]]:
        """Resolve top-level $ref and allOf by merging; return (schema or False, refs expanded).

        With `cut_deep_refs`, a $ref expanded max_ref_depth times already gives False (the
        recursion stops there); without, the result is the schema's exact meaning.
        """
        refs: list[str] = []
        return self._flatten(schema, path, refs, frozenset(), cut_deep_refs), refs

    def _flatten(
        self, schema: object, path: str, refs: list[str], chain: frozenset[str], cut: bool
    ) -> dict[str, Any] | Literal[False]:
        if schema is True or schema is False:
            return {} if schema else False
        if not isinstance(schema, dict):
            raise InvalidSchemaError(f"the schema at {path} must be an object or a boolean, got {schema!r}")
        if "$ref" in schema and self.ref_replaces_siblings:
            schema = {"$ref": schema["$ref"]}  # (a draft 7 schema: see `ref_replaces_siblings`)
        schema = _unevaluated_as_additional(schema)
        parts: list[dict[str, Any] | Literal[False]] = [
            {
                k: v
                for k, v in schema.items()
                if k not in ANNOTATION_KEYWORDS
                and k not in ("$ref", "allOf", "not", "if", "then", "else")
                and k not in DEPENDENCY_KEYWORDS
            }
        ]
        if "if" in schema:  # (if and then) or (not if and else): two disjoint cases
            condition = self._flatten(schema["if"], f"{path}/if", [], chain, False)
            otherwise = self.negation(condition, f"{path}/if")
            cases = {
                "anyOf": [_both(schema["if"], schema.get("then", True)), _both(otherwise, schema.get("else", True))],
                BRANCHES_AT: [
                    f"{path}/then" if "then" in schema else f"{path}/if",
                    f"{path}/else" if "else" in schema else f"{path}/if",
                ],
            }
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
            if cut and self.ref_depth(target_path) >= self.max_ref_depth:
                return False  # recursion unrolled max_ref_depth times: stop here
            if target_path not in refs:
                refs.append(target_path)
            parts.append(self._flatten(target, target_path, refs, chain | {target_path}, cut))
        if "allOf" in schema:
            subschemas = schema["allOf"]
            if not isinstance(subschemas, list) or not subschemas:
                raise InvalidSchemaError(f"'allOf' at {path} must be a non-empty array of schemas")
            parts.extend(self._flatten(s, f"{path}/allOf/{i}", refs, chain, cut) for i, s in enumerate(subschemas))
        merged = parts[0]
        for part in parts[1:]:
            merged = _merge(merged, part, path)
        return merged

    def negation(self, flat: dict[str, Any] | bool, path: str) -> dict[str, Any] | Literal[False]:
        """A schema for "not `flat`" (an exact, flattened schema), or UnsupportedSchemaError.

        not (k1 and k2 ...) = (not k1) or (not k2) ...: each keyword's negation is written
        with positive keywords: other types; values outside const/enum; a required
        property absent; the opposite bound; not (A or B) = (not A) and (not B).
        """
        if flat is False:
            return {}
        assert flat is not True  # flattened: `true` is written {}
        cases: list[dict[str, Any]] = []
        for keyword, value in flat.items():
            if keyword == "type":
                cases.append(_not_types(_types({"type": value}, path), path))
            elif keyword == FRACTIONAL:  # (other types satisfy it: their negation fails)
                cases.append({"type": "integer"})
            elif keyword == EXCLUDED_STRINGS:
                cases.append({"enum": list(value)})
            elif keyword in (NOT_AT, BRANCHES_AT):
                continue
            elif (keyword not in CONSTRAINING_KEYWORDS and keyword != "additionalItems") or (
                keyword in ("minContains", "maxContains") and "contains" not in flat
            ):
                # an unknown keyword (x-order, nullable, discriminator), or a count without its
                # contains, constrains nothing: every value satisfies it, so no value fails it
                # (additionalItems: refused with its items)
                continue
            elif keyword in ("pattern", MORE_PATTERNS):  # a string none of them... one of them misses
                for pattern in [value] if keyword == "pattern" else value:
                    cases.append({"type": "string", NOT_PATTERNS: [pattern], NOT_AT: path})
            elif keyword == NOT_PATTERNS:
                cases.extend({"type": "string", "pattern": pattern} for pattern in value)
            elif keyword in ("const", "enum"):
                values = _finite_values({keyword: value})
                if values is None:
                    raise InvalidSchemaError(f"'enum' at {path} must be an array, got {value!r}")
                cases.append(_excluding(values, path))
            elif keyword == "required":  # (other types satisfy `required`: their negation fails)
                cases.extend({"type": "object", "properties": {name: False}} for name in value)
            elif keyword in _OPPOSITE_BOUNDS:  # a value of the bound's type on the other side
                kind, opposite = _OPPOSITE_BOUNDS[keyword]
                if keyword in _NUMBER_BOUNDS:  # refused in the schema's own words, not the opposite's
                    _decimal(value, keyword, path)
                bound = opposite(value)
                if bound is not None:
                    cases.append({"type": kind, **bound})
            elif keyword == "properties" and isinstance(value, dict):  # an object with one of them failing
                for name, sub in value.items():
                    where = f"{path}/properties/{pointer_token(name)}"
                    failing = self.negation(self._flatten(sub, where, [], frozenset(), False), where)
                    if failing is not False:
                        cases.append({"type": "object", "required": [name], "properties": {name: failing}})
            elif keyword == "anyOf" and isinstance(value, list):
                cases.append(
                    {
                        "allOf": [
                            self.negation(
                                self._flatten(b, f"{path}/anyOf/{i}", [], frozenset(), False), f"{path}/anyOf/{i}"
                            )
                            for i, b in enumerate(value)
                        ]
                    }
                )
            else:
                raise UnsupportedSchemaError(
                    f"keyword 'not' at {path}: the negation of '{keyword}' cannot be "
                    "written exactly (supported: type, const, enum, required, bounds, "
                    "anyOf, pattern)"
                )
        if not cases:
            return False  # not {} (or of a keyword that every value satisfies): nothing
        return cases[0] if len(cases) == 1 else {"anyOf": cases}
