"""Drawings for teaching: DOT text builders (pure functions) and their renderer."""
from minisglang.drawings.fsm import char_dfa_dot, token_fsm_dot
from minisglang.drawings.render import Drawing, GraphvizNotFoundError, Layout, dot_escape, render_dot, show_text

__all__ = ["Drawing", "GraphvizNotFoundError", "Layout", "char_dfa_dot", "dot_escape", "render_dot", "show_text",
           "token_fsm_dot"]
