"""How much text a grammar can force in a row: the bounds that decide whether xgrammar's
jump-forward search runs.

xgrammar's `find_jump_forward_string` writes out every character the grammar forces from the
matcher's state, and the matcher keeps what it wrote: a native call on the scheduler thread
that no budget can cut, once per choice. So xgrammar grammars are served with jumps (a
speed-up only: outputs are the same without) only where a bound on any forced run of text is
at most JUMP_MAX_FORCED_CHARS.

Each bound over-counts on purpose. A run of forced text is at most the shortest text that
completes the grammar from where the run starts, and that is at most an output in which
every part is written once, every repeat as often as its minimum asks (at least once), every
alternation by its longest branch. A pattern's shortest match alone is no bound:
`a|b(cdefghij){2000}` is matched by "a", but after "b" it forces 16,000 characters (and
`a|b((cdefghij){1000}){1000}`, 30 characters of regex, forced 8 MB in a 2.3 s search: a
stranger's stall hunt found the same through GBNF rules that double, and v2 structural tags'
nested `repeat`s, which held every client 7-20 s and then failed xgrammar's allocation).
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from ..constrained import structural_tag_format as tag
from ..constrained.gbnf_regex import Element, GrammarNotRegular, parse_rules
from ..constrained.json_pointer import resolve_pointer
from .ignored_keywords import IgnoredKeyword, find_ignored_keyword, parsed_pattern, recursive_ref, subschemas

try:  # the items of Python's own regex parser (`parsed_pattern`)
    import re._parser as sre_parse  # Python >= 3.11
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse

UNBOUNDED = sys.maxsize
_ONE_CHARACTER = (sre_parse.LITERAL, sre_parse.NOT_LITERAL, sre_parse.ANY, sre_parse.IN)
_NO_CHARACTER = (sre_parse.AT, sre_parse.ASSERT, sre_parse.ASSERT_NOT)  # an anchor, a lookaround
# (the possessive repeat and the atomic group are Python 3.11's; on 3.10 no item is either)
_REPEATS = (sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT, getattr(sre_parse, "POSSESSIVE_REPEAT", None))
_ATOMIC_GROUP = getattr(sre_parse, "ATOMIC_GROUP", None)

# xgrammar's find_jump_forward_string writes out every forced character, at a cost that grows
# with the square of their number (a 1,000-item minItems array of nulls: 74 ms a call; 100,000:
# 22 s, then out of memory, the whole engine waiting; a stranger's fuzzer), and it never returns
# for a recursion whose members are all required. Such a schema is served without jumps.
JUMP_MAX_MIN_ITEMS = 256
# (a rule for find_ignored_keyword, the one walk over every subschema: not a refusal here)
_LONG_FORCED_ARRAY = IgnoredKeyword(
    "minItems", "", lambda s: isinstance(s["minItems"], (int, float)) and s["minItems"] > JUMP_MAX_MIN_ITEMS
)

# And it keeps what it wrote while the matcher lives: a schema of 6,000 required properties of
# type null (an 80 KB forced object, a 214 KB request) took 0.2-0.6 s a call and held ~480 MB a
# matcher; 32 choices of 10,000 of them got the server killed at 23.6 GB (a stranger's stall
# hunt). So jumps are served only where the text a search can find is bounded, and small
# (1,000 nulls, ~14k characters: ~0.02 s and ~10 MB a search; 5.5% of MaskBench's schemas over
# count past this bound, most of them by their length or recursion).
JUMP_MAX_FORCED_CHARS = 16384


def _capped(n: int) -> int:
    return min(n, UNBOUNDED)


def pattern_bound(pattern: str) -> int:
    """A bound on the characters a match of regex `pattern` (Python's syntax) can be forced
    to hold in a row; UNBOUNDED when Python cannot read it."""
    parsed = parsed_pattern(pattern)
    return UNBOUNDED if parsed is None else _sre_bound(parsed)


def _sre_bound(items: Any) -> int:
    """The bound of a sequence of sre items (sre_parse's parse): each item's, added up."""
    total = 0
    for op, arg in items:
        if op in _ONE_CHARACTER:
            total += 1
        elif op in _NO_CHARACTER:
            pass
        elif op == sre_parse.SUBPATTERN:
            total += _sre_bound(arg[-1])
        elif op == sre_parse.BRANCH:
            total += max(_sre_bound(branch) for branch in arg[1])
        elif op in _REPEATS:
            low, _high, body = arg
            total += _sre_bound(body) * max(low, 1)
        elif op == _ATOMIC_GROUP:
            total += _sre_bound(arg)
        else:  # (a back reference, a conditional group: no bound here)
            return UNBOUNDED
        total = _capped(total)
    return total


def gbnf_bound(text: str) -> int:
    """A bound on the characters GBNF `text`'s `root` can force in a row; UNBOUNDED for a
    recursive grammar (a rule that reaches itself can force without end: `r ::= "a" r`) and
    for text the GBNF reader does not take (it is compiled, or refused, by the library)."""
    try:
        rules = parse_rules(text)
    except (GrammarNotRegular, RecursionError):  # (groups nested past Python's stack)
        return UNBOUNDED
    done: dict[str, int] = {}

    def rule(name: str, path: frozenset[str]) -> int:
        if name in path or name not in rules:
            return UNBOUNDED
        if name not in done:
            done[name] = element(rules[name], path | {name})
        return done[name]

    def element(e: Element, path: frozenset[str]) -> int:
        kind = e[0]
        if kind == "text":
            return len(e[1])
        if kind == "class":
            return 1
        if kind == "ref":
            return rule(e[1], path)
        if kind == "alt":
            return max(_capped(sum(element(x, path) for x in seq)) for seq in e[1])
        return _capped(element(e[1], path) * max(e[2], 1))  # ("repeat", element, low, high)

    try:
        return rule("root", frozenset())
    except RecursionError:  # (rules nested past Python's stack)
        return UNBOUNDED


def format_bound(fmt: tag.Format) -> int:
    """A bound on the characters a v2 structural tag's format (structural_tag_format.py) can
    force in a row: its parts' bounds added up, a `repeat` times its minimum, an alternation
    (`or`, a tag among tags) by its longest; free text (`any_text`) and tokens force none."""
    if isinstance(fmt, tag.ConstStringFormat):
        return len(fmt.value)
    if isinstance(fmt, tag.JSONSchemaFormat):
        return schema_bound(fmt.json_schema)
    if isinstance(fmt, tag.RegexFormat):
        return pattern_bound(fmt.pattern)
    if isinstance(fmt, tag.GrammarFormat):
        return gbnf_bound(fmt.grammar) if fmt.syntax == "ebnf" else UNBOUNDED
    if isinstance(fmt, (tag.AnyTextFormat, tag.TokenFormat, tag.ExcludeTokenFormat, tag.AnyTokensFormat)):
        return 0
    if isinstance(fmt, tag.SequenceFormat):
        return _capped(sum(format_bound(e) for e in fmt.elements))
    if isinstance(fmt, tag.OrFormat):
        return max(format_bound(e) for e in fmt.elements)
    if isinstance(fmt, (tag.OptionalFormat, tag.PlusFormat, tag.StarFormat)):
        return format_bound(fmt.content)
    if isinstance(fmt, tag.RepeatFormat):
        return _capped(format_bound(fmt.content) * max(fmt.min, 1))
    if isinstance(fmt, tag.TagFormat):
        begin = len(fmt.begin) if isinstance(fmt.begin, str) else 0
        return _capped(begin + format_bound(fmt.content) + max(map(len, fmt.ends), default=0))
    if isinstance(fmt, (tag.TriggeredTagsFormat, tag.TagsWithSeparatorFormat)):
        separator = len(fmt.separator) if isinstance(fmt, tag.TagsWithSeparatorFormat) else 0
        return _capped(max(format_bound(t) for t in fmt.tags) + separator)
    if isinstance(fmt, tag.DispatchFormat):
        return max(_capped(len(pattern) + format_bound(f)) for pattern, f in fmt.rules)
    return UNBOUNDED  # (a format this bound does not know: no jumps)


# The subschemas that write an array's items past its prefixItems: each as many times as its
# minItems asks (xgrammar fills a minItems of 64 from `unevaluatedItems` too: three nested
# such arrays forced 3.1 million characters from a 230-character schema, a stranger's fuzzer).
_ITEMS = ("#/items", "#/unevaluatedItems")
_EXPONENT = re.compile(r"[eE][+-]?(\d+)")


def _written(node: Any) -> int:
    """The characters `node`'s literals may take as xgrammar writes them: its JSON text, a DEL
    six times over (xgrammar escapes it `\\u007f`; json.dumps does not), and a number in
    e-notation with all its digits (`1e308` pinned by minimum and maximum is 309 digits). An
    "e5" inside a string counts too: an over-count."""
    text = json.dumps(node, ensure_ascii=False)
    return len(text) + 5 * text.count("\x7f") + sum(min(int(e), 400) for e in _EXPONENT.findall(text))


def forced_text_bound(schema: Any, extra: int = 0) -> int:
    """An upper bound on the characters an output of `schema` can be forced to hold (plus
    `extra`, a tag's begin and end): every forced character comes from the schema's own text
    (keys, consts), a subschema's text written once per copy a `minItems` asks for of it (at
    any depth: 200 arrays of 200 nulls), a pattern's `pattern_bound` (`a{100000}`), or a local
    `$ref`'s target where it stands. Over-counts freely (an optional key, a `"type"` counts
    too): it only decides whether jumps are worth their search, so a schema whose text alone
    passes JUMP_MAX_FORCED_CHARS is answered from its length."""
    text = _written(schema)
    if text > JUMP_MAX_FORCED_CHARS:
        return text + extra
    if recursive_ref(schema) is not None:
        return UNBOUNDED  # (a recursion whose members are all required never returns)
    memo: dict[str, int] = {}

    def bound(node: Any) -> tuple[int, int]:
        """(the bound for `node`, the length of its text)."""
        written = _written(node)  # its text, its subschemas' once
        total = written
        if not isinstance(node, dict):
            return total, written
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            total += pattern_bound(pattern)
        copies = node.get("minItems", 1)
        copies = max(int(copies), 1) if isinstance(copies, (int, float)) and copies < UNBOUNDED else UNBOUNDED
        for sub, at in subschemas(node, "#"):
            sub_bound, sub_written = bound(sub)
            if at.startswith(("#/$defs/", "#/definitions/")):
                total -= sub_written  # (written where a $ref names it)
            else:  # the subschema's text replaced by its bound, once per copy
                total += _capped(sub_bound * (copies if at in _ITEMS else 1)) - sub_written
        ref = node.get("$ref")
        if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
            if ref not in memo:
                memo[ref] = bound(resolve_pointer(schema, ref))[0]
            total += memo[ref]
        return _capped(total), written

    return _capped(bound(schema)[0] + extra)


def schema_bound(schema: Any, extra: int = 0) -> int:
    """`forced_text_bound`, or UNBOUNDED where an array's minItems passes JUMP_MAX_MIN_ITEMS
    (the search's cost grows with the square of what it writes): what decides a schema's jumps
    (`extra`: the characters of a tag's begin and end)."""
    if find_ignored_keyword(schema, (_LONG_FORCED_ARRAY,)) is not None:
        return UNBOUNDED
    return forced_text_bound(schema, extra)
