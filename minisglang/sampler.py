"""Turn a batch of (already masked) logits into one token per request.

Each row is sampled on its own, with its request's own `torch.Generator` when it gave a
seed, so a request's output never depends on what else shares the batch.
"""

from __future__ import annotations

import math
import random
import struct

import torch

from .core import GREEDY_TEMPERATURE, AbortKind, Req


def seeded_generator(seed: int) -> torch.Generator:
    """A request's own generator for `seed` (any integer the engine takes: [-2**63, 2**64 - 1],
    read modulo 2**64 as torch reads it).

    torch's CPU generator (mt19937) keeps only the seed's low 32 bits: seeds 5, 5 + 2**32 and
    5 + 2**40 drew the same numbers and wrote the same text, and so did -1, 2**32 - 1 and
    2**63 - 1 (a stranger's test: seeds 2**40 + i gave exactly the texts of seeds i). Below
    2**32 the stream is torch's own (every such seed keeps the text it always had); above,
    the 624 state words come from the whole seed, by mt19937's `init_by_array` on its 32-bit
    halves (Python's `random.Random(seed)` computes it), written into torch's state."""
    seed %= 2**64
    generator = torch.Generator().manual_seed(seed)
    if seed < 2**32:
        return generator
    state = bytearray(generator.get_state().numpy().tobytes())
    # torch's CPU state: initial seed (u64), left (i32), seeded (i32), next (u64), then the
    # 624 words (u64 each); `manual_seed` left it at left=1, next=0, as a fresh seeding does.
    words = random.Random(seed).getstate()[1][:624]
    struct.pack_into("<624Q", state, 24, *words)
    generator.set_state(torch.frombuffer(state, dtype=torch.uint8).clone())
    return generator


# What a row no token can be drawn from says to the caller's stop check: its request is aborted.
NO_TOKEN = -1


def sample(logits: torch.Tensor, reqs: list[Req], default_generator: torch.Generator) -> list[int]:
    """logits: [B, V] float (disallowed tokens already at -inf). Returns B token ids, and
    `NO_TOKEN` for a request whose row gives no token a score to draw it by (`abort_unsampleable`):
    that request alone is aborted, the rest of the batch samples as if it were not there."""
    out = [0] * len(reqs)
    # Greedy rows need no generator: one argmax serves them all (same ids as row by row).
    greedy = [i for i, req in enumerate(reqs) if is_greedy(req)]
    if len(greedy) == len(reqs):  # the usual batch: no copy of the [B, V] logits to pick rows
        ids = greedy_ids(logits)
        _drop_unscored(logits, reqs, list(range(len(reqs))), ids)
        return ids
    if greedy:
        for i, token in zip(greedy, greedy_ids(logits[greedy])):
            out[i] = token
        _drop_unscored(logits, reqs, greedy, out)
    for i, req in enumerate(reqs):
        if not is_greedy(req):
            # On the CPU: the generators are CPU ones (multinomial refuses a CPU generator for a
            # CUDA tensor), and then a seed gives the same tokens on every device.
            row = logits[i].float().cpu()
            why = unsampleable(row[None])[0]
            if why is not None:
                out[i] = abort_unsampleable(req, why)
                continue
            out[i] = sample_row(row, req, req.generator or default_generator)
    return out


def _drop_unscored(logits: torch.Tensor, reqs: list[Req], rows: list[int], ids: list[int]) -> None:
    """A greedy row whose argmax is -inf has no allowed token with a finite logit: its argmax
    is token 0, whatever the grammar allows. One gather of B values, not another pass."""
    picked = logits[torch.tensor(rows), torch.tensor([ids[i] for i in rows])]
    for i in torch.nonzero(picked == float("-inf")).flatten().tolist():
        ids[rows[i]] = abort_unsampleable(reqs[rows[i]], "every logit -inf")


def unsampleable(rows: torch.Tensor) -> list[str | None]:
    """rows: [N, V] masked logits -> for each row, why no token can be drawn from it ("a NaN
    logit", "every logit -inf"), or None when one can. One max per row (it carries a NaN):
    s7 asks it of every verify block, and isnan plus a comparison, two passes, cost 0.49 ms
    a [9, 65k] block against the max's 0.02 ms."""
    tops = rows.amax(dim=-1).tolist()
    return ["a NaN logit" if math.isnan(top) else "every logit -inf" if top == float("-inf") else None for top in tops]


