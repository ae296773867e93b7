r"""Structural tags: free text with triggered, schema-constrained tool calls, as ONE regex.

A structural tag (SGLang's `structural_tag` sampling parameter, xgrammar's "triggered
tags") lets a model write free text, and constrains only the tool calls inside it:

    {"structures": [{"begin": "<tool_call>{\"name\": \"get_weather\", \"arguments\": ",
                     "schema": {...JSON Schema...}, "end": "}</tool_call>"}, ...],
     "triggers": ["<tool_call>"], "at_least_one": false, "stop_after_first": false}

Semantics (what `StructuralTag` accepts; tests/test_structural_tag.py checks them
against a direct Python matcher):

- The output is free text, which contains no trigger. As soon as a trigger appears, the
  output continues as one of the begins that start with that trigger, then a JSON value
  valid under that structure's schema (our JSON Schema compiler, json_schema.py, with the
  same options as a `json_schema` request), then that structure's end. Then free text
  again (scanned afresh from the end: a trigger never straddles an end and the text after
  it), and so on. A prefix of a trigger may end the output ("... <tool_c" then EOS).
- `at_least_one`: the output must hold a tag, and (as in xgrammar 0.2, which compiles it
  as "first tag, then the usual loop") it STARTS with one: no free text before the first
  tag. Free text may follow it unless `stop_after_first`.
- `stop_after_first`: after the first complete tag only EOS may follow.
- EOS is never allowed inside a tag (the regex has no accepting state there).

Restrictions (each a clear `StructuralTagError` naming the field): every begin starts
with a trigger; no trigger is a substring of another (then "the first trigger in the
text" is one place, as in xgrammar, where each tag is matched by exactly one trigger).

How it becomes a regex (then the lazy automaton of lazy_token_fsm.py builds states and
token masks on demand, exact for any tokenizer): free text is a walk in the triggers'
Aho-Corasick automaton (its states are the prefixes of triggers; reading a character
goes to the longest prefix that the text now ends with). Reaching a full trigger is
where a tag starts. State elimination (the textbook DFA -> regex construction) turns the
automaton into regexes P[t] = "free text, then the first trigger t" and F = "free text,
then the end of the output"; the whole output is

    (P[t] rest-of-begin schema end | ...)* F          (the other options: see `to_regex`)

so each schema's regex appears once per loop, and the lazy regex parser parses a
repeated group once.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# The keys a spec may have; "type" may only say "structural_tag" (SGLang's response_format).
_SPEC_KEYS = ("type", "structures", "triggers", "at_least_one", "stop_after_first")
_STRUCTURE_KEYS = ("begin", "schema", "end")
# Characters that mean something in a regex (outside or inside a class): written escaped.
_REGEX_SPECIAL = set(".^$*+?{}[]()|\\-#&~ ")


class StructuralTagError(ValueError):
    """A structural tag spec that is not valid; the message names the field."""


@dataclass(frozen=True)
class TagStructure:
    """One kind of tag: `begin`, then a JSON value valid under `schema`, then `end`."""

    begin: str
    schema: dict | bool
    end: str


@dataclass(frozen=True)
class StructuralTag:
    """A parsed, validated structural tag (see the module doc for what it accepts)."""

    structures: tuple[TagStructure, ...]
    triggers: tuple[str, ...]
    at_least_one: bool = False
    stop_after_first: bool = False

    def to_json(self) -> str:
        """Canonical JSON text: equal specs give equal text (a grammar cache key)."""
        return json.dumps({"structures": [{"begin": s.begin, "schema": s.schema, "end": s.end}
                                          for s in self.structures],
                           "triggers": list(self.triggers), "at_least_one": self.at_least_one,
                           "stop_after_first": self.stop_after_first}, separators=(",", ":"), ensure_ascii=False)

    def trigger_of(self, structure: TagStructure) -> str:
        """The one trigger `structure.begin` starts with."""
        return next(t for t in self.triggers if structure.begin.startswith(t))

    def to_regex(self, schema_regex: Callable[[dict | bool], str]) -> str:
        """The regex of every output this spec accepts; `schema_regex(schema)` compiles one schema."""
        free = FreeText(self.triggers)
        # Per structure: its trigger, and the regex of the tag after that trigger.
        trigger = [self.trigger_of(s) for s in self.structures]
        body = [f"{literal(s.begin[len(t):])}(?:{self._schema_regex(i, schema_regex)}){literal(s.end)}"
                for i, (s, t) in enumerate(zip(self.structures, trigger))]
        # One loop iteration: free text up to the first trigger t, then one of t's tags.
        loop = _alt([free.until_trigger[t] + _alt([b for b, u in zip(body, trigger) if u == t])
                     for t in self.triggers if t in trigger])
        # A tag at the very start of the output (at_least_one: no free text before it).
        first = _alt([literal(t) + b for b, t in zip(body, trigger)])
        if self.at_least_one and self.stop_after_first:
            return first
        if self.at_least_one:
            return f"{first}{_star(loop)}{free.until_end}"
        if self.stop_after_first:
            return _alt([loop, free.until_end])
        return f"{_star(loop)}{free.until_end}"

    def _schema_regex(self, i: int, schema_regex: Callable[[dict | bool], str]) -> str:
        """Structure i's schema compiled; the compiler's error says which structure it is, so
        a server can name the tool (its errors are ValueError subclasses with one message)."""
        try:
            return schema_regex(self.structures[i].schema)
        except ValueError as e:
            raise type(e)(f"structural_tag.structures[{i}].schema: {e}") from e


# ------------------------------------------------------------------------- parsing
def parse_structural_tag(spec: Any) -> StructuralTag:
    """A spec (a dict, or its JSON text) -> StructuralTag; StructuralTagError names what is wrong.

    Schemas are only checked to be JSON objects or booleans here; compiling them
    (`StructuralTag.to_regex`) reports their own errors.
    """
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except (ValueError, RecursionError) as e:
            raise StructuralTagError(f"structural_tag is not valid JSON: {e}") from None
    if not isinstance(spec, dict):
        raise StructuralTagError(f"structural_tag must be an object, got {_json_type(spec)}")
    unknown = sorted(k for k in spec if k not in _SPEC_KEYS)
    if unknown:
        raise StructuralTagError(f"structural_tag has unknown key(s) {unknown}; known: {list(_SPEC_KEYS)}")
    if "type" in spec and spec["type"] != "structural_tag":
        raise StructuralTagError(f"structural_tag.type must be 'structural_tag', got {spec['type']!r}")
    for key in ("structures", "triggers"):
        if key not in spec:
            raise StructuralTagError(f"structural_tag.{key} is missing")
        if not isinstance(spec[key], list) or not spec[key]:
            raise StructuralTagError(f"structural_tag.{key} must be a non-empty list, got "
                                     f"{'an empty list' if spec[key] == [] else _json_type(spec[key])}")
    triggers = tuple(_text(f"structural_tag.triggers[{i}]", t, nonempty=True) for i, t in enumerate(spec["triggers"]))
    for i, t in enumerate(triggers):
        for j, u in enumerate(triggers):
            if i != j and t in u:
                raise StructuralTagError(
                    f"structural_tag.triggers[{i}] {t!r} is {'the same as' if t == u else 'inside'} "
                    f"triggers[{j}] {u!r}: the first trigger in the text must be one place, so no trigger "
                    f"may contain another")
    structures = tuple(_structure(i, s, triggers) for i, s in enumerate(spec["structures"]))
    flags = {}
    for key in ("at_least_one", "stop_after_first"):
        flags[key] = spec.get(key, False)
        if not isinstance(flags[key], bool):
            raise StructuralTagError(f"structural_tag.{key} must be true or false, got {_json_type(flags[key])}")
    return StructuralTag(structures, triggers, **flags)


def _structure(i: int, s: Any, triggers: tuple[str, ...]) -> TagStructure:
    where = f"structural_tag.structures[{i}]"
    if not isinstance(s, dict):
        raise StructuralTagError(f"{where} must be an object with begin, schema and end, got {_json_type(s)}")
    unknown = sorted(k for k in s if k not in _STRUCTURE_KEYS)
    if unknown:
        raise StructuralTagError(f"{where} has unknown key(s) {unknown}; known: {list(_STRUCTURE_KEYS)}")
    missing = [k for k in _STRUCTURE_KEYS if k not in s]
    if missing:
        raise StructuralTagError(f"{where} is missing {missing}")
    begin = _text(f"{where}.begin", s["begin"], nonempty=True)
    end = _text(f"{where}.end", s["end"])
    if not any(begin.startswith(t) for t in triggers):
        raise StructuralTagError(f"{where}.begin {begin!r} starts with no trigger (triggers: {list(triggers)})")
    schema = s["schema"]
    if not isinstance(schema, (dict, bool)):
        raise StructuralTagError(f"{where}.schema must be a JSON Schema (an object or a boolean), "
                                 f"got {_json_type(schema)}")
    return TagStructure(begin, schema, end)


def _text(where: str, value: Any, nonempty: bool = False) -> str:
    if not isinstance(value, str):
        raise StructuralTagError(f"{where} must be a string, got {_json_type(value)}")
    if nonempty and not value:
        raise StructuralTagError(f"{where} is empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise StructuralTagError(f"{where} is not valid Unicode text (a lone surrogate at character {e.start})") from None
    return value


def _json_type(value: Any) -> str:
    names = {bool: "a boolean", str: "a string", list: "a list", dict: "an object", type(None): "null",
             int: "a number", float: "a number"}
    return names.get(type(value), f"a {type(value).__name__}")


# ------------------------------------------------------------------------- regex text
def literal(text: str) -> str:
    """`text` as a regex matching exactly it (punctuation escaped, control characters as \\xNN)."""
    return "".join(_char(c) for c in text)


def _char(c: str) -> str:
    if c in _REGEX_SPECIAL or (c.isascii() and not c.isalnum() and c.isprintable() and c != "_"):
        return "\\" + c
    if ord(c) < 0x20 or ord(c) == 0x7F:
        return f"\\x{ord(c):02x}"
    return c


def _alt(options: list[str]) -> str:
    """Any of `options` as one group (an empty string among them is the empty word)."""
    unique = list(dict.fromkeys(options))
    if len(unique) == 1:
        return unique[0] if _is_unit(unique[0]) else f"(?:{unique[0]})"
    return "(?:" + "|".join(unique) + ")"


def _star(regex: str) -> str:
    return "" if not regex else f"{regex}*" if _is_unit(regex) else f"(?:{regex})*"


def _is_unit(regex: str) -> bool:
    """One atom a quantifier may follow: a group, a class or one (escaped) character, or "" (nothing)."""
    if regex == "" or len(regex) == 1 or (len(regex) == 2 and regex[0] == "\\") or regex.startswith("\\x") and len(regex) == 4:
        return True
    if regex[0] in "([" and _closing(regex) == len(regex) - 1:
        return True
    return False


def _closing(regex: str) -> int:
    """Index of the bracket closing the group or class that opens `regex`."""
    depth, i, in_class = 0, 0, False
    while i < len(regex):
        c = regex[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
                if depth == 0:
                    return i
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _char_class(chars: set[str], negated: bool) -> str:
    if not negated and len(chars) == 1:
        return _char(next(iter(chars)))
    return "[" + ("^" if negated else "") + "".join(_char(c) for c in sorted(chars)) + "]"


# ------------------------------------------------------------------------- free text
class FreeText:
    """The regexes of free text for a set of triggers (no trigger is inside another).

    `until_trigger[t]`: free text, then trigger t, where t is the first trigger in it;
    `until_end`: free text that contains no trigger (the output may end there).
    Built from the triggers' Aho-Corasick automaton by state elimination.
    """

    def __init__(self, triggers: tuple[str, ...]):
        self.triggers = triggers
        prefixes = sorted({t[:i] for t in triggers for i in range(len(t))}, key=lambda p: (len(p), p))
        self.states = {p: i for i, p in enumerate(prefixes)}     # prefix -> state; "" (root) is 0
        alphabet = {c for t in triggers for c in t}
        # Edges of the automaton as regexes: (from, to) -> regex; "END" and triggers are sinks.
        edges: dict[tuple[Any, Any], str] = {}
        for p in prefixes:
            by_target: dict[Any, set[str]] = {}
            for c in alphabet:
                by_target.setdefault(self._next(p + c), set()).add(c)
            src = self.states[p]
            for target, chars in by_target.items():
                if target != 0:
                    edges[src, target] = _char_class(chars, negated=False)
            # Every character that leads back to the root (all but those above) as one class.
            leaving = set().union(*(chars for target, chars in by_target.items() if target != 0)) if by_target else set()
            edges[src, 0] = _char_class(leaving, negated=True) if leaving else r"[\s\S]"
            edges[src, "END"] = ""
        self._eliminate(edges, order=[self.states[p] for p in reversed(prefixes) if p])
        loop = _star(edges.get((0, 0), ""))
        self.until_end = loop + edges[0, "END"]
        self.until_trigger = {t: loop + edges[0, ("trigger", t)] for t in triggers}

    def _next(self, text: str) -> Any:
        """The automaton state after `text`: a full trigger's sink, or the longest prefix it ends with."""
        # BEGIN SOLUTION task6_1
        for t in self.triggers:
            if text.endswith(t):
                return ("trigger", t)
        for start in range(len(text) + 1):
            if text[start:] in self.states:
                return self.states[text[start:]]
        return 0
        # END SOLUTION

    @staticmethod
    def _eliminate(edges: dict[tuple[Any, Any], str], order: list[int]) -> None:
        """Remove the states in `order` one by one, rerouting every path through them:
        p -> q -> r becomes p -> r labelled (p,q)(q,q)*(q,r), joined to any old (p,r)."""
        # BEGIN SOLUTION task6_1
        for q in order:
            loop = _star(edges.pop((q, q), ""))
            into = [(p, e) for (p, r), e in edges.items() if r == q]
            out = [(r, e) for (p, r), e in edges.items() if p == q]
            for key in [k for k in edges if q in k]:
                del edges[key]
            for p, e_in in into:
                for r, e_out in out:
                    path = e_in + loop + e_out
                    edges[p, r] = _alt([edges[p, r], path]) if (p, r) in edges else path
        # END SOLUTION


__all__ = ["FreeText", "StructuralTag", "StructuralTagError", "TagStructure", "literal", "parse_structural_tag"]
