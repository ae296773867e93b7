"""JSON Schema keywords beyond the basics, each exact or an error naming it: checked
exhaustively on small domains against `jsonschema` (the oracle): every string/value of
the domain, serialised with json.dumps, matches the compiled regex exactly when valid.
"""
from __future__ import annotations

import itertools
import json
import re

import pytest

from minisglang.constrained.json_schema import UnsupportedSchemaError, build_regex_from_schema
from test_json_schema import assert_sound, is_valid


def strings(alphabet: str, longest: int):
    for n in range(longest + 1):
        for chars in itertools.product(alphabet, repeat=n):
            yield "".join(chars)


def assert_exact_on(schema, values, **options) -> None:
    """For every value: the regex matches json.dumps(value) exactly when the value is valid."""
    regex = re.compile(build_regex_from_schema(schema, **options))
    for value in values:
        text = json.dumps(value)
        assert bool(regex.fullmatch(text)) == is_valid(value, schema), (schema, value)


# ---------------------------------------------------------------------------------------
# pattern with minLength/maxLength: the intersection, exactly
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("pattern", ["^[ab]+$", "a", "^a", "b$", "^a.b", "ab|^b+$", "^(ab|ba)*$", "^a{2}b?$",
                                     "[^a]", "^(?:a|bb)$", "^a*b*$", "\\\\", '^"?a'])
@pytest.mark.parametrize("window", [(0, 2), (2, None), (1, 3), (3, 3), (4, 5)])
def test_pattern_with_length_is_the_exact_intersection(pattern, window):
    lo, hi = window
    schema = {"type": "string", "pattern": pattern, "minLength": lo, **({} if hi is None else {"maxLength": hi})}
    domain = list(strings('ab"\\', 5))
    try:
        build_regex_from_schema(schema)
    except UnsupportedSchemaError as e:
        if "accepts no JSON value" in str(e):  # an empty intersection
            assert not any(is_valid(s, schema) for s in domain)
        else:  # alternatives of different widths; a counted search (no leading ^)
            assert f"'pattern' {pattern!r} with 'minLength'/'maxLength' at #/pattern" in str(e)
            assert pattern == "^(?:a|bb)$" or not pattern.startswith("^")
        return
    assert_exact_on(schema, domain)


def test_pattern_with_length_refuses_varying_width_repeats_by_name():
    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": "^(a|bc)+$", "maxLength": 4}}}
    with pytest.raises(UnsupportedSchemaError, match=re.escape("'pattern' '^(a|bc)+$' with 'minLength'/'maxLength' "
                                                               "at #/properties/x/pattern")):
        build_regex_from_schema(schema)


def test_pattern_with_length_is_sound_on_real_shapes():
    for schema in [{"type": "string", "pattern": "^[a-zA-Z0-9_-]+$", "maxLength": 64},
                   {"type": "string", "pattern": "^[A-Z]{2}[0-9]{2,4}$", "minLength": 5},
                   {"type": "string", "pattern": "\\S", "minLength": 1},
                   {"type": "string", "pattern": "^[a-z]", "minLength": 3, "maxLength": 40},
                   {"type": "string", "pattern": "^\\d{3}-\\d{4}$", "maxLength": 8}]:
        assert_sound(schema)
