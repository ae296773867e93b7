r"""A v2 structural tag (structural_tag_format.py) as ONE regex tree, for the fsm backend's lazy automaton.

Each format becomes a regex_ast node; the semantics are structural_tag_format.py's:

- `const_string` is its text; `regex` is the pattern read as Python's `re` reads it (our
  parser, lazy_regex_parser.py); `json_schema` is our JSON Schema compiler's tree
  (`schema_tree(schema, whitespace)`, the engine's options), with at most one space where
  JSON allows whitespace (so any `max_whitespace_cnt` >= 1 holds; 0: none);
- `sequence`, `or`, `optional`, `plus`, `star`, `repeat` are concatenation, alternation and
  counted repetition;
- `tag` is begin, content, one of the ends;
- `any_text` is "any text minus (any text, a forbidden string, any text)", the lazy
  automaton's difference operator, where the forbidden strings are its excludes plus the
  nearest enclosing tag's ends; `max_chars` intersects it with `.{0,n}`;
- `triggered_tags` is stage s6's loop (structural_tag.py's `to_regex`), with free text up
  to the first trigger written as `FreeTextByDifference` writes it: (any text with no
  forbidden string and ending in no head of t) then t, where a head of t is what comes
  before t's start in a forbidden string that ends inside t;
- `tags_with_separator` is `T (sep T)*`, optional unless `at_least_one`, cut to one tag by
  `stop_after_first`;
- `dispatch` is `triggered_tags`'s loop with each pattern for a trigger and its rule's
  format after it (its free text does not stop at an enclosing tag's end).

A `grammar` (GBNF) is written out as a regex when no rule refers to itself (gbnf_regex.py).
Refused by name (StructuralTagFormatError, with the format's path): a recursive `grammar`
(a context-free grammar; this automaton is regular) or a Lark one, the token-level formats and a
tag's token begin or end (the automaton reads bytes, not token ids), `any_text.max_tokens`,
`json_schema` with a `style` other than "json", `any_order` or `excludes` (xgrammar's
own relaxations), and forbidden strings of which one holds another (the "first trigger"
would be two places at once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .gbnf_regex import GrammarNotRegular, gbnf_regex
from .lazy_regex_parser import parse_tree
from .regex_ast import (
    EPSILON,
    Alt,
    And,
    Chars,
    Diff,
    Regex,
    Repeat,
    Seq,
    Shared,
    Text,
    alt,
    chars,
    concat,
    difference,
    intersect,
    lit,
    repeat,
)
from .regex_dfa import RegexError
from .structural_tag_format import (
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
)

ANY = chars([(0, 0x10FFFF)])
ANY_TEXT = repeat(ANY, 0, None)
# Bounds on the strings free text must avoid (the old shape's TagLimits defaults): each, and
# all of one format's together.
MAX_FORBIDDEN_BYTES = 256
MAX_FORBIDDEN_TOTAL = 4096
# Where JSON allows whitespace: at most one space (json_schema/'s default layout).
ONE_SPACE = "[ ]?"

# schema_tree(schema, whitespace): our JSON Schema compiler's tree; whitespace None: the engine's.
SchemaTree = Callable[[dict[str, Any] | bool, str | None], Regex]


def format_regex(spec: StructuralTagFormat, schema_tree: SchemaTree, backend: str = "fsm") -> Regex:
    """The regex tree of every output `spec` accepts (see the module doc); `backend`: the
    grammar backend a refusal names."""
    return _Compiler(schema_tree, backend).node("structural_tag.format", spec.format, None)


class _Compiler:
    def __init__(self, schema_tree: SchemaTree, backend: str):
        self.schema_tree = schema_tree
        self.backend = backend

    def node(self, where: str, fmt: Format, stops: tuple[str, ...] | None) -> Regex:
        """`fmt`'s regex; `stops`: the nearest enclosing tag's ends (None at the top level)."""
        if isinstance(fmt, ConstStringFormat):
            return lit(fmt.value)
        if isinstance(fmt, RegexFormat):
            try:
                return parse_tree(fmt.pattern)
            except RegexError as e:
                raise StructuralTagFormatError(f"{where}.pattern: {e}") from e
        if isinstance(fmt, JSONSchemaFormat):
            return self.json_schema(where, fmt)
        if isinstance(fmt, AnyTextFormat):
            return self.any_text(where, fmt, stops)
        if isinstance(fmt, SequenceFormat):
            return concat(*(self.node(f"{where}.elements[{i}]", e, stops) for i, e in enumerate(fmt.elements)))
        if isinstance(fmt, OrFormat):
            return _some(where, alt(self.node(f"{where}.elements[{i}]", e, stops) for i, e in enumerate(fmt.elements)))
        if isinstance(fmt, (OptionalFormat, PlusFormat, StarFormat, RepeatFormat)):
            body = self.node(f"{where}.content", fmt.content, stops)
            low, high = {
                OptionalFormat: (0, 1),
                PlusFormat: (1, None),
                StarFormat: (0, None),
            }.get(type(fmt), (0, 0))
            if isinstance(fmt, RepeatFormat):
                low, high = fmt.min, None if fmt.max == -1 else fmt.max
            return repeat(body, low, high)
        if isinstance(fmt, TagFormat):
            return self.tag(where, fmt)
        if isinstance(fmt, TriggeredTagsFormat):
            return self.triggered_tags(where, fmt, stops)
        if isinstance(fmt, TagsWithSeparatorFormat):
            one = _some(where, alt(self.tag(f"{where}.tags[{i}]", t) for i, t in enumerate(fmt.tags)))
            if fmt.stop_after_first:
                return one if fmt.at_least_one else repeat(one, 0, 1)
            many = concat(one, repeat(concat(lit(fmt.separator), one), 0, None))
            return many if fmt.at_least_one else repeat(many, 0, 1)
        if isinstance(fmt, DispatchFormat):
            return self.dispatch(where, fmt, stops)
        if isinstance(fmt, GrammarFormat):
            if fmt.syntax != "ebnf":
                raise StructuralTagFormatError(
                    f"{where}.syntax: the {self.backend!r} backend reads a grammar in GBNF ('ebnf') only, "
                    f"not {fmt.syntax!r}: the 'xgrammar' backend reads Lark"
                )
            try:
                return gbnf_regex(fmt.grammar)
            except GrammarNotRegular as e:
                if e.malformed:  # (no backend serves it: none is suggested)
                    raise StructuralTagFormatError(f"{where}.grammar: not a GBNF grammar: {e}") from e
                raise StructuralTagFormatError(
                    f"{where}.grammar: the {self.backend!r} backend takes a grammar only when it is a regular "
                    f"expression (no rule refers to itself), and here {e}: the 'xgrammar' backend serves "
                    "any context-free grammar"
                ) from e
        if isinstance(fmt, (TokenFormat, ExcludeTokenFormat, AnyTokensFormat)):
            raise _token_level(where, fmt.TYPE, self.backend)
        raise StructuralTagFormatError(f"{where}: format {type(fmt).__name__} has no regex")  # pragma: no cover

    def json_schema(self, where: str, fmt: JSONSchemaFormat) -> Regex:
        for field, bad, why in (
            ("style", fmt.style != "json", f"style {fmt.style!r} (only 'json')"),
            ("any_order", fmt.any_order, "any_order (xgrammar's: keys in any order, required keys unchecked)"),
            ("excludes", bool(fmt.excludes), "excludes (substrings kept out of JSON strings)"),
        ):
            if bad:
                raise StructuralTagFormatError(
                    f"{where}.{field}: the {self.backend!r} backend does not serve json_schema {why}; "
                    "the 'xgrammar' backend does"
                )
        cnt = fmt.max_whitespace_cnt
        whitespace = None if cnt is None else "" if cnt == 0 else ONE_SPACE
        try:
            return self.schema_tree(fmt.json_schema, whitespace)
        except ValueError as e:  # (our compiler's errors are ValueError subclasses with one message)
            raise type(e)(f"{where}.json_schema: {e}") from e

    def any_text(self, where: str, fmt: AnyTextFormat, stops: tuple[str, ...] | None) -> Regex:
        if fmt.max_tokens is not None:
            raise StructuralTagFormatError(
                f"{where}.max_tokens: the {self.backend!r} backend does not count tokens in a format (it reads bytes); "
                "max_chars bounds characters, or the 'xgrammar' backend serves max_tokens"
            )
        forbidden = _forbidden(where, fmt.excludes, stops)
        text = _without(forbidden)
        if fmt.max_chars is not None:
            return intersect(text, repeat(ANY, 0, fmt.max_chars)) or EPSILON
        return text

    def tag(self, where: str, fmt: TagFormat) -> Regex:
        for key, part in (("begin", fmt.begin), ("end", fmt.end)):
            if isinstance(part, TokenFormat):
                raise _token_level(f"{where}.{key}", "token", self.backend)
        assert isinstance(fmt.begin, str)
        ends = fmt.ends
        content = self.node(f"{where}.content", fmt.content, ends)
        end = alt(lit(e) for e in ends)
        return concat(lit(fmt.begin), content, _some(where, end))

    def dispatch(self, where: str, fmt: DispatchFormat, stops: tuple[str, ...] | None) -> Regex:
        """Free text up to the first pattern, then that rule's format; the enclosing tag's
        ends are not forbidden here (they reach only the rules' formats)."""
        forbidden = _forbidden(where, fmt.excludes, None, triggers=tuple(p for p, _ in fmt.rules))
        loop = _some(
            where,
            alt(
                concat(_until(p, forbidden), self.node(f"{where}.rules[{i}][1]", f, stops))
                for i, (p, f) in enumerate(fmt.rules)
            ),
        )
        free = _without(forbidden)
        return concat(repeat(loop, 0, None), free) if fmt.loop else _some(where, alt([loop, free]))

    def triggered_tags(self, where: str, fmt: TriggeredTagsFormat, stops: tuple[str, ...] | None) -> Regex:
        forbidden = _forbidden(where, fmt.excludes, stops, triggers=fmt.triggers)
        body: dict[str, list[Regex]] = {}  # trigger -> its tags after the trigger
        first: list[Regex] = []  # whole tags (at_least_one: the output starts with one)
        for i, tag in enumerate(fmt.tags):
            t = fmt.trigger_of(tag)
            assert isinstance(tag.begin, str)
            # The tag after its trigger (its content compiled once: a tool's schema can be large).
            rest = self.tag(f"{where}.tags[{i}]", TagFormat(tag.begin[len(t) :], tag.content, tag.end))
            body.setdefault(t, []).append(rest)
            first.append(concat(lit(t), rest))
        free = _without(forbidden)
        loop = _some(
            where,
            alt(concat(_until(t, forbidden), _some(where, alt(rests))) for t, rests in body.items()),
        )
        one = _some(where, alt(first))
        if fmt.at_least_one and fmt.stop_after_first:
            return one
        if fmt.at_least_one:
            return concat(one, repeat(loop, 0, None), free)
        if fmt.stop_after_first:
            return _some(where, alt([loop, free]))
        return concat(repeat(loop, 0, None), free)


def _forbidden(
    where: str, own: tuple[str, ...], stops: tuple[str, ...] | None, triggers: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """The strings free text must not hold: a format's `triggers` (triggered_tags' triggers,
    dispatch's patterns), its own excludes (`own`) and the nearest enclosing tag's ends.
    Refused when a tag end is empty, and, where the FIRST one to complete matters (where
    there are triggers), when one holds another. An exclude or end listed twice (a tag's
    end also in its triggered_tags' excludes, which xgrammar serves) is one string; a
    trigger listed twice is refused (xgrammar: an exclude equal to a trigger keeps its
    tags out altogether)."""
    if stops is not None and any(not s for s in stops):
        raise StructuralTagFormatError(
            f"{where}: this format is unlimited (it can take any text), so the tag around it needs "
            "non-empty end strings to know where it stops"
        )
    listed = (*triggers, *own, *(stops or ()))
    # Bounded as the old shape's triggers are (TagLimits): finding the heads (`_until`) reads
    # every suffix of every string, so a 20,000-character trigger took 1.3 s, 200,000 minutes.
    for text in listed:
        if len(text.encode("utf-8")) > MAX_FORBIDDEN_BYTES:
            raise StructuralTagFormatError(
                f"{where}: {_clipped(text)} is {len(text.encode('utf-8')):,} bytes long; a trigger, exclude, "
                f"pattern or end kept out of free text may be at most {MAX_FORBIDDEN_BYTES} bytes"
            )
    total = sum(len(text.encode("utf-8")) for text in listed)
    if total > MAX_FORBIDDEN_TOTAL:
        raise StructuralTagFormatError(
            f"{where}: the strings kept out of this free text are {total:,} bytes together; the limit is "
            f"{MAX_FORBIDDEN_TOTAL:,}"
        )
    distinct = (*triggers, *dict.fromkeys((*own, *(stops or ()))))
    for i, a in enumerate(distinct if triggers else ()):
        for j, b in enumerate(distinct):
            if i != j and a in b:
                raise StructuralTagFormatError(
                    f"{where}: {a!r} is {'listed twice' if a == b else f'inside {b!r}'} (its triggers, excludes "
                    "and the enclosing tag's ends are kept out of free text, and no one of them may hold another)"
                )
    return tuple(dict.fromkeys(listed))


def _clipped(text: str, limit: int = 40) -> str:
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text):,} characters)"


