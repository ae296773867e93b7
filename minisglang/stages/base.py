"""The constraint layer's hook points, and the stage with no constraints at all.

The scheduler calls a stage at five named points (chapters/00-the-engine.md, "Where the
constraint layer plugs in"):

1. `on_arrival(req)`          a request arrives (s1 compiles its FSM right here)
2. `poll_grammar_queue(q)`    which requests waiting for a grammar may go on (s3)
3. `before_decode(running)`   just before a decode step: which requests to re-admit
                              (s4 jumps forward; the scheduler's `readmit` does the move)
4. `mask_logits(logits, reqs)` forbid the tokens the grammar does not allow (s1, s2); from
                              s5 on in two halves, `batch_vocab_mask(reqs)` fills the packed
                              rows and `BaseGrammarObject.apply_vocab_mask` applies them, so that s7's overlapped
                              step fills them during the forward (overlap.py `fill_masks`)
5. `advance(req, token_id)`   after sampling: move the grammar state, maybe finish (s1)

plus `release(req)` when a request leaves the engine, and two calls that keep one
client's grammar from stalling the others (the scheduler thread is every client's):
`begin_step()` at the start of each step, and `ready(req)` for each request about to
join a forward, which may do a bounded slice of its grammar's work and say "not yet": the
request then sits out this step (s5; constrained/work_slices.py). This module's `Stage` does nothing
at any of them: it is the engine before constrained decoding existed, and it refuses
constrained requests with a clear message rather than ignoring the constraint. Each stage
declares the engine options it reads as a `StageOptions` dataclass (`Stage.Options`).
"""

from __future__ import annotations

import time
import typing
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import torch

from ..core import AbortKind, check_declared_type
from ..registry import Registry

if TYPE_CHECKING:  # pragma: no cover
    from ..core import Req
    from ..tokenizer import Tokenizer

STAGES = Registry("stage", attr="tag")
register = STAGES.register  # `@register("s1-masked-fill")` makes a stage reachable by its tag


@dataclass(frozen=True)
class Readmit:
    """Hook 3's answer: re-admit `req` with its output rewritten to `new_output_ids`."""

    req: Req
    new_output_ids: list[int]


@dataclass
class StageContext:
    """What a stage may know about the engine it serves."""

    tokenizer: Tokenizer
    vocab_size: int  # width of the logits (may exceed the tokenizer's vocabulary)
    device: torch.device
    options: dict[str, Any] = field(default_factory=dict)


# Number options that may be zero or negative (a niceness), or zero (a half-life of 0 turns the
# compile pool's order by usage off; its stage refuses a negative one); every other count, size
# or time is > 0.
SIGNED_OPTIONS = frozenset({"compile_nice", "compile_usage_half_life"})


@dataclass(frozen=True)
class StageOptions:
    """The engine options a stage reads (`Engine(stage=..., **options)`), as declared fields.

    Each stage subclasses this with its own; `parse` refuses a key no field declares, so a
    typo is an error rather than a silently ignored setting, and a value that is not of its
    field's declared type (`jump_forward="false"` is truthy: it would turn jumps on), or a
    count, size or time that is not above 0 (outside SIGNED_OPTIONS).
    """

    @classmethod
    def parse(cls, given: dict[str, Any], stage: str) -> StageOptions:
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(given) - set(valid))
        if unknown:
            raise ValueError(
                f"unknown option(s) {', '.join(map(repr, unknown))} for stage {stage}; "
                f"its options are: {', '.join(valid) or '(none)'}"
            )
        options = cls(**given)  # the stage's own checks (__post_init__) first: their words are sharper
        hints = typing.get_type_hints(cls)
        for name in given:
            check_declared_type(name, getattr(options, name), hints[name], positive=name not in SIGNED_OPTIONS)
        return options

    @staticmethod
    def check_choice(name: str, value: Any, choices: tuple) -> None:
        if value not in choices:
            *first, last = map(repr, choices)
            raise ValueError(f"{name} must be {', '.join(first) + ' or ' if first else ''}{last}, not {value!r}")


@register("s0-unconstrained")
class Stage:
    """No constrained decoding: every hook is a no-op."""

    tag = "s0-unconstrained"
    Options = StageOptions
    # Declared capabilities, read by the behaviour test suite and `minisglang stages`:
    # constraint kinds, plus "think_end" for the reasoning gate.
    supports: frozenset[str] = frozenset()
    # Exceptions that mean "this request's grammar failed" (a limit reached while masking, a
    # rejected token): the scheduler aborts that request with a grammar message, not an
    # internal error. Each stage names its own, so the core never imports a grammar library.
    grammar_errors: tuple[type[BaseException], ...] = ()
    # The scheduler class the engine runs this stage with (None: scheduler.Scheduler); s7's
    # decode step drafts and verifies, so it brings its own.
    scheduler_class: type | None = None

    def __init__(self, ctx: StageContext):
        self.ctx = ctx
        self.options = self.Options.parse(ctx.options, self.tag)

    def refuse_unsupported(self, req: Req) -> bool:
        """Abort `req` if it asks for a constraint kind or feature this stage lacks; True if so."""
        p = req.sampling_params
        constraint = p.constraint()
        if constraint is not None and constraint[0] not in self.supports:
            kinds = sorted(self.supports - {"think_end"})
            first_stage = {"regex": "s1-masked-fill", "structural_tag": "s6-function-calling"}
            arrives = first_stage.get(constraint[0], "s5-backends")
            req.finish(
                "abort",
                AbortKind.CLIENT,
                message=f"stage {self.tag} does not support {constraint[0]!r} constraints"
                + (f" (it supports {kinds})" if kinds else "")
                + f"; {constraint[0]} needs stage {arrives}",
            )
            return True
        if p.think_end is not None and "think_end" not in self.supports:
            req.finish(
                "abort",
                AbortKind.CLIENT,
                message=f"stage {self.tag} cannot honour think_end (the reasoning "
                f"gate arrives in s5-backends); it would constrain the thinking too",
            )
            return True
        return False

    # 1. request arrival ------------------------------------------------------------
    def on_arrival(self, req: Req) -> None:
        self.refuse_unsupported(req)

    # 2. grammar queue ---------------------------------------------------------------
    def poll_grammar_queue(self, queue: list[Req]) -> list[Req]:
        """Return the requests whose grammar is ready (or failed), in arrival order."""
        return list(queue)

    # every step: bounded grammar work -------------------------------------------------
    def begin_step(self) -> None:
        """A scheduler step starts (s5 renews its per-step budget of grammar work here)."""
        return None

    def ready(self, req: Req) -> bool:
        """Whether `req`'s grammar can mask its next logits now; False: it sits out this
        step (s5: the work its next mask needs did not fit this step's budget)."""
        return True

    def wait_for_compiles(self, seconds: float) -> None:
        """Nothing to run but compiles: give them the CPU for up to `seconds`."""
        time.sleep(seconds)

    # 3. before a decode step ---------------------------------------------------------
    def before_decode(self, running: list[Req]) -> list[Readmit]:
        """The running requests to take out of the batch and prefill again (s4's jumps);
        the scheduler performs each through `Scheduler.readmit`."""
        return []

    # 4. mask the logits --------------------------------------------------------------
    def mask_logits(self, logits: torch.Tensor, reqs: list[Req]) -> None:
        """logits: [B, vocab_size], modified in place; row i belongs to reqs[i]."""
        return None

    # 5. advance after sampling -------------------------------------------------------
    def advance(self, req: Req, token_id: int) -> None:
        return None

    def release(self, req: Req) -> None:
        req.grammar = None

    def shutdown(self) -> None:
        return None
