"""`pattern` with minLength/maxLength: the pattern's matches of a length in the window, for
a plain regex (the lazy automaton intersects instead)."""

from __future__ import annotations

from dataclasses import dataclass

from minisglang.constrained.json_schema.errors import UnsupportedSchemaError
from minisglang.constrained.json_schema.patterns import (
    _ENDS,
    _P,
    _STARTS,
    _UNSUPPORTED_REGEX_OPS,
    ParsedItem,
    _item_ranges,
    _parsed_pattern,
    _top_branches,
)
from minisglang.constrained.json_schema.regex_parts import Regex, _alt, _concat, _repeat
from minisglang.constrained.json_schema.string_chars import COUNTED_STRING_CHAR_NODE, _json_string_chars
from minisglang.constrained.regex_ast import text_size
from minisglang.constrained.regex_dfa import _complement, _remove_surrogates, shown_regex


@dataclass(frozen=True)
class _Piece:
    """`unit` (a regex of characters, each match `width` characters long) repeated lo..hi
    times (hi None: unbounded)."""

    unit: Regex
    width: int
    lo: int
    hi: int | None


MAX_LENGTH_WINDOW_REGEX = 100_000  # characters; a pattern whose windowed regex grows beyond is refused


def _pattern_with_length(pattern: str, path: str, min_length: int, max_length: int | None) -> Regex | None:
    """The string contents that `pattern` finds a match in AND whose length (in characters)
    is min_length..max_length, exactly; UnsupportedSchemaError when the pattern is not a
    sequence of fixed-width parts and repeats of fixed-width parts (e.g. `(ab|c)+`).

    Each branch is a list of pieces; `window` walks them left to right, choosing how
    often the first piece repeats, and asks the rest for the remaining length window.
    """
    anything = _Piece(COUNTED_STRING_CHAR_NODE, 1, 0, None)
    options = []
    for branch in _top_branches(list(_parsed_pattern(pattern, path))):
        starts = bool(branch) and branch[0] in _STARTS
        ends = bool(branch) and branch[-1] in _ENDS
        middle = branch[int(starts) : len(branch) - int(ends)]
        body = _pieces(middle, pattern, path)
        if body is None:
            continue  # this branch matches nothing
        pieces = body + ([] if ends else [anything])
        if not starts:
            pieces = _search_prefix(middle, ends) + pieces
            counted = max_length is not None or min_length > sum(p.width * p.lo for p in pieces)
            if counted and (pieces[0] == anything or max_length is not None):
                # Counting the text before the match makes one alternative per start, and
                # interegular's automaton tracks every start that may still match (2^n
                # states for `any{n} P`; n^2 even for "no C, then C").
                raise UnsupportedSchemaError(
                    f"'pattern' {shown_regex(pattern)} with 'minLength'/'maxLength' at {path}: a pattern without a "
                    "leading ^ can be intersected with a length only when it is one character class "
                    "and there is no maxLength"
                )
        options.append(_window(tuple(pieces), min_length, max_length, {}))
    regex = _alt(options)
    if regex is not None and text_size(regex) > MAX_LENGTH_WINDOW_REGEX:
        raise UnsupportedSchemaError(
            f"'pattern' {shown_regex(pattern)} with 'minLength'/'maxLength' at {path}: the "
            f"exact intersection needs a regex of {text_size(regex)} characters (limit "
            f"{MAX_LENGTH_WINDOW_REGEX})"
        )
    return regex


def _search_prefix(items: list[ParsedItem], ends: bool) -> list[_Piece]:
    """The text before an unanchored match of the parsed regex `items`. "Contains a
    character of class C" is written as "no C, then the first C" (one way to match: the
    automaton stays small); otherwise any text."""
    if not ends and len(items) == 1 and items[0][0] in (_P.LITERAL, _P.NOT_LITERAL, _P.ANY, _P.IN):
        others = _json_string_chars(_remove_surrogates(_complement(_item_ranges(*items[0]))), counted=True)
        return [] if others is None else [_Piece(others, 1, 0, None)]
    return [_Piece(COUNTED_STRING_CHAR_NODE, 1, 0, None)]


