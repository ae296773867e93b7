"""Numbers: exact ranges over decimal numerals, digit limits for unbounded numbers, and
multipleOf (the compiler's `_number` rules)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from fractions import Fraction
from typing import Any

from minisglang.constrained.json_schema.compiler_base import _CompilerBase
from minisglang.constrained.json_schema.errors import InvalidSchemaError, UnsupportedSchemaError
from minisglang.constrained.json_schema.keywords import _NUMBER_BOUNDS, FRACTIONAL, NOT_AT, _types
from minisglang.constrained.json_schema.options import SchemaOptions
from minisglang.constrained.json_schema.regex_parts import (
    DIGIT,
    EPSILON,
    NONZERO_DIGIT,
    Regex,
    _alt,
    _concat,
    _digit_class,
    _repeat,
    chars,
    lit,
)
from minisglang.constrained.json_schema.values import _decimal, short_value

MINUS, POINT, ZERO = lit("-"), lit("."), lit("0")
OPTIONAL_MINUS = _repeat(MINUS, 0, 1)
# How json.dumps writes a float equal to an integer: 3.0.
POINT_ZERO = _repeat(lit(".0"), 0, 1)


@functools.lru_cache(maxsize=64)
def _unbounded_number(options: SchemaOptions, integer: bool) -> Regex:
    """Any integer (or number, with fraction and exponent) within the options' digit limits
    (none with bound_numbers off). Remembered: every unbounded number of every schema
    compiled with the same options is this same tree."""

    def digits(lo: int, limit: int) -> Regex | None:
        return _repeat(DIGIT, lo, limit if options.bound_numbers else None)

    nonzero = _concat(NONZERO_DIGIT, digits(0, options.max_integer_digits - 1))
    if integer:
        out = _alt([ZERO, _concat(OPTIONAL_MINUS, nonzero)])
    else:
        fraction = _concat(POINT, digits(1, options.max_fraction_digits))
        exponent = _concat(
            chars([(ord("E"), ord("E")), (ord("e"), ord("e"))]),
            _repeat(chars([(ord("+"), ord("+")), (ord("-"), ord("-"))]), 0, 1),
            digits(1, options.max_exponent_digits),
        )
        out = _concat(OPTIONAL_MINUS, _alt([ZERO, nonzero]), _repeat(fraction, 0, 1), _repeat(exponent, 0, 1))
    assert out is not None  # (every part matches something)
    return out


def _at_most_digits_with_a_nonzero(k: int) -> Regex | None:
    """1..k digits, not all zeros: `0{j}[1-9][0-9]{0,k-1-j}` for each count j of leading zeros."""
    return _alt([_concat(lit("0" * j), NONZERO_DIGIT, _repeat(DIGIT, 0, k - 1 - j)) for j in range(k)])


def _decimal_digits(x: Decimal) -> tuple[tuple[int, ...], int]:
    """A non-negative Decimal -> (its digits, fraction zeros dropped; number of integer digits)."""
    whole, _, fraction = format(x, "f").partition(".")  # plain notation: 1E+2 -> "100"
    return tuple(int(c) for c in whole + fraction.rstrip("0")), len(whole)


def _magnitude_range(
    low: Decimal, low_strict: bool, high: Decimal | None, high_strict: bool, fraction: bool, max_fraction: int
) -> Regex | None:
    """Unsigned numerals `(0|[1-9][0-9]*)(\\.[0-9]{1,max_fraction})?` with low <(=) value <(=) high.

    Numerals are split by their count n of integer digits; for each n the digits are
    read left to right, comparing with the bounds' digits (bounds padded with zeros), as
    long as the numeral so far equals a bound's prefix ("tight"). The fraction is
    optional (`fraction=False`: integers only, no fraction at all). Digit i (from 0) is
    a fraction digit when i >= n; at most n + max_fraction digits in all.
    """
    lo_digits, lo_len = _decimal_digits(low)
    hi_digits, hi_len = _decimal_digits(high) if high is not None else ((), None)
    frac_any = _repeat(_concat(POINT, _repeat(DIGIT, 1, max_fraction)), 0, 1) if fraction else EPSILON

    def digit(ds: tuple[int, ...], i: int) -> int:
        return ds[i] if i < len(ds) else 0

    def left(n: int, i: int) -> int:
        """How many fraction digits may still follow, from digit position i > n - 1 on."""
        return n + max_fraction - i

    def free(n: int, i: int) -> Regex | None:
        """The rest of a numeral that is strictly inside the bounds already."""
        if i > n:
            return _repeat(DIGIT, 0, left(n, i))
        if i == 0 and n > 1:  # no leading zeros
            return _concat(NONZERO_DIGIT, _repeat(DIGIT, n - 1, n - 1), frac_any)
        return _concat(_repeat(DIGIT, n - i, n - i), frac_any)

    def rest(n: int, i: int, tight_lo: bool, tight_hi: bool) -> Regex | None:
        """The rest of a numeral with n integer digits, from digit position i on."""
        lo_rest_zero = not any(lo_digits[i:])
        if tight_lo and lo_rest_zero and not low_strict:
            tight_lo = False  # equal to `low` so far, and `low` ends here: any rest is >= low
        if not tight_lo and not tight_hi:
            return free(n, i)
        if tight_hi and not any(hi_digits[i:]):  # equal to `high`, which ends here: only zeros
            if tight_lo or high_strict:
                return None
            zeros = _repeat(_concat(POINT, _repeat(ZERO, 1, max_fraction)), 0, 1) if fraction else EPSILON
            return _repeat(ZERO, 0, left(n, i)) if i > n else _concat(lit("0" * (n - i)), zeros)
        if tight_lo and not tight_hi and lo_rest_zero and i >= n:  # equal to `low`: need more
            if not fraction:
                return None
            return _concat(POINT if i == n else EPSILON, _at_most_digits_with_a_nonzero(left(n, i)))
        options: list[Regex | None] = []
        if i >= n and not tight_lo:  # may end here: the value is below `high`, above `low`
            options.append(EPSILON)
        if i < n or (fraction and left(n, i) > 0):
            first = 1 if i == 0 and n > 1 else 0  # no leading zeros
            a = digit(lo_digits, i) if tight_lo else 0
            b = digit(hi_digits, i) if tight_hi else 9
            steps: list[tuple[int, int, Regex | None]] = []  # (first digit, last digit, rest of the numeral)
            for d in range(max(a, first), b + 1):
                after = rest(n, i + 1, tight_lo and d == a, tight_hi and d == b)
                if steps and steps[-1][2] == after:  # neighbouring digits with the same rest
                    steps[-1] = (steps[-1][0], d, after)
                else:
                    steps.append((d, d, after))
            step = _alt([_concat(_digit_class(lo, hi), after) for lo, hi, after in steps])
            options.append(_concat(POINT if i == n else EPSILON, step))
        return _alt(options)

    options = [rest(n, 0, n == lo_len, n == hi_len) for n in range(lo_len, (lo_len if hi_len is None else hi_len) + 1)]
    if high is None:  # numerals with more integer digits than `low`
        options.append(_concat(NONZERO_DIGIT, _repeat(DIGIT, lo_len, None), frac_any))
    return _alt(options)


def _number_range(
    lo: Decimal | None, lo_strict: bool, hi: Decimal | None, hi_strict: bool, fraction: bool, max_fraction: int
) -> Regex | None:
    """Decimal numerals (no exponent; no fraction if `fraction` is False; at most
    `max_fraction` fraction digits) in the bounds."""
    # -0 (a bound of -0.0, or -0.5 rounded up for an integer) is 0: drop the sign.
    lo = lo.copy_abs() if lo is not None and lo == 0 else lo
    hi = hi.copy_abs() if hi is not None and hi == 0 else hi
    if lo is not None and hi is not None and (lo > hi or (lo == hi and (lo_strict or hi_strict))):
        return None
    options = []
    if hi is None or hi > 0 or (hi == 0 and not hi_strict):  # numerals without a sign
        low, low_strict = (lo, lo_strict) if lo is not None and lo >= 0 else (Decimal(0), False)
        options.append(_magnitude_range(low, low_strict, hi, hi_strict, fraction, max_fraction))
    if lo is None or lo < 0:  # numerals with a minus sign: value < 0 (we never write -0)
        low, low_strict = (-hi, hi_strict) if hi is not None and hi < 0 else (Decimal(0), True)
        high, high_strict = (None, False) if lo is None else (-lo, lo_strict)
        options.append(_concat(MINUS, _magnitude_range(low, low_strict, high, high_strict, fraction, max_fraction)))
    return _alt(options)


@functools.lru_cache(maxsize=1024)
def _remembered_range(
    lo: str | None, lo_strict: bool, hi: str | None, hi_strict: bool, fraction: bool, max_fraction: int
) -> Regex | None:
    """`_number_range` of bounds given as Decimal text (which keeps a Decimal's digits and
    exponent exactly), remembered: the same bounds (0, 100, the digit limits) come back in
    schema after schema."""
    low = None if lo is None else Decimal(lo)
    high = None if hi is None else Decimal(hi)
    return _number_range(low, lo_strict, high, hi_strict, fraction, max_fraction)


# multipleOf within bounds lists the multiples: at most this many.
MAX_LISTED_MULTIPLES = 256


def _multiple_span(step: Decimal | int, lo: Decimal, lo_strict: bool, hi: Decimal, hi_strict: bool) -> tuple[int, int]:
    """(first, last): the multiples of `step` within the bounds are first*step ... last*step
    (none when first > last)."""
    first = (lo / step).to_integral_value(ROUND_CEILING)
    first += 1 if lo_strict and first * step <= lo else 0
    last = (hi / step).to_integral_value(ROUND_FLOOR)
    last -= 1 if hi_strict and last * step >= hi else 0
    return int(first), int(last)


def _decimal_multiples(
    step: Decimal,
    given: float,
    lo: Decimal | None,
    lo_strict: bool,
    hi: Decimal | None,
    hi_strict: bool,
    path: str,
    note_empty: Callable[[str], None] | None = None,
) -> Regex | None:
    """The multiples of a fractional `step` between both bounds, listed (at most
    MAX_LISTED_MULTIPLES). Only those that a validator's float division also accepts
    (x / step an integer in binary floating point, as jsonschema computes it: 0.29 / 0.01
    is 28.999999999999996) are written: valid both exactly and in floats. `note_empty`
    hears why when there are multiples but none of them passes that division."""
    if lo is None or hi is None:
        raise UnsupportedSchemaError(
            f"keyword 'multipleOf' at {path}: a fractional multipleOf ({given!r}) is "
            "supported only between a minimum and a maximum"
        )
    first, last = _multiple_span(step, lo, lo_strict, hi, hi_strict)
    if last - first + 1 > MAX_LISTED_MULTIPLES:
        raise UnsupportedSchemaError(
            f"keyword 'multipleOf' at {path}: more than {MAX_LISTED_MULTIPLES} multiples "
            f"of {given!r} between the bounds"
        )
    texts = []
    for n in range(int(first), int(last) + 1):
        text = format((n * step).normalize(), "f")
        quotient = float(text) / float(given)
        if math.isfinite(quotient) and int(quotient) == quotient:
            # a whole multiple is also written as json.dumps writes a float: 3.0
            texts.append(lit(text) if "." in text else _concat(lit("0" if text == "-0" else text), POINT_ZERO))
    if not texts and last >= first and note_empty is not None:
        note_empty(
            f"keyword 'multipleOf' at {path}: no multiple of {given!r} between the bounds divides by it "
            "exactly in binary floating point (x / multipleOf, as validators compute it)"
        )
    return _alt(texts)


def _validator_multiple(value: int | float, given: int | float) -> bool:
    """Whether `value` is a multiple of `given` as jsonschema decides it: a float multipleOf
    divides in floats, an int one takes the remainder (exact for an int value)."""
    if isinstance(given, float):
        quotient = value / given
        return math.isfinite(quotient) and int(quotient) == quotient
    return value % given == 0


def _float_division_exact(given: object) -> bool:
    """Whether a validator's float division x / given is whole for every whole multiple x of
    `given` that we write (an exact double: at most DOUBLE_DIGITS digits, or a quotient past
    2^53, where every double is whole): `given` is no float, or the double nearest the
    decimal it writes is off by at most 2^-54 of it, so that each quotient k / (1 + error)
    rounds back to k. 1 / 0.1 is 10.0 (0.1 is off by exactly 2^-54), but 1 / 1e-05 is
    99999.99999999999, which jsonschema calls no multiple (schema_fuzz)."""
    if not isinstance(given, float) or given <= 0 or not math.isfinite(given):
        return True
    written = Fraction(Decimal(repr(given)))
    return abs(Fraction(given) - written) <= written / 2**54


def _int_bound_as_double(value: Any, below: bool) -> Decimal | None:
    """For a bound that is an integer no double holds (past 2^53), an inclusive bound that
    numerals parsed to doubles keep as well: the nearest double inside it (below it for a
    maximum); None for any other bound. A numeral
    that parses to a double (a fraction, ".0") is compared as that double, exactly with the
    integer: 123456789012345677.9 is 123456789012345680.0, above maximum
    123456789012345678 (found by a stranger's differential fuzzing, 2026-12-05)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    try:
        double = float(value)
    except OverflowError:  # (past the largest double: refused as out of range elsewhere)
        return None
    if double == value:
        return None
    if (double > value) == below:  # rounded outwards
        double = math.nextafter(double, -math.inf if below else math.inf)
    # Written shortest (a numeral up to it parses at most to that double), and no further out
    # than the integer itself (which integer numerals are compared with exactly).
    shortest = Decimal(repr(double))
    return min(shortest, Decimal(value)) if below else max(shortest, Decimal(value))


# A numeral parses (json.loads, as every validator does) to the nearest double, and a double
# holds about 15 significant decimal digits (DBL_DIG): a numeral with more can round onto a
# value the schema excludes (0.09999999999999999999 is 0.1, 1.00000000000000000001 is 1.0).
DOUBLE_DIGITS = 15


def _double_inside(bound: Decimal, below: bool, fraction_digits: int) -> Decimal | None:
    """The inclusive bound that replaces an exclusive one on a number: the double next to
    `bound` on the inside (below it for a maximum), written shortest, rounded further
    inwards to `fraction_digits`. Every numeral up to it parses to that double or one
    further inside, never to the bound (found by a stranger's attack, 2026-12-04). None
    when no double lies inside: beyond +-DBL_MAX comes only infinity."""
    double = math.nextafter(float(bound), -math.inf if below else math.inf)
    if not math.isfinite(double):
        return None
    inside = Decimal(repr(double))
    step = Decimal(1).scaleb(-fraction_digits)
    exponent = inside.as_tuple().exponent
    assert isinstance(exponent, int)  # (a finite double)
    if exponent < -fraction_digits:  # e.g. 5e-324 next to 0
        inside = inside.quantize(step, rounding=ROUND_FLOOR if below else ROUND_CEILING)
    return inside


def _fractional_numerals(options: SchemaOptions) -> Regex:
    """`not integer`: a numeral with a nonzero last fraction digit, no exponent, and at most
    DOUBLE_DIGITS significant digits, so the double it parses to is not a whole number."""
    fraction_digits = min(options.max_fraction_digits, DOUBLE_DIGITS)
    zero = _concat(ZERO, POINT, _repeat(DIGIT, 0, fraction_digits - 1), NONZERO_DIGIT)
    whole = [  # k integer digits leave DOUBLE_DIGITS - k for the fraction
        _concat(NONZERO_DIGIT, _repeat(DIGIT, k - 1, k - 1), POINT, _repeat(DIGIT, 0, left - 1), NONZERO_DIGIT)
        for k in range(1, min(options.max_integer_digits, DOUBLE_DIGITS - 1) + 1)
        if (left := min(fraction_digits, DOUBLE_DIGITS - k)) >= 1
    ]
    out = _concat(OPTIONAL_MINUS, _alt([zero, *whole]))
    assert out is not None
    return out


class _NumberRules(_CompilerBase):
    """integer and number (mixed into _SchemaCompiler)."""

    def _number(self, schema: dict[str, Any], path: str) -> Regex | None:
        """integer or number with minimum/maximum/exclusive bounds, as an exact numeral range."""
        integer = "number" not in _types(schema, path)
        if FRACTIONAL in schema:  # `not integer`: a nonzero last fraction digit, no exponent
            if integer:
                return None
            if any(k in schema for k in _NUMBER_BOUNDS):
                raise UnsupportedSchemaError(
                    f"keyword 'not' at {schema[NOT_AT]}: 'not integer' together with "
                    "minimum/maximum bounds is not supported"
                )
            if "multipleOf" in schema:  # (its fractional numerals are no multiples of anything)
                raise UnsupportedSchemaError(
                    f"keyword 'not' at {schema[NOT_AT]}: 'not integer' together with multipleOf is not supported"
                )
            return _fractional_numerals(self.options)
        step, decimal_step = 1, None
        if "multipleOf" in schema:  # m = p/q: integers -> multiples of p; numbers: listed multiples of m
            m = _decimal(schema["multipleOf"], "multipleOf", path)
            if m <= 0:
                raise InvalidSchemaError(f"'multipleOf' at {path} must be greater than 0, got {schema['multipleOf']!r}")
            p, q = Fraction(m).as_integer_ratio()
            if integer or q == 1:
                integer, step = True, p
            else:
                decimal_step = m
        lo, lo_strict, hi, hi_strict = None, False, None, False
        lo_keyword = hi_keyword = None
        for keyword, strict in (("minimum", False), ("exclusiveMinimum", True)):
            if keyword in schema:
                bound = _decimal(schema[keyword], keyword, path)
                if lo is None or bound > lo or (bound == lo and strict):
                    lo, lo_strict, lo_keyword = bound, strict, keyword
        for keyword, strict in (("maximum", False), ("exclusiveMaximum", True)):
            if keyword in schema:
                bound = _decimal(schema[keyword], keyword, path)
                if hi is None or bound < hi or (bound == hi and strict):
                    hi, hi_strict, hi_keyword = bound, strict, keyword
        # (whether the schema's range holds numbers at all, before the bounds move inwards below)
        nonempty = lo is None or hi is None or lo < hi or (lo == hi and not (lo_strict or hi_strict))
        if "number" in _types(schema, path):  # numerals with a fraction or ".0": doubles
            if lo is not None and (inside := _int_bound_as_double(schema[str(lo_keyword)], False)) is not None:
                lo, lo_strict = inside, False
            if hi is not None and (inside := _int_bound_as_double(schema[str(hi_keyword)], True)) is not None:
                hi, hi_strict = inside, False
        as_doubles = not integer and step == 1 and decimal_step is None and (lo_strict or hi_strict)
        if as_doubles:
            digits = self.options.max_fraction_digits
            bounds = ((hi_keyword, hi, hi_strict, True), (lo_keyword, lo, lo_strict, False))
            for exclusive, edge, strict, below in bounds:
                if edge is not None and strict and _double_inside(edge, below, digits) is None:
                    # (an exclusive bound at +-DBL_MAX: a numeral beyond it parses to infinity)
                    given = short_value(schema[str(exclusive)])
                    self.note_empty(f"no double lies beyond {exclusive} {given} at {path}")
                    return None
            if hi is not None and hi_strict:
                hi, hi_strict = _double_inside(hi, True, digits), False
            if lo is not None and lo_strict:
                lo, lo_strict = _double_inside(lo, False, digits), False
        if step > 1 or not _float_division_exact(schema.get("multipleOf")):
            # (a number (not integer) type may also write them as json.dumps writes 4.0; a float
            # multipleOf that validators' division does not keep exact: listed, each one checked)
            whole = "number" in _types(schema, path)
            multiples = self._multiples(step, lo, lo_strict, hi, hi_strict, path, schema["multipleOf"], whole)
            return _concat(multiples, POINT_ZERO if whole else EPSILON)
        if decimal_step is not None:
            return _decimal_multiples(
                decimal_step, schema["multipleOf"], lo, lo_strict, hi, hi_strict, path, self.note_empty
            )
        if lo is None and hi is None:
            return _unbounded_number(self.options, integer)
        if integer:  # integer bounds: round inwards, then they are inclusive
            if lo is not None:
                lo = lo.to_integral_value(ROUND_FLOOR) + 1 if lo_strict else lo.to_integral_value(ROUND_CEILING)
            if hi is not None:
                hi = hi.to_integral_value(ROUND_CEILING) - 1 if hi_strict else hi.to_integral_value(ROUND_FLOOR)
            lo_strict = hi_strict = False
        # One bound only: the other is the digit limit, a power of ten (exclusive) beyond the
        # given bound, so that numerals have at most max_integer_digits integer digits.
        limit = Decimal(10) ** self.options.max_integer_digits
        given_bound = lo if hi is None else hi
        assert given_bound is not None  # (no bound at all returned above)
        while abs(given_bound) >= limit:
            limit *= 10
        if lo is None and self.options.bound_numbers:
            lo, lo_strict = -limit, True
        if hi is None and self.options.bound_numbers:
            hi, hi_strict = limit, True
        regex = _remembered_range(
            None if lo is None else str(lo),
            lo_strict,
            None if hi is None else str(hi),
            hi_strict,
            not integer,
            self.options.max_fraction_digits,
        )
        if regex is None and not integer and nonempty:
            # Numbers lie in the range, but none with the fraction digits we write: our policy, not the schema's.
            given = " and ".join(f"{k} {short_value(schema[k])}" for k in (lo_keyword, hi_keyword) if k)
            self.note_empty(
                f"no number with at most {self.options.max_fraction_digits} fraction digits (the "
                f"option max_fraction_digits) lies in the range {given} at {path}"
                + (
                    " (as the double it parses to: a numeral that rounds onto an exclusive bound is not written)"
                    if as_doubles
                    else ""
                )
            )
        return regex

    def _multiples(
        self,
        step: int,
        lo: Decimal | None,
        lo_strict: bool,
        hi: Decimal | None,
        hi_strict: bool,
        path: str,
        given: Any = None,
        as_double: bool = False,
    ) -> Regex | None:
        """The integer multiples of `step` in the bounds: listed when both bounds leave at
        most MAX_LISTED_MULTIPLES; without bounds, when step divides 10^j (j <= 3), by
        their last j digits. `given`: the schema's multipleOf, whose integer multiples
        these are (11 for 1.1), checked as a validator checks them: a float one divides in
        floats (33 / 1.1 is 29.999999999999996). `as_double`: each may also be written
        with ".0" (json.dumps' 4.0), which parses to a double. Listed ones are kept only
        where the validator agrees; written by last digits, they have at most
        DOUBLE_DIGITS digits when a double is divided (a float multipleOf, or ".0"): a
        longer numeral is rounded first (197935100221588850 / 50.0 is not whole)."""
        if lo is not None and hi is not None:
            first, last = _multiple_span(step, lo, lo_strict, hi, hi_strict)
            if last - first + 1 <= MAX_LISTED_MULTIPLES:
                listed = [n * step for n in range(first, last + 1)]
                if isinstance(given, (int, float)) and not isinstance(given, bool):
                    kept = [
                        n
                        for n in listed
                        if _validator_multiple(n, given) and (not as_double or _validator_multiple(float(n), given))
                    ]
                    if listed and not kept:
                        self.note_empty(
                            f"keyword 'multipleOf' at {path}: no multiple of {given!r} between the bounds divides "
                            "by it exactly in binary floating point (x / multipleOf, as validators compute it)"
                        )
                    listed = kept
                return _alt([lit(str(n)) for n in listed])
        if not _float_division_exact(given):
            raise UnsupportedSchemaError(
                f"keyword 'multipleOf' at {path}: validators divide by the double nearest {given!r}, which "
                "leaves out some whole multiples (1 / 1e-05 is 99999.99999999999); supported only within "
                f"bounds holding at most {MAX_LISTED_MULTIPLES} multiples, each checked"
            )
        if (lo is None or lo == 0) and (hi is None or hi == 0) and not (lo == 0 and hi == 0):
            j = next((j for j in range(1, 4) if 10**j % step == 0), None)
            digits = self.options.max_integer_digits
            if isinstance(given, float) or as_double:  # (every numeral an exact double)
                digits = min(digits, DOUBLE_DIGITS)
            if j is not None and digits > j:
                small = [lit(str(n)) for n in range(step, 10**j, step)]  # fewer than j+1 digits
                endings = _alt([lit(str(n).zfill(j)) for n in range(0, 10**j, step)])
                nonzero = _alt([*small, _concat(NONZERO_DIGIT, _repeat(DIGIT, 0, digits - 1 - j), endings)])
                sign = OPTIONAL_MINUS if lo is None and hi is None else EPSILON if hi is None else MINUS
                zero = [] if (lo == 0 and lo_strict) or (hi == 0 and hi_strict) else [ZERO]
                return _alt([*zero, _concat(sign, nonzero)])
        raise UnsupportedSchemaError(
            f"keyword 'multipleOf' at {path}: multiples of {step} are supported within bounds holding at most "
            f"{MAX_LISTED_MULTIPLES} of them, or with no bound other than 0 when {step} divides 1000"
        )
