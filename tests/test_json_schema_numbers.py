"""The JSON Schema compiler's numbers (minisglang/constrained/json_schema/numbers.py): integer
and number ranges, exclusive bounds read as doubles, multipleOf, `not` of numbers.

Oracles as in test_json_schema.py: `Decimal` comparison judges ranges, `jsonschema` judges
every numeral the regex matches, `json.loads` gives the double a validator compares.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from decimal import Decimal

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_json_schema import assert_sound, dfa_of, is_valid, matches

from minisglang.constrained.json_schema import InvalidSchemaError, UnsupportedSchemaError, build_regex_from_schema


# ---------------------------------------------------------------------------------------
# Integers and numbers: exact ranges
# ---------------------------------------------------------------------------------------
def test_documented_integer_range_example():
    assert build_regex_from_schema({"type": "integer", "minimum": 18, "maximum": 65}) == "(?:1[89]|[2-5][0-9]|6[0-5])"


bounds = st.none() | st.integers(-150, 150) | st.integers(-300, 300).map(lambda k: k / 2)


@settings(deadline=None)
@given(bounds, bounds, st.booleans(), st.booleans())
@example(-0.5, None, False, False)  # rounds up to -0, which must be written 0 (found by hypothesis)
@example(None, 0.5, False, True)
def test_integer_bounds_are_exact(lo, hi, lo_exclusive, hi_exclusive):
    schema = {"type": "integer"}
    if lo is not None:
        schema["exclusiveMinimum" if lo_exclusive else "minimum"] = lo
    if hi is not None:
        schema["exclusiveMaximum" if hi_exclusive else "maximum"] = hi
    try:
        regex = re.compile(build_regex_from_schema(schema))
    except UnsupportedSchemaError:  # an empty range
        assert not any(is_valid(n, schema) for n in range(-400, 401))
        return
    for n in range(-400, 401):
        assert bool(regex.fullmatch(str(n))) == is_valid(n, schema), n
    assert not any(regex.fullmatch(t) for t in ("-0", "00", "01", "+1", "1.0", "1e2"))


numerals = st.from_regex(r"-?(0|[1-9][0-9]{0,3})(\.[0-9]{1,3})?", fullmatch=True)
decimal_bounds = st.none() | st.decimals(-1000, 1000, places=2, allow_nan=False, allow_infinity=False)


@settings(deadline=None)
@given(decimal_bounds, decimal_bounds, st.booleans(), st.booleans(), st.lists(numerals, max_size=40))
@example(Decimal("-0.00"), None, False, False, ["0", "-0.5", "0.5", "1"])  # a bound of -0 is 0
def test_number_bounds_are_exact_over_decimal_numerals(lo, hi, lo_exclusive, hi_exclusive, texts):
    schema = {"type": "number"}
    if lo is not None:
        schema["exclusiveMinimum" if lo_exclusive else "minimum"] = float(lo)
    if hi is not None:
        schema["exclusiveMaximum" if hi_exclusive else "maximum"] = float(hi)
    try:
        regex = re.compile(build_regex_from_schema(schema))
    except UnsupportedSchemaError:  # an empty range
        assert lo is not None and hi is not None and (lo > hi or (lo == hi and (lo_exclusive or hi_exclusive)))
        return
    edges = [str(b + d) for b in (lo, hi) if b is not None for d in (Decimal("-0.01"), 0, Decimal("0.01"))]
    for text in texts + edges:
        value = Decimal(text)
        inside = (lo is None or value > lo or (value == lo and not lo_exclusive)) and (
            hi is None or value < hi or (value == hi and not hi_exclusive)
        )
        bounded = lo is not None or hi is not None  # bounded numbers: 0, never -0
        never_written = bounded and text.startswith("-") and value == 0
        assert bool(regex.fullmatch(text)) == (inside and not never_written), text


def _numerals_near(x: float) -> list[str]:
    """Numerals that json.loads may round onto `x` or just past it: x's neighbours a few units
    of the 20th fraction digit away, and the shortest spellings of the doubles beside it."""
    exact, unit = Decimal(x), Decimal(1).scaleb(-20)
    near = [format((exact + k * unit).quantize(unit), "f") for k in (-3, -1, 0, 1, 3)]
    beside = [repr(math.nextafter(x, d)) for d in (-math.inf, math.inf)]
    return [t for t in near + beside + [repr(x)] if "e" not in t]


@settings(deadline=None)
@given(
    st.floats(-1e6, 1e6, allow_nan=False) | st.sampled_from([0.1, 0.3, 1.0, 100.0, 0.0, -2.5, 1e-7]),
    st.sampled_from(["exclusiveMaximum", "exclusiveMinimum", "not const", "not minimum"]),
)
@example(0.1, "exclusiveMaximum")  # 0.09999999999999999999 parses to 0.1 (a stranger's attack, 2026-12-04)
@example(0.1, "exclusiveMinimum")
@example(1.0, "not const")
@example(-5e-324, "exclusiveMinimum")  # the double inside is -0.0
def test_no_numeral_parses_onto_an_excluded_number(x, keyword):
    """Bounds are compared with the double a numeral parses to, as a validator does: a numeral
    inside an exclusive bound (or beside an excluded value) with more digits than a double holds
    must not be written when it rounds onto the bound; the nearest double inside still is."""
    schema = {
        "exclusiveMaximum": {"type": "number", "exclusiveMaximum": x},
        "exclusiveMinimum": {"type": "number", "exclusiveMinimum": x},
        "not const": {"type": "number", "not": {"const": x}},
        "not minimum": {"type": "number", "not": {"minimum": x}},
    }[keyword]
    regex = re.compile(build_regex_from_schema(schema))
    for text in _numerals_near(x):
        if regex.fullmatch(text):
            assert is_valid(json.loads(text), schema), text
    inside = repr(math.nextafter(x, math.inf if keyword == "exclusiveMinimum" else -math.inf))
    inside = "0.0" if inside == "-0.0" else inside  # (zero is written unsigned: the same number)
    if "e" not in inside and len(inside.partition(".")[2]) <= 20:
        assert regex.fullmatch(inside), inside  # narrowed to doubles, not emptied


@pytest.mark.parametrize("whole", [0, 1, 7, -3, 123456789, 10**13])
def test_not_integer_writes_no_numeral_that_parses_to_a_whole_number(whole):
    schema = {"type": "number", "not": {"type": "integer"}}
    regex = re.compile(build_regex_from_schema(schema))
    for digits in range(1, 21):
        for delta in (Decimal(1).scaleb(-digits), -Decimal(1).scaleb(-digits)):
            text = format(Decimal(whole) + delta, "f")
            if regex.fullmatch(text):
                assert is_valid(json.loads(text), schema), text
    assert regex.fullmatch(f"{whole}.5") and not regex.fullmatch(f"{whole}.00000000000000000001")


@settings(deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(10**18) + 1, 10**18 - 1))
def test_unbounded_numbers_match_json_dumps_including_exponents(x):
    """The default digit limits hold every double as json.dumps writes it, and every
    integer of up to 18 digits (all fit an int64)."""
    assert matches({"type": "number"}, json.dumps(x))
    if isinstance(x, int):
        assert matches({"type": "integer"}, json.dumps(x))


def longest_match(regex: str) -> int | None:
    """The length of the longest string the regex's DFA accepts; None if unbounded (a cycle)."""
    dfa = dfa_of(regex)
    longest: dict[int, int] = {}

    def visit(state: int, on_path: frozenset) -> int | None:
        if state in on_path:
            return None
        if state not in longest:
            best = 0 if state in dfa.finals else -1
            for target in dfa.transitions[state].values():
                sub = visit(target, on_path | {state})
                if sub is None:
                    return None
                best = max(best, sub + 1)
            longest[state] = best
        return longest[state]

    return visit(dfa.initial, frozenset())


