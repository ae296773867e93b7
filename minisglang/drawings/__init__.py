"""Drawings for teaching: DOT text builders (pure functions), their layout and their renderer."""

from minisglang.drawings.fsm import char_dfa_dot, token_fsm_dot
from minisglang.drawings.layout import Layout
from minisglang.drawings.render import Drawing, GraphvizNotFoundError, dot_escape, render_dot, show_text

__all__ = [
    "Drawing",
    "GraphvizNotFoundError",
    "Layout",
    "char_dfa_dot",
    "dot_escape",
    "render_dot",
    "show_text",
    "token_fsm_dot",
]
