"""Turn Graphviz DOT text into pictures: inline in Jupyter, or saved as SVG/PNG/PDF.

The drawing functions (fsm.py, radix.py) are pure: they return DOT text, which tests can
read. `Drawing` wraps that text and calls the graphviz `dot` program only when a picture
is actually wanted.
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

FORMATS = {".svg": "svg", ".png": "png", ".pdf": "pdf"}


class GraphvizNotFoundError(RuntimeError):
    """The graphviz `dot` program is not installed."""


def dot_escape(text: str) -> str:
    """Escape text for a double-quoted DOT string (backslashes first, then quotes)."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


# Whitespace a reader must see on a slide: a space is drawn as ␣, control characters as
# the escapes a programmer types.
VISIBLE = {" ": "\u2423", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def show_char(ch: str) -> str:
    """One character as drawn: visible whitespace, `\\xNN` for other unprintable ones."""
    if ch in VISIBLE:
        return VISIBLE[ch]
    if not ch.isprintable():
        code = ord(ch)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
    return ch


def show_text(text: str) -> str:
    """Literal text as every drawing writes it: in single quotes, whitespace visible
    (`'{"name":␣'`), a quote or backslash inside escaped with a backslash. Character
    classes such as `[0-9]` are written bare, so quotes always mean "exactly this text"."""
    return "'" + "".join("\\" + ch if ch in "'\\" else show_char(ch) for ch in text) + "'"


@dataclass(frozen=True)
class Layout:
    """How an automaton drawing is laid out.

    rankdir: "LR" (the start on the left, a chain reads left to right) or "TB" (top to
    bottom). states_per_row: wrap the drawing into rows of at most this many states,
    grouped by their distance from the start state, stacked top to bottom, so that a
    40-state chain stays readable at slide width; None draws one long row (or column).
    """

    rankdir: str = "LR"
    states_per_row: int | None = None

    def __post_init__(self) -> None:
        if self.rankdir not in ("LR", "TB"):
            raise ValueError(f"Layout.rankdir must be 'LR' or 'TB', not {self.rankdir!r}")
        if self.states_per_row is not None and (not isinstance(self.states_per_row, int) or self.states_per_row < 2):
            raise ValueError(f"Layout.states_per_row must be an int >= 2 or None, not {self.states_per_row!r}")

    def place(self, initial: int, edges: list[tuple[int, int]], states: list[int]) -> Placement:
        """Where the states go: the direction and, when wrapping, the rows (the states in
        order of distance from the start, `states_per_row` to a row)."""
        if self.states_per_row is None:
            return Placement([f"  rankdir={self.rankdir};"], {})
        depth = distances(initial, edges, states)
        order = sorted(states, key=lambda s: (depth[s], s))
        n = self.states_per_row
        rows = [order[i:i + n] for i in range(0, len(order), n)]
        lines = ["  rankdir=TB;"]
        for row in rows:
            lines.append("  { rank=same; " + " ".join(f"{s};" for s in row) + " }")
            # invisible links keep a row in order, left to right
            lines += [f"  {a} -> {b} [style=invis];" for a, b in zip(row, row[1:])]
        # invisible links stack the rows, each under the one before, aligned on the left
        lines += [f"  {a[0]} -> {b[0]} [style=invis, weight=10];" for a, b in zip(rows, rows[1:])]
        return Placement(lines, {s: r for r, row in enumerate(rows) for s in row})


@dataclass(frozen=True)
class Placement:
    """A layout applied to one drawing: its DOT lines, and the row of each state."""

    lines: list[str]
    row_of: dict[int, int]

    def edge_attrs(self, src: int, dst: int) -> str:
        """Extra attributes for an edge: one between rows must not pull the rows apart."""
        return ", constraint=false" if self.row_of.get(src, 0) != self.row_of.get(dst, 0) else ""


def distances(initial: int, edges: list[tuple[int, int]], states: list[int]) -> dict[int, int]:
    """Breadth-first distance of every state from `initial` (unreachable ones: after the rest)."""
    out: dict[int, list[int]] = {}
    for src, dst in edges:
        out.setdefault(src, []).append(dst)
    depth, frontier = {initial: 0}, [initial]
    while frontier:
        nxt = []
        for s in frontier:
            for d in out.get(s, []):
                if d not in depth:
                    depth[d] = depth[s] + 1
                    nxt.append(d)
        frontier = nxt
    far = max(depth.values()) + 1
    return {s: depth.get(s, far) for s in states}


def render_dot(source: str, fmt: str = "svg") -> bytes:
    """Run `dot -T<fmt>` on DOT text and return the picture's bytes."""
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizNotFoundError(
            "the graphviz 'dot' program is not installed, so the drawing cannot be rendered: "
            "install it with `apt-get install graphviz` (macOS: `brew install graphviz`, "
            "conda: `conda install graphviz`); the DOT text is still available as .source"
        )
    result = subprocess.run([exe, f"-T{fmt}"], input=source.encode("utf-8"), capture_output=True, timeout=120)
    if result.returncode != 0:
        raise ValueError(f"graphviz dot failed on this drawing: {result.stderr.decode(errors='replace').strip()}")
    return result.stdout


@dataclass(frozen=True)
class Drawing:
    """DOT text that shows itself as SVG in Jupyter and can be saved to a file."""

    source: str

    def _repr_svg_(self) -> str:
        return render_dot(self.source, "svg").decode("utf-8")

    def save(self, path: str | Path) -> Path:
        """Write the picture to `path`; its suffix (.svg, .png, .pdf) picks the format."""
        path = Path(path)
        fmt = FORMATS.get(path.suffix.lower())
        if fmt is None:
            raise ValueError(f"cannot save a drawing as {path.name!r}: use one of the suffixes {sorted(FORMATS)}")
        path.write_bytes(render_dot(self.source, fmt))
        return path
