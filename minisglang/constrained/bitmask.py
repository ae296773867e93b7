"""Packed token bitmasks: one bit per token, 32 tokens per int32 word (stage s2).

Token t is bit t % 32 of word t // 32, so a row over a vocabulary of V tokens is
W = ceil(V / 32) words; a set bit means "allowed". xgrammar and llguidance use the same
format, so one `apply_bitmask` serves every grammar backend (stage s5).

- `pack_bits` / `unpack_bits`: bool [..., V] <-> int32 [..., W] (tasks 2_1 and 2_2);
- `with_rows`: a TokenFSM plus the packed row of every state;
- `apply_bitmask_torch`: the readable apply, unpack + one `masked_fill_` (task 2_4);
- `apply_bitmask`: the fast apply, a compiled CPU kernel (bitmask_kernel.py) where it can.
"""

from __future__ import annotations

import torch

from .token_fsm import TokenFSM

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


def allows(row: torch.Tensor, token_id: int) -> bool:
    """Whether the packed mask row [W] int32 has `token_id`'s bit set."""
    return bool(int(row[token_id >> 5]) >> (token_id & 31) & 1)


def with_rows(fsm: TokenFSM, vocab_size: int) -> TokenFSM:
    """`fsm` plus `bitmasks` [num_states, W] int32 and `state_row` {state: its row}.

    Rows follow the states in sorted order; `state_row[s]` is a view of row s of
    `bitmasks` (no copy): the fill only looks it up.
    """
    index = fsm.index
    states = sorted(index.state_to_tokens)
    allowed = torch.zeros(len(states), vocab_size, dtype=torch.bool)
    for row, state in enumerate(states):
        allowed[row, index.allowed_token_ids(state)] = True
    bitmasks = pack_bits(allowed)
    return fsm.replace(bitmasks=bitmasks, state_row=dict(zip(states, bitmasks.unbind(0))))


def all_allowed_mask(batch_size: int, vocab_size: int, device: str | torch.device = "cpu") -> torch.Tensor:
    """[batch_size, ceil(vocab_size / 32)] int32, every bit set (= everything allowed)."""
    return torch.full((batch_size, (vocab_size + 31) // 32), -1, dtype=torch.int32, device=device)


def apply_bitmask_torch(logits: torch.Tensor, mask: torch.Tensor) -> None:
    """logits [B, V] in place: -inf wherever the bit of `mask` [B, W] is 0 (the readable way)."""
    # BEGIN SOLUTION task2_4
    allowed = unpack_bits(mask.to(logits.device), logits.shape[-1])
    logits.masked_fill_(~allowed, float("-inf"))
    # END SOLUTION


def apply_bitmask(logits: torch.Tensor, mask: torch.Tensor) -> None:
    """logits [B, V] in place: -inf wherever the bit of `mask` [B, W] is 0 (the fast way).

    float32 logits on CPU go through the compiled kernel; anything else (another device,
    another dtype) through the readable `apply_bitmask_torch`.
    """
    if mask.shape[-1] * 32 < logits.shape[-1]:
        # The kernel would leave the uncovered columns allowed: never weaken a mask silently.
        raise ValueError(
            f"a mask of {mask.shape[-1]} words covers {mask.shape[-1] * 32} tokens, "
            f"fewer than the logits' {logits.shape[-1]} columns"
        )
    if logits.device.type == "cpu" and logits.dtype == torch.float32 and logits.is_contiguous():
        from .bitmask_kernel import apply_bitmask_cpu  # numba: compiled on first use

        apply_bitmask_cpu(logits.numpy(), mask.to(torch.int32).contiguous().numpy())
    else:
        apply_bitmask_torch(logits, mask)


def warm_up_apply_kernel(device: torch.device) -> None:
    """Compile the CPU kernel (or load it from numba's disk cache, ~0.3 s) at startup, so
    that the first constrained request's decode step does not pay for it. Off the CPU the
    kernel is never used: nothing to do."""
    if device.type == "cpu":
        apply_bitmask(torch.zeros(1, 32), torch.full((1, 1), -1, dtype=torch.int32))