def _pieces(items: list[ParsedItem], pattern: str, path: str) -> list[_Piece] | None:
    """A parsed regex as pieces (None: it matches nothing), or UnsupportedSchemaError."""
    out = []
    for op, arg in items:
        if op in (_P.MAX_REPEAT, _P.MIN_REPEAT):
            lo, hi, sub = arg
            unit = _fixed_width(list(sub), pattern, path)
            if unit is None:
                raise UnsupportedSchemaError(
                    f"'pattern' {shown_regex(pattern)} with 'minLength'/'maxLength' at {path}: only repeats of "
                    "fixed-width parts can be intersected with a length exactly"
                )
            if unit[0] is None:  # the repeated part matches nothing: only zero times
                if lo > 0:
                    return None
                continue
            out.append(_Piece(unit[0], unit[1], lo, None if hi == _P.MAXREPEAT else hi))
        elif op is _P.SUBPATTERN and not (arg[1] or arg[2]):
            sub = _pieces(list(arg[3]), pattern, path)
            if sub is None:
                return None
            out.extend(sub)
        else:
            unit = _fixed_width([(op, arg)], pattern, path)
            if unit is None:
                raise UnsupportedSchemaError(
                    f"'pattern' {shown_regex(pattern)} with 'minLength'/'maxLength' at {path}: alternatives of "
                    "different widths cannot be intersected with a length exactly"
                )
            if unit[0] is None:
                return None
            out.append(_Piece(unit[0], unit[1], 1, 1))
    return out


def _fixed_width(items: list[ParsedItem], pattern: str, path: str) -> tuple[Regex | None, int] | None:
    """(regex, width) when every match of the parsed regex has the same number of
    characters (regex None: no match at all); None when widths vary."""
    parts, width = [], 0
    for op, arg in items:
        if op in (_P.LITERAL, _P.NOT_LITERAL, _P.ANY, _P.IN):
            part, w = _json_string_chars(_item_ranges(op, arg), counted=True), 1
        elif op in (_P.MAX_REPEAT, _P.MIN_REPEAT) and arg[0] == arg[1]:
            sub = _fixed_width(list(arg[2]), pattern, path)
            if sub is None:
                return None
            part, w = _repeat(sub[0], arg[0], arg[0]), sub[1] * arg[0]
        elif op is _P.SUBPATTERN:
            if arg[1] or arg[2]:
                raise UnsupportedSchemaError(
                    f"'pattern' {shown_regex(pattern)} at {path}: inline flags such as (?i:...) are not supported"
                )
            sub = _fixed_width(list(arg[3]), pattern, path)
            if sub is None:
                return None
            part, w = sub
        elif op is _P.BRANCH:
            subs = [_fixed_width(list(b), pattern, path) for b in arg[1]]
            live = [sub for sub in subs if sub is not None and sub[0] is not None]
            if None in subs or len({w for _, w in live}) > 1:
                return None
            part, w = _alt([r for r, _ in live]), (live[0][1] if live else 0)
        elif op in (_P.MAX_REPEAT, _P.MIN_REPEAT):
            return None  # a repeat with a count range: widths vary
        else:
            what = _UNSUPPORTED_REGEX_OPS.get(op, str(op))
            raise UnsupportedSchemaError(f"'pattern' {shown_regex(pattern)} at {path}: {what} are not supported")
        if part is None:
            return None, 0
        parts.append(part)
        width += w
    return _concat(*parts), width


def _window(
    pieces: tuple[_Piece, ...], lo: int, hi: int | None, memo: dict[tuple[int, int, int | None], Regex | None]
) -> Regex | None:
    """The concatenation of `pieces` restricted to total widths lo..hi (hi None: no limit)."""
    key = (len(pieces), lo, hi)
    if key in memo:
        return memo[key]
    least = sum(p.width * p.lo for p in pieces)
    most = None if any(p.hi is None and p.width for p in pieces) else sum(p.width * (p.hi or 0) for p in pieces)
    if (hi is not None and least > hi) or (most is not None and most < lo):
        result = None
    elif least >= lo and (hi is None or (most is not None and most <= hi)):  # every width fits
        result = _concat(*(_repeat(p.unit, p.lo, p.hi) for p in pieces))
    elif pieces[0].width == 0:  # repeating it changes no width
        first, rest = pieces[0], pieces[1:]
        result = _concat(_repeat(first.unit, first.lo, first.hi), _window(rest, lo, hi, memo))
    else:
        first, rest = pieces[0], pieces[1:]
        rest_least = least - first.width * first.lo
        steps: list[tuple[int, int | None, Regex | None]] = []  # (fewest, most repeats, regex of the rest)
        count = first.lo
        while first.hi is None or count <= first.hi:
            used = count * first.width
            if hi is not None and used + rest_least > hi:
                break
            after = _window(rest, lo - used, None if hi is None else hi - used, memo)
            if steps and steps[-1][2] == after:
                steps[-1] = (steps[-1][0], count, after)
            else:
                steps.append((count, count, after))
            if hi is None and lo - used <= rest_least:  # longer prefixes leave the rest free
                steps[-1] = (steps[-1][0], first.hi, after)
                break
            count += 1
        result = _alt([_concat(_repeat(first.unit, a, b), after) for a, b, after in steps])
    memo[key] = result
    return result
