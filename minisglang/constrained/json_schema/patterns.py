"""`pattern`: Python's regex parser reads it; we write the same language over JSON text
(a JSON Schema pattern is a search: `^...$` pins both ends)."""

from __future__ import annotations

import re
from typing import Any

from minisglang.constrained.json_schema.errors import UnsupportedSchemaError
from minisglang.constrained.json_schema.regex_parts import EPSILON, Regex, _alt, _concat, _repeat
from minisglang.constrained.json_schema.string_chars import (
    STRING_CHAR_NODE,
    Ranges,
    _intersect,
    _json_string_chars,
)
from minisglang.constrained.python_regex import MAX_CODE_POINT, normalize
from minisglang.constrained.regex_dfa import RegexError, _complement, shown_regex
from minisglang.constrained.regex_search import searches

try:  # Python's own regex parser, used to read (and check) `pattern` keywords
    import re._parser as sre_parse  # Python >= 3.11
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse

# One item of Python's parse of a regex: (op, arg), the shape of arg set by op. The ops are
# named ints; re._parser has no type stubs, so both are Any to the type checker.
ParsedItem = tuple[int, Any]


def _searches(pattern: str, name: str, path: str) -> bool:
    """Whether `pattern` finds a match in `name`, as the jsonschema validator decides (its
    `re.search`), by our automaton (regex_search.py: Python's `re` backtracked for minutes on
    one name)."""
    try:
        return searches(pattern, name)
    except RegexError as e:
        raise UnsupportedSchemaError(f"'patternProperties' at {path}, property name {name!r}: {e}") from None


