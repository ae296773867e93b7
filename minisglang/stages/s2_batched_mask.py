"""Stage s2-batched-mask: packed bitmasks, filled and applied once per batch.

Read with chapters/02-batched-masks.md. s1 built, for every constrained request and every
step, a fresh bool row over the whole vocabulary and called `masked_fill_` on it: a Python
loop whose cost grows with batch size times vocabulary. SGLang replaced it with
`fill_vocab_mask_batched` + `apply_vocab_mask`, and xgrammar with int32 bitmasks. This
stage does the same:

1. At compile time every FSM state gets a packed row: one bit per token, 32 tokens per
   int32 word (token t is bit t % 32 of word t // 32), covering the logits' full width so
   padding columns past the tokenizer's vocabulary are masked too.
2. Fill: one [B, W] int32 tensor for the batch, stacked from each constrained request's
   precomputed state row (unconstrained rows all ones): one copy, whatever mix of FSMs.
3. Apply: the readable version unpacks the bits into a [B, V] bool tensor and calls one
   `masked_fill_` for the batch, on the logits' device. On CPU the engine uses a compiled
   kernel instead (s2_apply_kernel.py) that skips all-ones words: same result, measured
   6-20x faster (benchmarks/results/masks.md). Option `mask_apply="torch"` picks the
   readable one everywhere.

Everything else (compiling at arrival, advancing the state) is s1's.
"""
from __future__ import annotations

import torch

from ..core import Req
from .base import register
from .s1_masked_fill import MaskedFillStage, RegexFSM

_BIT = torch.arange(32, dtype=torch.int32)


def pack_bits(allowed: torch.Tensor) -> torch.Tensor:
    """Bool [..., V] -> int32 [..., ceil(V / 32)]: bit t % 32 of word t // 32 is token t."""
    # BEGIN SOLUTION task2_1
    v = allowed.shape[-1]
    words = (v + 31) // 32
    padded = torch.zeros(*allowed.shape[:-1], words * 32, dtype=torch.int64)
    padded[..., :v] = allowed.to(torch.int64)
    weights = torch.ones(32, dtype=torch.int64) << torch.arange(32, dtype=torch.int64)
    packed = (padded.view(*allowed.shape[:-1], words, 32) * weights).sum(-1)
    # Reinterpret the unsigned 32-bit value as a signed int32 (bit 31 is the sign bit).
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)
    # END SOLUTION


