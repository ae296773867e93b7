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
  valid under that structure's schema (our JSON Schema compiler, json_schema/, with the
  same options as a `json_schema` request), then that structure's end. Then free text
  again (scanned afresh from the end: a trigger never straddles an end and the text after
  it), and so on. A prefix of a trigger may end the output ("... <tool_c" then EOS).
- `at_least_one`: the output must hold a tag, and (as in xgrammar 0.2, which compiles it
  as "first tag, then the usual loop") it STARTS with one: no free text before the first
  tag. Free text may follow it unless `stop_after_first`.
- `stop_after_first`: after the first complete tag only EOS may follow.
- EOS is never allowed inside a tag (the regex has no accepting state there).
- `content_schema` (minisglang's, for OpenAI's response_format beside tools): the output is
  either a message, one JSON value valid under this schema with no trigger inside it, or
  tags only, back to back (no free text: free text would be a message outside the
  schema). With `at_least_one`, tags only. Only the lazy automaton reads it (it needs the
  difference operator to keep triggers out of the message).

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
repeated group once. State elimination's regexes can be exponential in the number of
triggers, so they are bounded as they are written (`TagLimits.max_free_text_chars`), and
for the lazy automaton `to_regex(..., automaton="lazy")` writes free text with its
difference operator instead (`FreeTextByDifference`). The triggers are held to
`TagLimits` when the spec is parsed, before anything is built.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

T = TypeVar("T")

# The keys a spec may have; "type" may only say "structural_tag" (SGLang's response_format).
_SPEC_KEYS = ("type", "structures", "triggers", "at_least_one", "stop_after_first", "content_schema")
_STRUCTURE_KEYS = ("begin", "schema", "end")
# Characters that mean something in a regex (outside or inside a class): written escaped.
_REGEX_SPECIAL = set(".^$*+?{}[]()|\\-#&~ ")
ANY_CHAR = r"[\s\S]"  # one character, whatever it is


class StructuralTagError(ValueError):
    """A structural tag spec that is not valid; the message names the field."""


@dataclass(frozen=True)
class TagLimits:
    """Bounds on a spec's triggers, checked by `parse_structural_tag` before anything is built.

    - max_triggers: how many triggers a spec may list;
    - max_trigger_bytes: the UTF-8 length of one trigger;
    - max_trigger_states: the triggers' automaton size, its number of states over bytes
      (the distinct proper prefixes of the UTF-8 triggers, which the lazy automaton's
      free-text states follow; see `FreeTextByDifference`);
    - max_free_text_chars: the regex text state elimination (`FreeText`, the plain-regex
      form the eager automaton reads) may write before it is refused: that text can grow
      about 4x per trigger whose first character no other trigger shares.
    """

    max_triggers: int = 128
    max_trigger_bytes: int = 256
    max_trigger_states: int = 4096
    max_free_text_chars: int = 200_000


@dataclass(frozen=True)
class TagStructure:
    """One kind of tag: `begin`, then a JSON value valid under `schema`, then `end`."""

    begin: str
    schema: dict[str, Any] | bool
    end: str


