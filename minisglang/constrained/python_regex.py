"""Python's reading of a regex: its character sets as code point ranges, and the regex
written again with every set spelled out.

The one regex dialect of minisglang is Python's `re` for str patterns, whatever reads the
regex (the eager automaton, the lazy one, xgrammar, outlines-core, llguidance):
- `\\d` is every character Python calls a decimal digit ('٣' too), `\\w` every letter,
  digit and '_' of Unicode ('艳', 'é', '²'), `\\s` every whitespace character of Unicode
  and '\\x1c'-'\\x1f'; `\\D \\W \\S` are their complements;
- `.` is any character but '\\n';
- inline flags (`(?i)`, `(?a)`, `(?s)`, ...) are refused: case folding at Unicode scale is
  a table of its own, and no automaton here needs it.

Every engine reads these differently (interegular and xgrammar: ASCII `\\w \\d`; Rust's
regex in outlines-core and llguidance: Unicode, but `\\w` holds combining marks and not
'²'; xgrammar's `.` holds '\\n'), so no engine is handed a shorthand class: `PythonRegex`
parses the regex with Python's own parser and `write` spells every character set out as
explicit ranges, the one syntax they all read alike.

The classes are computed from `re` itself, once per process (a scan of every code point,
about 0.1 s) and kept as ranges: `\\w` is 733 ranges, 133,548 code points.
"""

from __future__ import annotations

import array
import functools
import re
import warnings
from collections.abc import Callable, Iterable
from typing import Any

try:  # Python's own regex parser
    import re._parser as sre_parse  # Python >= 3.11
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse  # type: ignore[no-redef,unused-ignore]  # 3.10's name

MAX_CODE_POINT = 0x10FFFF
Ranges = tuple[tuple[int, int], ...]  # sorted, disjoint, non-adjacent, inclusive

_P = sre_parse
_CATEGORIES = {
    _P.CATEGORY_DIGIT: "d",
    _P.CATEGORY_NOT_DIGIT: "D",
    _P.CATEGORY_WORD: "w",
    _P.CATEGORY_NOT_WORD: "W",
    _P.CATEGORY_SPACE: "s",
    _P.CATEGORY_NOT_SPACE: "S",
}
_UNSUPPORTED = {
    _P.GROUPREF: "backreferences",
    _P.GROUPREF_EXISTS: "conditional groups",
    _P.AT: "anchors other than ^ and $ at the start and end of the regex or of an alternative",
}
for _name, _what in (("ATOMIC_GROUP", "atomic groups"), ("POSSESSIVE_REPEAT", "possessive quantifiers")):
    if hasattr(_P, _name):
        _UNSUPPORTED[getattr(_P, _name)] = _what


class NotWritable(ValueError):
    """The regex uses a construct the automata do not support; the message says which."""


class WrittenTooLong(NotWritable):
    """The regex written out would pass the `max_chars` its writer was given."""


# A POSIX class inside a set, as grep and PCRE write it: Python reads `[[:alpha:]]` as the set
# of '[', ':', 'a', 'l', 'p', 'h' followed by a literal ']' (and warns that this may change),
# so a model under it wrote "h]" (a stranger porting regexes). Refused by name instead.
_POSIX_CLASS = re.compile(
    r"(?<!\\)\[:(alnum|alpha|ascii|blank|cntrl|digit|graph|lower|print|punct|space|upper|word|xdigit):\]"
)


def posix_class_message(body: str) -> str | None:
    """Why `body` is refused when it holds a POSIX class such as `[:alpha:]`, else None."""
    found = _POSIX_CLASS.search(body)
    if found is None:
        return None
    return (
        f"POSIX character classes such as {found[0]} are not supported (Python's re reads them as the "
        f"characters they spell): write the characters out, e.g. [A-Za-z] for [:alpha:], [0-9] for [:digit:]"
    )


