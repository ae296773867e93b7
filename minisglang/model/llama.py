"""A Llama-family decoder (Llama, Qwen2) in plain torch, reading and writing a token-slot KV pool.

The math is the usual one: RMSNorm, rotary position embeddings (RoPE), grouped-query
attention (GQA) and a SwiGLU MLP. What is particular to a serving engine is where K and V
live: not in a per-request ``past_key_values`` tensor but in a shared ``TokenToKVPool``.
Each layer writes the new tokens' K/V into their slots (``out_cache_loc``), then reads
every earlier token's K/V back through ``req_to_token[req, :seq_len]``.

Module and parameter names follow Hugging Face's (``model.layers.0.self_attn.q_proj``...),
so a checkpoint's tensors load by name. ``T`` below is the number of new tokens in the
batch, ``B`` the number of requests, ``H``/``Hkv`` query/KV heads, ``D`` the head size.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from minisglang.model.config import ModelConfig
from minisglang.model.forward_batch import ExtendGroup, ForwardBatch, ForwardMode


class RMSNorm(nn.Module):
    """``x / rms(x) * weight``, computed in fp32 like the reference implementation."""

    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: ``[T, hidden]`` -> ``[T, hidden]`` in x's dtype."""
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rope_inv_freq(config: ModelConfig, device: torch.device) -> torch.Tensor:
    """The rotation speed of each pair of channels, ``[D/2]`` fp32, with rope scaling applied."""
    d = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64, device=device).float() / d))
    scaling = config.rope_scaling
    if scaling is None:
        return inv_freq
    if scaling["rope_type"] == "linear":
        # Position interpolation: positions are divided by the factor.
        return inv_freq / scaling["factor"]
    # "llama3": slow channels (long wavelengths) are slowed by `factor`, fast channels
    # are kept, and channels in between blend smoothly between the two.
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_len = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    slowed = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    blended = (1 - smooth) * slowed / factor + smooth * slowed
    in_between = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(in_between, blended, slowed)


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """positions ``[T]`` -> (cos, sin), each ``[T, D]`` fp32 (each angle repeated for both halves)."""
    angles = positions.float()[:, None] * inv_freq[None, :]  # [T, D/2]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate channel ``i`` with channel ``i + D/2`` (the Llama/"rotate_half" layout).
    x: ``[T, heads, D]``, cos/sin: ``[T, D]`` -> ``[T, heads, D]``."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    cos, sin = cos[:, None, :].to(x.dtype), sin[:, None, :].to(x.dtype)
    return x * cos + rotated * sin


def gather_slots(buffer: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """buffer ``[Hkv, num_slots, D]`` (one layer of the KV pool), slots ``[B, L]`` ->
    ``[B, Hkv, L, D]``: the K (or V) of every listed slot, per head.

    The same as ``buffer[:, slots].transpose(0, 1)``; `index_select` on the flattened
    slots is several times faster on a CPU than advanced indexing.
    """
    heads, _, head_dim = buffer.shape
    return buffer.index_select(1, slots.reshape(-1)).view(heads, *slots.shape, head_dim).transpose(0, 1)


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float, dtype: torch.dtype
) -> torch.Tensor:
    """Masked softmax attention with grouped-query heads, computed in ``dtype``.

    q: ``[B, Tq, H, D]``; k, v: ``[B, Hkv, L, D]``; mask: ``[B, Tq, L]`` bool (True = may
    attend) -> ``[B, Tq, H, D]`` in q's dtype. It is softmax(q k^T * scale, masked) v per
    head, written as torch's fused `scaled_dot_product_attention` (what SGLang's
    torch-native attention backend calls too): about twice as fast on a CPU as spelling
    it out with einsum, because the scores never become a separate tensor. GQA: query
    heads come in groups of H / Hkv consecutive heads that share one KV head
    (`enable_gqa`), so the KV heads are never copied.
    """
    out = F.scaled_dot_product_attention(
        q.to(dtype).transpose(1, 2), k.to(dtype), v.to(dtype), attn_mask=mask[:, None], scale=scale, enable_gqa=True
    )  # [B, H, Tq, D]
    return out.transpose(1, 2).to(q.dtype)