@pytest.mark.parametrize(
    "schema, longest",
    [
        ({"type": "integer"}, 19),  # -, 18 digits
        ({"type": "number"}, 1 + 18 + 1 + 20 + 2 + 3),  # -, digits, .fraction, e+, exponent
        ({"type": "number", "minimum": 0}, 18 + 1 + 20),  # one bound: no exponent
        ({"type": "integer", "maximum": -5}, 19),
        ({"type": "number", "minimum": 0, "maximum": 1}, 1 + 1 + 20),  # both bounds: the fraction is limited
        ({"type": "integer", "minimum": 10**20}, 21),  # a bound beyond the limit moves it
    ],
)
def test_numbers_are_finite_length_by_default(schema, longest):
    """A model cannot write digits until max_new_tokens: the language is finite."""
    assert longest_match(build_regex_from_schema(schema)) == longest


def test_number_digit_limits_are_options():
    options = {"max_integer_digits": 2, "max_fraction_digits": 1, "max_exponent_digits": 1}
    for text, ok in [("99", True), ("100", False), ("-99.5", True), ("1.25", False), ("1e9", True), ("1e10", False)]:
        assert matches({"type": "number"}, text, **options) == ok, text
    for text, ok in [("-99", True), ("-100", False), ("0", True)]:
        assert matches({"type": "integer"}, text, **options) == ok, text
    assert longest_match(build_regex_from_schema({"type": "number", "minimum": 0}, **options)) == 4