# ---------------------------------------------------------------------------------------
# Ranges
# ---------------------------------------------------------------------------------------
def normalize(ranges: Iterable[tuple[int, int]]) -> Ranges:
    """Inclusive ranges in any order -> sorted, disjoint, non-adjacent ranges."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return tuple(out)


def complement(ranges: Ranges) -> Ranges:
    """The code points of [0, MAX_CODE_POINT] not in `ranges` (normalized)."""
    out, start = [], 0
    for lo, hi in ranges:
        if lo > start:
            out.append((start, lo - 1))
        start = hi + 1
    if start <= MAX_CODE_POINT:
        out.append((start, MAX_CODE_POINT))
    return tuple(out)


def size(ranges: Ranges) -> int:
    """How many code points `ranges` hold."""
    return sum(hi - lo + 1 for lo, hi in ranges)


@functools.cache
def _every_character() -> tuple[str, int]:
    """Every code point but the surrogates, as one string, and where the surrogates were cut
    out (none of them is in \\d, \\w or \\s: they are category Cs)."""
    below = array.array("I", range(0xD800)).tobytes().decode("utf-32-le")
    above = array.array("I", range(0xE000, MAX_CODE_POINT + 1)).tobytes().decode("utf-32-le")
    return below + above, len(below)


@functools.cache
def shorthand_ranges(letter: str) -> Ranges:
    """What Python's `\\d \\D \\w \\W \\s \\S` (the `letter`) match, as ranges.

    Found by `re` itself over every code point, on first use, and kept: what `re.fullmatch`
    says is the definition, so a new Python's Unicode tables come along by themselves.
    """
    if letter in "DWS":
        return complement(shorthand_ranges(letter.lower()))
    if letter not in "dws":
        raise ValueError(f"no shorthand class \\{letter}")
    text, cut = _every_character()
    gap = 0xE000 - 0xD800  # code points after the cut sit this much higher
    out = []
    for m in re.finditer(f"\\{letter}+", text):
        lo, hi = m.start(), m.end() - 1
        if lo < cut <= hi:  # a run across the cut: two ranges, the surrogates left out
            out += [(lo, cut - 1), (cut + gap, hi + gap)]
        else:
            out.append((lo + gap * (lo >= cut), hi + gap * (hi >= cut)))
    return normalize(out)


def prepare_shorthands() -> None:
    """Find every shorthand class's ranges now (~50 ms, once per process). A backend calls
    this when it starts: found on first use instead, they were the longest stretch of a
    compile with no checkpoint, and the first client whose regex said `\\s` held every
    other client's step for that long (a 4 ms lend of the compile threads took 65 ms)."""
    for letter in "dwsDWS":
        shorthand_ranges(letter)


DOT: Ranges = complement(((10, 10),))  # `.`: anything but a newline


def shorthand_name(ranges: Ranges) -> str | None:
    """`\\d`, `\\W`, ... when `ranges` are exactly one shorthand class, else None (for labels)."""
    for letter in "dDwWsS":
        if ranges == shorthand_ranges(letter):
            return "\\" + letter
    return None


