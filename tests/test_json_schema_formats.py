"""`format` in the JSON Schema compiler (minisglang/constrained/json_schema/formats.py): each
format we support against jsonschema's FormatChecker (the oracle), against what Python itself
writes (dates, UUIDs, IP addresses, times), exact where the format is (leap years, nine
fraction digits), and with minLength/maxLength: the short forms, sound, or refused naming
both keywords when the length cannot fit the format."""

from __future__ import annotations

import datetime
import itertools
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_json_schema import FORMAT_CHECKER, assert_sound, is_valid, matches

from minisglang.constrained.json_schema import FORMATS, SHORT_FORMATS, UnsupportedSchemaError, build_regex_from_schema
from minisglang.constrained.json_schema.formats import _length_range
from minisglang.constrained.lazy_regex_parser import parse_tree
from minisglang.constrained.regex_ast import render


def test_the_format_oracle_checks_every_format_we_support():
    assert set(FORMATS) <= set(FORMAT_CHECKER.checkers), "install jsonschema[format] (rfc3339/rfc3986 validators)"


def test_the_compilers_own_regexes_are_read_as_python_reads_them():
    """rx reads the compiler's own regexes without asking `re.compile` first: each one is
    a regex Python accepts, and the tree is the one a checked parse gives."""
    from minisglang.constrained.json_schema.regex_parts import rx
    from minisglang.constrained.json_schema.string_chars import COUNTED_STRING_CHAR, STRING_CHAR
    from minisglang.constrained.lazy_regex_parser import parse_tree

    for text in [*FORMATS.values(), *SHORT_FORMATS.values(), STRING_CHAR, COUNTED_STRING_CHAR]:
        re.compile(text)
        assert rx(text) == parse_tree(text), text


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_format_strings_pass_jsonschemas_format_checker(fmt):
    assert_sound({"type": "string", "format": fmt}, n=200)


def test_date_is_exact_including_leap_years():
    regex = re.compile(FORMATS["date"])
    for year in (0, 1, 4, 100, 400, 1900, 2000, 2023, 2024, 9999):
        for month in range(0, 14):
            for day in range(0, 33):
                text = f"{year:04d}-{month:02d}-{day:02d}"
                try:
                    real = datetime.date.fromisoformat(text) is not None
                except ValueError:
                    real = False
                assert bool(regex.fullmatch(text)) == real, text


@settings(deadline=None)
@given(st.dates(), st.uuids(), st.ip_addresses(v=4), st.datetimes(timezones=st.just(datetime.timezone.utc)))
def test_formats_match_what_python_writes(date, uuid, ip, moment):
    assert matches({"format": "date"}, json.dumps(date.isoformat()))
    assert matches({"format": "uuid"}, json.dumps(str(uuid)))
    assert matches({"format": "ipv4"}, json.dumps(str(ip)))
    assert matches({"format": "date-time"}, json.dumps(moment.isoformat()))
    assert matches({"format": "time"}, json.dumps(moment.timetz().isoformat()))


def ipv6_writings() -> set[str]:
    """IPv6 texts of 8 groups (0 or 1 each, and one extra group) written in full and with "::"
    over every run of groups, zeros or not: the valid compressed forms and their near misses."""
    texts = set()
    for n in (7, 8, 9):
        for groups in itertools.product("01", repeat=n):
            texts.add(":".join(groups))
            for i in range(n + 1):
                for j in range(i, n + 1):
                    texts.add(":".join(groups[:i]) + "::" + ":".join(groups[j:]))
    return texts


def test_ipv6_is_exact_wherever_the_double_colon_stands():
    """'::' stands for one or more zero groups anywhere: 2001:db8::1 (the commonest written
    form, and what Python's ipaddress writes) was refused; only '::' at either end was
    written (schema_fuzz). Exact against jsonschema's checker on every placement."""
    regex = re.compile(FORMATS["ipv6"])
    for text in sorted(ipv6_writings()):
        assert bool(regex.fullmatch(text)) == FORMAT_CHECKER.conforms(text, "ipv6"), text
    assert matches({"format": "ipv6"}, json.dumps("2001:db8::1"))


@pytest.mark.parametrize("fmt,prefix", [("time", ""), ("date-time", "2024-05-01T")])
def test_a_time_has_at_most_nine_fraction_digits(fmt, prefix):
    """Seconds end within nanoseconds: with `\\.[0-9]+` the bundled model, greedy, wrote
    fraction digits until max_new_tokens (4 runs out of 4)."""
    assert matches({"format": fmt}, json.dumps(f"{prefix}13:12:12.123456789Z"))
    assert not matches({"format": fmt}, json.dumps(f"{prefix}13:12:12.1234567891Z"))
    assert matches({"format": fmt}, json.dumps(f"{prefix}13:12:12+02:00"))


@pytest.mark.parametrize(
    "text",
    [
        "user@example.com",
        "a.b+c@d-e.example.org",
        "https://example.com/a/b?c=d#e",
        "urn:isbn:0451450523",
        "mailto:x@y.z",
    ],
)
def test_common_emails_and_uris_match(text):
    fmt = "email" if "@" in text and ":" not in text else "uri"
    assert matches({"format": fmt}, json.dumps(text)) and is_valid(text, {"format": fmt})


@pytest.mark.parametrize("fmt", sorted(SHORT_FORMATS))
def test_short_format_strings_pass_the_checker_and_fit_their_length(fmt):
    """The short forms used with maxLength: sound, and no longer than they claim."""
    lo, hi = _length_range(SHORT_FORMATS[fmt])
    schema = {"type": "string", "format": fmt, "minLength": lo, "maxLength": hi}
    assert build_regex_from_schema(schema) == render(parse_tree(f'"{SHORT_FORMATS[fmt]}"'))  # the short form itself
    assert_sound(schema, n=200)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "format": "date", "maxLength": 10},
        {"type": "string", "format": "uuid", "minLength": 36},
        {"type": "string", "format": "uri", "maxLength": 2048},
        {"type": "string", "format": "email", "maxLength": 255, "minLength": 3},
        {"type": "string", "format": "date-time", "maxLength": 30},
    ],
)
def test_format_with_length_bounds_is_sound(schema):
    assert_sound(schema, n=200)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "format": "date", "maxLength": 9},
        {"type": "string", "format": "uri", "maxLength": 20},
        {"type": "string", "format": "email", "minLength": 10},
    ],
)
def test_format_with_length_that_does_not_fit_names_both(schema):
    with pytest.raises(
        UnsupportedSchemaError,
        match=re.escape(f"'format': {schema['format']!r} together with 'minLength'/'maxLength' at #"),
    ):
        build_regex_from_schema(schema)


def test_pattern_with_format_is_refused():
    """(pattern with minLength/maxLength is an exact intersection: test_json_schema_keywords.py)"""
    with pytest.raises(UnsupportedSchemaError, match="'format' together with"):
        build_regex_from_schema({"type": "string", "format": "date", "pattern": "^2"})