@pytest.mark.parametrize(
    "schema, options, needles",
    [
        # Numbers lie in the range, but none with at most 20 fraction digits (a server attack got
        # "accepts no JSON value", which blames the schema for our policy).
        (
            {"type": "number", "exclusiveMinimum": 0, "maximum": 5e-324},
            {},
            ["max_fraction_digits", "at most 20 fraction digits", "exclusiveMinimum 0", "maximum 5e-324"],
        ),
        (
            {"type": "number", "minimum": 0.001, "exclusiveMaximum": 0.002},
            {"max_fraction_digits": 2},
            ["at most 2 fraction digits", "minimum 0.001", "exclusiveMaximum 0.002"],
        ),
        (
            {"anyOf": [{"type": "number", "minimum": 1e-30, "maximum": 2e-30}, {"type": "null", "not": {}}]},
            {},
            ["at most 20 fraction digits", "minimum 1e-30 and maximum 2e-30 at #/anyOf/0"],
        ),
        # Multiples exist, but none that a validator's float division accepts (0.3 / 0.1 = 2.9999999999999996).
        (
            {"type": "number", "multipleOf": 0.1, "minimum": 0.3, "maximum": 0.3},
            {},
            ["'multipleOf'", "0.1", "binary floating point"],
        ),
    ],
)
def test_a_range_empty_only_by_our_number_policy_names_the_policy(schema, options, needles):
    with pytest.raises(UnsupportedSchemaError) as info:
        build_regex_from_schema(schema, **options)
    assert "accepts no JSON value" not in str(info.value)
    for needle in needles:
        assert needle in str(info.value)
    # Where one branch still has values, the other's emptiness is no error.
    assert matches({"anyOf": [schema, {"type": "null"}]}, "null", **options)


