"""Structural tag v2: `{"type": "structural_tag", "format": {...}}`, parsed into typed, frozen dataclasses.

This is the shape xgrammar (0.2) and SGLang take today. `format` is a small tree of formats:

- primitives: `const_string` (value), `json_schema` (json_schema, style, any_order,
  max_whitespace_cnt, excludes), `grammar` (grammar, syntax), `regex` (pattern),
  `any_text` (excludes, max_chars, max_tokens);
- composition: `sequence` and `or` (elements), `optional`, `plus`, `star` (content),
  `repeat` (min, max: -1 for no bound, content);
- tagging: `tag` (begin, content, end: one string or a list), `triggered_tags` (triggers,
  tags, at_least_one, stop_after_first, excludes), `tags_with_separator` (tags, separator,
  at_least_one, stop_after_first), `dispatch` (rules: [pattern, format] pairs, loop,
  excludes);
- token level: `token` (token), `exclude_token` (exclude_tokens), `any_tokens`
  (exclude_tokens, max_tokens).

Semantics (xgrammar's, checked against its GrammarMatcher in tests/test_structural_tag_regex.py;
structural_tag_regex.py writes them as one regex for the fsm backend):

- An *unlimited* format (`any_text`, `triggered_tags`) inside a `tag` stops at that tag's
  end: the end strings of the NEAREST enclosing tag join its excludes (a tag whose content
  holds one needs non-empty ends). At the top level nothing is added (`any_text` then
  `"x"` is `.*x`).
- `any_text`: text in which no exclude (nor that end) occurs; any split counts (with end
  "aa", "<aaa" is "<", the text "a", then the end).
- `triggered_tags`: free text (no trigger, exclude or end inside) up to the FIRST place a
  trigger completes, then one of the tags whose begin starts with that trigger; then free
  text again, and so on. `at_least_one`: it starts with a tag (no free text first);
  `stop_after_first`: nothing after the first tag. Each tag's begin starts with exactly one
  trigger.
- `tags_with_separator`: zero or more tags with the separator between them, nothing else
  (`at_least_one`: one or more; `stop_after_first`: at most one).
- `dispatch`: as `triggered_tags`, with each rule's pattern for a trigger and its format
  right after the pattern (no begin or end of its own); `loop` false: nothing after the
  first. It is not unlimited in the sense above: an enclosing tag's end is not kept out
  of its free text (xgrammar's docs: list the end in `excludes` to stop there).

Why a second parser beside structural_tag.py's (the old shape, `{"structures", "triggers"}`):
the old shape IS expressible in v2 terms (`from_legacy`: a `triggered_tags` of `tag`s with
`json_schema` content, which is what the xgrammar backend hands xgrammar), but it stays its
own parser and compiler because (1) it is stage s6's teaching material (its free-text
automaton and state elimination are the students' exercise, read by the eager automaton,
which cannot read v2's difference operator), and (2) it carries minisglang's own
`content_schema`, which v2 has no words for. The two compilers are held to each other:
tests compile old-shape specs both ways and require the same verdicts.

Every refusal is a `StructuralTagFormatError` whose message starts with the path of the
field at fault (`structural_tag.format.tags[2].content.type: ...`).

The parser is structural_tag_parse.py (`parse_structural_tag_format`, and
`parse_any_structural_tag` for either shape); this module holds the formats themselves.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar

from .structural_tag import StructuralTag, StructuralTagError, TriggerPrefixes

# Bounds checked while parsing, before anything is built.
MAX_DEPTH = 64  # formats inside formats
MAX_NODES = 4096  # formats in all
MAX_REPEAT = 1000  # a repeat's bounds
MAX_STRINGS = 256  # triggers, excludes or ends of one format


class StructuralTagFormatError(StructuralTagError):
    """A v2 structural tag that is not valid or not served; the message names the field's path."""


# ---------------------------------------------------------------------------- the formats
@dataclass(frozen=True)
class ConstStringFormat:
    TYPE: ClassVar[str] = "const_string"
    value: str


@dataclass(frozen=True)
class JSONSchemaFormat:
    TYPE: ClassVar[str] = "json_schema"
    json_schema: dict[str, Any] | bool
    style: str = "json"
    any_order: bool = False
    max_whitespace_cnt: int | None = None
    excludes: tuple[str, ...] = ()


@dataclass(frozen=True)
class GrammarFormat:
    TYPE: ClassVar[str] = "grammar"
    grammar: str
    syntax: str = "ebnf"


@dataclass(frozen=True)
class RegexFormat:
    TYPE: ClassVar[str] = "regex"
    pattern: str


@dataclass(frozen=True)
class AnyTextFormat:
    TYPE: ClassVar[str] = "any_text"
    excludes: tuple[str, ...] = ()
    max_tokens: int | None = None
    max_chars: int | None = None


@dataclass(frozen=True)
class SequenceFormat:
    TYPE: ClassVar[str] = "sequence"
    elements: tuple[Format, ...]


