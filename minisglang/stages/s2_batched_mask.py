"""Stage s2-batched-mask: packed bitmasks, filled and applied once per batch.

Read with chapters/02-batched-masks.md. s1 built, for every constrained request and every
step, a fresh bool row over the whole vocabulary and called `masked_fill_` on it: a Python
loop whose cost grows with batch size times vocabulary. SGLang replaced it with
`fill_vocab_mask_batched` + `apply_vocab_mask`, and xgrammar with int32 bitmasks. This
stage does the same:

1. At compile time every FSM state gets a packed row: one bit per token, 32 tokens per
   int32 word (token t is bit t % 32 of word t // 32), covering the logits' full width so
   padding columns past the tokenizer's vocabulary are masked too.
2. Fill: one [B, W] int32 tensor for the batch; each constrained request's row is a gather
   of its state's precomputed row (one indexing op per distinct FSM in the batch);
   unconstrained rows are all ones.
3. Apply: unpack the bits into a [B, V] bool tensor and one `masked_fill_` for the batch,
   on the logits' device.

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
    """Precompute `fsm.bitmasks` [num_states, W] int32 and `fsm.state_row` {state: row}."""
    index = fsm.index
    states = sorted(index.state_to_tokens)
    allowed = torch.zeros(len(states), vocab_size, dtype=torch.bool)
    for row, state in enumerate(states):
        allowed[row, index.allowed_token_ids(state)] = True
    fsm.bitmasks = pack_bits(allowed)
    fsm.state_row = {s: i for i, s in enumerate(states)}
    return fsm


@register("s2-batched-mask")
class BatchedMaskStage(MaskedFillStage):
    def compile_regex_fsm(self, regex: str) -> RegexFSM:
        """s1's compile, plus the packed row of every state."""
        return self.add_bitmasks(super().compile_regex_fsm(regex))

    def add_bitmasks(self, fsm: RegexFSM) -> RegexFSM:
        return add_bitmasks(fsm, self.ctx.vocab_size)

    def allocate_mask(self, batch_size: int) -> torch.Tensor:
        """[B, W] int32, all bits set (= everything allowed)."""
        return torch.full((batch_size, (self.ctx.vocab_size + 31) // 32), -1, dtype=torch.int32)

    def fill_mask(self, mask: torch.Tensor, reqs: list[Req]) -> None:
        """Write each constrained request's state row into `mask` [B, W], one gather per FSM."""
        # BEGIN SOLUTION task2_3
        by_fsm: dict[int, tuple[RegexFSM, list[int], list[int]]] = {}
        for i, req in enumerate(reqs):
            if req.grammar is None or req.finished:
                continue
            fsm = req.grammar.fsm
            _, rows, states = by_fsm.setdefault(id(fsm), (fsm, [], []))
            rows.append(i)
            states.append(fsm.state_row[req.grammar.state])
        for fsm, rows, states in by_fsm.values():
            mask[rows] = fsm.bitmasks[states]
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
        for i, req in enumerate(reqs):
            if req.grammar is not None and not req.finished and not bool(mask[i].any()):
                req.finish("abort", message=f"no token is allowed in FSM state {req.grammar.state} "
                           f"of regex {req.grammar.fsm.regex!r}")
        self.apply_mask(logits, mask)