@pytest.mark.parametrize(
    "part, because",
    [
        ({"type": "integer", "minimum": 1.5, "maximum": 1.7}, "no integer lies between minimum 1.5 and maximum 1.7"),
        (
            {"type": "integer", "exclusiveMinimum": 3, "exclusiveMaximum": 4},
            "no integer lies between exclusiveMinimum 3 and exclusiveMaximum 4",
        ),
        ({"type": "number", "minimum": 5, "maximum": 2}, "no number lies between minimum 5 and maximum 2"),
        ({"type": "integer", "multipleOf": 10, "minimum": 1, "maximum": 9}, "no multiple of 10 lies between minimum 1"),
        ({"type": "string", "minLength": 5, "maxLength": 2}, "minLength 5 is above maxLength 2"),
        ({"type": "array", "minItems": 3, "maxItems": 1}, "minItems 3 is above maxItems 1"),
        ({"type": "string", "enum": [1, None]}, "none of its enum/const values has type string"),
        ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "allOf/not/if that exclude each other"),
    ],
)
def test_a_schema_with_no_value_says_which_part_and_why(part, because):
    """The error names the innermost part that has no value, and the keywords that leave it
    none; an alternative or an optional property with no value is not blamed."""
    schema = {
        "type": "object",
        "required": ["a", "b"],
        "properties": {
            "a": {"anyOf": [{"type": "integer", "minimum": 9, "maximum": 0}, {"type": "null"}]},  # has null
            "b": {"type": "object", "required": ["c"], "properties": {"c": part, "d": {"not": {}}}},
        },
    }
    for root, path in ((part, "#"), (schema, "#/properties/b/properties/c")):
        assert not any(is_valid(v, root) for v in ([], {}, 0, 5, 1.6, "", "abc", None, [1, 2]))
        with pytest.raises(UnsupportedSchemaError) as info:
            build_regex_from_schema(root, automaton="lazy")
        assert f"the schema accepts no JSON value (at {path}: " in str(info.value) and because in str(info.value)