@dataclass(frozen=True)
class StructuralTag:
    """A parsed, validated structural tag (see the module doc for what it accepts)."""

    structures: tuple[TagStructure, ...]
    triggers: tuple[str, ...]
    at_least_one: bool = False
    stop_after_first: bool = False
    content_schema: dict[str, Any] | bool | None = None

    def to_json(self) -> str:
        """Canonical JSON text: equal specs give equal text (a grammar cache key)."""
        content = {} if self.content_schema is None else {"content_schema": self.content_schema}
        return json.dumps(
            {
                "structures": [{"begin": s.begin, "schema": s.schema, "end": s.end} for s in self.structures],
                "triggers": list(self.triggers),
                "at_least_one": self.at_least_one,
                "stop_after_first": self.stop_after_first,
                **content,
            },
            separators=(",", ":"),
            ensure_ascii=False,
        )

    def trigger_of(self, structure: TagStructure) -> str:
        """The one trigger `structure.begin` starts with."""
        return self._trigger_prefixes.starting(structure.begin)[0]

    @functools.cached_property
    def _trigger_prefixes(self) -> TriggerPrefixes:
        return TriggerPrefixes(self.triggers)

    def to_regex(
        self,
        schema_regex: Callable[[dict[str, Any] | bool], str],
        automaton: str = "eager",
        limits: TagLimits = TagLimits(),
    ) -> str:
        """The regex of every output this spec accepts; `schema_regex(schema)` compiles one schema.

        `automaton`: which automaton reads it. "eager" (the default): a plain regex (`re`
        reads it too), free text by state elimination, refused past
        `limits.max_free_text_chars`; "lazy": free text with the lazy automaton's
        difference operator, linear in the triggers (see `FreeTextByDifference`).
        """
        if automaton not in ("eager", "lazy"):
            raise ValueError(f"automaton must be 'eager' or 'lazy', got {automaton!r}")
        free = (FreeTextByDifference if automaton == "lazy" else FreeText)(self.triggers, limits.max_free_text_chars)
        # Per group of structures with one trigger, end and schema: the trigger, and the regex
        # of their tags after it. (Their begins differ; one group's tags are (b1|b2|...)S e,
        # the same words as b1 S e | b2 S e | ..., with the schema written once: 5,000 tools
        # of the schema `true` wrote its ~1.6 KB regex 5,000 times, twice, and took 42 s.)
        groups: dict[tuple[str, str, str], list[int]] = {}
        for i, s in enumerate(self.structures):
            groups.setdefault((self.trigger_of(s), s.end, json.dumps(s.schema, sort_keys=True)), []).append(i)
        trigger = [t for t, _, _ in groups]
        body = [
            _alt([literal(self.structures[i].begin[len(t) :]) for i in members])
            + f"(?:{self._schema_regex(members[0], schema_regex)}){literal(end)}"
            for (t, end, _), members in groups.items()
        ]
        # One loop iteration: free text up to the first trigger t, then one of t's tags.
        loop = _alt(
            [
                free.until_trigger[t] + _alt([b for b, u in zip(body, trigger) if u == t])
                for t in self.triggers
                if t in trigger
            ]
        )
        # A tag at the very start of the output (at_least_one: no free text before it).
        first = _alt([literal(t) + b for b, t in zip(body, trigger)])
        if self.content_schema is not None:  # a message, or tags only
            if automaton != "lazy":
                raise StructuralTagError(
                    "structural_tag.content_schema needs the lazy automaton (it keeps the triggers "
                    "out of the message with the difference operator)"
                )
            tags = first if self.stop_after_first else f"(?:{first})+"
            if self.at_least_one:
                return tags
            anything = f"{ANY_CHAR}*"
            any_trigger = _alt([literal(t) for t in self.triggers])
            message = _named("content_schema", self.content_schema, schema_regex)
            return _alt([_difference(message, f"{anything}{any_trigger}{anything}"), tags])
        if self.at_least_one and self.stop_after_first:
            return first
        if self.at_least_one:
            return f"{first}{_star(loop)}{free.until_end}"
        if self.stop_after_first:
            return _alt([loop, free.until_end])
        return f"{_star(loop)}{free.until_end}"

    def _schema_regex(self, i: int, schema_regex: Callable[[dict[str, Any] | bool], str]) -> str:
        """Structure i's schema compiled; the compiler's error says which structure it is, so
        a server can name the tool (its errors are ValueError subclasses with one message)."""
        return self._with_structure_named(i, schema_regex)

    def with_schemas(self, rewrite: Callable[[dict[str, Any] | bool], dict[str, Any] | bool]) -> StructuralTag:
        """This tag with each structure's schema passed through `rewrite` (a library backend's
        refusals and rewrites, the same as for its json_schema requests); an error names the
        structure, as `_schema_regex`'s does."""
        structures = tuple(
            replace(s, schema=self._with_structure_named(i, rewrite)) for i, s in enumerate(self.structures)
        )
        content = None if self.content_schema is None else _named("content_schema", self.content_schema, rewrite)
        return replace(self, structures=structures, content_schema=content)

    def _with_structure_named(self, i: int, use: Callable[[dict[str, Any] | bool], T]) -> T:
        """`use(structure i's schema)`; its error (a ValueError subclass) says which structure."""
        return _named(f"structures[{i}].schema", self.structures[i].schema, use)


def _named(where: str, schema: dict[str, Any] | bool, use: Callable[[dict[str, Any] | bool], T]) -> T:
    """`use(schema)`; its error (a ValueError subclass) says where in the tag the schema is."""
    try:
        return use(schema)
    except ValueError as e:
        raise type(e)(f"structural_tag.{where}: {e}") from e


