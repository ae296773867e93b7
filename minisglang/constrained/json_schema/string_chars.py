"""The characters inside JSON strings: code point ranges written as JSON text (raw or escaped)."""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict

from minisglang.constrained.json_schema.errors import UnsupportedSchemaError
from minisglang.constrained.json_schema.regex_parts import (
    EPSILON,
    Regex,
    _alt,
    _concat,
    _repeat,
    chars,
    lit,
    rx,
)
from minisglang.constrained.python_regex import MAX_CODE_POINT, normalize
from minisglang.constrained.regex_ast import REMEMBERED_TEXT_CHARS
from minisglang.constrained.regex_dfa import SURROGATES, _complement, _remove_surrogates

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


def _intersect(a: Ranges, b: Ranges) -> Ranges:
    """The code points in both range lists."""
    return [(max(lo1, lo2), min(hi1, hi2)) for lo1, hi1 in a for lo2, hi2 in b if max(lo1, lo2) <= min(hi1, hi2)]


def _class_regex(ranges: Ranges) -> Regex:
    """One character of `ranges` (a class, or the character itself)."""
    return chars(ranges)


def _hex_digits(lo: int, hi: int) -> Regex:
    """One hex digit with a value lo..hi, in either case: (8, 11) -> [89a-bA-B]."""
    ranges = []
    if lo <= 9:
        ranges.append((ord("0") + lo, ord("0") + min(hi, 9)))
    if hi >= 10:
        for a in "aA":
            ranges.append((ord(a) + max(lo, 10) - 10, ord(a) + hi - 10))
    return chars(ranges)


HEX_DIGIT = _hex_digits(0, 15)


def _hex_range(lo: int, hi: int, width: int = 4) -> Regex | None:
    """The `width`-digit hex numerals (any case) with values lo..hi."""
    if width == 0:
        return EPSILON
    shift = 4 * (width - 1)
    low_mask = (1 << shift) - 1
    first_lo, first_hi = lo >> shift, hi >> shift
    if first_lo == first_hi:
        return _concat(_hex_digits(first_lo, first_lo), _hex_range(lo & low_mask, hi & low_mask, width - 1))
    parts = []
    if lo & low_mask:  # the lowest first digit is followed by the tail of lo only
        parts.append(_concat(_hex_digits(first_lo, first_lo), _hex_range(lo & low_mask, low_mask, width - 1)))
        first_lo += 1
    last = None
    if hi & low_mask != low_mask:  # the highest first digit is followed by the head of hi only
        last = _concat(_hex_digits(first_hi, first_hi), _hex_range(0, hi & low_mask, width - 1))
        first_hi -= 1
    if first_lo <= first_hi:
        parts.append(_concat(_hex_digits(first_lo, first_hi), _repeat(HEX_DIGIT, width - 1, width - 1)))
    return _alt(parts + [last])


def _surrogate_pairs(lo: int, hi: int) -> list[Regex | None]:
    """Regexes for the `\\uD8xx\\uDCxx` escapes of the code points lo..hi (all above 0xFFFF)."""
    first_high, first_low = divmod(lo - 0x10000, 0x400)
    last_high, last_low = divmod(hi - 0x10000, 0x400)

    def pairs(high_lo: int, high_hi: int, low_lo: int, low_hi: int) -> Regex | None:
        return _concat(
            lit("\\u"),
            _hex_range(0xD800 + high_lo, 0xD800 + high_hi),
            lit("\\u"),
            _hex_range(0xDC00 + low_lo, 0xDC00 + low_hi),
        )

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


ClassKey = tuple[tuple[tuple[int, int], ...], bool, bool]  # (ranges, counted, every)


