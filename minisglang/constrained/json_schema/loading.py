"""A schema's JSON text -> the schema, read as strictly as a request body (and its error wording)."""

from __future__ import annotations

import json
import re
from typing import Any

from minisglang.constrained.json_schema.errors import InvalidSchemaError


def load_schema(text: str) -> Any:
    """A schema's JSON text -> the schema. InvalidSchemaError when it is not JSON, when one
    object gives a key twice (parsers disagree on which copy counts, so the request body
    refuses it too: `{"type": "string", "type": "integer"}` must not quietly mean integers),
    or when it nests deeper than Python's parser can follow."""

    def refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        twice = repeated_key(pairs)
        if twice is not None:
            raise InvalidSchemaError(f"the schema gives the key {twice!r} twice in one object; give each key once")
        return dict(pairs)

    def refuse_underflow(numeral: str) -> float:
        value = float(numeral)
        if underflows(numeral, value):
            raise InvalidSchemaError(
                f"the schema holds the number {shown_numeral(numeral)}, which is below the "
                f"smallest double ({5e-324}) and reads as 0; write 0 or a larger number"
            )
        return value

    try:
        return json.loads(text, object_pairs_hook=refuse_duplicates, parse_float=refuse_underflow)
    except json.JSONDecodeError as e:
        raise InvalidSchemaError(f"the schema is not valid JSON: {e}") from None
    except RecursionError:
        raise InvalidSchemaError("the schema is not valid JSON: it nests too deeply for the parser") from None


def underflows(numeral: str, value: float) -> bool:
    """Whether a JSON numeral that is not zero read as 0.0 (`1e-400`: below the smallest
    double). Such a bound would silently become 0: `minimum: 1e-400` would allow 0."""
    return value == 0.0 and any(c in "123456789" for c in re.split("[eE]", numeral)[0])


def shown_numeral(numeral: str) -> str:
    """A numeral (or a value's JSON text) for an error message, cut after 40 characters."""
    return numeral if len(numeral) <= 40 else numeral[:37] + "..."


def repeated_key(pairs: list[tuple[str, Any]]) -> str | None:
    """The first key given twice in one JSON object's (key, value) pairs (what json.loads
    hands an `object_pairs_hook`), or None."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            return key
        seen.add(key)
    return None