# ------------------------------------------------------------------------- parsing
def parse_structural_tag(spec: Any, limits: TagLimits = TagLimits()) -> StructuralTag:
    """A spec (a dict, or its JSON text) -> StructuralTag; StructuralTagError names what is wrong.

    The triggers are held to `limits` here, before any automaton is built. Schemas are
    only checked to be JSON objects or booleans; compiling them (`StructuralTag.to_regex`)
    reports their own errors.
    """
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except (ValueError, RecursionError) as e:
            raise StructuralTagError(f"structural_tag is not valid JSON: {e}") from None
    if not isinstance(spec, dict):
        raise StructuralTagError(f"structural_tag must be an object, got {json_type(spec)}")
    unknown = sorted(k for k in spec if k not in _SPEC_KEYS)
    if unknown:
        raise StructuralTagError(f"structural_tag has unknown key(s) {unknown}; known: {list(_SPEC_KEYS)}")
    if "type" in spec and spec["type"] != "structural_tag":
        raise StructuralTagError(f"structural_tag.type must be 'structural_tag', got {spec['type']!r}")
    for key in ("structures", "triggers"):
        if key not in spec:
            raise StructuralTagError(f"structural_tag.{key} is missing")
        if not isinstance(spec[key], list) or not spec[key]:
            raise StructuralTagError(
                f"structural_tag.{key} must be a non-empty list, got "
                f"{'an empty list' if spec[key] == [] else json_type(spec[key])}"
            )
    triggers = _triggers(spec["triggers"], limits)
    for i, t in enumerate(triggers):
        for j, u in enumerate(triggers):
            if i != j and t in u:
                raise StructuralTagError(
                    f"structural_tag.triggers[{i}] {t!r} is {'the same as' if t == u else 'inside'} "
                    f"triggers[{j}] {u!r}: the first trigger in the text must be one place, so no trigger "
                    f"may contain another"
                )
    prefixes = TriggerPrefixes(triggers)
    structures = tuple(_structure(i, s, triggers, prefixes) for i, s in enumerate(spec["structures"]))
    flags = {}
    for key in ("at_least_one", "stop_after_first"):
        flags[key] = spec.get(key, False)
        if not isinstance(flags[key], bool):
            raise StructuralTagError(f"structural_tag.{key} must be true or false, got {json_type(flags[key])}")
    content = spec.get("content_schema")
    if content is not None and not isinstance(content, (dict, bool)):
        raise StructuralTagError(
            f"structural_tag.content_schema must be a JSON Schema (an object or a boolean), got {json_type(content)}"
        )
    return StructuralTag(structures, triggers, **flags, content_schema=content)


def _triggers(values: list[Any], limits: TagLimits) -> tuple[str, ...]:
    """The triggers, each a non-empty string, held to `limits` (the count first, so the
    later checks read a bounded number of them)."""
    if len(values) > limits.max_triggers:
        raise StructuralTagError(
            f"structural_tag.triggers has {len(values)} triggers; the limit max_triggers is {limits.max_triggers}"
        )
    triggers = []
    for i, value in enumerate(values):
        t = checked_text(f"structural_tag.triggers[{i}]", value, nonempty=True)
        size = len(t.encode("utf-8"))
        if size > limits.max_trigger_bytes:
            raise StructuralTagError(
                f"structural_tag.triggers[{i}] {_clipped(t)} is {size:,} bytes long; "
                f"the limit max_trigger_bytes is {limits.max_trigger_bytes}"
            )
        triggers.append(t)
    states = trigger_states(triggers)
    if states > limits.max_trigger_states:
        raise StructuralTagError(
            f"structural_tag.triggers make an automaton of {states:,} states (their distinct "
            f"prefixes, in bytes); the limit max_trigger_states is {limits.max_trigger_states:,}"
        )
    return tuple(triggers)


def trigger_states(triggers: Sequence[str]) -> int:
    """The size of the triggers' automaton over bytes: how many distinct proper prefixes
    their UTF-8 encodings have (the empty one included), i.e. the states of their trie."""
    return len({t.encode("utf-8")[:i] for t in triggers for i in range(len(t.encode("utf-8")))})


