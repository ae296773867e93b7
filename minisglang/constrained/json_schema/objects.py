"""The compiler's rules for JSON objects: properties in order or any order, patternProperties,
additionalProperties, propertyNames and min/maxProperties."""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Callable
from typing import Any

from minisglang.constrained.json_pointer import pointer_token
from minisglang.constrained.json_schema.compiler_base import _CompilerBase
from minisglang.constrained.json_schema.errors import InvalidSchemaError, UnsupportedSchemaError
from minisglang.constrained.json_schema.keywords import LISTED_PATTERNS
from minisglang.constrained.json_schema.merge import _both
from minisglang.constrained.json_schema.patterns import _pattern_regex, _searches
from minisglang.constrained.json_schema.regex_parts import EPSILON, Regex, _alt, _concat, _repeat, lit
from minisglang.constrained.json_schema.string_chars import STRING, _string_literal
from minisglang.constrained.json_schema.values import _count
from minisglang.constrained.regex_ast import And, Diff, Members
from minisglang.constrained.regex_dfa import shown_regex

# patternProperties' keys are split by the set of patterns they match: 2^n - 1 regions.
MAX_KEY_PATTERNS = 6
OPEN_BRACE, CLOSE_BRACE, COLON, QUOTE = lit("{"), lit("}"), lit(":"), lit('"')


