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
