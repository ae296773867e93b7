"""Stage s2-batched-mask: packed bitmasks, filled and applied once per batch.

Read with chapters/02-batched-masks.md. s1 built, for every constrained request and every
step, a fresh bool row over the whole vocabulary and called `masked_fill_` on it: a Python
loop whose cost grows with batch size times vocabulary. SGLang replaced it with
`fill_vocab_mask_batched` + `apply_vocab_mask`, and xgrammar with int32 bitmasks. This
stage does the same:

1. At compile time every FSM state gets a packed row: one bit per token, 32 tokens per
   int32 word (token t is bit t % 32 of word t // 32), covering the logits' full width so
   padding columns past the tokenizer's vocabulary are masked too. The packing is a
   library function (constrained/bitmask.py: `pack_bits`, `with_rows`): s5's backends
   use the same one.
2. Fill: one [B, W] int32 tensor for the batch, stacked from each constrained request's
   precomputed state row (unconstrained rows all ones): one copy, whatever mix of FSMs.
3. Apply: the readable version (`apply_bitmask_torch`) unpacks the bits into a [B, V] bool
   tensor and calls one `masked_fill_` for the batch, on the logits' device. On CPU the
   engine uses a compiled kernel instead (`apply_bitmask`, constrained/bitmask_kernel.py) that skips
   all-ones words: same result, measured 17-31x faster at batch 64 (benchmarks/results/masks.md). Option
   `mask_apply="torch"` picks the readable one everywhere.

Everything else (compiling at arrival, advancing the state) is s1's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..constrained.bitmask import all_allowed_mask, apply_bitmask, apply_bitmask_torch, warm_up_apply_kernel, with_rows
from ..constrained.grammar import FSMState
from ..constrained.regex_dfa import shown_regex
from ..constrained.token_fsm import TokenFSM
from ..core import AbortKind, Req
from .base import StageContext, register
from .s1_masked_fill import MaskedFillOptions, MaskedFillStage


@dataclass(frozen=True)
class BatchedMaskOptions(MaskedFillOptions):
    mask_apply: str = "kernel"  # "kernel" (compiled, CPU) or "torch" (the readable apply)

    def __post_init__(self) -> None:
        self.check_choice("mask_apply", self.mask_apply, ("kernel", "torch"))


@register("s2-batched-mask")
class BatchedMaskStage(MaskedFillStage):
    Options = BatchedMaskOptions
    options: BatchedMaskOptions

    def __init__(self, ctx: StageContext):
        super().__init__(ctx)
        self.all_allowed = all_allowed_mask(1, ctx.vocab_size)[0]  # the row of an unconstrained request
        apply = self.options.mask_apply
        self.apply = apply_bitmask if apply == "kernel" else apply_bitmask_torch
        if apply == "kernel":
            warm_up_apply_kernel(ctx.device)

    def compile_fsm(self, regex: str) -> TokenFSM:
        """s1's compile, plus the packed row of every state (constrained/bitmask.py)."""
        return with_rows(super().compile_fsm(regex), self.ctx.vocab_size)

    def allocate_mask(self, batch_size: int) -> torch.Tensor:
        """[B, W] int32, all bits set (= everything allowed)."""
        return all_allowed_mask(batch_size, self.ctx.vocab_size)

    def fill_mask(self, mask: torch.Tensor, reqs: list[Req[FSMState]]) -> None:
        """Write each request's row into `mask` [B, W]: one stack of precomputed rows."""
        # BEGIN SOLUTION task2_3
        rows = [
            self.all_allowed if req.grammar is None or req.finished else req.grammar.fsm.state_row[req.grammar.state]
            for req in reqs
        ]
        torch.stack(rows, out=mask)
        # END SOLUTION

    def mask_logits(self, logits: torch.Tensor, reqs: list[Req[FSMState]]) -> None:
        """One fill and one apply for the whole batch (s1 looped over requests)."""
        if all(r.grammar is None for r in reqs):
            return
        mask = self.allocate_mask(len(reqs))
        self.fill_mask(mask, reqs)
        for req in reqs:
            # A state with no allowed token has an all-zero row: end the request, never sample it.
            grammar = req.grammar
            if grammar is not None and not req.finished and not grammar.fsm.index.state_to_tokens.get(grammar.state):
                req.finish(
                    "abort",
                    AbortKind.GRAMMAR,
                    message=f"no token is allowed in FSM state {grammar.state} "
                    f"of regex {shown_regex(grammar.fsm.regex)}",
                )
        self.apply(logits, mask.to(logits.device))
