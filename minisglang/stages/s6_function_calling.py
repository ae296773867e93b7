"""Stage s6-function-calling: s5 plus the `structural_tag` request kind (tool calls).

Read with chapters/07-function-calling.md (SGLang #3566, "integrate Structural Tag in
xgrammar backend for function calling", 2025-02). A structural tag constrains only part
of the output: the model writes free text until a trigger such as `<tool_call>`, then
one of the tools' begins, arguments valid under that tool's JSON Schema, the end tag,
and free text again (constrained/structural_tag.py has the exact semantics and how our
backend turns it into one regex for the lazy automaton).

Nothing in the scheduler changes: the request kind travels through s5's interface like
the others, `backend.get_cached_or_future_value("structural_tag", spec_json)`, and each
backend compiles it with its `compile_structural_tag(spec)` (ours, xgrammar's triggered
tags, llguidance's lazy lexemes; outlines refuses). A spec with a mistake aborts only its
request, with a message naming the field.

The same kind takes structural tag v2, `{"type": "structural_tag", "format": {...}}`
(xgrammar's and SGLang's format tree: constrained/structural_tag_format.py), compiled by
each backend's `compile_structural_tag_format(spec)` (chapter 07, section 7).
"""

from __future__ import annotations

from .base import register
from .s5_backends import BackendStage


@register("s6-function-calling")
class FunctionCallingStage(BackendStage):
    supports = BackendStage.supports | {"structural_tag"}
