"""`$ref` targets: the schema resources ($id) and anchors of one document, and JSON pointers into it."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

from minisglang.constrained.json_pointer import pointer_token, resolve_pointer, step
from minisglang.constrained.json_schema.errors import InvalidSchemaError, UnsupportedSchemaError

# The base URI of a root schema without $id (relative refs resolve against it).
ROOT_URI = "https://minisglang.invalid/root.json"  # hierarchical: urljoin resolves paths against it


class _ResourceIndex:
    """Finds the target of a `$ref` in the root schema (mixed into _SchemaCompiler)."""

    root: dict[str, Any] | bool
    resources: dict[str, str]  # absolute URI ($id) -> its pointer
    anchors: dict[tuple[str, str], str]  # (URI, $anchor) -> its pointer
    places: dict[str, tuple[object, str]]  # JSON pointer -> (its node, its base URI): see `_at`
    targets: dict[tuple[str, str], tuple[object, str]]  # (base URI, $ref) -> `resolve`'s answer
    one_base: bool  # no `$id` below the root changes the base URI: every subschema has the root's

    def _index(self, node: object, base: str, pointer: str) -> None:
        """Record every schema resource ($id, resolved against its parent's) and $anchor
        under `node`; values of const/enum/default/examples are data, not schemas."""
        if isinstance(node, list):
            for i, item in enumerate(node):
                self._index(item, base, f"{pointer}/{i}")
            return
        if not isinstance(node, dict):
            return
        if isinstance(node.get("$id"), str):
            parent, base = base, urldefrag(urljoin(base, node["$id"]))[0]
            self.resources.setdefault(base, pointer)
            if pointer != "#" and base != parent:
                self.one_base = False
        if isinstance(node.get("$anchor"), str):
            self.anchors.setdefault((base, node["$anchor"]), pointer)
        for key, value in node.items():
            if key not in ("const", "enum", "default", "examples") and isinstance(value, (dict, list)):
                self._index(value, base, f"{pointer}/{pointer_token(key)}")

    def base_uri(self, path: str) -> str:
        """The base URI at a JSON pointer: the innermost $id on the way from the root."""
        return self._at(path)[1]

    def _at(self, path: str) -> tuple[object, str]:
        """(the node at `path`, None past a missing step; the base URI there), remembered
        per path and worked out from the parent's: the compiler asks at every $ref, and its
        paths share their prefixes."""
        done = self.places.get(path)
        if done is not None:
            return done
        node: object = self.root
        base = ROOT_URI
        if len(path) > 1:  # (a pointer is "#" and its tokens, each after a "/")
            parent, token = path.rsplit("/", 1) if "/" in path else ("#", path[2:])
            node, base = self._at(parent)
            if node is not None:
                node = step(node, token)
        if isinstance(node, dict) and isinstance(node.get("$id"), str):
            base = urldefrag(urljoin(base, node["$id"]))[0]
        done = self.places[path] = (node, base)
        return done

    def resolve(self, ref: object, path: str) -> tuple[object, str]:
        """A $ref -> (target, its JSON pointer from the root). The ref is resolved against
        the base URI at `path`; it may name a resource of this document ($id), an anchor
        in it ($anchor) and a JSON pointer inside it. Other documents are not fetched."""
        if not isinstance(ref, str):
            raise InvalidSchemaError(f"'$ref' at {path} must be a string, got {ref!r}")
        base = self.base_uri(path)
        found = self.targets.get((base, ref))  # (each use of a $ref resolves it again)
        if found is None:
            found = self.targets[base, ref] = self._resolved(base, ref, path)
        return found

    def _resolved(self, base: str, ref: str, path: str) -> tuple[object, str]:
        uri, fragment = urldefrag(urljoin(base, ref))
        if uri not in self.resources:
            raise UnsupportedSchemaError(
                f"'$ref' {ref!r} at {path}: {uri!r} is not a schema resource of this "
                "document (only local refs, $id and $anchor in it are supported)"
            )
        pointer = self.resources[uri]
        if fragment and not fragment.startswith("/"):
            if (uri, unquote(fragment)) not in self.anchors:
                raise InvalidSchemaError(f"'$ref' {ref!r} at {path}: no $anchor {unquote(fragment)!r} in {uri!r}")
            pointer = self.anchors[(uri, unquote(fragment))]
        elif fragment:
            pointer = pointer + fragment if pointer != "#" else "#" + fragment
        target = resolve_pointer(self.root, pointer)
        if target is None:
            raise InvalidSchemaError(f"'$ref' {ref!r} at {path} points to nothing in this schema")
        return target, pointer