@dataclass(frozen=True)
class OrFormat:
    TYPE: ClassVar[str] = "or"
    elements: tuple[Format, ...]


@dataclass(frozen=True)
class OptionalFormat:
    TYPE: ClassVar[str] = "optional"
    content: Format


@dataclass(frozen=True)
class PlusFormat:
    TYPE: ClassVar[str] = "plus"
    content: Format


@dataclass(frozen=True)
class StarFormat:
    TYPE: ClassVar[str] = "star"
    content: Format


@dataclass(frozen=True)
class RepeatFormat:
    TYPE: ClassVar[str] = "repeat"
    min: int
    max: int  # -1: no upper bound
    content: Format


@dataclass(frozen=True)
class TokenFormat:
    TYPE: ClassVar[str] = "token"
    token: int | str


@dataclass(frozen=True)
class ExcludeTokenFormat:
    TYPE: ClassVar[str] = "exclude_token"
    exclude_tokens: tuple[int | str, ...] = ()


@dataclass(frozen=True)
class AnyTokensFormat:
    TYPE: ClassVar[str] = "any_tokens"
    exclude_tokens: tuple[int | str, ...] = ()
    max_tokens: int | None = None


@dataclass(frozen=True)
class TagFormat:
    """`begin content end`; `end` is one string, a list of them (any one ends it), or a token."""

    TYPE: ClassVar[str] = "tag"
    begin: str | TokenFormat
    content: Format
    end: str | tuple[str, ...] | TokenFormat

    @property
    def ends(self) -> tuple[str, ...]:
        """The end strings (a token end has none)."""
        return (self.end,) if isinstance(self.end, str) else () if isinstance(self.end, TokenFormat) else self.end


@dataclass(frozen=True)
class TriggeredTagsFormat:
    TYPE: ClassVar[str] = "triggered_tags"
    triggers: tuple[str, ...]
    tags: tuple[TagFormat, ...]
    at_least_one: bool = False
    stop_after_first: bool = False
    excludes: tuple[str, ...] = ()

    def trigger_of(self, tag: TagFormat) -> str:
        """The one trigger `tag.begin` starts with (checked by the parser)."""
        assert isinstance(tag.begin, str)
        return self._trigger_prefixes.starting(tag.begin)[0]

    @functools.cached_property
    def _trigger_prefixes(self) -> TriggerPrefixes:
        return TriggerPrefixes(self.triggers)


@dataclass(frozen=True)
class DispatchFormat:
    """Free text in which each rule's pattern, where it first appears, is followed by the
    rule's format; then free text again (`loop`) or the end of this format (not `loop`)."""

    TYPE: ClassVar[str] = "dispatch"
    rules: tuple[tuple[str, Format], ...]
    loop: bool = True
    excludes: tuple[str, ...] = ()


@dataclass(frozen=True)
class TagsWithSeparatorFormat:
    TYPE: ClassVar[str] = "tags_with_separator"
    tags: tuple[TagFormat, ...]
    separator: str
    at_least_one: bool = False
    stop_after_first: bool = False


Format = (
    ConstStringFormat
    | JSONSchemaFormat
    | GrammarFormat
    | RegexFormat
    | AnyTextFormat
    | SequenceFormat
    | OrFormat
    | OptionalFormat
    | PlusFormat
    | StarFormat
    | RepeatFormat
    | TagFormat
    | TriggeredTagsFormat
    | TagsWithSeparatorFormat
    | DispatchFormat
    | TokenFormat
    | ExcludeTokenFormat
    | AnyTokensFormat
)
FORMATS: dict[str, type[Any]] = {
    cls.TYPE: cls
    for cls in (
        ConstStringFormat,
        JSONSchemaFormat,
        GrammarFormat,
        RegexFormat,
        AnyTextFormat,
        SequenceFormat,
        OrFormat,
        OptionalFormat,
        PlusFormat,
        StarFormat,
        RepeatFormat,
        TagFormat,
        TriggeredTagsFormat,
        TagsWithSeparatorFormat,
        DispatchFormat,
        TokenFormat,
        ExcludeTokenFormat,
        AnyTokensFormat,
    )
}
TOKEN_FORMATS = ("token", "exclude_token", "any_tokens")
# xgrammar's formats that minisglang does not take (refused by name when parsed).
NOT_SERVED = ("token_dispatch", "token_triggered_tags", "qwen_xml_parameter")
JSON_STYLES = (
    "json",
    "qwen_xml",
    "minimax_xml",
    "minimax_m3_xml",
    "deepseek_xml",
    "glm_xml",
    "cohere_xml",
    "kimi_k3_xml",
    "deepseek_v4_1_xml",
    "gemma",
)