class _RememberedClasses:
    """`_json_chars_of`'s answers, least recently used first, bounded by the ranges of their
    classes in all (`max_ranges`), not by their count: a class's regex grows with its ranges
    (`\\w`'s 734: ~1.2 MB, 37 ms to build), and a pattern's class is a client's to make, so
    4,096 remembered classes could hold gigabytes. Compile threads share it (a lock)."""

    def __init__(self, max_ranges: int):
        self.max_ranges = max_ranges
        self.ranges = 0
        self._classes: OrderedDict[ClassKey, Regex | None] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: ClassKey) -> Regex | None:
        with self._lock:
            if key in self._classes:
                self._classes.move_to_end(key)
                return self._classes[key]
        out = _json_chars_of(*key)
        with self._lock:
            if key not in self._classes:
                self._classes[key] = out
                self.ranges += len(key[0])
            while self.ranges > self.max_ranges and len(self._classes) > 1:
                old, _ = self._classes.popitem(last=False)
                self.ranges -= len(old[0])
        return out

    def __len__(self) -> int:
        return len(self._classes)


# ~16 classes of `\w`'s size, or thousands of the few-range classes keys and formats use.
REMEMBERED_CLASSES = _RememberedClasses(max_ranges=12_000)


def _json_string_chars(ranges: Ranges, counted: bool = False, every: bool = False) -> Regex | None:
    """`_json_chars_of` the characters in `ranges` (any order, overlaps allowed), remembered
    (REMEMBERED_CLASSES): a pattern's classes and a key's letters come back in schema after
    schema, and the range arithmetic (hex digits of escapes) is not cheap."""
    return REMEMBERED_CLASSES.get((tuple(normalize(ranges)), counted, every))


def _json_chars_of(key: tuple[tuple[int, int], ...], counted: bool, every: bool) -> Regex | None:
    """One character of a JSON string's content, for the characters in `key` (sorted,
    disjoint ranges).

    Every form json.dumps may write a character in is matched: raw, a short escape
    (`\\"`, `\\n`, also `\\/`), or `\\uXXXX` for control and non-ASCII characters (a
    surrogate pair for characters above U+FFFF). `counted`: non-ASCII raw only, as in
    COUNTED_STRING_CHAR (a smaller automaton to repeat). `every`: also `\\u0041` for `A`,
    every form JSON allows (what a set we take away from another must hold). None if
    `key` holds no range.
    """
    ranges = list(key)
    if counted:
        ranges_escaped = _intersect(ranges, [(0x00, 0x1F)])
        raw = _intersect(ranges, RAW_STRING_CHARACTERS)
        letters = [letter for ch, letter in SHORT_ESCAPES.items() if _intersect(ranges, [(ord(ch), ord(ch))])]
        return _alt(
            [
                _class_regex(raw) if raw else None,
                _concat(lit("\\"), _class_regex([(ord(c), ord(c)) for c in letters])) if letters else None,
                _concat(lit("\\u"), _alt([_hex_range(lo, hi) for lo, hi in ranges_escaped]))
                if ranges_escaped
                else None,
            ]
        )
    options: list[Regex | None] = []
    raw = _intersect(ranges, RAW_STRING_CHARACTERS)
    if raw:
        options.append(_class_regex(raw))
    letters = [letter for ch, letter in SHORT_ESCAPES.items() if _intersect(ranges, [(ord(ch), ord(ch))])]
    if letters:
        options.append(_concat(lit("\\"), _class_regex(list(normalize((ord(c), ord(c)) for c in letters)))))
    escaped = BMP_CHARACTERS if every else BMP_ESCAPED_CHARACTERS
    hex_codes = _alt([_hex_range(lo, hi) for lo, hi in _intersect(ranges, escaped)])
    if hex_codes is not None:
        options.append(_concat(lit("\\u"), hex_codes))
    for lo, hi in _intersect(ranges, [(0x10000, MAX_CODE_POINT)]):
        options.extend(_surrogate_pairs(lo, hi))
    return _alt(options)


