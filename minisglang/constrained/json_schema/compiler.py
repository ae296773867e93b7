"""The schema compiler: one flattened schema -> its regex, by type (the rules of the other
modules put together), anyOf/oneOf and const/enum."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from minisglang.constrained.json_schema.applicators import _ApplicatorRules
from minisglang.constrained.json_schema.arrays import _ArrayRules
from minisglang.constrained.json_schema.budget import tick
from minisglang.constrained.json_schema.errors import InvalidSchemaError, UnsupportedSchemaError
from minisglang.constrained.json_schema.keywords import (
    BRANCHES_AT,
    _check_keywords,
    _declared_types,
    _finite_values,
    _types,
    _types_overlap,
)
from minisglang.constrained.json_schema.numbers import _NumberRules, _unbounded_number
from minisglang.constrained.json_schema.objects import _ObjectRules
from minisglang.constrained.json_schema.options import SchemaOptions
from minisglang.constrained.json_schema.regex_parts import Regex, _alt, _concat, lit
from minisglang.constrained.json_schema.string_chars import STRING
from minisglang.constrained.json_schema.strings import _StringRules
from minisglang.constrained.json_schema.values import (
    _json_equal,
    _json_type_of,
    _literal,
    _type_allows,
    _whole_as_int,
)

# `_any_value`'s trees by (nesting, whitespace, options), as compiles made them: every
# schema with an unconstrained value (`{}`, an array's missing `items`) needs the same one.
ANY_VALUES: dict[tuple[int, Regex, SchemaOptions], Regex] = {}


class _SchemaCompiler(_ApplicatorRules, _NumberRules, _StringRules, _ArrayRules, _ObjectRules):
    """Compiles the subschemas of one root schema; remembers which $refs are being expanded."""

    # -- one flattened schema -----------------------------------------------------------
    def _flat_value(self, schema: dict[str, Any] | bool, path: str) -> Regex | None:
        if schema is False:
            return None
        if schema is True or not schema:  # {} or true: any value
            return self._any_value(self.nesting)
        _check_keywords(schema, path)
        if "anyOf" in schema or "oneOf" in schema:
            return self._combination(schema, path)
        types = _types(schema, path)
        if "const" in schema or "enum" in schema:
            return self._enum(schema, path)
        if "number" in types:  # the number regex writes integers too
            types = [t for t in types if t != "integer"]
        builders: dict[str, Callable[[dict[str, Any], str], Regex | None]] = {
            "object": self._object,
            "array": self._array,
            "string": self._string,
            "number": self._number,
            "integer": self._number,
            "boolean": lambda s, p: _alt([lit("true"), lit("false")]),
            "null": lambda s, p: lit("null"),
        }
        return _alt([builders[t](schema, path) for t in types])

    def _combination(self, schema: dict[str, Any], path: str) -> Regex | None:
        """anyOf: any branch (each merged with the sibling keywords); oneOf: disjoint branches."""
        keyword = "anyOf" if "anyOf" in schema else "oneOf"
        branches = schema[keyword]
        if not isinstance(branches, list) or not branches:
            raise InvalidSchemaError(f"'{keyword}' at {path} must be a non-empty array of schemas")
        rest = {k: v for k, v in schema.items() if k not in (keyword, BRANCHES_AT)}
        # where each branch is in the user's schema (an anyOf the compiler wrote says)
        labels = schema.get(BRANCHES_AT)
        at = labels if isinstance(labels, list) and len(labels) == len(branches) else None
        where = [at[i] if at else f"{path}/{keyword}/{i}" for i in range(len(branches))]
        plain = [self.flatten({"allOf": [rest, b]}, where[i]) for i, b in enumerate(branches)]
        if keyword == "anyOf":
            return self._branch_values(plain, where)
        # oneOf: "exactly one" is "at least one" only when no value fits two branches
        exact = [
            self.flatten({"allOf": [rest, b]}, f"{path}/oneOf/{i}", cut_deep_refs=False)[0]
            for i, b in enumerate(branches)
        ]
        overlapping = [
            (i, j)
            for i in range(len(exact))
            for j in range(i + 1, len(exact))
            if not self._disjoint(exact[i], exact[j], path)
        ]
        if not overlapping:
            return self._branch_values(plain, where)
        try:  # branch i and not each branch it may overlap: exact when negatable
            negated = [
                self.flatten(
                    {
                        "allOf": [rest, b]
                        + [
                            self.negation(
                                self._flatten(branches[j], f"{path}/oneOf/{j}", [], frozenset(), False),
                                f"{path}/oneOf/{j}",
                            )
                            for j in range(len(branches))
                            if (min(i, j), max(i, j)) in overlapping
                        ]
                    },
                    f"{path}/oneOf/{i}",
                )
                for i, b in enumerate(branches)
            ]
            return self._branch_values(negated, where)
        except UnsupportedSchemaError as e:
            # A branch that fails on its own says so in its own words; otherwise the refusal is
            # the negation this rewrite wrote (a 'not' the user never did: name the oneOf).
            self._branch_values(plain, where)
            i, j = overlapping[0]
            raise UnsupportedSchemaError(
                f"'oneOf' at {path}: branches {i} and {j} may both accept a value, and we can "
                "only prove disjointness by type, const/enum, or a required property with "
                f"disjoint schemas, or negate a branch exactly ({e}); use anyOf if overlaps are fine"
            ) from None

    def _branch_values(
        self, merged: list[tuple[dict[str, Any] | Literal[False], list[str]]], where: list[str]
    ) -> Regex | None:
        """The alternation of the flattened branches' values (`where`: each branch's path)."""
        options: list[Regex | None] = []
        chars = 0
        for i, (flat, refs) in enumerate(merged):
            with self.expanding(refs):
                options.append(self._flat_value(flat, where[i]))
            chars += options[-1].size if options[-1] is not None else 0
            self.check_size(chars, where[i])
        return _alt(options)

    def _disjoint(self, a: dict[str, Any] | bool, b: dict[str, Any] | bool, path: str, depth: int = 0) -> bool:
        """Whether no value can be valid for both exact (uncut) flattened schemas: a proof, or False."""
        if a is False or b is False:
            return True
        assert a is not True and b is not True  # flattened: flatten writes `true` as {}
        if depth > 10:  # deep recursive schemas: give up proving
            return False
        types_a, types_b = _declared_types(a, path), _declared_types(b, path)
        if types_a is not None and types_b is not None and not _types_overlap(types_a, types_b):
            return True
        values_a, values_b = _finite_values(a), _finite_values(b)
        for values, types in ((values_a, types_b), (values_b, types_a)):
            if (
                values is not None
                and types is not None
                and not any(_type_allows(types, _json_type_of(v)) for v in values)
            ):
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

    def _enum(self, schema: dict[str, Any], path: str) -> Regex | None:
        """const / enum: the listed values that the other keywords accept too."""
        if "enum" in schema:
            if not isinstance(schema["enum"], list):
                raise InvalidSchemaError(f"'enum' at {path} must be an array, got {schema['enum']!r}")
            values: list[Any] = schema["enum"]
        else:  # (_flat_value calls this for a schema with const or enum)
            values = [schema["const"]]
        if "const" in schema:
            values = [v for v in values if _json_equal(v, schema["const"])]
        rest = {k: v for k, v in schema.items() if k not in ("enum", "const")}
        if set(rest) == {"type"}:  # the common case, exactly
            types = set(_types(rest, path))
            values = [v for v in values if _type_allows(types, _json_type_of(v))]
        elif rest:  # keep the values the rest of the schema accepts (its regex is sound)
            rest_regex = self._flat_value(rest, path)

            def written(value: Any) -> bool:
                return rest_regex is not None and self.matches(
                    rest_regex, json.dumps(value, separators=(",", ":"), ensure_ascii=False)
                )

            def fits(value: Any) -> bool:  # as given, else with keys in properties order (only on a miss)
                return written(value) or (
                    isinstance(value, (dict, list)) and written(self._in_properties_order(value, rest, path))
                )

            # ... else with its whole floats as integers: `[1, 1.0]` under integer items is the
            # valid `[1, 1]` (a stranger's fuzzer: refused as "the schema accepts no JSON value")
            values = [v for v in values if fits(v) or ((w := _whole_as_int(v)) is not v and fits(w))]
        literals = []
        for v in values:  # (an enum may hold thousands of values: a checkpoint per value)
            tick(self.budget, path)
            literals.append(_literal(v, self.ws))
        return _alt(literals)

    def _in_properties_order(self, value: Any, schema: dict[str, Any] | bool, path: str) -> Any:
        """`value` with each object's keys in the order our regex writes them: the listed
        `properties` first, in the schema's order, then the others as given. An enum's object
        in another key order than `properties` failed the check against the rest's regex, so
        `{"properties": {"a": {}, "b": {}}, "const": {"b": 1, "a": 2}}` was refused as having
        no value (schema_fuzz)."""
        if isinstance(value, dict) and isinstance(schema, dict):
            listed = schema.get("properties")
            listed = listed if isinstance(listed, dict) else {}
            keys = [k for k in listed if k in value] + [k for k in value if k not in listed]
            return {
                k: self._in_properties_order(
                    value[k], self.flatten(listed[k], f"{path}/properties/{k}")[0] if k in listed else True, path
                )
                for k in keys
            }
        if isinstance(value, list) and isinstance(schema, dict):
            prefix = schema.get("prefixItems")
            prefix = prefix if isinstance(prefix, list) else []
            items = schema.get("items", True)
            return [
                self._in_properties_order(
                    v, self.flatten(prefix[i] if i < len(prefix) else items, f"{path}/items")[0], path
                )
                for i, v in enumerate(value)
            ]
        return value

    def _any_value(self, nesting: int) -> Regex:
        """Any JSON value with containers nested at most `nesting` levels deep."""
        if nesting not in self.any_values:
            made = ANY_VALUES.get((nesting, self.ws, self.options))
            if made is not None and self.adopt(made):  # (made by an earlier compile: the same tree)
                self.any_values[nesting] = made
                return made
            options: list[Regex | None] = [STRING, _unbounded_number(self.options, False)]
            options += [lit("true"), lit("false"), lit("null")]
            if nesting > 0:
                inner = self._any_value(nesting - 1)
                member = _concat(STRING, lit(":"), self.ws, inner)
                assert member is not None  # (every part matches something)
                options.append(self._array_regex([], inner, 0, None))
                options.append(self._map_regex([], member))
            any_value = self.shared(_alt(options))
            assert any_value is not None  # (a string, at least)
            self.any_values[nesting] = any_value
            if len(ANY_VALUES) < 64:
                ANY_VALUES[nesting, self.ws, self.options] = any_value
        return self.any_values[nesting]
