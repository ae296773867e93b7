"""Schema values: JSON types and equality of values, exact numbers, counts and literal JSON texts."""

from __future__ import annotations

import json
import math
import sys
from decimal import Decimal
from typing import Any

from minisglang.constrained.json_schema.errors import InvalidSchemaError, UnsupportedSchemaError
from minisglang.constrained.json_schema.loading import shown_numeral
from minisglang.constrained.json_schema.regex_parts import Regex, _alt, _concat, lit
from minisglang.constrained.json_schema.string_chars import _string_literal


def _json_type_of(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}[type(value)]


def _type_allows(types: set[str], value_type: str) -> bool:
    return value_type in types or (value_type == "integer" and "number" in types)


def _json_equal(a: object, b: object) -> bool:
    """JSON equality: 1 == 1.0, but true != 1, and lists/objects compare element-wise."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, dict, str)) or isinstance(b, (list, dict, str)):
        return type(a) is type(b) and a == b
    return a == b


def _decimal(value: object, keyword: str, path: str) -> Decimal:
    """A number keyword's value, exactly. Within a double's range only: a JSON number
    beyond it (1e999, or an integer of 310 digits) reads as infinity in most parsers
    (Python's json makes 1e999 inf, JavaScript both), so validators disagree on it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidSchemaError(f"'{keyword}' at {path} must be a number, got {short_value(value)}")
    if isinstance(value, int):  # exact, however long: no float(value), which overflows
        if abs(value) > sys.float_info.max:
            try:
                digits = str(len(str(abs(value))))
            except ValueError:  # past sys.get_int_max_str_digits()
                digits = f"more than {sys.get_int_max_str_digits()}"
            raise UnsupportedSchemaError(
                f"'{keyword}' at {path} is out of range: an integer of {digits} digits, beyond the largest "
                f"double ({sys.float_info.max:.17g}), which most JSON parsers read as infinity"
            )
        return Decimal(value)
    if not math.isfinite(value):
        raise InvalidSchemaError(
            f"'{keyword}' at {path} must be a finite number, got {value!r} (a JSON number "
            f"beyond the largest double, {sys.float_info.max:.17g}, such as 1e999, reads "
            "as infinity)"
        )
    return Decimal(repr(value))


def short_value(value: object) -> str:
    """A value for an error message (a keyword's, a request field's): its JSON text, cut after 40 characters."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return shown_numeral(text)


def _count(schema: dict[str, Any], keyword: str, path: str) -> int | None:
    """A non-negative integer keyword (minLength, ...), None when absent (given as null: an
    error, where it read as absent and the bound was dropped)."""
    if keyword not in schema:
        return None
    value = schema[keyword]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != int(value):
        raise InvalidSchemaError(f"'{keyword}' at {path} must be a non-negative integer, got {value!r}")
    return int(value)


def _whole_as_int(value: Any) -> Any:
    """`value` with each float equal to an integer below 2**53 as that integer, as our number
    regexes write it (`[1, 1.0]` -> `[1, 1]`); `value` itself when it holds none."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, list):
        items = [_whole_as_int(v) for v in value]
        return value if all(a is b for a, b in zip(items, value)) else items
    if isinstance(value, dict):
        members = {k: _whole_as_int(v) for k, v in value.items()}
        return value if all(members[k] is value[k] for k in value) else members
    return value


def _literal(value: object, ws: Regex) -> Regex | None:
    """The JSON text of one value; numbers equal to an integer also as `n` and `n.0`."""
    if value is None or isinstance(value, bool):
        return lit(json.dumps(value))
    if isinstance(value, (int, float)):
        texts = [json.dumps(value)]
        if value == int(value) and abs(value) < 2**53:
            texts += [str(int(value)), f"{int(value)}.0"]
        return _alt([lit(t) for t in texts])
    if isinstance(value, str):
        return _string_literal(value)
    sep = _concat(lit(","), ws)
    if isinstance(value, list):
        items = [_concat(*([sep] if i else []), _literal(v, ws)) for i, v in enumerate(value)]
        return _concat(lit("["), ws, *items, ws, lit("]"))
    assert isinstance(value, dict)  # a JSON value: an object is the one kind left
    members = [
        _concat(*([sep] if i else []), _string_literal(k), lit(":"), ws, _literal(v, ws))
        for i, (k, v) in enumerate(value.items())
    ]
    return _concat(lit("{"), ws, *members, ws, lit("}"))