def _without(forbidden: tuple[str, ...]) -> Regex:
    """Any text in which no string of `forbidden` occurs."""
    if not forbidden:
        return ANY_TEXT
    inside = concat(ANY_TEXT, _some("", alt(lit(s) for s in forbidden)), ANY_TEXT)
    return difference(ANY_TEXT, inside) or EPSILON


def _until(t: str, forbidden: tuple[str, ...]) -> Regex:
    """Free text, then trigger t where t is the first forbidden string that completes:
    the text holds no forbidden string and ends in no head of t (structural_tag._heads)."""
    heads = sorted({u[:k] for u in forbidden for k in range(1, len(u)) if t.startswith(u[k:]) and u[k:] != t})
    bad = alt(
        [concat(ANY_TEXT, _some("", alt(lit(s) for s in forbidden)), ANY_TEXT)]
        + [concat(ANY_TEXT, lit(h)) for h in heads]
    )
    return concat(difference(ANY_TEXT, bad) or EPSILON, lit(t))


def _some(where: str, node: Regex | None) -> Regex:
    if node is None:  # (only from an empty list, which the parser refuses)
        raise StructuralTagFormatError(f"{where}: matches no string at all")
    return node


def _token_level(where: str, kind: str, backend: str) -> StructuralTagFormatError:
    return StructuralTagFormatError(
        f"{where}: the {backend!r} backend does not serve the token-level format {kind!r} (this translation "
        "reads bytes, not token ids): the 'xgrammar' backend does"
    )