# ---------------------------------------------------------------------------------------
# Parsing and writing
# ---------------------------------------------------------------------------------------
class PythonRegex:
    """A regex (anchors already stripped) as Python's parser reads it.

    Raises re.error for an invalid regex and NotWritable for a construct none of our
    automata support (lookarounds, backreferences, inner anchors, inline flags, atomic
    groups, possessive quantifiers).
    """

    def __init__(self, body: str):
        posix = posix_class_message(body)
        if posix is not None:
            raise NotWritable(posix)
        with warnings.catch_warnings():  # "possible nested set": read `[[` as re does today
            warnings.simplefilter("ignore", FutureWarning)
            try:
                tree = sre_parse.parse(body)
            except OverflowError as e:  # a repetition bound past 2**32 - 2: invalid, as re.compile says
                raise re.error(str(e)) from None
        if tree.state.flags & ~re.UNICODE:
            raise NotWritable("inline flags such as (?i) are not supported")
        self.items = list(tree)
        self._sets: dict[tuple[Any, ...], Ranges] = {}
        self._check(self.items)

    def _check(self, items: list[Any]) -> None:  # sre_parse's (op, arg) items
        for op, arg in items:
            if op in (_P.ASSERT, _P.ASSERT_NOT):
                raise NotWritable(f"{'lookbehind' if arg[0] < 0 else 'lookahead'} assertions are not supported")
            if op in _UNSUPPORTED:
                raise NotWritable(f"{_UNSUPPORTED[op]} are not supported")
            if op is _P.SUBPATTERN:
                if arg[1] or arg[2]:
                    raise NotWritable("inline flags such as (?i:...) are not supported")
                self._check(list(arg[3]))
            elif op in (_P.MAX_REPEAT, _P.MIN_REPEAT):
                self._check(list(arg[2]))
            elif op is _P.BRANCH:
                for branch in arg[1]:
                    self._check(list(branch))

    def char_set(self, op: Any, arg: Any) -> Ranges:
        """One character item of the parse (a literal, `.`, a class) as ranges."""
        key = (op, arg if op is not _P.IN else tuple(arg))
        ranges = self._sets.get(key)
        if ranges is None:
            ranges = self._sets[key] = _item_ranges(op, arg)
        return ranges

    def char_sets(self) -> set[Ranges]:
        """Every distinct character set the regex uses."""
        found: set[Ranges] = set()

        def visit(items: Any) -> None:
            for op, arg in items:
                if op in (_P.LITERAL, _P.NOT_LITERAL, _P.ANY, _P.IN):
                    found.add(self.char_set(op, arg))
                elif op is _P.SUBPATTERN:
                    visit(arg[3])
                elif op in (_P.MAX_REPEAT, _P.MIN_REPEAT):
                    visit(arg[2])
                elif op is _P.BRANCH:
                    for branch in arg[1]:
                        visit(branch)

        visit(self.items)
        return found

    def write(
        self,
        write_set: Callable[[Ranges], str],
        spell_counts_up_to: int = 0,
        nonempty_repeats: bool = False,
        max_chars: int | None = None,
    ) -> str | None:
        """The regex again, each character set as `write_set(ranges)` (never called with
        an empty set), groups as `(?:...)`: the same language in the syntax every engine
        reads alike. None when the regex matches no string at all (`[^\\s\\S]`).
        `spell_counts_up_to`: a repetition of one character set X is written so that no
        count with a required copy ends it (`_spelled`, see portable_regex), and any `X?` or
        empty alternative as `{0,1}`.
        `nonempty_repeats`: a part that can match the empty string, repeated, is written
        without its empty match (`without_empty`): `(?:[a-z]?)+` as `[a-z]{0,}`.
        `max_chars`: raise WrittenTooLong as soon as the character sets written pass it (a part that
        can match nothing, repeated, may be written in quadratic length: `(?:a?a?...a?)+`
        of 4 KB took 8 s to write out before its length was refused; a stranger's stall hunt)."""
        self._spell = spell_counts_up_to
        self._nonempty = nonempty_repeats
        self._max_chars = max_chars
        self._left = max_chars
        return self._write(self.items, write_set)

    _spell = 0
    _nonempty = False
    _max_chars: int | None = None
    _left: int | None = None

    def _write(self, items: Any, write_set: Callable[[Ranges], str]) -> str | None:
        out = []
        for op, arg in items:
            if op in (_P.LITERAL, _P.NOT_LITERAL, _P.ANY, _P.IN):
                ranges = self.char_set(op, arg)
                # (a set of lone surrogates only, `[\ud800-\udfff]`, matches no UTF-8 text:
                # empty, not a `[]` that each engine refuses in words about a class never written)
                part = write_set(ranges) if _without_surrogates(ranges) else None
                if self._left is not None and part is not None:  # (the written sets alone: a lower bound)
                    self._left -= len(part)
                    if self._left < 0:
                        raise WrittenTooLong(f"written out, it is longer than {self._max_chars:,} characters")
            elif op in (_P.MAX_REPEAT, _P.MIN_REPEAT):  # laziness does not change a full match
                low, high, sub = arg
                if self._nonempty and high > 1 and nullable(sub):
                    # (X){m,n} with X nullable is (X without ""){0,n}: each copy may be empty
                    low, sub = 0, without_empty(sub)
                    if sub is None:  # X matches only the empty string: so does the repetition
                        continue
                body = self._write(sub, write_set)
                if body is None:
                    part = "" if low == 0 else None
                else:
                    body = body if _is_atom(sub) else f"(?:{body})"
                    top = None if high == _P.MAXREPEAT else high
                    if self._spell and _one_set(sub):
                        part = _spelled(body, low, top, self._spell)
                    else:
                        # (xgrammar's counted form of `X?` is `X{0,1}`, whatever X is)
                        part = body + ("{0,1}" if self._spell and (low, top) == (0, 1) else _bounds(low, top))
            elif op is _P.SUBPATTERN:
                part = self._write(arg[3], write_set)
                part = None if part is None else f"(?:{part})"
            else:  # BRANCH (_check refused every other op)
                options = [o for o in (self._write(b, write_set) for b in arg[1]) if o is not None]
                part = f"(?:{'|'.join(options)})" if options else None
                if self._spell and "" in options and any(options):  # `(?:X|)` as `(?:X){0,1}`
                    part = f"(?:{'|'.join(o for o in options if o)}){{0,1}}"
            if part is None:
                return None
            out.append(part)
        return "".join(out)


