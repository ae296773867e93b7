"""The errors of the JSON Schema compiler: a schema we refuse (and why) or one that is not valid."""

from __future__ import annotations


class UnsupportedSchemaError(ValueError):
    """The schema is valid but uses a keyword or construct this compiler does not support."""


class SchemaTooLargeError(UnsupportedSchemaError):
    """The schema's regex would be longer than the option max_regex_chars."""


class CompileBudgetError(UnsupportedSchemaError):
    """The compile took more CPU time in this process than its budget (budget.py): the fsm
    backend then compiles the schema in a child process; anyone else gets this refusal."""


class InvalidSchemaError(ValueError):
    """The input is not a valid JSON Schema (bad JSON, wrong keyword value types, bad $ref)."""
