"""Python's regex dialect as our automata read it (constrained/python_regex.py): `\\d \\w \\s`,
their complements and `.` hold exactly the code points Python's `re` gives them (found by `re`
itself over every code point), and inline flags are refused (but `(?u)`, no flag in a str pattern). The oracle is `re.fullmatch`;
the automaton is the lazy one (its rows are built on demand, so each character's bytes are
walked). The eager DFA's own reading: tests/test_regex_dfa.py; every backend's:
tests/test_backends.py."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_lazy_automaton import accepts, lazy_dfa
from test_regex_dfa import DIALECT_CHARS, DIALECT_REGEXES

from minisglang.constrained.lazy_regex import RegexError
from minisglang.constrained.python_regex import portable_regex
from minisglang.constrained.regex_dfa import compile_regex


@pytest.fixture(scope="module")
def dialect_lazy_dfas():
    return {rx: lazy_dfa(rx) for rx in DIALECT_REGEXES}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(DIALECT_REGEXES), st.lists(DIALECT_CHARS, max_size=5).map("".join))
def test_shorthand_classes_and_dot_read_as_python_does(dialect_lazy_dfas, pattern, text):
    """Characters in and next to each Unicode class ('٣', '艳', '\\x1c', '\\u2028', '_')."""
    assert accepts(dialect_lazy_dfas[pattern], text) == (re.fullmatch(pattern, text) is not None), (pattern, text)


@pytest.mark.parametrize("pattern", [r"\w", r"\W", r"\d", r"\D", r"\s", r"\S", ".", r"[\w-]", r"[^\w\s]"])
def test_each_shorthand_class_holds_exactly_pythons_code_points(pattern):
    """Every code point, against `re` itself (the lazy automaton's rows are built on demand,
    so this walks each character's bytes)."""
    dfa = lazy_dfa(pattern)
    for code in range(0x110000):
        if 0xD800 <= code <= 0xDFFF or (code > 0x3000 and code % 7):  # every 7th above U+3000
            continue
        ch = chr(code)
        assert accepts(dfa, ch) == (re.fullmatch(pattern, ch) is not None), (pattern, hex(code))


def test_inline_flags_are_refused_in_the_lazy_automaton_too():
    for pattern in ["(?i)a", "a(?i:b)", "(?a)\\w", "(?s).", "(?x)a b"]:
        with pytest.raises(RegexError, match="inline flags"):
            lazy_dfa(pattern)


@pytest.mark.parametrize("pattern", [r"(?u)\w+", r"(?u:\w)x", r"a(?u:[^\W\d])*"])
def test_the_unicode_flag_a_str_pattern_has_anyway_is_read_as_no_flag(pattern):
    """A stranger's fuzzer: `(?u)` was refused as inline flags here and read by the eager
    DFA; in a str pattern Python's matching is Unicode already, so the flag changes nothing."""
    dfa = lazy_dfa(pattern)
    for text in ["é", "艳٣_", "ax", "a", "a1", "x", "é x", "٣x", "aéz"]:
        assert accepts(dfa, text) == (re.fullmatch(pattern, text) is not None), (pattern, text)


@pytest.mark.parametrize("pattern", ["a{,4294967295}", "a{4294967296}", "(ab){2,99999999999}"])
def test_a_repetition_bound_too_large_for_python_is_a_regex_error(pattern):
    """A stranger's fuzzer: Python's parser raises OverflowError for a bound past 2**32 - 2,
    which left the parser as that, not as the RegexError every other invalid regex is."""
    with pytest.raises(RegexError, match="invalid regex .*repetition number is too large"):
        lazy_dfa(pattern)
    # (and the eager automaton and the libraries' portable form: a stranger's regex fuzzing saw
    # the eager fsm report "OverflowError: the repetition number is too large")
    for reader in (compile_regex, portable_regex):
        with pytest.raises(RegexError, match="invalid regex .*repetition number is too large"):
            reader(pattern)


@pytest.mark.parametrize(
    "pattern",
    [
        r"[a\x01]",
        r"[\x01-\x05a-f]",
        r"[^\x01-\x1fA]",
        r"[\x00-\x1f0-9]",
        r"[\x0e\x127F]",
        r"[\x01^]",
        r"[\x02-\x03\^a]",
    ],
)
def test_portable_classes_keep_control_characters_apart_from_hex_digits(pattern):
    """xgrammar writes a control character as `\\xHH` in its grammar and reads every hex digit
    after `\\x`: `portable_regex("[a\\x01]")` was `[\\u0001a]`, which xgrammar read as U+001A
    (its mask allowed b"\\x1a" and neither b"\\x01" nor b"a"; a stranger's vocabulary with
    control-character tokens). No such escape is followed by a hex digit now, and xgrammar's
    first-byte mask is the fsm backend's."""
    xgr = pytest.importorskip("xgrammar")  # noqa: F841  (the backend's library)
    import minisglang
    from minisglang.backends.base import get_backend_class
    from minisglang.constrained.bitmask import unpack_bits
    from minisglang.constrained.python_regex import portable_regex
    from minisglang.tokenizer import Tokenizer

    written = portable_regex(pattern)
    assert not re.search(r"\\u00[01][0-9a-f](?![-\\\]^])", written), written
    tokenizer = Tokenizer.from_pretrained(minisglang.DEFAULT_MODEL_PATH)
    width = tokenizer.vocab_size
    rows = []
    for name in ("xgrammar", "fsm"):
        backend = get_backend_class(name)(tokenizer, width, compile_in="thread")
        try:
            g = backend.compile("regex", pattern)
            mask = g.allocate_vocab_mask(width, 1)
            g.fill_vocab_mask(mask, 0)
            rows.append(unpack_bits(mask, width)[0])
        finally:
            backend.shutdown()
    differ = (rows[0] != rows[1]).nonzero().flatten().tolist()
    assert not differ, [(tokenizer.token_bytes[t], bool(rows[0][t])) for t in differ[:5]]


@pytest.mark.parametrize("regex", ["[[:alpha:]]+", "x[[:digit:][:space:]]{2}", "[^[:punct:]]"])
def test_a_posix_class_is_refused_by_name_by_every_reader(regex):
    """Python reads `[[:alpha:]]` as the set of '[', ':', 'a', 'l', 'p', 'h' and a literal ']'
    (a model under it wrote "h]"); a stranger porting grep's and PCRE's regexes meant letters.
    The eager reader, the lazy one and the libraries' portable form all refuse it by name."""
    from minisglang.constrained.lazy_regex_parser import parse_tree
    from minisglang.constrained.python_regex import NotWritable, PythonRegex, portable_regex
    from minisglang.constrained.regex_dfa import RegexError

    with pytest.raises(NotWritable, match=r"POSIX character classes such as \[:\w+:\] are not supported"):
        PythonRegex(regex)
    with pytest.raises(RegexError, match="POSIX character classes"):
        portable_regex(regex)  # (what xgrammar, llguidance and outlines-core are given)
    with pytest.raises(RegexError, match="POSIX character classes"):
        parse_tree(regex)


@pytest.mark.parametrize("regex", [r"\[:alpha:\]", "[[:]+", "[:x:]", r"[\[:alpha:\]]"])
def test_text_that_only_looks_like_a_posix_class_is_read_as_python_reads_it(regex):
    from minisglang.constrained.lazy_regex_parser import parse_tree
    from minisglang.constrained.python_regex import PythonRegex

    PythonRegex(regex)
    parse_tree(regex)


@st.composite
def _repetitions(draw) -> str:
    """One to three repetitions of a set, a group or a literal, with every kind of count (a
    part that can match the empty string up to 2 required copies and never unbounded: Python's
    `re`, the oracle, backtracks through every way to split a text that fails `(?:a?b?){17,21}`,
    1.4 s for 13 characters, and `(?:a?b?)+(?:ab){18,}` on 80 for minutes; CI runs hung in
    both. test_repeated_parts_without_their_empty_match_are_the_same_language reads `*` and `+`
    of such parts on every short text instead)."""
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        body = draw(
            st.sampled_from(["a", "[ab]", "[0-9٠-٩]", "(?:ab)", "(?:[a1])", "(?:a?)", "(?:a?b?)", "(?:a|)", "(?:a*b)"])
        )
        nullable = body in ("(?:a?)", "(?:a?b?)", "(?:a|)")
        low = draw(st.integers(0, 2 if nullable else 20))
        high = draw(st.integers(low, low + 4) if nullable else st.one_of(st.none(), st.integers(low, low + 4)))
        count = (
            draw(st.sampled_from(["?"] if nullable else ["+", "*", "?"]))
            if draw(st.booleans())
            else f"{{{low},{'' if high is None else high}}}"
        )
        parts.append(body + count)
    return "".join(parts)


@settings(max_examples=150, deadline=None)
@given(_repetitions(), st.integers(1, 16), st.booleans(), st.data())
def test_spelled_out_counts_are_the_same_language(pattern, spell, nonempty, data):
    """portable_regex's spelled-out counts and repeated parts without their empty match
    (xgrammar's form: `XX{0,}` for `X+`, `X{19}X` for `X{20}`, `(?:a|b){0,}` for `(?:a?b?)*`)
    match exactly what the regex matches, for any spelling bound: a text it matches and the
    texts one character away from it (a copy short, a copy too many); and with
    `nonempty_repeats` no repeated part can match the empty string."""
    from minisglang.backends.ignored_keywords import repeats_a_nullable_part

    written = portable_regex(pattern, spell, nonempty)
    assert not (nonempty and repeats_a_nullable_part(written)), (pattern, written)
    text = data.draw(st.from_regex(pattern, fullmatch=True), label="text")
    near = {text, text[:-1], text[1:], text + text[-1:], text[:1] + text}
    for t in near:
        assert (re.fullmatch(written, t) is None) == (re.fullmatch(pattern, t) is None), (pattern, written, t)


@pytest.mark.parametrize(
    "pattern",
    ["(?:a?b?){2}", "(?:(?:a?){2,3}b?)*", "(?:a|b?){1,3}", "(?:a?b?)+b", "(?:(?:ab)?(?:ba)?){2,3}", "(?:a*b?){0,2}a"],
)
def test_repeated_parts_without_their_empty_match_are_the_same_language(pattern):
    """xgrammar's form of a repeated part that can match the empty string (`(?:a?b?){2}` as
    `(?:ab{0,1}|b){0,2}`), against `re.fullmatch` on every string of a and b up to 7 long."""
    from itertools import product

    from minisglang.backends.ignored_keywords import repeats_a_nullable_part

    written = portable_regex(pattern, 16, nonempty_repeats=True)
    assert not repeats_a_nullable_part(written), written
    for n in range(8):
        for text in map("".join, product("ab", repeat=n)):
            assert (re.fullmatch(written, text) is None) == (re.fullmatch(pattern, text) is None), (written, text)


def test_a_rewrite_past_its_length_bound_stops_while_it_is_written():
    """A repeated run of n optional parts is rewritten as n alternatives of up to n parts: a
    stranger's `(?:a?...a?)+` of 4 KB took 8 s to write out whole before its length was refused
    (a compile thread's GIL all that while). `max_chars` stops the writer at the bound, and a
    run too long to rewrite at all is refused before any of it is built."""
    from minisglang.constrained.python_regex import MAX_REWRITTEN_ITEMS, WrittenTooLong

    regex = "(?:" + "a?" * 300 + ")+"
    assert len(portable_regex(regex, 16, nonempty_repeats=True)) > 100_000  # (quadratic: ~45,000 copies)
    with pytest.raises(WrittenTooLong, match="longer than 2,000 characters"):
        portable_regex(regex, 16, nonempty_repeats=True, max_chars=2_000)
    short = portable_regex("(?:a?b?)+", 16, nonempty_repeats=True, max_chars=2_000)  # (within the bound)
    assert [t for t in ["", "a", "b", "ab", "ba", "abb", "aab"] if re.fullmatch(short, t)] == [
        t for t in ["", "a", "b", "ab", "ba", "abb", "aab"] if re.fullmatch("(?:a?b?)+", t)
    ]
    n = int((2 * MAX_REWRITTEN_ITEMS) ** 0.5) + 1
    with pytest.raises(WrittenTooLong, match=f"{n:,} parts"):
        portable_regex("(?:" + "a?" * n + ")+", 16, nonempty_repeats=True)