@pytest.mark.parametrize("keyword", ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"])
def test_a_number_keyword_beyond_a_double_is_refused_naming_it(keyword):
    """A 4000-digit bound raised Python's "int too large to convert to float", naming nothing."""
    negated = [] if keyword == "multipleOf" else [{"not": {keyword: -(10**400)}}]  # (not multipleOf: refused)
    for schema in [
        {"type": "number", keyword: 10**4000},
        f'{{"type": "integer", "{keyword}": 1{"0" * 4000}}}',
        *negated,
    ]:
        with pytest.raises(UnsupportedSchemaError) as info:
            build_regex_from_schema(schema)
        assert f"'{keyword}' at #" in str(info.value) and "out of range" in str(info.value)
        assert "digits" in str(info.value) and "largest double" in str(info.value)
    with pytest.raises(InvalidSchemaError, match=f"'{keyword}' at # must be a finite number, got inf"):
        build_regex_from_schema(f'{{"type": "number", "{keyword}": 1e999}}')
    if keyword != "multipleOf":  # a bound of 10^308 (a double) is in range
        assert matches({"type": "number", keyword: 10**308 * (1 if "ax" in keyword else -1)}, "0")


@pytest.mark.parametrize(
    "schema, beyond",
    [
        ({"type": "number", "exclusiveMinimum": 1.7976931348623157e308}, "exclusiveMinimum 1.7976931348623157e+308"),
        ({"type": "number", "exclusiveMaximum": -1.7976931348623157e308}, "exclusiveMaximum -1.7976931348623157e+308"),
        (
            {"type": "number", "exclusiveMinimum": 1.7976931348623157e308, "exclusiveMaximum": 123.456},
            "exclusiveMinimum 1.7976931348623157e+308",
        ),
    ],
)
def test_an_exclusive_bound_at_the_largest_double_leaves_no_double_and_says_so(schema, beyond):
    """No double lies beyond +-DBL_MAX (the next one is infinity): the compile failed on an
    empty AssertionError (a stranger's differential fuzzing, 2026-12-05); it says so now."""
    for automaton in ("eager", "lazy"):
        with pytest.raises(UnsupportedSchemaError) as info:
            build_regex_from_schema(schema, automaton=automaton)
        assert "no value that minisglang writes" in str(info.value) and f"beyond {beyond}" in str(info.value)
    # next to other types, the numbers beyond are left out and the rest compiles (soundly)
    negated = {"not": {"type": "integer", "maximum": 1.7976931348623157e308}}
    assert_sound(negated)
    assert matches(negated, "1.5") and matches(negated, "null") and not matches(negated, "2")


@pytest.mark.parametrize("step, factor", [(1.1, 11), (0.7, 7), (2.2, 11)])
def test_integer_multiples_of_a_fractional_multipleof_are_written_only_where_floats_divide(step, factor):
    """{"type": "integer", "multipleOf": 1.1} wrote 33 (30 x 1.1), which jsonschema refuses: it
    divides in floats, and 33 / 1.1 is 29.999999999999996 (a stranger's differential fuzzing,
    2026-12-05). The integers written are exactly the multiples a validator accepts."""
    schema = {"type": "integer", "multipleOf": step, "exclusiveMinimum": 3, "maximum": 250}
    regex = build_regex_from_schema(schema)
    written = [n for n in range(-5, 260) if re.fullmatch(regex, str(n))]
    assert written == [n for n in range(4, 251) if n % factor == 0 and is_valid(n, schema)]
    assert len(written) < len(range(factor, 251, factor))  # (some multiples do not divide in floats)
    with pytest.raises(UnsupportedSchemaError, match="divides by it exactly in binary floating point"):
        build_regex_from_schema({"type": "integer", "multipleOf": 1.1, "minimum": 33, "maximum": 33})


def test_integer_multiples_of_a_float_multipleof_are_exact_doubles():
    """{"type": "integer", "multipleOf": 50.0} wrote 197935100221588850, which jsonschema refuses:
    it divides in floats, and a numeral of 18 digits is rounded to a double first (a stranger's
    differential fuzzing, 2026-12-05). Written by last digits, such multiples have at most 15
    digits; listed, they are kept only where the float division is whole. An int multipleOf
    (exact modulo in validators) keeps the 18 digits, unless the numeral may end in ".0"
    (a number type), which makes it a double."""
    for schema in ({"type": "integer", "multipleOf": 50.0}, {"type": ["integer", "number"], "multipleOf": 100.0}):
        regex = build_regex_from_schema(schema)
        assert not re.fullmatch(regex, "197935100221588800") and not re.fullmatch(regex, "1979351002215800")
        assert re.fullmatch(regex, "197935100221500") and is_valid(197935100221500, schema)
    assert re.fullmatch(build_regex_from_schema({"type": "integer", "multipleOf": 50}), "197935100221588850")
    # a number type writes 4.0 too, which parses to a double: 652688732428265945.0 % 5 is 1.0
    number = {"type": "number", "multipleOf": 5}
    regex = build_regex_from_schema(number)
    assert not re.fullmatch(regex, "652688732428265945.0") and not re.fullmatch(regex, "652688732428265940")
    assert re.fullmatch(regex, "652688732428265.0") and is_valid(652688732428265.0, number)
    listed = {"type": "number", "multipleOf": 5, "minimum": 2**54, "maximum": 2**54 + 500}
    regex = build_regex_from_schema(listed)
    for n in range(2**54, 2**54 + 501):
        for text in (str(n), f"{n}.0"):
            assert not re.fullmatch(regex, text) or is_valid(json.loads(text), listed), text
    listed = {"type": "integer", "multipleOf": 50.0, "minimum": 2**54, "maximum": 2**54 + 5000}
    regex = build_regex_from_schema(listed)
    written = [n for n in range(2**54, 2**54 + 5001, 2) if re.fullmatch(regex, str(n))]
    assert written == [n for n in range(2**54, 2**54 + 5001, 2) if n % 50 == 0 and is_valid(n, listed)]


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "number", "maximum": 123456789012345678},
        {"type": "number", "minimum": -123456789012345678},
        {"type": "number", "exclusiveMaximum": 123456789012345678},
        {"type": "number", "minimum": 123456789012345600, "maximum": 123456789012345678, "multipleOf": 0.5},
        {"type": "number", "minimum": 123456789012345600, "maximum": 123456789012345678, "multipleOf": 2},
        {"type": ["integer", "number"], "minimum": 9007199254740993, "maximum": 9007199254741011},
    ],
)
def test_an_integer_bound_no_double_holds_is_kept_by_numerals_that_parse_to_doubles(schema):
    """{"type": "number", "maximum": 123456789012345678} wrote 123456789012345677.9, which parses
    to 123456789012345680.0, above the maximum (validators compare the double with the integer
    exactly): a stranger's differential fuzzing, 2026-12-05. Every numeral near the bound that
    the regex matches is valid."""
    regex = build_regex_from_schema(schema)
    bound = schema.get("maximum", schema.get("exclusiveMaximum", schema.get("minimum")))
    texts = [str(bound + d) + tail for d in range(-40, 41) for tail in ("", ".0", ".5", ".9", ".99")]
    matched = [t for t in texts if re.fullmatch(regex, t)]
    assert matched and all(is_valid(json.loads(t), schema) for t in matched), [
        t for t in matched if not is_valid(json.loads(t), schema)
    ]


