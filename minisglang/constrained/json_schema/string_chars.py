"""The characters inside JSON strings: code point ranges written as JSON text (raw or escaped)."""
from __future__ import annotations

import functools

from minisglang.constrained.json_schema.regex_parts import _alt, _concat, _digit_class, _repeat
from minisglang.constrained.python_regex import MAX_CODE_POINT
from minisglang.constrained.regex_dfa import SURROGATES, _complement, _escape_char, _remove_surrogates

Ranges = list[tuple[int, int]]  # sorted, disjoint, inclusive code point ranges

ALL_CHARACTERS: Ranges = _remove_surrogates([(0, MAX_CODE_POINT)])
NUM_CHARACTERS = sum(hi - lo + 1 for lo, hi in ALL_CHARACTERS)
# Characters a JSON string may hold raw: not `"`, not `\`, no control characters.
RAW_STRING_CHARACTERS: Ranges = _remove_surrogates([(0x20, 0x21), (0x23, 0x5B), (0x5D, MAX_CODE_POINT)])
# Characters json.dumps writes as \uXXXX (control characters and DEL, non-ASCII of the BMP).
BMP_ESCAPED_CHARACTERS: Ranges = [(0x00, 0x1F), (0x7F, SURROGATES[0] - 1), (SURROGATES[1] + 1, 0xFFFF)]
# Characters JSON lets any writer escape as \uXXXX (every BMP character but a surrogate).
BMP_CHARACTERS: Ranges = [(0x00, SURROGATES[0] - 1), (SURROGATES[1] + 1, 0xFFFF)]
SHORT_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t"}


def _normalize(ranges: Ranges) -> Ranges:
    """Sort and merge overlapping or adjacent ranges."""
    out: Ranges = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(hi, out[-1][1]))
        else:
            out.append((lo, hi))
    return out


def _intersect(a: Ranges, b: Ranges) -> Ranges:
    """The code points in both range lists."""
    return [(max(lo1, lo2), min(hi1, hi2)) for lo1, hi1 in a for lo2, hi2 in b
            if max(lo1, lo2) <= min(hi1, hi2)]


def _class_regex(ranges: Ranges) -> str:
    """A character class for `ranges`, negated when that names fewer characters."""
    size = sum(hi - lo + 1 for lo, hi in ranges)
    if size == 1:
        return _escape_char(chr(ranges[0][0]), in_class=False)
    negated = size > NUM_CHARACTERS // 2
    listed = _remove_surrogates(_complement(ranges)) if negated else ranges
    body = "".join(_escape_char(chr(lo), True) if lo == hi else
                   f"{_escape_char(chr(lo), True)}-{_escape_char(chr(hi), True)}" for lo, hi in listed)
    return f"[^{body}]" if negated else f"[{body}]"


def _hex_digits(lo: int, hi: int) -> str:
    """A class for the hex digits with values lo..hi, in either case: (8, 11) -> [89a-bA-B]."""
    if lo == hi and lo < 10:
        return str(lo)
    parts = []
    if lo <= 9:
        parts.append(_digit_class(lo, min(hi, 9)).strip("[]"))
    if hi >= 10:
        a, b = "abcdef"[max(lo, 10) - 10], "abcdef"[hi - 10]
        parts.append(f"{a}{a.upper()}" if a == b else f"{a}-{b}{a.upper()}-{b.upper()}")
    return "[" + "".join(parts) + "]"


def _hex_range(lo: int, hi: int, width: int = 4) -> str:
    """A regex for the `width`-digit hex numerals (any case) with values lo..hi."""
    if width == 0:
        return ""
    shift = 4 * (width - 1)
    low_mask = (1 << shift) - 1
    first_lo, first_hi = lo >> shift, hi >> shift
    if first_lo == first_hi:
        return _hex_digits(first_lo, first_lo) + _hex_range(lo & low_mask, hi & low_mask, width - 1)
    parts = []
    if lo & low_mask:  # the lowest first digit is followed by the tail of lo only
        parts.append(_hex_digits(first_lo, first_lo) + _hex_range(lo & low_mask, low_mask, width - 1))
        first_lo += 1
    last = None
    if hi & low_mask != low_mask:  # the highest first digit is followed by the head of hi only
        last = _hex_digits(first_hi, first_hi) + _hex_range(0, hi & low_mask, width - 1)
        first_hi -= 1
    if first_lo <= first_hi:
        parts.append(_hex_digits(first_lo, first_hi) + (_repeat("[0-9a-fA-F]", width - 1, width - 1)))
    return _alt(parts + [last])