class TriggerPrefixes:
    """Triggers, asked which of them a text starts with: one set lookup per distinct trigger
    length, not a `startswith` per trigger (a tag of 1,200 structures and 128 triggers asked
    153,600 of those, 23 ms on the scheduler thread for each request: a stranger's stall hunt)."""

    def __init__(self, triggers: Iterable[str]):
        self.triggers = frozenset(triggers)
        self.lengths = sorted({len(t) for t in self.triggers})

    def starting(self, text: str) -> list[str]:
        """The triggers `text` starts with, shortest first."""
        return [text[:n] for n in self.lengths if text[:n] in self.triggers]


def _structure(i: int, s: Any, triggers: tuple[str, ...], prefixes: TriggerPrefixes) -> TagStructure:
    where = f"structural_tag.structures[{i}]"
    if not isinstance(s, dict):
        raise StructuralTagError(f"{where} must be an object with begin, schema and end, got {json_type(s)}")
    unknown = sorted(k for k in s if k not in _STRUCTURE_KEYS)
    if unknown:
        raise StructuralTagError(f"{where} has unknown key(s) {unknown}; known: {list(_STRUCTURE_KEYS)}")
    missing = [k for k in _STRUCTURE_KEYS if k not in s]
    if missing:
        raise StructuralTagError(f"{where} is missing {missing}")
    begin = checked_text(f"{where}.begin", s["begin"], nonempty=True)
    end = checked_text(f"{where}.end", s["end"])
    if not prefixes.starting(begin):
        raise StructuralTagError(f"{where}.begin {begin!r} starts with no trigger (triggers: {list(triggers)})")
    schema = s["schema"]
    if not isinstance(schema, (dict, bool)):
        raise StructuralTagError(
            f"{where}.schema must be a JSON Schema (an object or a boolean), got {json_type(schema)}"
        )
    return TagStructure(begin, schema, end)