class _ObjectRules(_CompilerBase):
    """A JSON object (mixed into _SchemaCompiler)."""

    def _object(self, schema: dict[str, Any], path: str) -> Regex | None:
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
            return names_free or (
                key_regex is not None
                and any(self.matches(key_regex, json.dumps(name, ensure_ascii=a)) for a in (True, False))
            )

        def member(name: str, subschemas: list[Any], where: str) -> Regex | None:
            """`"name": value` with a value valid for every subschema; None: no value fits."""
            value = (
                self.value(subschemas[0] if len(subschemas) == 1 else {"allOf": subschemas}, where)
                if name_allowed(name)
                else None
            )
            return _concat(_string_literal(name), COLON, self.ws, value)

        members = []  # (regex of `"key": value`, required)
        chars = 0  # their total size so far
        # (a merged schema's patternProperties may carry another subschema's additionalProperties,
        # which does not hold for the listed names: LISTED_PATTERNS are the ones that do)
        listed_patterns = schema.get(LISTED_PATTERNS, patterns)
        for name, sub in properties.items():
            matching = [s for p, s in listed_patterns.items() if _searches(p, name, f"{path}/patternProperties")]
            regex = member(name, [sub, *matching], f"{path}/properties/{name}")
            if regex is None:  # no value fits: the property must be absent
                if name in required:
                    return None
                continue
            members.append((regex, name in required))
            chars += regex.size
            self.check_size(chars, f"{path}/properties/{name}")
        for name in dict.fromkeys(required):
            if name not in properties:  # required, not listed: patternProperties or additionalProperties
                matching = [s for p, s in patterns.items() if _searches(p, name, f"{path}/patternProperties")]
                regex = member(
                    name, matching or [True if additional is None else additional], f"{path}/additionalProperties"
                )
                if regex is None:
                    return None
                members.append((regex, True))
        listed = list(properties) + [r for r in required if r not in properties]
        counts = (_count(schema, "minProperties", path) or 0, _count(schema, "maxProperties", path))

        def too_few_keys(why: str) -> None:  # our policy, not the schema, leaves fewer keys than asked
            self.note_empty(
                f"minProperties {counts[0]} at {path} asks for more keys than the {len(members)} listed, and {why}"
            )

        if patterns and self.options.automaton == "lazy":
            entries = self._key_regions(
                patterns, listed, additional, None if names_free else key_regex, "properties" in schema, path
            )
        elif patterns:
            entries = self._pattern_entries(patterns, listed, additional, names_free, path)
        elif additional is False or ("properties" in schema and not self.options.extra_properties):
            entries = []
            if additional is not False and counts[0] > len(members):
                too_few_keys(
                    "an object with properties gets no other keys, whatever its additionalProperties allows "
                    "(option extra_properties)"
                )
        else:
            extra_value = (
                self._any_value(self.nesting - 1)
                if additional is None or additional is True
                else self.value(additional, f"{path}/additionalProperties")
            )
            if "properties" in schema:  # extra_properties: unlisted keys after the listed ones
                if not names_free:
                    raise UnsupportedSchemaError(
                        f"keyword 'propertyNames' at {path} is not supported together with the option extra_properties"
                    )
                key: Regex | None = self.key_except(listed)
            else:  # a map (None: propertyNames allows no key)
                key = STRING if names_free else key_regex
            entries = [] if extra_value is None or key is None else [_concat(key, COLON, self.ws, extra_value)]
        if not entries and patterns and additional is None and counts[0] > len(members):
            too_few_keys(
                "an object with patternProperties gets no key its patterns do not match unless "
                "additionalProperties is written (true or a schema)"
            )
        if not entries:
            return self._members_regex(members, path, counts=counts)
        one_entry = not members and "properties" not in schema and counts[0] == 1  # one key is distinct
        # Only required members prove the count: a repeated unlisted key counts once, and the
        # members' regex below does not count the optional ones (a stranger's fuzzer found
        # `{}` allowed under minProperties 1 with an optional property and patternProperties).
        if counts[0] > sum(req for _, req in members) and not one_entry:
            raise UnsupportedSchemaError(
                f"keyword 'minProperties' at {path} is not supported on an object with unlisted keys, "
                "beyond what its required properties make (a regex cannot keep keys distinct)"
            )
        if "properties" not in schema or (counts[1] is not None and all(req for _, req in members)):
            # every member is required: a map (the entries counted against maxProperties)
            return self._map_regex(members, self.shared(_alt(entries)), counts[1], at_least_one=one_entry)
        if counts[1] is not None:
            raise UnsupportedSchemaError(
                f"keyword 'maxProperties' at {path} is not supported on an object with "
                "both optional listed properties and unlisted keys"
            )
        return self._members_regex(members, path, self.shared(_alt(entries)))

    def _key_regions(
        self,
        patterns: dict[str, Any],
        listed: list[str],
        additional: Any,
        key_regex: Regex | None,
        has_properties: bool,
        path: str,
    ) -> list[Regex]:
        """The `"key": value` regexes of the unlisted keys, for the lazy automaton, exactly.

        A key gets the value of every pattern it matches, and additionalProperties' when it
        matches none (let in by the policy of the module doc). So the keys are split by the
        set S of patterns they match: the keys we write for each pattern in S, intersected
        (`And` nodes), minus every JSON writing of the keys of the other patterns
        (a `Diff` node with their wide translation); never a listed name (written as a
        listed member), and within propertyNames' `key_regex`. Empty regions are skipped.
        """
        if len(patterns) > MAX_KEY_PATTERNS:
            raise UnsupportedSchemaError(
                f"keyword 'patternProperties' at {path}: more than {MAX_KEY_PATTERNS} "
                "patterns (their keys are split into 2^n regions)"
            )
        where = [f"{path}/patternProperties/{pointer_token(p)}" for p in patterns]
        narrow = [_concat(QUOTE, _pattern_regex(p, w), QUOTE) for p, w in zip(patterns, where)]
        wide = [_concat(QUOTE, _pattern_regex(p, w, wide=True), QUOTE) for p, w in zip(patterns, where)]
        # Our key strings never decode to a listed name (`_string_except` writes no other form of one).
        base: list[Regex | None] = [self.key_except(listed)] if listed else []
        base += [key_regex] if key_regex is not None else []
        # (the key regexes to intersect, the keys to remove, value schemas, where)
        regions: list[tuple[list[Regex | None], list[Regex], list[Any], str]] = []
        for size in range(1, len(patterns) + 1):
            for chosen in itertools.combinations(range(len(patterns)), size):
                others = [w for j, w in enumerate(wide) if j not in chosen and w is not None]
                regions.append(
                    (
                        [narrow[i] for i in chosen] + base,
                        others,
                        [list(patterns.values())[i] for i in chosen],
                        where[chosen[0]],
                    )
                )
        extra_allowed = self.options.extra_properties or (additional is not None and not has_properties)
        if additional is not False and extra_allowed:
            value = True if additional is None else additional
            regions.append(
                (base or [STRING], [w for w in wide if w is not None], [value], f"{path}/additionalProperties")
            )
        entries = []
        for keys, others, values, at in regions:
            key = self.intersection(keys, at)
            excluded = _alt(others)  # None: no other pattern
            if key is not None and excluded is not None:
                key = Diff(key, excluded)
                key = None if self.language_empty(key, at) else key
            if key is None:
                continue
            if values == [True]:  # any value, nested as an unlisted key's may be
                value = self._any_value(self.nesting - 1)
            else:
                value = self.value(values[0] if len(values) == 1 else {"allOf": values}, at)
            if value is not None:  # (None: no value fits, so these keys stay absent)
                entries.append(_concat(key, COLON, self.ws, value))
        return entries

    def _pattern_entries(
        self, patterns: dict[str, Any], listed: list[str], additional: Any, names_free: bool, path: str
    ) -> list[Regex]:
        """The `"key": value` regexes of patternProperties, one per pattern, for a plain
        regex (the lazy automaton: _key_regions).

        Exact only when no key has two rules: each pattern's keys must miss the listed
        names and every other pattern's keys (checked on the automata); the keys of no
        pattern get no entry, so additionalProperties must not allow any (false or absent).
        """
        if additional not in (None, False) or (additional is None and self.options.extra_properties):
            raise UnsupportedSchemaError(
                f"keyword 'patternProperties' at {path} together with "
                "additionalProperties is not supported (the keys no pattern matches; "
                "with automaton='lazy' it is)"
            )
        if not names_free:
            raise UnsupportedSchemaError(
                f"keyword 'patternProperties' at {path} together with propertyNames "
                "is not supported (with automaton='lazy' it is)"
            )
        keys: list[tuple[str, Regex, Regex | None, bool]] = []  # (pattern, key regex, its wide form, has an entry)
        entries: list[Regex] = []
        for pattern, sub in patterns.items():
            where = f"{path}/patternProperties/{pointer_token(pattern)}"
            key = _concat(QUOTE, _pattern_regex(pattern, where), QUOTE)
            if key is None:
                continue
            wide = _concat(QUOTE, _pattern_regex(pattern, where, wide=True), QUOTE)
            value = self.value(sub, where)  # None: keys matching the pattern must be absent
            for name in listed if value is not None else []:
                if any(self.matches(key, json.dumps(name, ensure_ascii=a)) for a in (True, False)):
                    raise UnsupportedSchemaError(
                        f"keyword 'patternProperties' at {where}: the pattern also matches the listed property "
                        f"{name!r}, and a regex cannot keep that key from being written twice "
                        "(with automaton='lazy' it can)"
                    )
            for other_pattern, other, other_wide, other_written in keys:
                # A key one of them writes that the other matches too (in Python's reading).
                if (
                    value is not None
                    and other_wide is not None
                    and not self.language_empty(And(key, other_wide), where)
                ) or (other_written and wide is not None and not self.language_empty(And(other, wide), where)):
                    raise UnsupportedSchemaError(
                        f"keyword 'patternProperties' at {where}: some key matches both {shown_regex(pattern)} and "
                        f"{shown_regex(other_pattern)}, and its value would have to fit both "
                        "(with automaton='lazy' it can)"
                    )
            keys.append((pattern, key, wide, value is not None))
            if value is not None:
                entries.append(_concat(key, COLON, self.ws, value))
        return entries

    def _members_regex(
        self,
        members: list[tuple[Regex, bool]],
        path: str,
        extra: Regex | None = None,
        counts: tuple[int, int | None] = (0, None),
    ) -> Regex | None:
        """`{` the members, optional ones may be left out, then any number of `extra`
        entries (None: none) `}`. Members come in schema order (O(n^2) regex size), or in
        any order with the any_order option: for the lazy automaton one `Members`
        group (O(n), extras anywhere), else every order (O(n! n): at most
        max_any_order_properties).
        `counts`: minProperties/maxProperties, how many members are written (no extras).
        """
        ws, sep = self.ws, self.sep
        if self.options.any_order and self.options.automaton == "lazy" and counts == (0, None):
            group = Members(sep, tuple(m for m, _ in members), tuple(req for _, req in members), extra)
            return _concat(OPEN_BRACE, ws, group, ws, CLOSE_BRACE)
        if self.options.any_order:
            firsts = self._any_order_firsts(members, path, counts)
        elif counts != (0, None):
            inner = self._counted_members(members, counts, path)
            return _concat(OPEN_BRACE, ws, inner, ws, CLOSE_BRACE)
        else:
            firsts = self._ordered_firsts(members, path)
        if not firsts:
            return None
        if extra is not None:  # after the members (or alone), each behind a comma
            more = _repeat(_concat(sep, extra), 0, None)
            firsts = [
                option
                for first in firsts
                for option in ([_concat(extra, more), EPSILON] if first == EPSILON else [_concat(first, more)])
            ]
        return _concat(OPEN_BRACE, ws, _alt(firsts), ws, CLOSE_BRACE)

    def _ordered_firsts(self, members: list[tuple[Regex, bool]], path: str) -> list[Regex]:
        """The object's contents in schema order, split by which member is written first
        (one of the optional ones before the first required one, or that one; EPSILON: none)."""
        sep = self.sep

        def behind_comma(member: Regex, req: bool) -> Regex:
            return _concat(sep, member) if req else _repeat(_concat(sep, member), 0, 1)

        # rest(k): members[k:], each behind a comma.
        rest: Callable[[int], Regex]
        if self.options.automaton == "lazy":  # each rest one shared sub-expression: O(n) text, not O(n^2)
            tails = [EPSILON]
            for member, req in reversed(members):
                tail = self.shared(_concat(behind_comma(member, req), tails[-1]))
                assert tail is not None  # (shared marks a node, never voids it)
                tails.append(tail)
            rest = tails[::-1].__getitem__
        else:  # joined on demand, so a huge object meets the size bound before all of it is written

            def rest(k: int) -> Regex:
                return _concat(*(behind_comma(m, req) for m, req in members[k:]))

        firsts, chars = [], 0
        for k, (member, req) in enumerate(members):
            firsts.append(_concat(member, rest(k + 1)))
            chars += firsts[-1].size
            self.check_size(chars, path)  # each member is repeated in later alternatives: O(n^2)
            if req:
                break
        else:
            firsts.append(EPSILON)  # all optional: the object may be empty
        return firsts

    def _counted_members(
        self, members: list[tuple[Regex, bool]], counts: tuple[int, int | None], path: str
    ) -> Regex | None:
        """The object's contents in schema order with lo..hi members written (counts).

        `rest(k, n, started)`: members[k:] after n written (n stops counting at lo when
        there is no hi); a member that may be present or absent with the same rest after
        it is written `(,member)?`, so without active counts the size stays O(n^2).
        """
        lo, hi = counts
        sep = self.sep

        @functools.cache
        def rest(k: int, n: int, started: bool) -> Regex | None:
            if k == len(members):
                return EPSILON if n >= lo else None
            member, req = members[k]
            lead = sep if started else EPSILON
            after = None if hi is not None and n >= hi else rest(k + 1, n + 1 if hi is not None or n < lo else n, True)
            skip = None if req else rest(k + 1, n, started)
            if after is not None and skip is not None and started and after == skip:
                return _concat(_repeat(_concat(lead, member), 0, 1), skip)
            regex = _alt([_concat(lead, member, after), skip])
            self.check_size(regex.size if regex is not None else 0, path)
            return regex

        return rest(0, 0, False)

    def _any_order_firsts(
        self, members: list[tuple[Regex, bool]], path: str, counts: tuple[int, int | None] = (0, None)
    ) -> list[Regex]:
        """The object's contents with the members in any order, split by the first one
        (with lo..hi members written: counts)."""
        limit = self.options.max_any_order_properties
        if len(members) > limit:
            raise UnsupportedSchemaError(
                f"option any_order at {path}: the object has {len(members)} properties, more than "
                f"max_any_order_properties={limit} (every order is written out: n! alternatives)"
            )
        sep = self.sep

        lo, hi = counts

        @functools.cache
        def rest(left: frozenset[int]) -> Regex | None:
            """The members in `left` that follow, in any order, each behind a comma."""
            written = len(members) - len(left)
            done = not any(members[i][1] for i in left) and written >= lo
            options: list[Regex | None] = [EPSILON] if done else []
            if hi is None or written < hi:
                options += [_concat(sep, members[i][0], rest(left - {i})) for i in sorted(left)]
            return _alt(options)

        everyone = frozenset(range(len(members)))
        firsts = [_concat(members[i][0], rest(everyone - {i})) for i in sorted(everyone)] if hi != 0 else []
        empty = [EPSILON] if not any(req for _, req in members) and lo == 0 else []
        return [f for f in firsts if f is not None] + empty

    def _map_regex(
        self,
        members: list[tuple[Regex, bool]],
        entry: Regex | None,
        most: int | None = None,
        at_least_one: bool = False,
    ) -> Regex | None:
        """`{` the required members, then any number of `entry` (None: no entry; at most
        `most` entries in all: maxProperties; a repeated key only lowers the count;
        `at_least_one`: without members, one entry or more: minProperties 1) `}`."""
        ws, sep = self.ws, self.sep
        if most is not None and most < len(members):
            return None
        more = None if most is None else most - len(members)
        if members:
            listed = [_concat(sep, m) if i else m for i, (m, _) in enumerate(members)]
            body = _concat(*listed, _repeat(_concat(sep, entry), 0, more))
        elif more == 0:
            if at_least_one:  # minProperties 1, maxProperties 0
                return None
            body = EPSILON
        else:
            body = _repeat(
                _concat(entry, _repeat(_concat(sep, entry), 0, None if more is None else more - 1)),
                1 if at_least_one else 0,
                1,
            )
        return _concat(OPEN_BRACE, ws, body, ws, CLOSE_BRACE)