def unpack_bits(mask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """int32 [..., W] -> bool [..., vocab_size]: the inverse of `pack_bits`."""
    # BEGIN SOLUTION task2_2
    bits = (mask.unsqueeze(-1) >> _BIT.to(mask.device)) & 1
    return bits.flatten(-2)[..., :vocab_size].bool()
    # END SOLUTION


def add_bitmasks(fsm: RegexFSM, vocab_size: int) -> RegexFSM:
    """Precompute `fsm.bitmasks` [num_states, W] int32 and `fsm.state_row` {state: its row}.

    `state_row[s]` is a view of row s of `bitmasks` (no copy): the fill only looks it up.
    """
    index = fsm.index
    states = sorted(index.state_to_tokens)
    allowed = torch.zeros(len(states), vocab_size, dtype=torch.bool)
    for row, state in enumerate(states):
        allowed[row, index.allowed_token_ids(state)] = True
    fsm.bitmasks = pack_bits(allowed)
    fsm.state_row = dict(zip(states, fsm.bitmasks.unbind(0)))
    return fsm


def apply_bitmask(logits: torch.Tensor, mask: torch.Tensor) -> None:
    """logits [B, V] in place: -inf wherever the bit of `mask` [B, W] is 0 (the fast way).

    float32 logits on CPU go through the compiled kernel; anything else (another device,
    another dtype) through the readable `BatchedMaskStage.apply_mask`.
    """
    if mask.shape[-1] * 32 < logits.shape[-1]:
        # The kernel would leave the uncovered columns allowed: never weaken a mask silently.
        raise ValueError(f"a mask of {mask.shape[-1]} words covers {mask.shape[-1] * 32} tokens, "
                         f"fewer than the logits' {logits.shape[-1]} columns")
    if logits.device.type == "cpu" and logits.dtype == torch.float32 and logits.is_contiguous():
        from .s2_apply_kernel import apply_bitmask_cpu  # numba: compiled on first use

        apply_bitmask_cpu(logits.numpy(), mask.to(torch.int32).contiguous().numpy())
    else:
        BatchedMaskStage.apply_mask(logits, mask)


def warm_up_apply_kernel(device: torch.device) -> None:
    """Compile the CPU kernel (or load it from numba's disk cache, ~0.3 s) at startup, so
    that the first constrained request's decode step does not pay for it. Off the CPU the
    kernel is never used: nothing to do."""
    if device.type == "cpu":
        apply_bitmask(torch.zeros(1, 32), torch.full((1, 1), -1, dtype=torch.int32))


@register("s2-batched-mask")
class BatchedMaskStage(MaskedFillStage):
    def __init__(self, ctx):
        super().__init__(ctx)
        words = (ctx.vocab_size + 31) // 32
        self.all_allowed = torch.full((words,), -1, dtype=torch.int32)  # the row of an unconstrained request
        apply = ctx.options.get("mask_apply", "kernel")
        if apply not in ("kernel", "torch"):
            raise ValueError(f"mask_apply must be 'kernel' or 'torch', not {apply!r}")
        self.apply = apply_bitmask if apply == "kernel" else self.apply_mask
        if apply == "kernel":
            warm_up_apply_kernel(ctx.device)

    def compile_regex_fsm(self, regex: str) -> RegexFSM:
        """s1's compile, plus the packed row of every state."""
        return self.add_bitmasks(super().compile_regex_fsm(regex))

    def add_bitmasks(self, fsm: RegexFSM) -> RegexFSM:
        return add_bitmasks(fsm, self.ctx.vocab_size)

    def allocate_mask(self, batch_size: int) -> torch.Tensor:
        """[B, W] int32, all bits set (= everything allowed)."""
        return torch.full((batch_size, (self.ctx.vocab_size + 31) // 32), -1, dtype=torch.int32)

    def fill_mask(self, mask: torch.Tensor, reqs: list[Req]) -> None:
        """Write each request's row into `mask` [B, W]: one stack of precomputed rows."""
        # BEGIN SOLUTION task2_3
        rows = [self.all_allowed if req.grammar is None or req.finished
                else req.grammar.fsm.state_row[req.grammar.state] for req in reqs]
        torch.stack(rows, out=mask)
        # END SOLUTION

    @staticmethod
    def apply_mask(logits: torch.Tensor, mask: torch.Tensor) -> None:
        """logits [B, V] in place: -inf wherever the bit of `mask` [B, W] is 0."""
        # BEGIN SOLUTION task2_4
        allowed = unpack_bits(mask.to(logits.device), logits.shape[-1])
        logits.masked_fill_(~allowed, float("-inf"))
        # END SOLUTION

    def mask_logits(self, logits: torch.Tensor, reqs: list[Req]) -> None:
        """One fill and one apply for the whole batch (s1 looped over requests)."""
        if all(r.grammar is None for r in reqs):
            return
        mask = self.allocate_mask(len(reqs))
        self.fill_mask(mask, reqs)
        for req in reqs:
            # A state with no allowed token has an all-zero row: end the request, never sample it.
            if req.grammar is not None and not req.finished and not req.grammar.fsm.index.state_to_tokens.get(req.grammar.state):
                req.finish("abort", message=f"no token is allowed in FSM state {req.grammar.state} "
                           f"of regex {req.grammar.fsm.regex!r}")
        self.apply(logits, mask.to(logits.device))