# Any one character of a string: raw, a short escape, a \uXXXX escape that is not a
# surrogate, or a surrogate pair (one character above U+FFFF, as Python's len counts it).
# Written out by hand: `_json_string_chars(ALL_CHARACTERS)` means nearly the same (it
# leaves out escapes json.dumps never writes, such as \u0041) but gives a larger automaton.
STRING_CHAR = (
    r'(?:[^\x00-\x1f"\\]|\\["/\\bfnrt]|\\u(?:[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2})'
    r"|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})"
)
STRING_CHAR_NODE = rx(STRING_CHAR)
STRING = _concat(lit('"'), _repeat(STRING_CHAR_NODE, 0, None), lit('"'))  # any JSON string
# One character of a string with minLength/maxLength: raw or a short escape only. Counting
# repeats the character automaton once per position; with \uXXXX escapes it has 13 states
# instead of 2, and interegular's build time grows quadratically with the states
# (maxLength 200 took minutes). Non-ASCII is written raw, as a model writes it anyway.
COUNTED_STRING_CHAR = r'(?:[^\x00-\x1f"\\]|\\["/\\bfnrt])'
COUNTED_STRING_CHAR_NODE = rx(COUNTED_STRING_CHAR)


def _string_except(words: list[str]) -> Regex:
    """A JSON string whose decoded text is none of `words` (a trie: at each node the
    string ends, or takes a character no word continues with, or follows a word).
    Remembered when the words are short (REMEMBERED_TEXT_CHARS in all): a `not` of a const
    string is written once per branch and per expansion of a recursive definition
    (codeship-steps.json's if/then/else chain asked for the same few words 205 times, ~40%
    of its compile), and a tree is never changed."""
    key = frozenset(words)
    short = sum(map(len, key)) <= REMEMBERED_TEXT_CHARS
    return _remembered_string_except(key) if short else _write_string_except(key)


@functools.lru_cache(maxsize=1024)
def _remembered_string_except(words: frozenset[str]) -> Regex:
    return _write_string_except(words)


def _write_string_except(words: frozenset[str]) -> Regex:
    any_rest = _repeat(STRING_CHAR_NODE, 0, None)

    def rest(suffixes: frozenset[str]) -> Regex | None:
        if not suffixes:
            return any_rest
        options: list[Regex | None] = [] if "" in suffixes else [EPSILON]
        nexts = sorted({w[0] for w in suffixes if w})
        others = _remove_surrogates(_complement([(ord(c), ord(c)) for c in nexts]))
        options.append(_concat(_json_string_chars(others), any_rest))
        for c in nexts:
            tails = frozenset(w[1:] for w in suffixes if w[:1] == c)
            options.append(_concat(_json_string_chars([(ord(c), ord(c))]), rest(tails)))
        return _alt(options)

    out = _concat(lit('"'), rest(words), lit('"'))
    assert out is not None  # (any text but the words: never nothing)
    return out


def _string_literal(text: str) -> Regex:
    """The JSON string `text`, each character in any form json.dumps may write it;
    remembered when short (REMEMBERED_TEXT_CHARS): an object's keys are written again at each
    level of a recursion and in schema after schema (a tree is never changed, so compiles
    may share one)."""
    return _remembered_string_literal(text) if len(text) <= REMEMBERED_TEXT_CHARS else _write_string_literal(text)


@functools.lru_cache(maxsize=16384)
def _remembered_string_literal(text: str) -> Regex:
    return _write_string_literal(text)


def _write_string_literal(text: str) -> Regex:
    lone = next((ch for ch in text if 0xD800 <= ord(ch) <= 0xDFFF), None)
    if lone is not None:  # (no raw UTF-8 writing: the assert below failed with no message)
        raise UnsupportedSchemaError(
            f"the string {text!r} holds a lone surrogate, U+{ord(lone):04X}, which UTF-8 cannot encode "
            "(only a \\u escape writes it): not supported in a const, enum value or property name"
        )
    out = _concat(lit('"'), *map(_json_char, text), lit('"'))
    assert out is not None  # (every other character has a writing)
    return out


@functools.lru_cache(maxsize=4096)
def _json_char(ch: str, every: bool = False) -> Regex | None:
    """`_json_string_chars` of the one character `ch`, remembered: keys and enum values
    repeat a few letters, and the range arithmetic per character was the slowest part
    of compiling a 240-value enum (`every`: as there, every form JSON allows)."""
    return _json_string_chars([(ord(ch), ord(ch))], every=every)