def nullable(items: Any) -> bool:
    """Whether a parse (sre items, anchors stripped) matches the empty string."""
    for op, arg in items:
        if op in (_P.MAX_REPEAT, _P.MIN_REPEAT):
            if arg[0] > 0 and not nullable(arg[2]):
                return False
        elif op is _P.SUBPATTERN:
            if not nullable(arg[3]):
                return False
        elif op is _P.BRANCH:
            if not any(nullable(b) for b in arg[1]):
                return False
        else:  # a character set
            return False
    return True


# Items `without_empty` may write for one sequence (its rewrite of k nullable items holds
# k(k+1)/2 of them: 6,000 `a?` in a row took 0.7 s to rewrite before any length was checked).
MAX_REWRITTEN_ITEMS = 200_000


def without_empty(items: Any) -> list[Any] | None:
    """The parse of what `items` match except the empty string, as sre items; None when it
    matches nothing else. A sequence whose items can all be empty is a choice of which item
    is the first to read something: `a?b?` is `a{1}b? | b{1}`."""
    if not nullable(items):
        return list(items)
    items = list(items)
    if len(items) * (len(items) + 1) // 2 > MAX_REWRITTEN_ITEMS:  # (each option holds the items after its first)
        raise WrittenTooLong(f"a sequence of {len(items):,} parts that can each match nothing is too long to rewrite")
    options = []
    for i, (op, arg) in enumerate(items):  # (every item is nullable: the ones before i read nothing)
        first = _item_without_empty(op, arg)
        if first is not None:
            options.append([first, *items[i + 1 :]])
    if not options:
        return None
    return options[0] if len(options) == 1 else [(_P.BRANCH, (None, options))]


def _item_without_empty(op: Any, arg: Any) -> tuple[Any, Any] | None:
    if op in (_P.MAX_REPEAT, _P.MIN_REPEAT):
        low, high, sub = arg
        if high == 0:
            return None
        low, sub = (1, without_empty(sub)) if nullable(sub) else (max(low, 1), sub)
        if sub is None:
            return None
        # (one copy as a group: `(?:[a-z])`, which the writer knows for one character set)
        return (_P.SUBPATTERN, (None, 0, 0, sub)) if (low, high) == (1, 1) else (op, (low, high, sub))
    if op is _P.SUBPATTERN:
        inner = without_empty(arg[3])
        return None if inner is None else (op, (arg[0], arg[1], arg[2], inner))
    if op is _P.BRANCH:
        branches = [b for b in (without_empty(branch) for branch in arg[1]) if b is not None]
        if len(branches) == 1:
            return (_P.SUBPATTERN, (None, 0, 0, branches[0]))
        return (_P.BRANCH, (None, branches)) if branches else None
    return (op, arg)  # a character set: never empty


def _is_atom(items: Any) -> bool:
    """Whether a parse is one character set (written as one atom: no group needed)."""
    return len(items) == 1 and items[0][0] in (_P.LITERAL, _P.NOT_LITERAL, _P.ANY, _P.IN)


