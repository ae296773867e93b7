"""Structural tag v2 parsing: JSON (text or parsed) -> structural_tag_format.py's frozen dataclasses.

`parse_structural_tag_format` reads `{"type": "structural_tag", "format": {...}}`;
`parse_any_structural_tag` reads either shape (v2 when it has `format`, else the old
`{structures, triggers}` of structural_tag.py), what a grammar backend's `structural_tag`
request holds. Every refusal names the path of the field at fault
(`structural_tag.format.tags[2].content.type: ...`); bounds on depth, size, repeats and
string lists are checked here, before anything is built.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .structural_tag import StructuralTag, TriggerPrefixes, checked_text, json_type, parse_structural_tag
from .structural_tag_format import (
    FORMATS,
    JSON_STYLES,
    MAX_DEPTH,
    MAX_NODES,
    MAX_REPEAT,
    MAX_STRINGS,
    NOT_SERVED,
    AnyTextFormat,
    AnyTokensFormat,
    ConstStringFormat,
    DispatchFormat,
    ExcludeTokenFormat,
    Format,
    GrammarFormat,
    JSONSchemaFormat,
    OptionalFormat,
    OrFormat,
    PlusFormat,
    RegexFormat,
    RepeatFormat,
    SequenceFormat,
    StarFormat,
    StructuralTagFormat,
    StructuralTagFormatError,
    TagFormat,
    TagsWithSeparatorFormat,
    TokenFormat,
    TriggeredTagsFormat,
    is_v2,
)


def parse_any_structural_tag(spec: Any) -> StructuralTag | StructuralTagFormat:
    """A structural_tag spec of either shape (a dict, or its JSON text, parsed once): v2
    when it has `format`, else the old `{structures, triggers}` (structural_tag.py)."""
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except (ValueError, RecursionError) as e:
            raise StructuralTagFormatError(f"structural_tag is not valid JSON: {e}") from None
    if is_v2(spec):
        return parse_structural_tag_format(spec)
    return parse_structural_tag(spec)


# ---------------------------------------------------------------------------- parsing
def parse_structural_tag_format(spec: Any) -> StructuralTagFormat:
    """A v2 spec (a dict, or its JSON text) -> StructuralTagFormat; StructuralTagFormatError
    names the path of what is wrong. Schemas, regexes and grammars are only checked for their
    JSON type here: compiling them reports their own errors."""
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except (ValueError, RecursionError) as e:
            raise StructuralTagFormatError(f"structural_tag is not valid JSON: {e}") from None
    if not isinstance(spec, dict):
        raise StructuralTagFormatError(f"structural_tag must be an object, got {json_type(spec)}")
    _keys("structural_tag", spec, required=("format",), optional=("type",))
    if spec.get("type", "structural_tag") != "structural_tag":
        raise StructuralTagFormatError(f"structural_tag.type must be 'structural_tag', got {spec['type']!r}")
    return StructuralTagFormat(_Parser().format("structural_tag.format", spec["format"], 0))


class _Parser:
    def __init__(self) -> None:
        self.nodes = 0

    def format(self, where: str, value: Any, depth: int) -> Format:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise StructuralTagFormatError(f"{where}: the spec has more than {MAX_NODES} formats")
        if depth > MAX_DEPTH:
            raise StructuralTagFormatError(f"{where}: formats nest more than {MAX_DEPTH} deep")
        if not isinstance(value, dict):
            raise StructuralTagFormatError(f"{where} must be a format (an object with a type), got {json_type(value)}")
        if "type" not in value:
            raise StructuralTagFormatError(f"{where}.type is missing (one of {sorted(FORMATS)})")
        kind = value["type"]
        if kind in NOT_SERVED:
            raise StructuralTagFormatError(
                f"{where}.type: {kind!r} is an xgrammar format minisglang does not take (it takes {sorted(FORMATS)})"
            )
        if not isinstance(kind, str) or kind not in FORMATS:
            raise StructuralTagFormatError(f"{where}.type: unknown format type {kind!r}; known: {sorted(FORMATS)}")
        parse: Callable[[str, dict[str, Any], int], Format] = getattr(self, "_" + kind)
        return parse(where, value, depth)

    # primitives
    def _const_string(self, where: str, v: dict[str, Any], depth: int) -> Format:
        _keys(where, v, ("value",))
        return ConstStringFormat(_text(f"{where}.value", v["value"]))

    def _json_schema(self, where: str, v: dict[str, Any], depth: int) -> Format:
        _keys(where, v, ("json_schema",), ("style", "any_order", "max_whitespace_cnt", "excludes"))
        schema = v["json_schema"]
        if not isinstance(schema, (dict, bool)):
            raise StructuralTagFormatError(
                f"{where}.json_schema must be a JSON Schema (an object or a boolean), got {json_type(schema)}"
            )
        style = v.get("style", "json")
        if style not in JSON_STYLES:
            raise StructuralTagFormatError(f"{where}.style must be one of {list(JSON_STYLES)}, got {style!r}")
        cnt = v.get("max_whitespace_cnt")
        if cnt is not None:
            cnt = _count(f"{where}.max_whitespace_cnt", cnt)
        return JSONSchemaFormat(
            schema,
            style,
            _flag(f"{where}.any_order", v.get("any_order", False)),
            cnt,
            _strings(f"{where}.excludes", v.get("excludes", [])),
        )

    def _grammar(self, where: str, v: dict[str, Any], depth: int) -> Format:
        _keys(where, v, ("grammar",), ("syntax",))
        syntax = v.get("syntax", "ebnf")
        if syntax not in ("ebnf", "lark"):
            raise StructuralTagFormatError(f"{where}.syntax must be 'ebnf' or 'lark', got {syntax!r}")
        return GrammarFormat(_text(f"{where}.grammar", v["grammar"], nonempty=True), syntax)

    def _regex(self, where: str, v: dict[str, Any], depth: int) -> Format:
        _keys(where, v, ("pattern",))
        return RegexFormat(_text(f"{where}.pattern", v["pattern"]))

    def _any_text(self, where: str, v: dict[str, Any], depth: int) -> Format:
        _keys(where, v, (), ("excludes", "max_tokens", "max_chars"))
        bounds = {k: None if v.get(k) is None else _count(f"{where}.{k}", v[k]) for k in ("max_tokens", "max_chars")}
        return AnyTextFormat(_strings(f"{where}.excludes", v.get("excludes", [])), **bounds)

    # composition
    def _elements(self, where: str, v: dict[str, Any], depth: int) -> tuple[Format, ...]:
        _keys(where, v, ("elements",))
        elements = v["elements"]
        if not isinstance(elements, list) or not elements:
            raise StructuralTagFormatError(
                f"{where}.elements must be a non-empty list of formats, got "
                f"{'an empty list' if elements == [] else json_type(elements)}"
            )
        return tuple(self.format(f"{where}.elements[{i}]", e, depth + 1) for i, e in enumerate(elements))

    def _sequence(self, where: str, v: dict[str, Any], depth: int) -> Format:
        return SequenceFormat(self._elements(where, v, depth))

    def _or(self, where: str, v: dict[str, Any], depth: int) -> Format:
        return OrFormat(self._elements(where, v, depth))

    def _content(self, where: str, v: dict[str, Any], depth: int, more: tuple[str, ...] = ()) -> Format:
        _keys(where, v, ("content", *more))
        return self.format(f"{where}.content", v["content"], depth + 1)

    def _optional(self, where: str, v: dict[str, Any], depth: int) -> Format:
        return OptionalFormat(self._content(where, v, depth))

    def _plus(self, where: str, v: dict[str, Any], depth: int) -> Format:
        return PlusFormat(self._content(where, v, depth))

    def _star(self, where: str, v: dict[str, Any], depth: int) -> Format:
        return StarFormat(self._content(where, v, depth))

    def _repeat(self, where: str, v: dict[str, Any], depth: int) -> Format:
        content = self._content(where, v, depth, ("min", "max"))
        low = _count(f"{where}.min", v["min"])
        high = v["max"]
        if not (isinstance(high, int) and not isinstance(high, bool)) or high < -1:
            raise StructuralTagFormatError(f"{where}.max must be a whole number >= 0, or -1 for no bound, got {high!r}")
        if high != -1 and high < low:
            raise StructuralTagFormatError(f"{where}.max {high} is less than min {low}")
        if max(low, high) > MAX_REPEAT:
            raise StructuralTagFormatError(f"{where}: repeat bounds past {MAX_REPEAT} are refused")
        return RepeatFormat(low, high, content)

    # tags
    def _tag(self, where: str, v: dict[str, Any], depth: int) -> TagFormat:
        _keys(where, v, ("begin", "content", "end"))
        begin = self._text_or_token(f"{where}.begin", v["begin"], depth)
        end_value = v["end"]
        end: str | tuple[str, ...] | TokenFormat
        if isinstance(end_value, list):
            end = _strings(f"{where}.end", end_value, nonempty=False)
            if not end:
                raise StructuralTagFormatError(f"{where}.end is an empty list")
        else:
            end = self._text_or_token(f"{where}.end", end_value, depth)
        return TagFormat(begin, self.format(f"{where}.content", v["content"], depth + 1), end)

    def _text_or_token(self, where: str, value: Any, depth: int) -> str | TokenFormat:
        if isinstance(value, dict):
            fmt = self.format(where, value, depth + 1)
            if not isinstance(fmt, TokenFormat):
                raise StructuralTagFormatError(f"{where} must be a string or a token format, got a {fmt.TYPE!r} format")
            return fmt
        return _text(where, value)

    def _tags(self, where: str, values: Any, depth: int) -> tuple[TagFormat, ...]:
        if not isinstance(values, list) or not values:
            raise StructuralTagFormatError(
                f"{where} must be a non-empty list of tags, got "
                f"{'an empty list' if values == [] else json_type(values)}"
            )
        tags = []
        for i, value in enumerate(values):
            here = f"{where}[{i}]"
            if not isinstance(value, dict):
                raise StructuralTagFormatError(f"{here} must be a tag (an object), got {json_type(value)}")
            if value.get("type", "tag") != "tag":
                raise StructuralTagFormatError(f"{here}.type must be 'tag', got {value['type']!r}")
            self.nodes += 1
            tags.append(self._tag(here, {k: x for k, x in value.items() if k != "type"}, depth + 1))
        return tuple(tags)

    def _triggered_tags(self, where: str, v: dict[str, Any], depth: int) -> Format:
        _keys(where, v, ("triggers", "tags"), ("at_least_one", "stop_after_first", "excludes"))
        triggers = _strings(f"{where}.triggers", v["triggers"])
        if not triggers:
            raise StructuralTagFormatError(f"{where}.triggers is an empty list")
        if len(set(triggers)) != len(triggers):
            again = next(i for i, t in enumerate(triggers) if t in triggers[:i])
            raise StructuralTagFormatError(
                f"{where}.triggers[{again}] {triggers[again]!r} is listed twice; each tag must start with exactly one"
            )
        tags = self._tags(f"{where}.tags", v["tags"], depth)
        prefixes = TriggerPrefixes(triggers)
        for i, tag in enumerate(tags):
            if not isinstance(tag.begin, str):
                raise StructuralTagFormatError(
                    f"{where}.tags[{i}].begin must be a string in triggered_tags (a token begin: token_triggered_tags)"
                )
            matched = prefixes.starting(tag.begin)
            if len(matched) != 1:
                raise StructuralTagFormatError(
                    f"{where}.tags[{i}].begin {tag.begin!r} starts with {len(matched)} of the triggers "
                    f"{list(triggers)}; each tag must start with exactly one"
                )
        flags = {k: _flag(f"{where}.{k}", v.get(k, False)) for k in ("at_least_one", "stop_after_first")}
        return TriggeredTagsFormat(
            triggers, tags, **flags, excludes=_strings(f"{where}.excludes", v.get("excludes", []))
        )

    def _tags_with_separator(self, where: str, v: dict[str, Any], depth: int) -> Format:
        _keys(where, v, ("tags", "separator"), ("at_least_one", "stop_after_first"))
        tags = self._tags(f"{where}.tags", v["tags"], depth)
        flags = {k: _flag(f"{where}.{k}", v.get(k, False)) for k in ("at_least_one", "stop_after_first")}
        return TagsWithSeparatorFormat(tags, _text(f"{where}.separator", v["separator"]), **flags)

    def _dispatch(self, where: str, v: dict[str, Any], depth: int) -> Format:
        _keys(where, v, ("rules",), ("loop", "excludes"))
        rules = v["rules"]
        if not isinstance(rules, list) or not rules:
            raise StructuralTagFormatError(
                f"{where}.rules must be a non-empty list of [pattern, format] pairs, got "
                f"{'an empty list' if rules == [] else json_type(rules)}"
            )
        if len(rules) > MAX_STRINGS:
            raise StructuralTagFormatError(f"{where}.rules has {len(rules)} rules; at most {MAX_STRINGS} are taken")
        parsed = []
        for i, rule in enumerate(rules):
            here = f"{where}.rules[{i}]"
            if not isinstance(rule, list) or len(rule) != 2:
                raise StructuralTagFormatError(f"{here} must be a [pattern, format] pair, got {json_type(rule)}")
            parsed.append((_text(f"{here}[0]", rule[0], nonempty=True), self.format(f"{here}[1]", rule[1], depth + 1)))
        return DispatchFormat(
            tuple(parsed),
            _flag(f"{where}.loop", v.get("loop", True)),
            _strings(f"{where}.excludes", v.get("excludes", [])),
        )

    # token level
    def _token(self, where: str, v: dict[str, Any], depth: int) -> Format:
        _keys(where, v, ("token",))
        return TokenFormat(_token_ref(f"{where}.token", v["token"]))

    def _exclude_token(self, where: str, v: dict[str, Any], depth: int) -> Format:
        _keys(where, v, (), ("exclude_tokens",))
        return ExcludeTokenFormat(_token_refs(f"{where}.exclude_tokens", v.get("exclude_tokens", [])))

    def _any_tokens(self, where: str, v: dict[str, Any], depth: int) -> Format:
        _keys(where, v, (), ("exclude_tokens", "max_tokens"))
        cnt = v.get("max_tokens")
        return AnyTokensFormat(
            _token_refs(f"{where}.exclude_tokens", v.get("exclude_tokens", [])),
            None if cnt is None else _count(f"{where}.max_tokens", cnt),
        )


# ---------------------------------------------------------------------------- field checks
def _keys(where: str, v: dict[str, Any], required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
    known = ("type", *required, *optional)
    unknown = sorted(str(k) for k in v if k not in known)
    if unknown:
        raise StructuralTagFormatError(f"{where}.{unknown[0]}: unknown key (this format takes {list(known)})")
    for k in required:
        if k not in v:
            raise StructuralTagFormatError(f"{where}.{k} is missing")


def _text(where: str, value: Any, nonempty: bool = False) -> str:
    """`checked_text` raising v2's error."""
    return checked_text(where, value, nonempty, StructuralTagFormatError)