# ---------------------------------------------------------------------------- as Lark, for llguidance
def lark_grammar(tree: Regex) -> str:
    """`tree` as a Lark grammar for llguidance whose whole output is ONE lexeme (terminal
    `ALL`): its lexer is greedy, so a rule of several lexemes beside free text could split
    the output differently from the regex; one lexeme cannot. Text and classes are regexes
    with every character as `\\x{HEX}`, intersection and difference llguidance's `&` and
    `& ~`. Every composite node is its own terminal, written once however often the tree
    uses it: a tree is a graph (a separated list uses its tag twice), and written out in
    place nested lists doubled the text at each level (20 levels: 18 s), and llguidance
    refused 10 levels of parentheses ("too deeply nested")."""
    names: dict[Regex, str] = {}
    lines: list[str] = []

    def text(node: Regex) -> str:
        if isinstance(node, Text):
            return "/" + "".join(_hex(ord(c)) for c in node.text) + "/"
        if isinstance(node, Chars):
            if not node.ranges:
                return '("a" & "b")'  # no string at all
            return "/[" + "".join(_hex(a) if a == b else f"{_hex(a)}-{_hex(b)}" for a, b in _scalar(node.ranges)) + "]/"
        if isinstance(node, Seq) and not node.parts:
            return '""'
        if isinstance(node, Shared):
            return text(node.body)
        name = names.get(node)
        if name is None:
            body = composite(node)
            name = names[node] = f"T{len(names)}"
            lines.append(f"{name}: {body}")
        return name

    def composite(node: Regex) -> str:
        if isinstance(node, Seq):
            return " ".join(text(p) for p in node.parts)
        if isinstance(node, Alt):
            return " | ".join(text(o) for o in node.options)
        if isinstance(node, Repeat):
            high = "" if node.high is None else str(node.high)
            return f"{text(node.body)}{{{node.low},{high}}}"
        if isinstance(node, And):
            return f"{text(node.a)} & {text(node.b)}"
        if isinstance(node, Diff):
            return f"{text(node.a)} & ~{text(node.b)}"
        raise StructuralTagFormatError(f"llguidance cannot be given this regex node ({type(node).__name__})")

    whole = text(tree)
    return "\n".join(["start: ALL", f"ALL: {whole}", *lines, ""])


def _hex(code: int) -> str:
    return f"\\x{{{code:x}}}"


def _scalar(ranges: tuple[tuple[int, int], ...]) -> list[tuple[int, int]]:
    """`ranges` without the surrogates (no Unicode scalar value, refused in a Rust regex)."""
    out = []
    for a, b in ranges:
        for lo, hi in ((a, min(b, 0xD7FF)), (max(a, 0xE000), b)):
            if lo <= hi:
                out.append((lo, hi))
    return out


__all__ = ["format_regex", "lark_grammar"]