def abort_unsampleable(req: Req, why: str) -> int:
    """The masked row leaves nothing to draw from (the model gave every token the grammar
    allows -inf, or a NaN): abort this request with that reason. Drawing anyway raised
    inside torch.multinomial and aborted the whole batch as an internal error, and a greedy
    row took token 0 whether the grammar allowed it or not."""
    req.finish(
        "abort",
        AbortKind.ENGINE,
        message=f"the model's logits leave no token to sample ({why} after the grammar's mask)",
    )
    return NO_TOKEN


def greedy_ids(logits: torch.Tensor) -> list[int]:
    """The argmax of each row of `logits` [B, V]: the first of equal maxima (a NaN counts as
    the largest), as `torch.argmax` gives it. float32 on the CPU goes through numpy: on one
    thread torch's CPU argmax reads a [64, 65k] batch in 3.5 ms, numpy's in 0.37 ms
    (benchmarks/results/sampling.md), and a greedy decode step pays it every time."""
    if logits.device.type == "cpu" and logits.dtype == torch.float32:
        ids: list[int] = logits.detach().numpy().argmax(axis=-1).tolist()
        return ids
    return logits.argmax(dim=-1).tolist()


def is_greedy(req: Req) -> bool:
    """Argmax at temperature 0, at top_k 1, and at temperatures so small that dividing by
    them would overflow the logits (1e-40 gives inf, and softmax of inf gives nan)."""
    p = req.sampling_params
    return p.temperature < GREEDY_TEMPERATURE or p.top_k == 1


def sample_row(row: torch.Tensor, req: Req, generator: torch.Generator) -> int:
    """row: [V]. Greedy (see `is_greedy`); otherwise one draw from `distribution`."""
    if is_greedy(req):
        return int(torch.argmax(row))
    return int(torch.multinomial(distribution(row, req), 1, generator=generator))


def distribution(row: torch.Tensor, req: Req) -> torch.Tensor:
    """row: [V] logits -> the (unnormalised after top-k/top-p/min-p) probabilities a sampling
    request draws from: temperature, then top-k, then top-p, then min-p. s7's rejection
    sampling compares drafts against exactly this distribution.

    Every filter reads the row's own probabilities, never renormalised in between: top-p's
    mass is counted on the whole (masked, temperature-scaled) row, top-k's survivors first,
    and min-p is relative to the most likely token. That is SGLang's order (its torch
    sampler, `top_k_top_p_min_p_sampling_from_probs_torch`, and flashinfer's "joint" top-k
    top-p). vLLM differs when they are combined: it applies min-p first and counts top-p on
    the survivors of top-k and min-p, renormalised. On [0.4, 0.3, 0.2, 0.1] with top_k=2,
    top_p=0.5 this keeps two tokens (0.4 < 0.5 before the second), vLLM one (0.4 / 0.7 >= 0.5).
    """
    p = req.sampling_params
    scaled = row / p.temperature
    if scaled.max() == float("inf"):
        # A logit over float32's range once divided (1e35 at T=1e-4), or +inf itself, made
        # softmax all NaN and multinomial raise for the whole batch. Shifted by the row's max
        # first it is the same distribution (+inf logits share all of it). Only then: the
        # usual row keeps its bit-exact probabilities.
        top = row.max()
        scaled = (row - top) / p.temperature if top < float("inf") else torch.where(row == top, 0.0, -math.inf)
    probs = torch.softmax(scaled, dim=-1)
    if p.top_k > 0 and p.top_k < probs.numel():
        kth = torch.topk(probs, p.top_k).values[-1]
        probs = torch.where(probs >= kth, probs, torch.zeros_like(probs))
    if p.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        # Keep the smallest set whose mass reaches top_p (the first token always stays).
        keep = torch.cumsum(sorted_probs, 0) - sorted_probs < p.top_p
        keep[0] = True  # also when top_p is below float32's range (1e-300 rounds to 0)
        probs = torch.zeros_like(probs).scatter(0, order, sorted_probs * keep)
    if p.min_p > 0.0:
        # Relative to the most likely token, which top-k and top-p always keep (SGLang's order).
        probs = torch.where(probs >= p.min_p * probs.max(), probs, torch.zeros_like(probs))
    return probs
