"""The compiler's rules for JSON objects: properties in order or any order, patternProperties,
additionalProperties, propertyNames and min/maxProperties."""
from __future__ import annotations

import functools
import itertools
import json
import re

from minisglang.constrained.json_schema.compiler_base import _CompilerBase
from minisglang.constrained.json_schema.errors import InvalidSchemaError, UnsupportedSchemaError
from minisglang.constrained.json_schema.merge import _both
from minisglang.constrained.json_schema.patterns import _pattern_regex
from minisglang.constrained.json_schema.refs import _pointer_token
from minisglang.constrained.json_schema.regex_parts import _alt, _concat, _repeat
from minisglang.constrained.json_schema.string_chars import STRING, _string_literal
from minisglang.constrained.json_schema.values import _count
from minisglang.constrained.lazy_regex import MEMBERS_SYNTAX
from minisglang.constrained.regex_dfa import shown_regex

# patternProperties' keys are split by the set of patterns they match: 2^n - 1 regions.
MAX_KEY_PATTERNS = 6


def _searches(pattern: str, name: str, path: str) -> bool:
    """Whether `pattern` finds a match in `name`, as the jsonschema validator decides (re.search)."""
    try:
        return re.search(pattern, name) is not None
    except re.error as e:
        raise UnsupportedSchemaError(f"'patternProperties' at {path}: {shown_regex(pattern)} is not a regex we "
                                     f"can read: {e}") from None


class _ObjectRules(_CompilerBase):
    """A JSON object (mixed into _SchemaCompiler)."""

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
