"""regex -> CharDFA -> ByteDFA, checked against Python's `re.fullmatch` (the oracle).

Tests of minisglang/constrained/regex_dfa.py and python_regex.py.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minisglang.constrained.regex_dfa import (
    ByteDFA,
    CharClass,
    RegexError,
    compile_regex,
    shown_regex,
    utf8_sequences,
)

# Strings up to this length over this alphabet are enumerated exhaustively. "z" is named
# by no generated regex, so it exercises the "every other character" class.
ALPHABET = "ab1é中\nz"
MAX_LEN = 4
ALL_STRINGS = ["".join(p) for n in range(MAX_LEN + 1) for p in itertools.product(ALPHABET, repeat=n)]


def check_against_re(pattern: str, strings=ALL_STRINGS) -> None:
    """CharDFA and ByteDFA agree with re.fullmatch on every string; char states = byte states."""
    dfa = compile_regex(pattern)
    byte_dfa = ByteDFA.from_char_dfa(dfa)
    oracle = re.compile(pattern)  # Python's dialect: \d \w \s are Unicode-wide
    for s in strings:
        expected = oracle.fullmatch(s) is not None
        assert dfa.accepts(s) == expected, (pattern, s)
        end = byte_dfa.walk_bytes(0, s.encode("utf-8"))
        assert byte_dfa.is_final(end) == expected, (pattern, s)
        char_end = dfa.walk(0, s)
        # A whole number of characters lands in the char DFA's own state id (or both die).
        assert end == (-1 if char_end is None else char_end), (pattern, s)


# ---------------------------------------------------------------------------------------
# Known regexes (SGLang's own test regexes among them)
# ---------------------------------------------------------------------------------------
KNOWN = {
    r"^user@example\.com$": ["user@example.com", "user@example.co", "user@exampleXcom"],
    r"^(Hello|Hi|Hey)$": ["Hello", "Hi", "Hey", "He", "Hell", "Hix", ""],
    r"^\d{3}$": ["123", "12", "1234", "12a", "٣٣٣"],
    r"^\(\d{3}\) \d{3}-\d{4}$": ["(555) 123-4567", "555 123-4567", "(555) 123-456"],
    r"^2024-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$": ["2024-01-31", "2024-13-01", "2024-02-00", "2024-12-3"],
    r"^#[0-9A-F]{6}$": ["#00FF7A", "#00ff7a", "#00FF7", "00FF7A0"],
    r"((25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(25[0-5]|2[0-4]\d|1?\d?\d)": ["192.168.0.1", "256.1.1.1", "1.2.3", "0.0.0.0"],
    r'\{"name": "[^"\\]{0,5}", "age": (0|[1-9][0-9]*)\}': [
        '{"name": "Bob", "age": 42}',
        '{"name": "Bob", "age": 042}',
        '{"name": "中文", "age": 0}',
        '{"name": "a\\"", "age": 1}',
    ],
    r"[\u4e00-\u9fa5]{2,3}": ["中文", "中文字", "中", "中文字典", "ab"],
    r"(😀|🎉)+!": ["😀!", "😀🎉😀!", "!", "😀"],
    r"[^a-zé]+": ["XYZ", "x", "é", "中文", "É\n"],
    "": ["", "a"],
}


@pytest.mark.parametrize("pattern", sorted(KNOWN))
def test_known_regexes_match_like_re_fullmatch(pattern):
    check_against_re(pattern, KNOWN[pattern] + ALL_STRINGS[:400])


def test_step_walk_accepts_and_initial_state():
    dfa = compile_regex(r"ab*c")
    assert dfa.initial == 0
    s = dfa.step(0, "a")
    assert s is not None and dfa.step(s, "b") == s  # b* loops
    assert dfa.step(0, "b") is None
    assert dfa.walk(0, "abbb") == s
    assert dfa.walk(0, "abx") is None
    assert dfa.accepts("abbbc") and not dfa.accepts("abbb")


def test_anchors_are_ignored_but_an_escaped_dollar_is_literal():
    anchored, plain = compile_regex("^ab$"), compile_regex("ab")
    assert (anchored.transitions, anchored.finals) == (plain.transitions, plain.finals)
    assert compile_regex(r"a\$").accepts("a$")
    assert not compile_regex(r"a\$").accepts("a")
    assert compile_regex(r"a\\$").accepts("a\\")  # escaped backslash, then a real anchor


_BODIES = ["a", "b", "ab", "a*", "(?:a|b)", "[ab]b?", "[|^]", "b\\$", "[a]", "[^a]", "[]|]", "[\\]]"]


@st.composite
def anchored_alternatives(draw) -> str:
    """1-3 alternatives, each with or without `^` before and `$` after, the whole maybe a group."""
    branches = [
        draw(st.sampled_from(["", "^"])) + draw(st.sampled_from(_BODIES)) + draw(st.sampled_from(["", "$"]))
        for _ in range(draw(st.integers(1, 3)))
    ]
    whole = "|".join(branches)
    return draw(st.sampled_from([whole, f"({whole})", f"(?:{whole})", f"^(?:{whole})$"]))


@settings(max_examples=60, deadline=None)
@given(anchored_alternatives())
def test_anchors_opening_and_closing_each_alternative_read_as_fullmatch_does(pattern):
    """`^yes$|^no$` (users write an anchor per alternative) was refused by every backend, though
    those anchors always hold where a whole-output match starts and ends; every reader (the eager
    automaton, the lazy one, the libraries' portable form) now reads it as re.fullmatch does, on
    every string of a, b, |, ^, $ up to 3 characters (a stranger's regex fuzzing)."""
    from minisglang.constrained.lazy_byte_dfa import LazyByteDFA
    from minisglang.constrained.python_regex import portable_regex

    eager, lazy, portable = compile_regex(pattern), LazyByteDFA.from_regex(pattern), portable_regex(pattern)
    for n in range(4):
        for chars in itertools.product("ab|^$", repeat=n):
            text = "".join(chars)
            expected = re.fullmatch(pattern, text) is not None
            assert eager.accepts(text) == expected, (pattern, text, "eager")
            assert lazy.matches(text.encode()) == expected, (pattern, text, "lazy")
            assert (re.fullmatch(portable, text) is not None) == expected, (pattern, text, "portable")


def test_unicode_escapes_are_understood():
    assert compile_regex(r"\u4e2d\u6587").accepts("中文")
    assert compile_regex(r"[\u0041-\u0043]+").accepts("ABCA")
    assert compile_regex(r"\u005b").accepts("[")  # "[" escaped, not a class opener
    assert compile_regex(r"\U0001F600").accepts("😀")
    assert compile_regex(r"\\u0041").accepts("\\u0041")  # an escaped backslash, then "u0041"


# ---------------------------------------------------------------------------------------
# Property test: generated regexes over a small alphabet
# ---------------------------------------------------------------------------------------
ATOMS = st.sampled_from(["a", "b", "1", "é", "中", ".", r"\d", "[ab]", "[^a]", "[a1]", "[^é中]", "[a-b]", "[0-9]"])


def _quantified(inner: st.SearchStrategy) -> st.SearchStrategy:
    quantifier = st.sampled_from(["?", "*", "+", "{2}", "{0,2}", "{1,3}", "{2,}"])
    return st.tuples(inner, quantifier).map(lambda t: f"({t[0]}){t[1]}")


REGEXES = st.recursive(
    ATOMS,
    lambda inner: st.one_of(
        st.lists(inner, min_size=2, max_size=3).map("".join),  # concatenation
        st.lists(inner, min_size=2, max_size=3).map(lambda xs: "(" + "|".join(xs) + ")"),
        _quantified(inner),
        inner.map(lambda x: f"(?:{x})"),
    ),
    max_leaves=6,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(REGEXES)
def test_generated_regexes_agree_with_re_fullmatch_on_every_short_string(pattern):
    check_against_re(pattern)


@settings(max_examples=40, deadline=None)
@given(REGEXES)
def test_every_state_can_still_reach_an_accepting_state(pattern):
    dfa = compile_regex(pattern)
    live = set(dfa.finals)
    for _ in range(dfa.num_states):
        live |= {s for s, row in dfa.transitions.items() if set(row.values()) & live}
    assert live == set(range(dfa.num_states))


@settings(max_examples=60, deadline=None)
@given(
    st.sets(st.sampled_from('ab1é中\n\\"]^-'), max_size=4),
    st.booleans(),
    st.sets(st.sampled_from('ab1é中\n\\"]^-'), max_size=4),
    st.booleans(),
)
def test_char_class_union_and_label(chars1, neg1, chars2, neg2):
    c1, c2 = CharClass(frozenset(chars1), neg1), CharClass(frozenset(chars2), neg2)
    union = c1.union(c2)
    for ch in 'ab1é中\n\\"]^-xyz':
        assert (ch in union) == (ch in c1 or ch in c2)
    # The label is a regex that matches exactly the class's characters.
    label = union.label()
    for ch in 'ab1é中\n\\"]^-xyz':
        if label in ("(any)", "(none)"):
            assert (ch in union) == (label == "(any)")
        else:
            assert (re.fullmatch(label, ch) is not None) == (ch in union), (label, ch)


def test_labels_merge_ranges():
    assert CharClass(frozenset("0123456789")).label() == "[0-9]"
    assert CharClass(frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")).label() == "[A-Z_a-z]"
    assert CharClass(frozenset('"\\'), negated=True).label() == '[^"\\\\]'
    assert CharClass(frozenset("\n")).label() == "\\n"
    assert CharClass(frozenset(), negated=True).label() == "(any)"


# ---------------------------------------------------------------------------------------
# Byte level: every code point, and invalid UTF-8
# ---------------------------------------------------------------------------------------
ALL_CODE_POINTS = np.array([c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF])
EVERYTHING = "".join(map(chr, ALL_CODE_POINTS))


def _byte_matrix(sequences: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Byte strings -> ([n, longest] zero-padded uint8 matrix, [n] lengths)."""
    lengths = np.array([len(s) for s in sequences])
    matrix = np.zeros((len(sequences), lengths.max()), dtype=np.uint8)
    for k in range(lengths.max()):
        matrix[:, k] = [s[k] if len(s) > k else 0 for s in sequences]
    return matrix, lengths


@pytest.fixture(scope="module")
def every_code_point_utf8() -> tuple[np.ndarray, np.ndarray]:
    """The UTF-8 encoding (Python's encoder is the oracle) of every code point, as a matrix."""
    blob = np.frombuffer(EVERYTHING.encode("utf-8"), dtype=np.uint8)
    lengths = 1 + (ALL_CODE_POINTS >= 0x80) + (ALL_CODE_POINTS >= 0x800) + (ALL_CODE_POINTS >= 0x10000)
    starts = np.cumsum(lengths) - lengths
    assert starts[-1] + lengths[-1] == blob.shape[0]
    matrix = np.zeros((ALL_CODE_POINTS.shape[0], 4), dtype=np.uint8)
    for k in range(4):
        has = lengths > k
        matrix[has, k] = blob[starts[has] + k]
    return matrix, lengths


def _walk_many(byte_dfa: ByteDFA, matrix: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """End state of each byte string (a vectorised walk_bytes; -1 for dead)."""
    table = np.vstack([byte_dfa.table, np.full((1, 256), -1, np.int32)]).astype(np.int64)
    dead = byte_dfa.num_states  # the extra last row: dead stays dead
    table[table < 0] = dead
    state = np.zeros(matrix.shape[0], dtype=np.int64)
    for k in range(matrix.shape[1]):
        state = np.where(lengths > k, table[state, matrix[:, k]], state)
    state[state == dead] = -1
    return state


@pytest.mark.parametrize(
    "char_class",
    [
        r'[^"\\]',
        ".",
        r"[^a-zé]",
        r"[\u4e00-\u9fa5]",
        "[😀-🙏]",
        r"[^\x00-\x1f\x7f-\x9f]",
        r"\w",
        r"\W",
        r"\d",
        r"\D",
        r"\s",
        r"\S",
        r"[\w-]",
        r"[^\w\s]",
        r"[\d\s]",
    ],
)
def test_byte_dfa_accepts_exactly_the_utf8_of_every_code_point_in_the_class(char_class, every_code_point_utf8):
    byte_dfa = ByteDFA.from_char_dfa(compile_regex(char_class))
    in_class = np.zeros(ALL_CODE_POINTS.shape[0], dtype=bool)
    in_class[[m.start() for m in re.finditer(char_class, EVERYTHING)]] = True
    ends = _walk_many(byte_dfa, *every_code_point_utf8)
    accepted = np.isin(ends, list(byte_dfa.finals))
    wrong = np.flatnonzero(accepted != in_class)
    assert wrong.size == 0, [hex(ALL_CODE_POINTS[i]) for i in wrong[:5]]


@pytest.mark.parametrize("char_class", [r'[^"\\]', r"[\u4e00-\u9fa5é]"])
def test_byte_dfa_rejects_invalid_utf8(char_class):
    """Overlong forms, surrogates, stray continuation bytes, > U+10FFFF never match."""
    byte_dfa = ByteDFA.from_char_dfa(compile_regex(char_class))
    rng = np.random.default_rng(0)
    samples = [bytes(p) for p in itertools.product(range(256), repeat=2)]
    samples += [
        bytes(rng.integers(0xC0, 256, 1).tolist() + rng.integers(0x80, 0xC0, n).tolist())
        for n in (1, 2, 3)
        for _ in range(4_000)
    ]
    samples += [b"\xc0\x80", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf0\x80\x80\x80"]
    ends = _walk_many(byte_dfa, *_byte_matrix(samples))
    for data, end in zip(samples, ends.tolist()):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        expected = text is not None and re.fullmatch(char_class, text) is not None
        assert byte_dfa.is_final(end) == expected, data


@pytest.mark.parametrize(
    "lo,hi",
    [
        (0, 0x7F),
        (0x70, 0x90),
        (0x7F0, 0x810),
        (0x800, 0xFFFF),
        (0xFFF0, 0x10010),
        (0x1234, 0x5678),
        (0xD700, 0xE0FF),
        (0x3FFF0, 0x40100),
        (0x10FF00, 0x10FFFF),
        (0x3FF, 0x400),
    ],
)
def test_utf8_sequences_cover_exactly_the_encodings_of_the_range(lo, hi):
    sequences = utf8_sequences(lo, hi)
    expected = {chr(c).encode("utf-8") for c in range(lo, hi + 1) if not 0xD800 <= c <= 0xDFFF}
    covered = 0
    for seq in sequences:
        size = 1
        for a, b in seq:
            assert 0 <= a <= b <= 0xFF
            size *= b - a + 1
        covered += size
    assert covered == len(expected)  # no overlap, nothing extra ...
    rng = np.random.default_rng(lo)
    expected = sorted(expected)
    for i in rng.choice(len(expected), size=min(2000, len(expected)), replace=False):
        data = expected[i]
        assert any(len(seq) == len(data) and all(a <= x <= b for x, (a, b) in zip(data, seq)) for seq in sequences), (
            data
        )  # ... and everything that should be there


def test_intermediate_states_are_shared_and_numbered_after_the_char_states():
    dfa = compile_regex(r'"[^"]*"')
    byte_dfa = ByteDFA.from_char_dfa(dfa)
    assert byte_dfa.num_char_states == dfa.num_states
    assert byte_dfa.table.shape == (byte_dfa.num_states, 256) and byte_dfa.table.dtype == np.int32
    # Every 3-byte lead byte E1..EC of [^"] leads to the same "two more bytes" state.
    assert len({int(byte_dfa.table[1, b]) for b in range(0xE1, 0xED)}) == 1
    assert all(s >= dfa.num_states for s in byte_dfa.table[1, 0xC2:0xF5].tolist())
    assert byte_dfa.walk_bytes(1, "中".encode()[:2]) >= dfa.num_states
    assert byte_dfa.walk_bytes(1, "中".encode()) == 1
    assert not byte_dfa.is_final(byte_dfa.walk_bytes(0, '"中'.encode()[:3]))


# ---------------------------------------------------------------------------------------
# Determinism (caches depend on it)
# ---------------------------------------------------------------------------------------
DETERMINISM_PATTERNS = [r'\{"name": "[^"]{0,3}", "tags": \[("[a-z]+"(, )?)*\]\}', r"(ab|cd|[0-9]+|中)*x"]


SERIALISE = """
import json, sys
from minisglang.constrained.regex_dfa import ByteDFA, compile_regex
out = []
for pattern in json.loads(sys.argv[1]):
    dfa = compile_regex(pattern)
    rows = [[(c.label(), t) for c, t in dfa.transitions[s].items()] for s in range(dfa.num_states)]
    table = ByteDFA.from_char_dfa(dfa).table.tolist()
    out.append([rows, sorted(dfa.finals), [c.label() for c in dfa.classes], table])
print(json.dumps(out))
"""


def test_numbering_is_identical_across_processes_with_different_hash_seeds():
    outputs = set()
    for seed in ("1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        out = subprocess.run(
            [sys.executable, "-c", SERIALISE, json.dumps(DETERMINISM_PATTERNS)],
            env=env,
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        )
        outputs.add(out.stdout)
    assert len(outputs) == 1
    assert compile_regex(DETERMINISM_PATTERNS[0]) == compile_regex(DETERMINISM_PATTERNS[0])


def test_states_are_numbered_breadth_first_from_zero():
    dfa = compile_regex("abc|abd|x")
    # Minimal DFA, BFS order: 0 -a-> 1, 0 -x-> 2 (accepting), 1 -b-> 3, 3 -c or d-> 2
    assert dfa.num_states == 4
    assert dfa.walk(0, "a") == 1 and dfa.walk(0, "x") == 2
    assert dfa.walk(0, "ab") == 3 and dfa.walk(0, "abc") == dfa.walk(0, "abd") == 2


# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "pattern,words",
    [
        ("(ab", ["invalid regex", "'(ab'", "missing )"]),
        ("a{2,1}", ["invalid regex", "min repeat greater than max repeat"]),
        ("[z-a]", ["invalid regex", "bad character range"]),
        ("a(?=b)", ["unsupported regex", "lookahead"]),
        ("(?<=a)b", ["unsupported regex", "lookbehind"]),
        (r"(a)\1", ["unsupported regex", "backreferences are not supported"]),
        ("a$b", ["unsupported regex", "anchors other than ^ and $ at the start and end"]),
        ("(?i)a", ["unsupported regex", "inline flags"]),
        ("a(?i:b)", ["unsupported regex", "inline flags"]),
        ("(?a)\\w", ["unsupported regex", "inline flags"]),
        (r"a[^\s\S]b", ["matches no string", "empty language", r"'a[^\s\S]b'"]),
        ("[]a", ["invalid regex"]),
    ],
)
def test_bad_regexes_raise_regex_error_naming_the_problem(pattern, words):
    with pytest.raises(RegexError) as info:
        compile_regex(pattern)
    for word in words:
        assert word in str(info.value)
    assert isinstance(info.value, ValueError)


# ---------------------------------------------------------------------------------------
# The regex in an error message: as the client wrote it
# ---------------------------------------------------------------------------------------
def test_a_regex_in_an_error_keeps_its_backslashes_single():
    assert shown_regex(r"\d{3}-\d{4}") == r"'\d{3}-\d{4}'"
    with pytest.raises(RegexError) as info:
        compile_regex(r"\d{3}-\d{4}(")
    assert str(info.value).startswith(r"invalid regex '\d{3}-\d{4}(': ")
    assert "\\\\" not in str(info.value)


@pytest.mark.parametrize(
    "regex, shown",
    [
        ("a\nb", r"'a\nb'"),
        ("a\x00b", r"'a\x00b'"),
        ("\t\r", r"'\t\r'"),
        ("a\x7fb\x85", r"'a\x7fb\x85'"),
        ("a\u2028b", r"'a\u2028b'"),
        ("\xa0", r"'\xa0'"),
        ("é中😀", "'é中😀'"),  # printable non-ASCII is shown as is
        ("it's", "'it's'"),
        ('"', "'\"'"),  # a quote inside is left as is
    ],
)
def test_a_regex_shows_what_does_not_print_escaped_and_the_rest_as_is(regex, shown):
    assert shown_regex(regex) == shown


def test_a_newline_or_nul_in_a_bad_regex_is_escaped_in_the_error():
    for regex, shown in [("(a\nb", r"'(a\nb'"), ("(a\x00", r"'(a\x00'")]:
        with pytest.raises(RegexError) as info:
            compile_regex(regex)
        message = str(info.value)
        assert f"invalid regex {shown}:" in message and "\n" not in message and "\x00" not in message


def test_a_long_regex_is_cut_in_the_middle_with_its_length():
    regex = "\\d" + "a" * 5000 + "z$"
    shown = shown_regex(regex)
    assert shown == f"'\\d{'a' * 78}'...'{'a' * 38}z$' (5,004 characters)"
    assert shown_regex("a" * 120) == f"'{'a' * 120}'"  # up to the limit: whole
    assert shown_regex("ab" * 10, limit=6) == "'abab'...'ab' (20 characters)"
    with pytest.raises(
        RegexError, match=re.escape(f"invalid regex '\\d{'a' * 78}'...'{'a' * 37}z$(' (5,005 characters): missing )")
    ):
        compile_regex(regex + "(")


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=120))
def test_a_printable_ascii_regex_within_the_limit_is_shown_exactly(regex):
    shown = shown_regex(regex)
    assert shown[0] == shown[-1] == "'" and shown[1:-1] == regex


def test_too_many_states():
    with pytest.raises(RegexError, match=r"regex too complex: more than 10 states \(21\)"):
        compile_regex("a{20}", max_states=10)
    assert compile_regex("a{20}", max_states=21).num_states == 21


@pytest.mark.parametrize("pattern", ["a{1000000}", "(ab|cd){20000,}x", "[a-z]{0,100000}"])
def test_huge_repetitions_are_refused_before_building(pattern):
    with pytest.raises(RegexError, match="regex too complex: more than 10000 states would be needed"):
        compile_regex(pattern)


def test_unicode_scale_classes_compile_over_a_few_representatives():
    """interegular sees one character per atom, so a class of every code point is cheap."""
    dfa = compile_regex("[\\x00-\\U0010ffff]{3}")
    assert dfa.num_states == 4 and dfa.accepts("a\n😀") and not dfa.accepts("ab")


# ---------------------------------------------------------------------------------------
# One dialect: Python's \d \w \s and `.` (issue 30, item 6)
# ---------------------------------------------------------------------------------------
def _near_the_classes() -> list[str]:
    """Characters in and next to each Unicode shorthand class: every range's two ends and
    their neighbours, and the characters the engines disagree on."""
    from minisglang.constrained.python_regex import shorthand_ranges

    codes = set()
    for letter in "dws":
        for lo, hi in shorthand_ranges(letter):
            codes |= {lo - 1, lo, hi, hi + 1}
    chars = {chr(c) for c in codes if 0 <= c <= 0x10FFFF and not 0xD800 <= c <= 0xDFFF}
    return sorted(chars | set("aZ_5٣艳é \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u2028\u2029\u3000ǅ²Ⅻ\u0301-!😀"))


NEAR_THE_CLASSES = _near_the_classes()
# Characters to build strings from: mostly near the classes, some from anywhere.
DIALECT_CHARS = st.one_of(st.sampled_from(NEAR_THE_CLASSES), st.characters(exclude_categories=("Cs",)))
DIALECT_REGEXES = [
    r"\w+",
    r"\W{4}",
    r"\d{1,3}",
    r"\D*",
    r"\s+",
    r"\S{2}",
    r".{1,3}",
    r"[\w-]+",
    r"[^\w\s]*",
    r"[\d\s]+",
    r"[^\D]+",
    r"\w\W\d",
    r"(\s|\d)+x?",
    r"[\S\n]{2}",
    r"a.b|\W",
]


@pytest.fixture(scope="module")
def dialect_dfas():
    return {rx: (compile_regex(rx), ByteDFA.from_char_dfa(compile_regex(rx))) for rx in DIALECT_REGEXES}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(DIALECT_REGEXES), st.lists(DIALECT_CHARS, max_size=5).map("".join))
def test_shorthand_classes_and_dot_read_as_python_does(dialect_dfas, pattern, text):
    """`\\W{4}` once produced '艳艳艳艳' (interegular's \\w is ASCII), which re.fullmatch rejects."""
    dfa, byte_dfa = dialect_dfas[pattern]
    expected = re.fullmatch(pattern, text) is not None
    assert dfa.accepts(text) == expected, (pattern, text)
    assert byte_dfa.is_final(byte_dfa.walk_bytes(0, text.encode("utf-8"))) == expected, (pattern, text)


def test_the_finding_of_issue_30():
    dfa = compile_regex(r"\W{4}")
    assert not dfa.accepts("艳艳艳艳") and dfa.accepts("!!!!") and dfa.accepts("\u2028\x1c. ")
    assert compile_regex(r"\d+").accepts("٣٤") and compile_regex(r"\s").accepts("\x1c")
    assert not compile_regex(".").accepts("\n") and compile_regex(".").accepts("\u2028")


def test_shorthand_classes_are_labelled_by_name():
    assert [c.label() for c in compile_regex(r"\w").classes] == ["\\w", "\\W"]
    labels = [c.label() for c in compile_regex(r"\s\d").classes]
    assert labels[:2] == ["\\s", "\\d"] and labels[2].startswith("[^\\t-\\r\\x1c- 0-9")
    assert repr(compile_regex(r"\w").classes[0]) == "CharClass(\\w)"


# ---------------------------------------------------------------------------------------
# The construction is bounded as it goes, not checked after
# ---------------------------------------------------------------------------------------
@pytest.fixture
def crawl_sizes(monkeypatch):
    """The number of states each crawl (each interegular FSM operation) made, in order."""
    import interegular.fsm

    from minisglang.constrained import regex_dfa

    sizes: list[int] = []

    def counted(alphabet, initial, final, follow):
        made = set()

        def follow_counted(state, symbol):
            target = follow(state, symbol)
            made.add(regex_dfa._key(target))
            sizes[-1] = len(made)
            return target

        sizes.append(1)
        return regex_dfa._crawl(alphabet, initial, final, follow_counted)

    monkeypatch.setattr(interegular.fsm, "crawl", counted)
    return sizes


@pytest.mark.parametrize(
    "pattern",
    [r"(a|b)*a(a|b){16}", r"(a|b)*a(a|b){20}", r"([\s\S]*[aeiou][\s\S]{8}){6}", r"(.*a.{6}){5}", r"[01]*1[01]{14}x"],
)
def test_exponential_dfas_stop_at_the_state_limit_while_being_built(pattern, crawl_sizes):
    """Each of these has a DFA of 2^15 states or more (before: minutes for the first one,
    every state made, then refused). The construction stops at the first state past its
    limit: no crawl makes more than `construction_limit` (+1, the one refused)."""
    from minisglang.constrained.regex_dfa import construction_limit

    with pytest.raises(RegexError, match=r"regex too complex: more than 1000 states \(max_fsm_states\)"):
        compile_regex(pattern, max_states=1000)
    assert crawl_sizes and max(crawl_sizes) <= construction_limit(1000) + 1 == 2001


def test_a_small_dfa_whose_reversal_is_exponential_compiles(crawl_sizes):
    """`(a|b){16}a(a|b)*`: "the 17th character is a", 19 states; its reversal (which
    interegular's `reduce` builds, twice) has 2^17. Hopcroft's minimisation never builds it."""
    dfa = compile_regex("(a|b){16}a(a|b)*", max_states=100)
    assert dfa.num_states == 18
    assert max(crawl_sizes) < 100
    assert dfa.accepts("b" * 16 + "a") and dfa.accepts("a" * 17 + "b") and not dfa.accepts("a" * 16 + "b")


def test_the_state_limit_still_counts_the_minimal_dfa():
    """A construction step may make more states than the minimal DFA has (up to
    `construction_limit`): only the minimal count is held to max_states."""
    with pytest.raises(RegexError, match=r"more than 10 states \(21\)"):
        compile_regex("a{20}", max_states=10)
    assert compile_regex("(a|aa|aaa){1,6}b", max_states=20).num_states <= 20


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(REGEXES)
def test_hopcroft_minimisation_equals_interegulars_reduce(pattern):
    """Our minimisation and interegular's double reversal give the same minimal DFA (one
    numbering: `_renumber` is canonical on a minimal DFA)."""
    import interegular

    from minisglang.constrained.python_regex import PythonRegex
    from minisglang.constrained.regex_dfa import Alphabet, _renumber, _strip_anchors

    python = PythonRegex(_strip_anchors(pattern))  # what compile_regex gives interegular
    alphabet = Alphabet(python.char_sets())
    reduced = _renumber(
        interegular.parse_pattern(python.write(alphabet.representatives)).to_fsm().reduce(), pattern, alphabet
    )
    ours = compile_regex(pattern)
    assert ours.num_states == reduced.num_states and ours.finals == reduced.finals
    assert ours.classes == reduced.classes and ours.transitions == reduced.transitions