def checked_text(
    where: str, value: Any, nonempty: bool = False, error: type[StructuralTagError] = StructuralTagError
) -> str:
    """`value` if it is a string (not empty, if `nonempty`) that UTF-8 can write; else `error`
    naming `where` (both parsers' strings: the old shape's and v2's, structural_tag_parse.py)."""
    if not isinstance(value, str):
        raise error(f"{where} must be a string, got {json_type(value)}")
    if nonempty and not value:
        raise error(f"{where} is empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise error(f"{where} is not valid Unicode text (a lone surrogate at character {e.start})") from None
    return value


def _clipped(text: str, limit: int = 40) -> str:
    """`text` quoted for a message, cut after `limit` characters."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text):,} characters)"


def json_type(value: Any) -> str:
    """What a JSON value is, for a message ("a string", "a number", "null")."""
    names = {
        bool: "a boolean",
        str: "a string",
        list: "a list",
        dict: "an object",
        type(None): "null",
        int: "a number",
        float: "a number",
    }
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
    if (
        regex == ""
        or len(regex) == 1
        or (len(regex) == 2 and regex[0] == "\\")
        or regex.startswith("\\x")
        and len(regex) == 4
    ):
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
    Built from the triggers' Aho-Corasick automaton by state elimination, as plain regexes
    (what `re` and the eager automaton read). Their size can be exponential in the number
    of triggers (about 4x per trigger with a first character of its own: 6 triggers of 8
    CJK characters make 370,000 characters each), so the text is bounded by `max_chars`
    as it grows; `FreeTextByDifference` writes the same languages in a size linear in the
    triggers, for the lazy automaton.
    """

    def __init__(self, triggers: tuple[str, ...], max_chars: int = TagLimits.max_free_text_chars):
        self.triggers = triggers
        prefixes = sorted({t[:i] for t in triggers for i in range(len(t))}, key=lambda p: (len(p), p))
        self.states = {p: i for i, p in enumerate(prefixes)}  # prefix -> state; "" (root) is 0
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
            leaving = (
                set().union(*(chars for target, chars in by_target.items() if target != 0)) if by_target else set()
            )
            edges[src, 0] = _char_class(leaving, negated=True) if leaving else r"[\s\S]"
            edges[src, "END"] = ""
        for q in [self.states[p] for p in reversed(prefixes) if p]:
            # The text can grow several times over with one state removed: the step is
            # refused when its result could pass the limit, before it is written.
            size = _size_after_eliminating(edges, q)
            if size > max_chars:
                raise StructuralTagError(
                    f"structural_tag.triggers: the regex of free text between these {len(triggers)} triggers would "
                    f"grow to {size:,} characters in state elimination; the limit max_free_text_chars is "
                    f"{max_chars:,} (the lazy automaton, automaton='lazy', reads them without it)"
                )
            self._eliminate(edges, order=[q])
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


class FreeTextByDifference:
    """`FreeText`'s two languages for the lazy automaton, written with its difference
    operator `(?@diff(A)(B))` (A's strings that B does not match; lazy_regex.py), so their
    text is linear in the triggers plus their heads (below; only triggers that overlap
    each other have any), whatever their first characters:

        until_end        = (any text)  minus  (text, a trigger, text)
        until_trigger[t] = (any text)  minus  (text, a trigger, text | text ending in a head of t),  then t

    A head of t is what comes before t's start in a trigger u that ends inside t: u = head
    + t[:j], 1 <= j < len(t), head not empty. "y then t" has its first trigger at its end
    exactly when y has no trigger and ends in no head of t (a trigger inside t other than
    t itself, or one ending at t's end but starting before it, would hold another).

    The lazy automaton's states for them are Brzozowski derivatives, which remember which
    prefixes of triggers the text ends with: the triggers' automaton over bytes again,
    made as generation reaches it. Writing t outside the difference matters: each new
    difference is checked for a match by a breadth-first walk, which here stops at once
    (free text may end almost anywhere), where "(any text, then t) minus ..." would walk
    every state within t's length. Only our parser reads the operator (not `re`, not the
    eager automaton).
    """

    def __init__(self, triggers: tuple[str, ...], max_chars: int = TagLimits.max_free_text_chars):
        self.triggers = triggers
        anything, any_trigger = f"{ANY_CHAR}*", _alt([literal(t) for t in triggers])
        self.until_end = _difference(anything, f"{anything}{any_trigger}{anything}")
        self.until_trigger = {}
        size = len(self.until_end)
        for t, heads in _heads(triggers).items():
            bad = _alt([any_trigger + anything] + [literal(h) for h in sorted(heads)])
            self.until_trigger[t] = _difference(anything, anything + bad) + literal(t)
            size += len(self.until_trigger[t])
            if size > max_chars:  # only triggers that overlap each other many times have many heads
                raise StructuralTagError(
                    f"structural_tag.triggers: the regex of free text between these {len(triggers)} triggers passes "
                    f"{size:,} characters (they overlap each other in many ways); the limit max_free_text_chars "
                    f"is {max_chars:,}"
                )


def _heads(triggers: tuple[str, ...]) -> dict[str, set[str]]:
    """Each trigger t's heads (see FreeTextByDifference): u[:k] for each trigger u whose
    rest u[k:] (not empty) is a proper prefix of t. Every proper suffix of every trigger is
    listed once, so the work is the triggers' length times the longest one."""
    before: dict[str, list[str]] = {}  # a proper suffix of a trigger -> what precedes it there
    for u in triggers:
        for k in range(1, len(u)):
            before.setdefault(u[k:], []).append(u[:k])
    return {t: {h for j in range(1, len(t)) for h in before.get(t[:j], ())} for t in triggers}


def _difference(a: str, b: str) -> str:
    """The lazy automaton's `A minus B` (lazy_regex.DIFF_SYNTAX)."""
    return f"(?@diff({a})({b}))"


def _size_after_eliminating(edges: dict[tuple[Any, Any], str], q: int) -> int:
    """An upper bound on the edges' total text once state q is eliminated: the edges that do
    not touch q, plus each new path `in + (loop)* + out`, joined to an old edge by `(?:a|b)`."""
    into = [len(e) for (p, r), e in edges.items() if r == q and p != q]
    out = [len(e) for (p, r), e in edges.items() if p == q and r != q]
    loop = len(edges.get((q, q), "")) + 5  # `(?:...)*`
    untouched = sum(len(e) for (p, r), e in edges.items() if q not in (p, r))
    return untouched + len(out) * sum(into) + len(into) * sum(out) + len(into) * len(out) * (loop + 5)


__all__ = [
    "FreeText",
    "FreeTextByDifference",
    "TagLimits",
    "StructuralTag",
    "StructuralTagError",
    "TagStructure",
    "literal",
    "parse_structural_tag",
]
