"""A large JSON Schema turned into regex text in a process of its own (issue 30).

The schema compiler (the json_schema package) is pure Python: four 3.9 MB schemas compiled
on compile threads (a JSON parse, then 3 s of compiling each), back when it had no
checkpoints, made every step of the scheduler wait for the GIL at each torch operation: a
bystander's p99 went 2.6-20x its baseline. Schema -> regex text is a pure function, so a
large schema is compiled in a child process (child_process.py): the compile thread only
waits on a pipe (without the GIL), and what the compile built (a 3.9 MB schema is ~10^5
dicts) dies with the child instead of growing the server. The parent gets the regex text
back, or the compiler's own exception, and reads the text as it would have read the
compiler's result. The fsm backend sends a schema here when its text is over 256 KiB, or
when its compile in the server ran past its CPU budget (json_schema/budget.py; the compiler
now checkpoints at every subschema, so until then its thread yields to the scheduler).
"""

from __future__ import annotations

from typing import Any

from .child_process import call_in_child
from .json_schema import build_regex_from_schema


def schema_regex_in_process(
    schema: str, options: dict[str, Any], timeout: float, memory_bytes: int | None = 4 << 30, nice: int = 5
) -> str:
    """`build_regex_from_schema(schema, **options)`, computed in a child process.

    Raises what the compiler raised (InvalidSchemaError, a size limit ...), CompileTimeout
    past `timeout` seconds, CompileCancelled when the compile's requests gave up (seen at
    the `checkpoint` of a compile thread), ConstraintError if the child died. The child is
    killed in every case but the first."""
    return str(
        call_in_child(
            build_regex_from_schema,
            (schema,),
            options,
            timeout=timeout,
            what="compiling the json_schema",
            memory_bytes=memory_bytes,
            nice=nice,
        )
    )
