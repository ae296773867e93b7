"""``ForwardBatch``: everything one model forward needs to know about a batch.

The scheduler decides *which* requests run and *where* their new K/V go (it allocates
``out_cache_loc`` from the ``TokenToKVPool``); the two constructors here record those
slots in the ``ReqToTokenPool`` and derive the positions, so the model only reads.

Two modes, as in SGLang:

* EXTEND (prefill): each request brings ``n_i >= 1`` new tokens on top of ``p_i`` tokens
  whose K/V are already cached (``p_i = 0`` for a fresh prompt, more on a radix-cache hit).
  A decoding request can ride along as ``n_i = 1`` on top of all its tokens (the
  scheduler's ``mixed_prefill``).
* DECODE: each request brings exactly one token, the one sampled in the previous step.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import Enum

import torch

from minisglang.memory_pool import ReqToTokenPool, TokenToKVPool


class ForwardMode(Enum):
    EXTEND = "extend"
    DECODE = "decode"


@dataclass
class ExtendGroup:
    """EXTEND: some requests of the batch in one attention call, padded to the longest of
    them (``b`` requests, ``n`` = the most new tokens, ``L`` = the most keys)."""

    rows: torch.Tensor  # int64 [T'] their new tokens' rows of the batch, request after request
    req_rows: torch.Tensor  # int64 [T'] each new token's request in the group (the padded grid's row)
    cols: torch.Tensor  # int64 [T'] its column in the padded grid (its index among its request's new tokens)
    slots: torch.Tensor  # int64 [b, L] the KV slots of each request's keys
    mask: torch.Tensor  # bool [b, n, L] which keys each query sees: its prefix and itself (causal)
    # A group of a few new tokens per request (s7's verify, riders, re-admissions): how many
    # leading key columns sit in the same slots for every request, before every query (a
    # system prompt the radix tree shares, read once for the group; 0: none). None: a
    # prefill group, whose many queries go through the fused kernel.
    shared: int | None = None


@dataclass
class ForwardBatch:
    """One forward step. ``T`` = new tokens in the batch, ``B`` = requests."""

    mode: ForwardMode
    input_ids: torch.Tensor  # int64 [T] new tokens of all requests, concatenated
    positions: torch.Tensor  # int64 [T] position of each new token in its sequence
    out_cache_loc: torch.Tensor  # int64 [T] KV slot where each new token's K/V is written
    req_pool_indices: torch.Tensor  # int64 [B] request slot of each request
    seq_lens: torch.Tensor  # int64 [B] length of each request after this step
    extend_prefix_lens: list[int]  # [B] cached tokens before this step
    extend_seq_lens: list[int]  # [B] new tokens in this step (decode: all 1)
    req_to_token_pool: ReqToTokenPool
    token_to_kv_pool: TokenToKVPool
    # DECODE: the first positions whose KV slots are the same for every request (a prefix
    # the radix tree shares); attention reads them once for the batch. 0 = none. (EXTEND:
    # per group, `ExtendGroup.shared`.)
    shared_prefix_len: int = 0

    DECODE_CHUNK = 8  # requests per decode attention call (see decode_chunks)
    # EXTEND groups of at most this many new tokens per request read a shared prefix once
    # (`cascade_attention` spells the softmax out: fine for a few queries, not a prompt's).
    CASCADE_MAX_NEW = 16

    @property
    def batch_size(self) -> int:
        return len(self.extend_seq_lens)

    @functools.cached_property
    def decode_chunks(self) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """DECODE: the requests in chunks of `DECODE_CHUNK`, sorted by length, each as (its
        rows of the batch ``[b]``, the KV slots of its positions after the shared prefix
        ``[b, L]`` up to its own longest, which of those each request has ``[b, L]``).

        One pad for a batch whose lengths spread over 100-540 tokens gathered 50% more
        K/V than the requests have; chunks of 8 cut that to 12%. Every layer attends over
        the same chunks, so they are built once per forward (on first use)."""
        shared, table = self.shared_prefix_len, self.req_to_token_pool.req_to_token
        chunks = []
        for rows in torch.argsort(self.seq_lens).split(self.DECODE_CHUNK):
            seq_lens = self.seq_lens[rows]
            max_len = int(seq_lens.max())
            slots = table[self.req_pool_indices[rows], shared:max_len]  # [b, L]
            mask = torch.arange(shared, max_len, device=slots.device)[None, :] < seq_lens[:, None]  # [b, L]
            chunks.append((rows, slots, mask))
        return chunks

    @functools.cached_property
    def extend_groups(self) -> list[ExtendGroup]:
        """EXTEND: the requests in groups, one padded attention call each. Prompts go by their
        count of new tokens (1 | 2 | 3-4 | 5-8 | ...): jump-forward's re-admissions
        (chapter 04) bring 2 or 3 new tokens each, and padding forty of them to a 400-token
        prompt of the same prefill batch made that batch's attention ~25x the work it
        needed. Requests with at most `CASCADE_MAX_NEW` new tokens (s7's verify, riders,
        re-admissions) go as a decode's do, `DECODE_CHUNK` at a time sorted by length:
        one pad for 48 verifying requests of 100-440 own keys gathered ~60% more keys than
        they have. Every layer attends over the same groups, so they are built once per
        forward (on first use)."""
        members: dict[int, list[int]] = {}
        few = []
        for i, n in enumerate(self.extend_seq_lens):
            if n <= self.CASCADE_MAX_NEW:
                few.append(i)
            else:
                members.setdefault((n - 1).bit_length(), []).append(i)
        few.sort(key=lambda i: self.extend_prefix_lens[i] + self.extend_seq_lens[i])
        # (in batch order within a chunk: a lone group is the batch's rows as they are)
        chunks = [sorted(few[c : c + self.DECODE_CHUNK]) for c in range(0, len(few), self.DECODE_CHUNK)]
        starts = [0]
        for n in self.extend_seq_lens:
            starts.append(starts[-1] + n)
        device, table = self.input_ids.device, self.req_to_token_pool.req_to_token
        groups = []
        for reqs in [*members.values(), *chunks]:
            prefix = torch.tensor([self.extend_prefix_lens[i] for i in reqs], device=device)  # [b]
            new = torch.tensor([self.extend_seq_lens[i] for i in reqs], device=device)  # [b]
            max_new, max_len = int(new.max()), int((prefix + new).max())
            rows = torch.cat([torch.arange(starts[i], starts[i + 1], device=device) for i in reqs])
            req_rows = torch.repeat_interleave(torch.arange(len(reqs), device=device), new)
            cols = torch.arange(rows.shape[0], device=device) - torch.repeat_interleave(torch.cumsum(new, 0) - new, new)
            slots = table[self.req_pool_indices[torch.tensor(reqs, device=device)], :max_len]  # [b, L]
            query_pos = prefix[:, None] + torch.arange(max_new, device=device)[None, :]  # [b, n]
            mask = torch.arange(max_len, device=device)[None, None, :] <= query_pos[:, :, None]  # [b, n, L]
            shared = self._shared_slots(slots[:, : int(prefix.min())]) if max_new <= self.CASCADE_MAX_NEW else None
            groups.append(ExtendGroup(rows, req_rows, cols, slots, mask, shared))
        return groups

    @functools.cached_property
    def shared_prefix_slots(self) -> torch.Tensor:
        """DECODE: the KV slots ``[shared_prefix_len]`` every request of the batch starts with."""
        return self.req_to_token_pool.req_to_token[self.req_pool_indices[0], : self.shared_prefix_len]

    @classmethod
    def extend(
        cls,
        req_pool_indices: list[int],
        prefix_lens: list[int],
        new_token_ids: list[list[int]],
        out_cache_loc: torch.Tensor,
        req_to_token_pool: ReqToTokenPool,
        token_to_kv_pool: TokenToKVPool,
    ) -> ForwardBatch:
        """An EXTEND batch. ``out_cache_loc`` ``[sum(len(ids))]`` holds the new tokens'
        KV slots, request after request. Writes them into
        ``req_to_token[req, prefix:prefix+n]``; the prefix's slots must already be there."""
        num_reqs = len(req_pool_indices)
        if not (num_reqs == len(prefix_lens) == len(new_token_ids)) or num_reqs == 0:
            raise ValueError(
                f"extend needs one prefix length and one token list per request, got "
                f"{num_reqs} requests, {len(prefix_lens)} prefix lengths, {len(new_token_ids)} token lists"
            )
        new_lens = [len(ids) for ids in new_token_ids]
        if min(new_lens) == 0:
            raise ValueError("every request in an extend batch needs at least one new token")
        out_cache_loc = cls._check_slots(out_cache_loc, sum(new_lens), req_to_token_pool)

        positions, offset = [], 0
        for req, prefix, n in zip(req_pool_indices, prefix_lens, new_lens):
            cls._check_fits(prefix + n, req_to_token_pool)
            req_to_token_pool.req_to_token[req, prefix : prefix + n] = out_cache_loc[offset : offset + n]
            positions.append(torch.arange(prefix, prefix + n))
            offset += n

        device = req_to_token_pool.device
        return cls(
            mode=ForwardMode.EXTEND,
            input_ids=torch.tensor([t for ids in new_token_ids for t in ids], dtype=torch.int64, device=device),
            positions=torch.cat(positions).to(device),
            out_cache_loc=out_cache_loc,
            req_pool_indices=torch.tensor(req_pool_indices, dtype=torch.int64, device=device),
            seq_lens=torch.tensor([p + n for p, n in zip(prefix_lens, new_lens)], dtype=torch.int64, device=device),
            extend_prefix_lens=list(prefix_lens),
            extend_seq_lens=new_lens,
            req_to_token_pool=req_to_token_pool,
            token_to_kv_pool=token_to_kv_pool,
        )

    @classmethod
    def decode(
        cls,
        req_pool_indices: list[int],
        seq_lens_before: list[int],
        last_token_ids: list[int],
        out_cache_loc: torch.Tensor,
        req_to_token_pool: ReqToTokenPool,
        token_to_kv_pool: TokenToKVPool,
    ) -> ForwardBatch:
        """A DECODE batch: request ``i`` has ``seq_lens_before[i]`` cached tokens and
        feeds ``last_token_ids[i]`` at that position, its K/V going to ``out_cache_loc[i]``."""
        num_reqs = len(req_pool_indices)
        if not (num_reqs == len(seq_lens_before) == len(last_token_ids)) or num_reqs == 0:
            raise ValueError(
                f"decode needs one length and one last token per request, got {num_reqs} requests, "
                f"{len(seq_lens_before)} lengths, {len(last_token_ids)} tokens"
            )
        out_cache_loc = cls._check_slots(out_cache_loc, num_reqs, req_to_token_pool)
        for length in seq_lens_before:
            cls._check_fits(length + 1, req_to_token_pool)
        device = req_to_token_pool.device
        reqs = torch.tensor(req_pool_indices, dtype=torch.int64, device=device)
        before = torch.tensor(seq_lens_before, dtype=torch.int64, device=device)
        req_to_token_pool.req_to_token[reqs, before] = out_cache_loc
        return cls(
            mode=ForwardMode.DECODE,
            input_ids=torch.tensor(last_token_ids, dtype=torch.int64, device=device),
            positions=before,
            out_cache_loc=out_cache_loc,
            req_pool_indices=reqs,
            seq_lens=before + 1,
            extend_prefix_lens=list(seq_lens_before),
            extend_seq_lens=[1] * num_reqs,
            req_to_token_pool=req_to_token_pool,
            token_to_kv_pool=token_to_kv_pool,
            shared_prefix_len=cls._shared_slots(req_to_token_pool.req_to_token[reqs, : min(seq_lens_before)]),
        )

    @staticmethod
    def _shared_slots(rows: torch.Tensor) -> int:
        """rows ``[B, n]`` of the request-to-slot table -> how many leading columns are the
        same slot in every row (0 for a batch of one: nothing to share)."""
        if rows.shape[0] < 2 or rows.shape[1] == 0:
            return 0
        same = (rows == rows[0]).all(0)  # [n]
        return int(same.long().cumprod(0).sum())

    @staticmethod
    def _check_slots(out_cache_loc, expected: int, pool: ReqToTokenPool) -> torch.Tensor:
        """``out_cache_loc`` as an int64 tensor on the pool's device, one slot per new token."""
        out_cache_loc = torch.as_tensor(out_cache_loc, dtype=torch.int64).to(pool.device).flatten()
        if out_cache_loc.numel() != expected:
            raise ValueError(f"out_cache_loc has {out_cache_loc.numel()} slots for {expected} new tokens")
        return out_cache_loc

    @staticmethod
    def _check_fits(seq_len: int, pool: ReqToTokenPool) -> None:
        if seq_len > pool.max_context_len:
            raise ValueError(f"sequence length {seq_len} exceeds max_context_len {pool.max_context_len}")