def _one_set(items: Any) -> bool:
    """Whether a parse is one character set, perhaps inside groups (`(?:[a-z])`)."""
    while len(items) == 1 and items[0][0] is _P.SUBPATTERN:
        items = items[0][1][3]
    return _is_atom(items)


def _spelled(body: str, low: int, high: int | None, up_to: int) -> str:
    """`body{low,high}` (high None: unbounded) with its last required copy written alone,
    the copies before it spelled out up to `up_to` (beyond, groups of `up_to` counted, then
    the rest spelled), then what is optional counted from 0: `X+` as `XX{0,}`, `X{3,5}` as
    `XXX{0,2}`, `X{40}` as `(?:X{16}){2}XXXXXXXX`, `X?` as `X{0,1}`, `X*` as `X{0,}`. The same
    language; xgrammar masks this form right (see portable_regex). (`X{39}X` it did not:
    `[c-я]{18}` after ten letters forbade `function`; a stranger's fuzzing.)"""
    if low == 0:
        head = ""
    else:
        groups, rest = divmod(low - 1, up_to) if low - 1 > up_to else (0, low - 1)
        head = (f"(?:{body}{{{up_to}}}){{{groups}}}" if groups else "") + body * rest + body
    if high is None:
        return f"{head}{body}{{0,}}"
    return head + (f"{body}{{0,{high - low}}}" if high > low else "")


def _bounds(low: int, high: int | None) -> str:
    if (low, high) == (0, None):
        return "*"
    if (low, high) == (1, None):
        return "+"
    if (low, high) == (0, 1):
        return "?"
    if low == high:
        return f"{{{low}}}"
    return f"{{{low},{'' if high is None else high}}}"


def _item_ranges(op: Any, arg: Any) -> Ranges:
    if op is _P.LITERAL:
        return ((arg, arg),)
    if op is _P.NOT_LITERAL:
        return complement(((arg, arg),))
    if op is _P.ANY:
        return DOT
    negate, parts = False, []
    for item_op, item_arg in arg:
        if item_op is _P.NEGATE:
            negate = True
        elif item_op is _P.LITERAL:
            parts.append((item_arg, item_arg))
        elif item_op is _P.RANGE:
            parts.append(item_arg)
        elif item_op is _P.CATEGORY:
            parts.extend(shorthand_ranges(_CATEGORIES[item_arg]))
        else:  # pragma: no cover - re's parser puts nothing else in a class of a str pattern
            raise NotWritable(f"class item {item_op} is not supported")
    ranges = normalize(parts)
    return complement(ranges) if negate else ranges


# ---------------------------------------------------------------------------------------
# Spelling a class out
# ---------------------------------------------------------------------------------------
def escape_in_class(code: int, raw_astral: bool = False) -> str:
    """One code point as it reads inside `[...]` in Python, Rust's regex and xgrammar alike:
    letters and digits of ASCII as themselves, everything else as `\\uHHHH` or
    `\\UHHHHHHHH` (no engine can read an escape as something else, or a raw character as
    an operator such as Rust's `&&` or `~~`). Not `\\xHH`: xgrammar reads all the hex
    digits that follow (`\\x5fa` as U+05FA). `raw_astral`: a code point past U+FFFF as
    itself, not `\\UHHHHHHHH`, which xgrammar's reader of a JSON schema's pattern takes for
    the letters `U0001f600` (its regex reader knows it)."""
    if code < 0x80 and chr(code).isalnum() or raw_astral and code > 0xFFFF:
        return chr(code)
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def explicit_class(ranges: Ranges, raw_astral: bool = False) -> str:
    """`ranges` as one bracketed class, `[...]` or `[^...]`, whichever names fewer ranges
    (`.` is `[^\\u000a]`), or one character's escape alone. Surrogates are left out of a
    positive class (no engine reading UTF-8 has them) and so never split a negated one."""
    ranges = _without_surrogates(ranges)
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:  # one character: no brackets
        return escape_in_class(ranges[0][0], raw_astral)
    other = _without_surrogates(complement(ranges))
    # (every character: `[^]` says so in JavaScript alone; Rust and Python refuse it)
    negated = 0 < len(other) < len(ranges)
    items = list(other if negated else ranges)
    # xgrammar writes most control characters as `\xHH` in its EBNF class, whose `\x` reads
    # every hex digit that follows: `[\u0001a]` became U+001A, not U+0001 and 'a' (a stranger's
    # vocabulary with control-character tokens). So a range ending in a control character
    # goes after the others, where another escape, the caret or the `]` follows it.
    items = [r for r in items if r[1] >= 0x20] + [r for r in items if r[1] < 0x20]
    if not negated and items[0][0] == CARET:
        # xgrammar turns `[\u005ea]` (and `[\^a]`) into its EBNF class `[^a]`: a leading
        # caret, however escaped, negates there. So '^' goes last, where it is a character.
        lo, hi = items.pop(0)
        items = ([(lo + 1, hi)] if hi > lo else []) + items + [(CARET, CARET)]
    body = "".join(
        escape_in_class(lo, raw_astral)
        if lo == hi
        else f"{escape_in_class(lo, raw_astral)}-{escape_in_class(hi, raw_astral)}"
        for lo, hi in items
    )
    return f"[{'^' if negated else ''}{body}]"