def cascade_attention(
    q: torch.Tensor,
    k_shared: torch.Tensor,
    v_shared: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor,
    scale: float,
    dtype: torch.dtype,
) -> torch.Tensor:
    """A few queries per request over two sets of keys: a prefix every request shares and
    every query sees, then each request's own keys; exactly softmax attention over their
    concatenation.

    q: ``[B, Tq, H, D]``; k_shared, v_shared: ``[Hkv, P, D]`` (one copy for the batch, P may
    be 0); k, v: ``[Hkv, B, L, D]`` head-major, as `index_select` gathers them from the
    pool; mask: ``[B, Tq, L]`` bool over the own keys -> ``[B, Tq, H, D]``.
    The shared keys meet every query in one matrix product per KV head instead of being
    gathered B times: with a 340-token system prompt that halves what a decode step copies
    (the shared-prefix "cascade" attention of Hydragen and FlashInfer, in plain tensor
    ops). Both parts' scores go through one softmax, so nothing needs merging. With one
    query per request (a decode) or a few (s7's verify: the last token and its drafts) the
    scores are only ``[B, H, Tq, P + L]``, so spelling the softmax out costs little, and it
    reads the head-major K/V in place (the fused kernel of `attention` is for prefills,
    where scores would be ``[B, H, T, L]``).
    """
    batch, tq, heads, head_dim = q.shape
    kv_heads, shared = k.shape[0], k_shared.shape[1]
    group = heads // kv_heads  # GQA: a query row per (query, head of the group)
    rows = tq * group
    qh = q.to(dtype).view(batch, tq, kv_heads, group, head_dim).permute(2, 0, 1, 3, 4)
    qh = qh.reshape(kv_heads, batch, rows, head_dim)  # [Hkv, B, Tq*G, D]
    own = mask[:, :, None, :].expand(batch, tq, group, mask.shape[-1]).reshape(batch, rows, -1)  # [B, Tq*G, L]
    scores = torch.cat(
        [
            (qh.reshape(kv_heads, batch * rows, head_dim) @ k_shared.to(dtype).transpose(1, 2)).view(
                kv_heads, batch, rows, shared
            ),  # [Hkv, B, Tq*G, P]
            (qh @ k.to(dtype).transpose(2, 3)).masked_fill(~own[None], float("-inf")),  # [Hkv, B, Tq*G, L]
        ],
        dim=-1,
    )
    probs = torch.softmax(scores * scale, dim=-1)
    out = (probs[..., :shared].reshape(kv_heads, batch * rows, shared) @ v_shared.to(dtype)).view(
        kv_heads, batch, rows, head_dim
    ) + probs[..., shared:] @ v.to(dtype)  # [Hkv, B, Tq*G, D]
    out = out.view(kv_heads, batch, tq, group, head_dim).permute(1, 2, 0, 3, 4)  # [B, Tq, Hkv, G, D]
    return out.reshape(batch, tq, heads, head_dim).to(q.dtype)


class LlamaAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer_id: int, attention_dtype: torch.dtype):
        super().__init__()
        self.layer_id = layer_id
        self.num_heads = config.num_heads
        self.num_kv_heads = config.num_kv_heads
        self.head_dim = config.head_dim
        self.scale = config.head_dim**-0.5
        self.attention_dtype = attention_dtype
        qkv_bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, config.num_heads * config.head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(config.hidden_size, config.num_kv_heads * config.head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(config.hidden_size, config.num_kv_heads * config.head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(config.num_heads * config.head_dim, config.hidden_size, bias=config.o_proj_bias)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        """x: ``[T, hidden]`` -> ``[T, hidden]``; stores this layer's new K/V in the pool."""
        num_tokens = x.shape[0]
        q = apply_rope(self.q_proj(x).view(num_tokens, self.num_heads, self.head_dim), cos, sin)
        k = apply_rope(self.k_proj(x).view(num_tokens, self.num_kv_heads, self.head_dim), cos, sin)
        v = self.v_proj(x).view(num_tokens, self.num_kv_heads, self.head_dim)

        k_buffer = fb.token_to_kv_pool.k_buffer[self.layer_id]
        v_buffer = fb.token_to_kv_pool.v_buffer[self.layer_id]
        # The pool is head-major [Hkv, slots, D]: token t's K goes to column out_cache_loc[t].
        k_buffer.index_copy_(1, fb.out_cache_loc, k.transpose(0, 1).to(k_buffer.dtype))
        v_buffer.index_copy_(1, fb.out_cache_loc, v.transpose(0, 1).to(v_buffer.dtype))

        if fb.mode == ForwardMode.EXTEND:
            out = self._extend_attention(q, k_buffer, v_buffer, fb)
        else:
            out = self._decode_attention(q, k_buffer, v_buffer, fb)
        return self.o_proj(out.reshape(num_tokens, self.num_heads * self.head_dim))

    def _extend_attention(self, q, k_buffer, v_buffer, fb: ForwardBatch) -> torch.Tensor:
        """Request i's ``n_i`` new queries sit at positions ``prefix_i .. prefix_i + n_i - 1``
        and see the keys up to their own position (causal over the cached prefix too).
        q: ``[T, H, D]`` -> ``[T, H, D]``.

        Requests whose ``n_i`` are within a factor of two of each other share one padded
        attention call (`fb.extend_groups`, `_padded_extend_attention`).
        """
        groups = fb.extend_groups
        if len(groups) == 1:
            return self._padded_extend_attention(q, k_buffer, v_buffer, groups[0])
        out = torch.empty_like(q)
        for group in groups:
            out[group.rows] = self._padded_extend_attention(q[group.rows], k_buffer, v_buffer, group)
        return out

    def _padded_extend_attention(self, q, k_buffer, v_buffer, group: ExtendGroup) -> torch.Tensor:
        """One group's attention call. q: ``[T', H, D]`` (its new tokens, request after
        request) -> ``[T', H, D]``. Padded query rows are computed and dropped. A group of a
        few new tokens per request behind a prefix they all share (`ExtendGroup.shared`: s7's
        verify, riders, jump re-admissions under one system prompt) reads that prefix once,
        as a decode does (`cascade_attention`); a prompt's prefill goes through the fused
        kernel."""
        b, n = group.mask.shape[:2]
        q_pad = q.new_zeros(b, n, *q.shape[1:])
        q_pad[group.req_rows, group.cols] = q
        if group.shared is not None:  # a few queries each: scores are small, the shared prefix read once
            shared = group.slots[0, : group.shared]
            out = cascade_attention(
                q_pad,
                k_buffer.index_select(1, shared),
                v_buffer.index_select(1, shared),
                gather_slots(k_buffer, group.slots[:, group.shared :]).transpose(0, 1),
                gather_slots(v_buffer, group.slots[:, group.shared :]).transpose(0, 1),
                group.mask[:, :, group.shared :],
                self.scale,
                self.attention_dtype,
            )
            return out[group.req_rows, group.cols]
        out = attention(
            q_pad,
            gather_slots(k_buffer, group.slots),
            gather_slots(v_buffer, group.slots),
            group.mask,
            self.scale,
            self.attention_dtype,
        )
        return out[group.req_rows, group.cols]

    def _decode_attention(self, q, k_buffer, v_buffer, fb: ForwardBatch) -> torch.Tensor:
        """Each request's one query against its keys. q: ``[B, H, D]`` -> ``[B, H, D]``.

        The first ``fb.shared_prefix_len`` positions sit in the same KV slots for every
        request (a system prompt the radix tree shares): those keys are read once for the
        whole batch. The rest is gathered per request, padded and masked, in the chunks of
        requests of similar length that `fb.decode_chunks` lists.
        """
        prefix = fb.shared_prefix_slots  # [P]
        k_shared, v_shared = k_buffer.index_select(1, prefix), v_buffer.index_select(1, prefix)
        out = torch.empty_like(q)
        for rows, slots, mask in fb.decode_chunks:
            out[rows] = cascade_attention(
                q[rows, None],
                k_shared,
                v_shared,
                gather_slots(k_buffer, slots).transpose(0, 1),
                gather_slots(v_buffer, slots).transpose(0, 1),
                mask[:, None],
                self.scale,
                self.attention_dtype,
            )[:, 0]
        return out


class LlamaMLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    """Pre-norm residual block: ``h = x + attn(norm(x)); out = h + mlp(norm(h))``."""

    def __init__(self, config: ModelConfig, layer_id: int, attention_dtype: torch.dtype):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = LlamaAttention(config, layer_id, attention_dtype)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = LlamaMLP(config)

    def forward(self, x, cos, sin, fb: ForwardBatch) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, fb)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, config: ModelConfig, attention_dtype: torch.dtype):
        super().__init__()
        self.config = config
        # No random init (the loader fills every weight): under the loader's meta device,
        # Embedding's normal_ init imports torch._dynamo and with it triton, whose nanobind
        # objects are then reported as "nanobind: leaked ..." at every exit.
        self.embed_tokens = nn.Embedding(
            config.vocab_size, config.hidden_size, _weight=torch.empty(config.vocab_size, config.hidden_size)
        )
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, i, attention_dtype) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        """-> final hidden states ``[T, hidden]`` (before the final norm)."""
        x = self.embed_tokens(fb.input_ids)
        # RoPE angles depend only on positions, so every layer shares one cos/sin table.
        cos, sin = rope_cos_sin(fb.positions, rope_inv_freq(self.config, x.device))
        for layer in self.layers:
            x = layer(x, cos, sin, fb)
        return x


class LlamaForCausalLM(nn.Module):
    """Llama / Qwen2 causal LM over the KV pool. Build it with ``load_model``."""

    def __init__(self, config: ModelConfig, attention_dtype: torch.dtype = torch.float32):
        super().__init__()
        self.config = config
        self.model = LlamaModel(config, attention_dtype)
        # Tied embeddings reuse embed_tokens.weight as the output matrix (see forward).
        self.lm_head = (
            None if config.tie_word_embeddings else nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        )

    @property
    def dtype(self) -> torch.dtype:
        """Parameter dtype; the KV pool is created with it."""
        return self.model.embed_tokens.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.model.embed_tokens.weight.device

    @torch.inference_mode()
    def forward(self, fb: ForwardBatch, return_all_logits: bool = False) -> torch.Tensor:
        """Run one batch; returns fp32 logits ``[B, vocab]`` at each request's last new
        token, or ``[T, vocab]`` at every new token when ``return_all_logits``."""
        hidden = self.model(fb)
        if not return_all_logits:
            # Only the last new token of each request predicts the next one.
            last = torch.tensor(fb.extend_seq_lens, device=hidden.device).cumsum(0) - 1
            hidden = hidden[last]
        hidden = self.model.norm(hidden)
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(hidden, weight).float()