def _surrogate_pairs(lo: int, hi: int) -> list[str]:
    """Regexes for the `\\uD8xx\\uDCxx` escapes of the code points lo..hi (all above 0xFFFF)."""
    first_high, first_low = divmod(lo - 0x10000, 0x400)
    last_high, last_low = divmod(hi - 0x10000, 0x400)

    def pairs(high_lo: int, high_hi: int, low_lo: int, low_hi: int) -> str:
        return (r"\\u" + _hex_range(0xD800 + high_lo, 0xD800 + high_hi)
                + r"\\u" + _hex_range(0xDC00 + low_lo, 0xDC00 + low_hi))

    if first_high == last_high:
        return [pairs(first_high, first_high, first_low, last_low)]
    out = []
    if first_low > 0:  # the first high surrogate with only the top of the low ones
        out.append(pairs(first_high, first_high, first_low, 0x3FF))
        first_high += 1
    tail = None
    if last_low < 0x3FF:  # the last high surrogate with only the bottom of the low ones
        tail = pairs(last_high, last_high, 0, last_low)
        last_high -= 1
    if first_high <= last_high:
        out.append(pairs(first_high, last_high, 0, 0x3FF))
    return out + ([tail] if tail else [])


def _json_string_chars(ranges: Ranges, counted: bool = False, every: bool = False) -> str | None:
    """One character of a JSON string's content, for the characters in `ranges`.

    Every form json.dumps may write a character in is matched: raw, a short escape
    (`\\"`, `\\n`, also `\\/`), or `\\uXXXX` for control and non-ASCII characters (a
    surrogate pair for characters above U+FFFF). `counted`: non-ASCII raw only, as in
    COUNTED_STRING_CHAR (a smaller automaton to repeat). `every`: also `\\u0041` for `A`,
    every form JSON allows (what a set we take away from another must hold). None if
    `ranges` is empty.
    """
    ranges = _normalize(ranges)
    if counted:
        ranges_escaped = _intersect(ranges, [(0x00, 0x1F)])
        raw = _intersect(ranges, RAW_STRING_CHARACTERS)
        letters = [letter for ch, letter in SHORT_ESCAPES.items() if _intersect(ranges, [(ord(ch), ord(ch))])]
        return _alt([_class_regex(raw) if raw else None,
                     r"\\" + _class_regex(_normalize([(ord(c), ord(c)) for c in letters])) if letters else None,
                     r"\\u" + _alt([_hex_range(lo, hi) for lo, hi in ranges_escaped]) if ranges_escaped else None])
    options = []
    raw = _intersect(ranges, RAW_STRING_CHARACTERS)
    if raw:
        options.append(_class_regex(raw))
    letters = [letter for ch, letter in SHORT_ESCAPES.items() if _intersect(ranges, [(ord(ch), ord(ch))])]
    if letters:
        options.append(r"\\" + _class_regex(_normalize([(ord(c), ord(c)) for c in letters])))
    escaped = BMP_CHARACTERS if every else BMP_ESCAPED_CHARACTERS
    hex_codes = _alt([_hex_range(lo, hi) for lo, hi in _intersect(ranges, escaped)])
    if hex_codes is not None:
        options.append(r"\\u" + hex_codes)
    for lo, hi in _intersect(ranges, [(0x10000, MAX_CODE_POINT)]):
        options.extend(_surrogate_pairs(lo, hi))
    return _alt(options)


# Any one character of a string: raw, a short escape, a \uXXXX escape that is not a
# surrogate, or a surrogate pair (one character above U+FFFF, as Python's len counts it).
# Written out by hand: `_json_string_chars(ALL_CHARACTERS)` means nearly the same (it
# leaves out escapes json.dumps never writes, such as \u0041) but gives a larger automaton.
STRING_CHAR = (r'(?:[^\x00-\x1f"\\]|\\["/\\bfnrt]|\\u(?:[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2})'
               r'|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})')
STRING = f'"{STRING_CHAR}*"'
# One character of a string with minLength/maxLength: raw or a short escape only. Counting
# repeats the character automaton once per position; with \uXXXX escapes it has 13 states
# instead of 2, and interegular's build time grows quadratically with the states
# (maxLength 200 took minutes). Non-ASCII is written raw, as a model writes it anyway.
COUNTED_STRING_CHAR = r'(?:[^\x00-\x1f"\\]|\\["/\\bfnrt])'


def _string_except(words: list[str]) -> str:
    """A JSON string whose decoded text is none of `words` (a trie: at each node the
    string ends, or takes a character no word continues with, or follows a word)."""
    def rest(suffixes: frozenset[str]) -> str:
        if not suffixes:
            return f"{STRING_CHAR}*"
        options = [] if "" in suffixes else [""]
        nexts = sorted({w[0] for w in suffixes if w})
        others = _remove_surrogates(_complement([(ord(c), ord(c)) for c in nexts]))
        options.append(_concat(_json_string_chars(others), f"{STRING_CHAR}*"))
        for c in nexts:
            tails = frozenset(w[1:] for w in suffixes if w[:1] == c)
            options.append(_json_string_chars([(ord(c), ord(c))]) + rest(tails))
        return _alt(options)
    return f'"{rest(frozenset(words))}"'


def _string_literal(text: str) -> str:
    """The JSON string `text`, each character in any form json.dumps may write it."""
    return '"' + "".join(map(_json_char, text)) + '"'


@functools.lru_cache(maxsize=4096)
def _json_char(ch: str) -> str:
    """`_json_string_chars` of the one character `ch`, remembered: keys and enum values
    repeat a few letters, and the range arithmetic per character was the slowest part
    of compiling a 240-value enum."""
    return _json_string_chars([(ord(ch), ord(ch))])