@pytest.mark.parametrize(
    "schema",
    [
        {"allOf": [{"not": {"type": "integer"}}, {"type": ["integer", "number"], "multipleOf": 6.6}]},
        {"type": "number", "multipleOf": 0.5, "not": {"type": "integer"}},
    ],
)
def test_not_integer_with_multipleof_is_refused_by_name(schema):
    """`not integer` wrote its fractional numerals and dropped a sibling multipleOf:
    1998879.4 for a multipleOf of 6.6 (a stranger's differential fuzzing, 2026-12-05)."""
    for automaton in ("eager", "lazy"):
        with pytest.raises(UnsupportedSchemaError, match="'not integer' together with multipleOf is not supported"):
            build_regex_from_schema(schema, automaton=automaton)


@settings(deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.sampled_from([None, -7, 0, 5]), st.sampled_from([None, 8, 150]))
def test_digit_limited_numbers_agree_with_jsonschema_on_all_short_numerals(digits, frac, lo, hi):
    """Exhaustive on short numerals: the regex matches exactly the valid values whose
    numeral fits the limits. The integer-digit limit applies to an unbounded side only:
    one bound b makes the other side +-10**k, the first power of ten with 10**k > |b|
    and k >= max_integer_digits."""
    schema = {"type": "number", **({} if lo is None else {"minimum": lo}), **({} if hi is None else {"maximum": hi})}
    regex = re.compile(build_regex_from_schema(schema, max_integer_digits=digits, max_fraction_digits=frac))
    limit = 10**digits
    while (lo is None) != (hi is None) and abs(lo if hi is None else hi) >= limit:
        limit *= 10
    for sign, whole, fraction in itertools.product(
        ["", "-"], ["0", "5", "12", "150", "999", "1000"], ["", ".5", ".05", ".125", ".1250"]
    ):
        text = sign + whole + fraction
        value = Decimal(text)
        bounded = lo is not None or hi is not None  # bounded numbers: 0, never -0
        in_limit = (lo is not None and hi is not None) or (-limit < value < limit if bounded else len(whole) <= digits)
        fits = in_limit and len(fraction) - 1 <= frac and not (bounded and sign and value == 0)
        expected = fits and is_valid(json.loads(text), schema)
        assert bool(regex.fullmatch(text)) == expected, text


@pytest.mark.parametrize(
    "options, message",
    [
        ({"max_integer_digits": 0}, "option max_integer_digits must be a positive integer"),
        ({"max_fraction_digits": True}, "option max_fraction_digits must be a positive integer"),
        ({"unknown_formats": "ignore"}, "option unknown_formats must be 'error' or 'annotation'"),
        ({"any_oder": True}, "unknown JSON Schema option(s) any_oder; known:"),
    ],
)
def test_bad_options_are_refused_by_name(options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build_regex_from_schema({"type": "number"}, **options)


def test_number_types_are_sound():
    assert_sound({"type": "number", "exclusiveMinimum": -2.5, "maximum": 10})
    assert_sound({"type": ["integer", "null"], "minimum": -20, "exclusiveMaximum": 1000})