_P = sre_parse
_ASCII_CATEGORIES: dict[int, Ranges] = {  # \d \w \s, ASCII only: what ECMA-262 and Python both accept
    _P.CATEGORY_DIGIT: [(0x30, 0x39)],
    _P.CATEGORY_WORD: [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    _P.CATEGORY_SPACE: [(0x09, 0x0D), (0x20, 0x20)],
}
# The ASCII characters EITHER engine puts in a class (Python's \s also has \x1c-\x1f):
# what a negated class `[^\s]` must leave out. So `\S` is ASCII minus these.
_EITHER_ASCII_CATEGORIES: dict[int, Ranges] = {**_ASCII_CATEGORIES, _P.CATEGORY_SPACE: [(0x09, 0x0D), (0x1C, 0x20)]}
for _cat, _neg in (
    (_P.CATEGORY_DIGIT, _P.CATEGORY_NOT_DIGIT),
    (_P.CATEGORY_WORD, _P.CATEGORY_NOT_WORD),
    (_P.CATEGORY_SPACE, _P.CATEGORY_NOT_SPACE),
):
    _ASCII_CATEGORIES[_neg] = _intersect(_complement(_EITHER_ASCII_CATEGORIES[_cat]), [(0, 0x7F)])
    _EITHER_ASCII_CATEGORIES[_neg] = _intersect(_complement(_ASCII_CATEGORIES[_cat]), [(0, 0x7F)])
# `.`: every character but the line terminators of ECMA-262 (Python's `.` excludes only \n)
_DOT: Ranges = _complement([(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)])
_UNSUPPORTED_REGEX_OPS: dict[int, str] = {
    _P.GROUPREF: "backreferences",
    _P.ASSERT: "lookaround assertions",
    _P.ASSERT_NOT: "lookaround assertions",
    _P.GROUPREF_EXISTS: "conditional groups",
    _P.AT: "anchors (^, $, \\b) other than a leading ^ and a trailing $",
}
for _name, _what in (("ATOMIC_GROUP", "atomic groups"), ("POSSESSIVE_REPEAT", "possessive repeats")):
    if hasattr(_P, _name):
        _UNSUPPORTED_REGEX_OPS[getattr(_P, _name)] = _what


def _parsed_pattern(pattern: str, path: str) -> Any:
    """Python's parse of `pattern` (a list of ParsedItem), or UnsupportedSchemaError if it is
    unreadable or sets flags."""
    try:
        tree = sre_parse.parse(pattern)
    except re.error as e:
        raise UnsupportedSchemaError(
            f"'pattern' {shown_regex(pattern)} at {path} is not a regex we can read: {e}"
        ) from None
    if tree.state.flags & (re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE):
        raise UnsupportedSchemaError(
            f"'pattern' {shown_regex(pattern)} at {path}: inline flags such as (?i) are not supported"
        )
    return tree


def _top_branches(items: list[ParsedItem]) -> list[list[ParsedItem]]:
    """The alternatives of a parsed regex, looking into a group that is a whole alternative
    (so `^$|(^a+$)` has the anchored branches `^$` and `^a+$`). Python's parser moves a
    prefix every branch shares in front (`^$|^a$` -> `^(?:$|a$)`): it is put back."""
    if items and items[-1][0] is _P.BRANCH:
        branches = [items[:-1] + list(branch) for branch in items[-1][1][1]]
    else:
        branches = [items]
    out = []
    for branch in map(list, branches):
        if len(branch) == 1 and branch[0][0] is _P.SUBPATTERN and not (branch[0][1][1] or branch[0][1][2]):
            out.extend(_top_branches(list(branch[0][1][3])))
        else:
            out.append(branch)
    return out


_STARTS = ((_P.AT, _P.AT_BEGINNING), (_P.AT, _P.AT_BEGINNING_STRING))
_ENDS = ((_P.AT, _P.AT_END), (_P.AT, _P.AT_END_STRING))


def _pattern_regex(pattern: str, path: str, wide: bool = False) -> Regex | None:
    """The string contents (JSON text, no quotes) in which `pattern` finds a match.

    By default a subset of those (what we may write: `\\d` is ASCII, one writing of most
    characters); `wide`: a superset, every JSON writing of every string Python's `re.search`
    matches in (what we may take away from another set: a key set minus a pattern's keys).
    """
    any_text = _repeat(STRING_CHAR_NODE, 0, None)
    options = []
    for branch in _top_branches(list(_parsed_pattern(pattern, path))):  # unanchored ends: any text around
        starts = bool(branch) and branch[0] in _STARTS
        ends = bool(branch) and branch[-1] in _ENDS
        body = _translate_regex(branch[int(starts) : len(branch) - int(ends)], pattern, path, wide)
        # Python's `$` also matches before a last "\n"; a superset must hold that string too.
        end = (
            any_text
            if not ends
            else _repeat(_json_string_chars([(10, 10)], every=True), 0, 1)
            if wide and branch[-1] == (_P.AT, _P.AT_END)
            else EPSILON
        )
        options.append(_concat(EPSILON if starts else any_text, body, end))
    return _alt(options)


def _translate_regex(items: list[ParsedItem], pattern: str, path: str, wide: bool = False) -> Regex | None:
    """Python's parse of a regex -> our regex for the same characters written as JSON text
    (`wide`: see _pattern_regex)."""
    out = []
    for op, arg in items:
        if op in (_P.LITERAL, _P.NOT_LITERAL, _P.ANY, _P.IN):
            part = _json_string_chars(_item_ranges(op, arg, wide), every=wide)
        elif op in (_P.MAX_REPEAT, _P.MIN_REPEAT):  # laziness does not change the language
            lo, hi, sub = arg
            part = _repeat(_translate_regex(list(sub), pattern, path, wide), lo, None if hi == _P.MAXREPEAT else hi)
        elif op is _P.SUBPATTERN:
            _, add_flags, del_flags, sub = arg
            if add_flags or del_flags:
                raise UnsupportedSchemaError(
                    f"'pattern' {shown_regex(pattern)} at {path}: inline flags such as (?i:...) are not supported"
                )
            part = _translate_regex(list(sub), pattern, path, wide)
        elif op is _P.BRANCH:
            part = _alt([_translate_regex(list(b), pattern, path, wide) for b in arg[1]])
        else:
            what = _UNSUPPORTED_REGEX_OPS.get(op, str(op))
            raise UnsupportedSchemaError(f"'pattern' {shown_regex(pattern)} at {path}: {what} are not supported")
        if part is None:
            return None
        out.append(part)
    return _concat(*out)


def _class_ranges(items: list[ParsedItem], wide: bool = False) -> Ranges:
    """A parsed character class `[...]` -> its code point ranges (`wide`: a superset of
    what Python's class holds, else a subset that ECMA-262's holds too)."""
    negate = any(op is _P.NEGATE for op, _ in items)
    # A negated class leaves out what either engine's categories hold; a plain one holds
    # what both agree on (wide: the other way round, and any non-ASCII character).
    categories = _EITHER_ASCII_CATEGORIES if negate != wide else _ASCII_CATEGORIES
    has_category, ranges = False, []
    for op, arg in items:
        if op is _P.LITERAL:
            ranges.append((arg, arg))
        elif op is _P.RANGE:
            ranges.append(arg)
        elif op is _P.CATEGORY:
            ranges.extend(categories[arg])
            has_category = True
    if wide and has_category and not negate:  # Python's \d, \w, \s are Unicode-wide
        ranges.append((0x80, MAX_CODE_POINT))
    ranges = list(normalize(ranges))
    if negate:
        ranges = _complement(ranges)
        if has_category and not wide:  # Python's \d, \w, \s are Unicode-wide: only the ASCII part is sure
            ranges = _intersect(ranges, [(0, 0x7F)])
    return ranges


def _item_ranges(op: int, arg: Any, wide: bool = False) -> Ranges:
    """The characters of one parsed single-character item (literal, negated literal, ., class)."""
    if op is _P.LITERAL:
        return [(arg, arg)]
    if op is _P.NOT_LITERAL:
        return _complement([(arg, arg)])
    if op is _P.ANY:  # Python's `.`: all but "\n"
        return _complement([(10, 10)]) if wide else _DOT
    return _class_ranges(arg, wide)
