"""JSON pointers (RFC 6901) into a parsed JSON document: the `#/$defs/Person` of a `$ref`.

Used by the JSON Schema compiler's `$ref` resolution (json_schema/refs.py) and by the tool
definitions' check of a root `$ref` (function_call.py, which ships from stage s1 on, before
the compiler does: so this lives on its own).
"""

from __future__ import annotations

from urllib.parse import unquote


def pointer_token(key: str) -> str:
    """A key as a JSON pointer token (~ and / escaped)."""
    return key.replace("~", "~0").replace("/", "~1")


def step(node: object, token: str) -> object:
    """node[token] for a pointer token as written in a `$ref` (percent-encoded, ~ escaped): an
    object's key or a list's index; None where there is none."""
    key = unquote(token).replace("~1", "/").replace("~0", "~")
    if isinstance(node, dict):
        return node.get(key)
    if isinstance(node, list) and key.isdigit() and int(key) < len(node):
        return node[int(key)]
    return None


def resolve_pointer(root: object, pointer: str) -> object:
    """The node at `pointer` ("#" or "#/a/b") in `root`; None where a step finds nothing."""
    node = root
    for token in pointer[2:].split("/") if len(pointer) > 1 else []:
        node = step(node, token)
        if node is None:
            return None
    return node
