"""Read the drawings' edge labels back (the inverse of drawings.render.show_text), written
here from the rule in its docstring rather than imported, so the tests check the rule."""

from __future__ import annotations

import re

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "'": "'", "\\": "\\"}


def read_literal(label: str) -> str:
    """`'{"name":␣'` -> `{"name": `: quotes off, ␣ is a space, backslash escapes undone."""
    assert label[0] == label[-1] == "'" and len(label) >= 2, f"not a quoted literal: {label!r}"
    body, out, i = label[1:-1], [], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            nxt = body[i + 1]
            if nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
                i += 2
                continue
            width = {"x": 2, "u": 4, "U": 8}[nxt]
            out.append(chr(int(body[i + 2 : i + 2 + width], 16)))
            i += 2 + width
            continue
        assert ch != "'", f"an unescaped quote inside {label!r}"
        out.append(" " if ch == "\u2423" else ch)
        i += 1
    return "".join(out)


def label_matches(label: str, ch: str) -> bool:
    """Whether an edge label (a quoted character, or a class in regex syntax) takes `ch`."""
    if label.startswith("'"):
        return read_literal(label) == ch
    return re.fullmatch(label.replace("\u2423", " "), ch) is not None


_NODE = re.compile(r"^  (\w+) \[(.*)\];$", re.M)
_EDGE = re.compile(r"^  (\w+) -> (\w+)(?: \[(.*)\])?;$", re.M)
_LABEL = re.compile(r'label="((?:[^"\\]|\\.)*)"')


def _dot_string(text: str) -> str:
    """A DOT double-quoted string's text: its line breaks as newlines, escapes undone."""
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), text)


def read_graph(dot: str) -> tuple[dict[str, tuple[str, str]], list[tuple[str, str, str, str]]]:
    """A drawing's states and edges, read back from its DOT text: {name: (label, attributes)}
    and [(src, dst, label, attributes)], invisible edges left out."""
    nodes = {}
    for name, attrs in _NODE.findall(dot):
        if name not in ("graph", "node", "edge"):
            m = _LABEL.search(attrs)
            nodes[name] = (_dot_string(m.group(1)) if m else "", attrs)
    edges = []
    for src, dst, attrs in _EDGE.findall(dot):
        if "style=invis" not in attrs:
            m = _LABEL.search(attrs)
            edges.append((src, dst, _dot_string(m.group(1)) if m else "", attrs))
    return nodes, edges