def _strings(where: str, values: Any, nonempty: bool = True) -> tuple[str, ...]:
    """A list of strings (each non-empty unless `nonempty` is False), at most MAX_STRINGS."""
    if not isinstance(values, list):
        raise StructuralTagFormatError(f"{where} must be a list of strings, got {json_type(values)}")
    if len(values) > MAX_STRINGS:
        raise StructuralTagFormatError(f"{where} has {len(values)} strings; at most {MAX_STRINGS} are taken")
    return tuple(_text(f"{where}[{i}]", s, nonempty) for i, s in enumerate(values))


def _flag(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise StructuralTagFormatError(f"{where} must be true or false, got {json_type(value)}")
    return value


def _count(where: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise StructuralTagFormatError(f"{where} must be a whole number >= 0, got {value!r}")
    if value > 2_147_483_647:
        raise StructuralTagFormatError(f"{where} {value} is past 2147483647")
    return value


def _token_ref(where: str, value: Any) -> int | str:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise StructuralTagFormatError(f"{where} must be a token id or a token string, got {json_type(value)}")
    if isinstance(value, int) and value < 0:
        raise StructuralTagFormatError(f"{where} must be a token id >= 0, got {value}")
    return value if isinstance(value, int) else _text(where, value, nonempty=True)


def _token_refs(where: str, values: Any) -> tuple[int | str, ...]:
    if not isinstance(values, list):
        raise StructuralTagFormatError(f"{where} must be a list of token ids or strings, got {json_type(values)}")
    if len(values) > MAX_STRINGS:
        raise StructuralTagFormatError(f"{where} has {len(values)} tokens; at most {MAX_STRINGS} are taken")
    return tuple(_token_ref(f"{where}[{i}]", x) for i, x in enumerate(values))


__all__ = ["parse_any_structural_tag", "parse_structural_tag_format"]
