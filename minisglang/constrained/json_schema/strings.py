"""The compiler's rule for a JSON string: format, pattern, minLength/maxLength and excluded values."""

from __future__ import annotations

from typing import Any

from minisglang.constrained.json_schema.compiler_base import _CompilerBase
from minisglang.constrained.json_schema.errors import InvalidSchemaError, UnsupportedSchemaError
from minisglang.constrained.json_schema.formats import FORMATS, _format_with_length, format_node
from minisglang.constrained.json_schema.keywords import EXCLUDED_STRINGS, MORE_PATTERNS, NOT_AT, NOT_PATTERNS
from minisglang.constrained.json_schema.pattern_length import _pattern_with_length
from minisglang.constrained.json_schema.patterns import _pattern_regex
from minisglang.constrained.json_schema.regex_parts import Regex, _concat, _repeat, lit
from minisglang.constrained.json_schema.string_chars import COUNTED_STRING_CHAR_NODE, STRING, _string_except
from minisglang.constrained.json_schema.values import _count
from minisglang.constrained.regex_ast import difference
from minisglang.constrained.regex_dfa import shown_regex


class _StringRules(_CompilerBase):
    """A JSON string (mixed into _SchemaCompiler)."""

    def _string(self, schema: dict[str, Any], path: str) -> Regex | None:
        """A JSON string: `format`, `pattern`, minLength/maxLength characters, values a `not`
        excludes. For the lazy automaton any of them together is their intersection (one
        `And` node); a plain regex has exact forms for some pairs only."""
        min_length, max_length = _count(schema, "minLength", path), _count(schema, "maxLength", path)
        has_length = bool(min_length) or max_length is not None
        for keyword in ("format", "pattern"):
            if keyword in schema and not isinstance(schema[keyword], str):
                raise InvalidSchemaError(f"'{keyword}' at {path} must be a string, got {schema[keyword]!r}")
        if "format" in schema and schema["format"] not in FORMATS:
            if self.options.unknown_formats == "error":
                raise UnsupportedSchemaError(
                    f"'format': {schema['format']!r} at {path} is not supported (supported: "
                    f"{', '.join(sorted(FORMATS))}; the option unknown_formats='annotation' ignores it)"
                )
            schema = {k: v for k, v in schema.items() if k != "format"}  # an annotation: any string
        if self.options.automaton == "lazy":
            if max_length is not None and max_length < (min_length or 0):
                return None
            parts: list[Regex | None] = []  # whole string regexes; the string must match each
            if "format" in schema:
                parts.append(_quoted(format_node(schema["format"])))
            if "pattern" in schema:
                parts.append(_quoted(_pattern_regex(schema["pattern"], f"{path}/pattern")))
            if has_length:
                parts.append(_quoted(_repeat(COUNTED_STRING_CHAR_NODE, min_length or 0, max_length)))
            if EXCLUDED_STRINGS in schema:
                parts.append(_string_except(schema[EXCLUDED_STRINGS]))
            for pattern in schema.get(MORE_PATTERNS, []):
                parts.append(_quoted(_pattern_regex(pattern, f"{path}/allOf")))
            for pattern in schema.get(NOT_PATTERNS, []):  # minus every writing of what it matches
                wide = _pattern_regex(pattern, schema[NOT_AT], wide=True)
                parts.append(difference(STRING, _quoted(wide)))
            return self.intersection(parts, path) if parts else STRING
        if MORE_PATTERNS in schema:
            shown = ", ".join(shown_regex(p) for p in [schema["pattern"], *schema[MORE_PATTERNS]])
            raise UnsupportedSchemaError(
                f"'allOf' at {path}: a string must match several 'pattern's "
                f"([{shown}]); only automaton='lazy' intersects them"
            )
        if NOT_PATTERNS in schema:
            raise UnsupportedSchemaError(
                f"keyword 'not' at {schema[NOT_AT]}: the negation of 'pattern' is written only for automaton='lazy'"
            )
        if EXCLUDED_STRINGS in schema:  # `not` of string values: only for otherwise free strings
            if any(k in schema for k in ("format", "pattern")) or has_length:
                raise UnsupportedSchemaError(
                    f"keyword 'not' at {schema[NOT_AT]}: excluding string values from a "
                    "string with pattern, format or length bounds cannot be written exactly "
                    "(with automaton='lazy' it can)"
                )
            return _string_except(schema[EXCLUDED_STRINGS])
        if "format" in schema:
            fmt = schema["format"]
            if "pattern" in schema:
                raise UnsupportedSchemaError(f"'format' together with 'pattern' at {path} is not supported")
            if has_length:
                return _quoted(_format_with_length(fmt, min_length or 0, max_length, path))
            return _quoted(format_node(fmt))
        if "pattern" in schema:
            if has_length:
                return _quoted(_pattern_with_length(schema["pattern"], f"{path}/pattern", min_length or 0, max_length))
            return _quoted(_pattern_regex(schema["pattern"], f"{path}/pattern"))
        if max_length is not None and max_length < (min_length or 0):
            return None
        if not has_length:
            return STRING
        return _quoted(_repeat(COUNTED_STRING_CHAR_NODE, min_length or 0, max_length))


def _quoted(contents: Regex | None) -> Regex | None:
    """A JSON string of these contents (None: none)."""
    return _concat(lit('"'), contents, lit('"'))
