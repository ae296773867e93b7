"""The compiler's rules for JSON arrays: prefixItems/items, min/maxItems, uniqueItems and contains."""

from __future__ import annotations

import functools
from typing import Any

from minisglang.constrained.json_schema.compiler_base import _CompilerBase
from minisglang.constrained.json_schema.errors import InvalidSchemaError, UnsupportedSchemaError
from minisglang.constrained.json_schema.keywords import _finite_values, _types
from minisglang.constrained.json_schema.merge import _both
from minisglang.constrained.json_schema.regex_parts import EPSILON, Regex, _alt, _concat, _repeat, lit
from minisglang.constrained.json_schema.values import _count, _json_equal

# contains interleaves the items with and without a match: their regexes' total size.
MAX_CONTAINS_ITEM_CHARS = 3000


# uniqueItems writes every arrangement of the distinct item values: n! of them.
MAX_UNIQUE_VALUES = 4
OPEN_BRACKET, CLOSE_BRACKET = lit("["), lit("]")


class _ArrayRules(_CompilerBase):
    """A JSON array (mixed into _SchemaCompiler)."""

    def _array(self, schema: dict[str, Any], path: str) -> Regex | None:
        """A JSON array: prefixItems, then items (absent: a tuple after prefixItems, else any
        values), minItems/maxItems; or with `contains`, see _contains_array."""
        if not isinstance(schema.get("uniqueItems", False), bool):  # (a validator enforces any truthy value)
            raise InvalidSchemaError(f"'uniqueItems' at {path} must be true or false, got {schema['uniqueItems']!r}")
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
            self.check_size(sum(r.size for r in prefix_regexes), f"{path}/prefixItems/{i}")
        if schema.get("uniqueItems") is True and not (max_items is not None and max_items <= 1):
            if prefix is not None:
                raise UnsupportedSchemaError(
                    f"keyword 'uniqueItems' at {path} together with prefixItems is not supported"
                )
            return self._unique_array(True if items is None else items, min_items, max_items, path)
        if items is not None:
            item_regex = self.value(items, path_items)
        elif prefix is not None:
            item_regex = None  # a tuple: nothing after the prefix
            fits = len(prefix_regexes) == len(prefix) and (max_items is None or max_items >= min_items)
            if min_items > len(prefix) and fits:  # only our policy leaves too few items
                self.note_empty(
                    f"minItems {min_items} at {path} asks for more items than the {len(prefix)} of prefixItems, "
                    "and prefixItems without items is written as a tuple (nothing after the prefix)"
                )
        else:
            item_regex = self._any_value(self.nesting - 1)
        return self._array_regex(prefix_regexes, item_regex, min_items, max_items)

    def _unique_array(self, items: Any, min_items: int, max_items: int | None, path: str) -> Regex | None:
        """uniqueItems over an item schema with a few possible values (const, enum,
        boolean, null): every arrangement of distinct values, as a tree of choices."""
        flat = self._flatten(items, f"{path}/items", [], frozenset(), False)
        values = _finite_values(flat) if isinstance(flat, dict) else None
        if values is None and isinstance(flat, dict) and set(flat) == {"type"}:
            types = set(_types(flat, path))
            values = (
                [None] * ("null" in types) + [True, False] * ("boolean" in types)
                if types <= {"null", "boolean"}
                else None
            )
        if flat is False:
            values = []
        if values is None:
            raise UnsupportedSchemaError(
                f"keyword 'uniqueItems' at {path} is supported only for items with at most "
                f"{MAX_UNIQUE_VALUES} possible values (const, enum, boolean, null)"
            )
        distinct: list[object] = []
        for v in values:
            if not any(_json_equal(v, d) for d in distinct):
                distinct.append(v)
        regexes = [self.value(_both(items, {"const": v}), f"{path}/items") for v in distinct]
        regexes = [r for r in regexes if r is not None]
        if len(regexes) > MAX_UNIQUE_VALUES:
            raise UnsupportedSchemaError(
                f"keyword 'uniqueItems' at {path}: {len(regexes)} possible item values, "
                f"more than {MAX_UNIQUE_VALUES} (every arrangement is written out)"
            )
        ws, sep = self.ws, self.sep

        @functools.cache
        def rest(used: frozenset[int], lead: Regex) -> Regex | None:
            options: list[Regex | None] = [EPSILON] if len(used) >= min_items else []
            if max_items is None or len(used) < max_items:
                options += [
                    _concat(lead, regexes[i], rest(used | {i}, sep)) for i in range(len(regexes)) if i not in used
                ]
            return _alt(options)

        return _concat(OPEN_BRACKET, ws, rest(frozenset(), EPSILON), ws, CLOSE_BRACKET)

    def _contains_array(self, schema: dict[str, Any], path: str) -> Regex | None:
        """An array with minContains..maxContains items that match `contains` (default 1..):

        with Y = an item matching `contains` and N = one that does not (`not contains`,
        which must be writable exactly), the items are N* (Y N*){lo,hi}.
        """
        lo, hi = _count(schema, "minContains", path), _count(schema, "maxContains", path)
        lo = 1 if lo is None else lo
        min_items, max_items = _count(schema, "minItems", path) or 0, _count(schema, "maxItems", path)
        other = [k for k in ("prefixItems", "uniqueItems") if k in schema and schema[k] is not False]
        if other or isinstance(schema.get("items"), list) or (min_items > lo and max_items is None):
            raise UnsupportedSchemaError(
                f"keyword 'contains' at {path} together with "
                f"{', '.join(other) or 'minItems (without maxItems) or a tuple'} "
                "is not supported"
            )
        if hi is not None and hi < lo:
            return None
        items = schema.get("items", True)
        where = f"{path}/contains"
        missing = self.negation(self._flatten(schema["contains"], where, [], frozenset(), False), where)
        yes = self.value(_both(items, schema["contains"]), where)
        no = self.value(_both(items, missing), where) if missing is not False else None
        item_chars = (yes.size if yes is not None else 0) + (no.size if no is not None else 0)
        if item_chars > MAX_CONTAINS_ITEM_CHARS:
            # Y and N are repeated and interleaved; interegular takes minutes on big ones
            # (`contains: {const: 1}` without `items` makes N any value but 1).
            raise UnsupportedSchemaError(
                f"keyword 'contains' at {path}: the item regexes with and without a match take "
                f"{item_chars} characters (limit {MAX_CONTAINS_ITEM_CHARS}); give 'items' a "
                "narrower schema"
            )
        ws, sep = self.ws, self.sep
        if max_items is not None:
            elements = self._counted_contains(yes, no, lo, hi, min_items, max_items, path)
            return _concat(OPEN_BRACKET, ws, elements, ws, CLOSE_BRACKET)
        no_tail = EPSILON if no is None else _repeat(_concat(sep, no), 0, None)
        options = [EPSILON] if lo == 0 else []
        if yes is not None:
            more_yes = _repeat(_concat(sep, yes, no_tail), max(lo - 1, 0), None if hi is None else hi - 1)
            if no is not None:
                options.append(_concat(no, no_tail, _repeat(_concat(sep, yes, no_tail), lo, hi)))
            if hi is None or hi >= 1:
                options.append(_concat(yes, no_tail, more_yes))
        elif lo == 0 and no is not None:
            options.append(_concat(no, no_tail))
        return _concat(OPEN_BRACKET, ws, _alt(options), ws, CLOSE_BRACKET)

    def _counted_contains(
        self, yes: Regex | None, no: Regex | None, lo: int, hi: int | None, min_items: int, max_items: int, path: str
    ) -> Regex | None:
        """The elements of an array of min_items..max_items items, lo..hi of them Y (`yes`),
        the others N (`no`): a walk over (items so far, Ys so far). Where Y and N lead to
        the same count (enough Ys and no maxContains) they share one tail, so the text
        grows with the ways to place the first lo Ys, not 2**max_items."""
        sep = self.sep

        @functools.cache
        def rest(i: int, j: int) -> Regex | None:
            options: list[Regex | None] = [EPSILON] if i >= min_items and j >= lo else []
            if i < max_items:
                lead = sep if i else EPSILON
                after_yes = (
                    None if yes is None or (hi is not None and j >= hi) else (min(j + 1, lo) if hi is None else j + 1)
                )
                if after_yes == j:  # Y and N both keep the count: one tail for both
                    options.append(_concat(lead, _alt([yes, no]), rest(i + 1, j)))
                else:
                    if after_yes is not None:
                        options.append(_concat(lead, yes, rest(i + 1, after_yes)))
                    if no is not None:
                        options.append(_concat(lead, no, rest(i + 1, j)))
            regex = _alt(options)
            self.check_size(regex.size if regex is not None else 0, f"{path}/contains")
            return regex

        return rest(0, 0)

    def _array_regex(
        self, prefix: list[Regex], items: Regex | None, min_items: int, max_items: int | None
    ) -> Regex | None:
        """`[` elements `]`: element i matches prefix[i], later ones `items` (None: no more)."""
        # BEGIN SOLUTION task5_2
        ws, sep = self.ws, self.sep
        if items is None:
            max_items = len(prefix) if max_items is None else min(max_items, len(prefix))
        if max_items is not None and min_items > max_items:
            return None

        def after(i: int) -> Regex:
            """The elements after the first i (i >= 1), each behind a comma."""
            if max_items is not None and i >= max_items:
                return EPSILON
            if i >= len(prefix):
                hi = None if max_items is None else max_items - i
                return _repeat(sep + items, max(min_items - i, 0), hi)
            more = sep + prefix[i] + after(i + 1)
            return more if i < min_items else _repeat(more, 0, 1)

        if max_items == 0:
            elements = EPSILON
        else:
            elements = (prefix[0] if prefix else items) + after(1)
            if min_items == 0:
                elements = _repeat(elements, 0, 1)
        return OPEN_BRACKET + ws + elements + ws + CLOSE_BRACKET
        # END SOLUTION