CARET = ord("^")


def _without_surrogates(ranges: Ranges) -> Ranges:
    out = []
    for lo, hi in ranges:
        if lo < 0xD800:
            out.append((lo, min(hi, 0xD7FF)))
        if hi > 0xDFFF:
            out.append((max(lo, 0xE000), hi))
    return tuple(out)


def portable_regex(
    regex: str,
    spell_counts_up_to: int = 0,
    nonempty_repeats: bool = False,
    max_chars: int | None = None,
    raw_astral: bool = False,
) -> str:
    """`regex` (whole-output match, a leading `^` and trailing `$` ignored) written so that
    any engine reads it as Python does: every character set spelled out by
    `explicit_class`. What the library backends compile instead of the client's text.

    `spell_counts_up_to` (xgrammar's adapter, non-zero): a repetition of one character set
    is written with its last required copy alone, the copies before it spelled out up to
    that many (beyond, in counted groups of that many), and the rest counted from 0
    (`[a-z]{1,3}` as `[a-z][a-z]{0,2}`, `[A-Z]+` as `[A-Z][A-Z]{0,}`, `[a-z]?` as
    `[a-z]{0,1}`), the same language, which xgrammar masks right where it does not mask
    `{1,3}`, `+`, `{20}` or `?` right before a class of multi-byte characters; any other
    `X?`, and an empty alternative (`(?:X|)`), as `X{0,1}` (before `\\d\\d`,
    `(?:\\{|AB\\})?` let `{"` through). `nonempty_repeats` (xgrammar's too): a
    repeated part that can match the empty string is written without its empty match
    (`(?:[a-z]?b?)+` as `(?:[a-z]b{0,1}|b){0,}`), the same language, over which xgrammar's
    mask does not slow with every token. `max_chars`: WrittenTooLong (not a RegexError) as
    soon as the written regex would pass that length. `raw_astral`: see `escape_in_class`.

    Raises RegexError (regex_dfa's) naming the problem: Python's message for an invalid
    regex, the construct for an unsupported one, or an empty language.
    """
    from .regex_dfa import EmptyLanguage, RegexError, _strip_anchors, shown_regex  # (regex_dfa imports this module)

    try:
        write_set = functools.partial(explicit_class, raw_astral=raw_astral)
        text = PythonRegex(_strip_anchors(regex)).write(write_set, spell_counts_up_to, nonempty_repeats, max_chars)
    except re.error as e:
        raise RegexError(f"invalid regex {shown_regex(regex)}: {e}") from None
    except WrittenTooLong:
        raise
    except NotWritable as e:
        raise RegexError(f"unsupported regex {shown_regex(regex)}: {e}") from None
    except RecursionError:
        raise RegexError(f"regex too complex: {shown_regex(regex)} nests groups too deeply") from None
    if text is None:
        raise EmptyLanguage(shown_regex(regex))
    return text
