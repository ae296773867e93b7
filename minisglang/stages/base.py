"""The constraint layer's hook points, and the stage with no constraints at all.

The scheduler calls a stage at five named points (chapters/00-the-engine.md, "Where the
constraint layer plugs in"):

1. `on_arrival(req)`          a request arrives (s1 compiles its FSM right here)
2. `poll_grammar_queue(q)`    which requests waiting for a grammar may go on (s3)
3. `before_decode(sched)`     just before a decode step (s4 jumps forward here)
4. `mask_logits(logits, reqs)` forbid the tokens the grammar does not allow (s1, s2)
5. `advance(req, token_id)`   after sampling: move the grammar state, maybe finish (s1)

plus `release(req)` when a request leaves the engine. This module's `Stage` does nothing
at any of them: it is the engine before constrained decoding existed, and it refuses
constrained requests with a clear message rather than ignoring the constraint.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ..registry import Registry

if TYPE_CHECKING:  # pragma: no cover
    from ..core import Req
    from ..scheduler import Scheduler
    from ..tokenizer import Tokenizer

STAGES = Registry("stage", attr="tag")
register = STAGES.register      # `@register("s1-masked-fill")` makes a stage reachable by its tag


@dataclass
class StageContext:
    """What a stage may know about the engine it serves."""

    tokenizer: "Tokenizer"
    vocab_size: int            # width of the logits (may exceed the tokenizer's vocabulary)
    device: torch.device
    options: dict[str, Any] = field(default_factory=dict)


@register("s0-unconstrained")
class Stage:
    """No constrained decoding: every hook is a no-op."""

    tag = "s0-unconstrained"
    # Declared capabilities, read by the behaviour test suite and `minisglang stages`.
    supports: frozenset[str] = frozenset()

    def __init__(self, ctx: StageContext):
        self.ctx = ctx

    # 1. request arrival ------------------------------------------------------------
    def on_arrival(self, req: "Req") -> None:
        constraint = req.sampling_params.constraint()
        if constraint is not None:
            kind = constraint[0]
            req.finish("abort", message=f"stage {self.tag} does not support {kind!r} constraints")

    # 2. grammar queue ---------------------------------------------------------------
    def poll_grammar_queue(self, queue: list["Req"]) -> list["Req"]:
        """Return the requests whose grammar is ready (or failed), in arrival order."""
        return list(queue)

    # 3. before a decode step ---------------------------------------------------------
    def before_decode(self, scheduler: "Scheduler") -> None:
        return None

    # 4. mask the logits --------------------------------------------------------------
    def mask_logits(self, logits: torch.Tensor, reqs: list["Req"]) -> None:
        """logits: [B, vocab_size], modified in place; row i belongs to reqs[i]."""
        return None

    # 5. advance after sampling -------------------------------------------------------
    def advance(self, req: "Req", token_id: int) -> None:
        return None

    def release(self, req: "Req") -> None:
        req.grammar = None

    def shutdown(self) -> None:
        return None