@dataclass(frozen=True)
class StructuralTagFormat:
    """A parsed v2 structural tag: `{"type": "structural_tag", "format": ...}`."""

    format: Format

    def to_dict(self) -> dict[str, Any]:
        """The v2 JSON object, every field written (what xgrammar is handed)."""
        return {"type": "structural_tag", "format": format_to_dict(self.format)}

    def to_json(self) -> str:
        """Canonical JSON text: equal specs give equal text (a grammar cache key)."""
        return json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False)

    def walk(self) -> list[tuple[str, Format]]:
        """Every format with its path (`format.elements[0]`), parents before children."""
        out: list[tuple[str, Format]] = []
        stack: list[tuple[str, Format]] = [("format", self.format)]
        while stack:
            path, fmt = stack.pop()
            out.append((path, fmt))
            stack.extend(reversed(list(_children(path, fmt))))
        return out


def rewrite(spec: StructuralTagFormat, change: Callable[[str, Format], Format]) -> StructuralTagFormat:
    """`spec` with every format passed through `change(path, format)`, children first (a
    backend's rewrites: a schema refused or rewritten as for a json_schema request)."""

    def node(path: str, fmt: Any) -> Any:
        if isinstance(fmt, (SequenceFormat, OrFormat)):
            fmt = replace(fmt, elements=tuple(node(f"{path}.elements[{i}]", e) for i, e in enumerate(fmt.elements)))
        elif isinstance(fmt, (OptionalFormat, PlusFormat, StarFormat, RepeatFormat, TagFormat)):
            fmt = replace(fmt, content=node(f"{path}.content", fmt.content))
        elif isinstance(fmt, (TriggeredTagsFormat, TagsWithSeparatorFormat)):
            fmt = replace(fmt, tags=tuple(node(f"{path}.tags[{i}]", t) for i, t in enumerate(fmt.tags)))
        elif isinstance(fmt, DispatchFormat):
            fmt = replace(fmt, rules=tuple((p, node(f"{path}.rules[{i}][1]", f)) for i, (p, f) in enumerate(fmt.rules)))
        return change(path, fmt)

    return StructuralTagFormat(node("format", spec.format))


def _children(path: str, fmt: Format) -> list[tuple[str, Format]]:
    if isinstance(fmt, (SequenceFormat, OrFormat)):
        return [(f"{path}.elements[{i}]", e) for i, e in enumerate(fmt.elements)]
    if isinstance(fmt, (OptionalFormat, PlusFormat, StarFormat, RepeatFormat, TagFormat)):
        out = [(f"{path}.content", fmt.content)]
        if isinstance(fmt, TagFormat):
            out += [
                (f"{path}.{k}", v) for k, v in (("begin", fmt.begin), ("end", fmt.end)) if isinstance(v, TokenFormat)
            ]
        return out
    if isinstance(fmt, (TriggeredTagsFormat, TagsWithSeparatorFormat)):
        return [(f"{path}.tags[{i}]", t) for i, t in enumerate(fmt.tags)]
    if isinstance(fmt, DispatchFormat):
        return [(f"{path}.rules[{i}][1]", f) for i, (_, f) in enumerate(fmt.rules)]
    return []


def format_to_dict(fmt: Format) -> dict[str, Any]:
    """One format as xgrammar's JSON object (tuples as lists, nested formats as objects)."""

    def value(v: Any) -> Any:
        if isinstance(v, tuple):
            return [value(x) for x in v]
        if type(v) in FORMATS.values():
            return format_to_dict(v)
        return v

    return {"type": fmt.TYPE, **{f.name: value(getattr(fmt, f.name)) for f in fields(fmt)}}


def from_legacy(spec: StructuralTag) -> StructuralTagFormat:
    """The old shape in v2 terms: a `triggered_tags` of `tag`s with `json_schema` content (as
    xgrammar's `StructuralTag.from_legacy_structural_tag`). `content_schema` has no v2 form."""
    if spec.content_schema is not None:
        raise StructuralTagFormatError("structural_tag.content_schema has no v2 form")
    tags = tuple(TagFormat(s.begin, JSONSchemaFormat(s.schema), s.end) for s in spec.structures)
    return StructuralTagFormat(TriggeredTagsFormat(spec.triggers, tags, spec.at_least_one, spec.stop_after_first))


def is_v2(spec: Any) -> bool:
    """Whether a structural_tag spec (parsed JSON) is the v2 shape: an object with `format`."""
    return isinstance(spec, dict) and "format" in spec


__all__ = [
    "FORMATS",
    "AnyTextFormat",
    "AnyTokensFormat",
    "ConstStringFormat",
    "DispatchFormat",
    "ExcludeTokenFormat",
    "Format",
    "GrammarFormat",
    "JSONSchemaFormat",
    "OptionalFormat",
    "OrFormat",
    "PlusFormat",
    "RegexFormat",
    "RepeatFormat",
    "SequenceFormat",
    "StarFormat",
    "StructuralTagFormat",
    "StructuralTagFormatError",
    "TagFormat",
    "TagsWithSeparatorFormat",
    "TokenFormat",
    "TriggeredTagsFormat",
    "format_to_dict",
    "from_legacy",
    "is_v2",
    "rewrite",
]
