"""The engine's shared state, as plain dataclasses (see chapters/00-the-engine.md).

Everything the scheduler, the constraint layer and the engine pass around lives here:
`SamplingParams` (what the user asked for) and `Req` (one request as it moves through the
waiting queue, the running batch and out again).
"""
from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass, field, fields
from typing import Any

import torch

# The keys a user may put in a sampling-params dict; anything else is a typo we report.
_CONSTRAINT_KEYS = ("json_schema", "regex", "ebnf")


@dataclass
class SamplingParams:
    """What one request asks for. `temperature == 0` means greedy."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = 128
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    ignore_eos: bool = False
    regex: str | None = None
    json_schema: str | None = None
    ebnf: str | None = None
    # s5's reasoning gate: the grammar applies only after this marker was generated.
    think_end: str | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "SamplingParams":
        """Validate a user dict; unknown keys and bad values raise ValueError naming them."""
        d = dict(d or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown sampling parameter(s) {unknown}; known: {sorted(known)}")
        if isinstance(d.get("stop"), str):
            d["stop"] = [d["stop"]]
        if isinstance(d.get("json_schema"), dict):
            d["json_schema"] = json.dumps(d["json_schema"])
        p = cls(**d)
        p.validate()
        return p

    def validate(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k == 0 or self.top_k < -1:
            raise ValueError(f"top_k must be -1 (off) or >= 1, got {self.top_k}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        given = [k for k in _CONSTRAINT_KEYS if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give at most one of regex / json_schema / ebnf, got {given}")

    def constraint(self) -> tuple[str, str] | None:
        """The (kind, text) of this request's grammar, or None when unconstrained."""
        for kind in _CONSTRAINT_KEYS:
            text = getattr(self, kind)
            if text is not None:
                return kind, text
        return None


_rid_counter = itertools.count()


@dataclass(eq=False)
class Req:
    """One request. Token lists are plain Python lists of ids.

    `fill_ids` = prompt ids + output ids is what the model has seen or will see; the KV of
    its first `kv_len` tokens sits in the slots `req_to_token[req_pool_idx, :kv_len]`.
    """

    prompt: str
    origin_input_ids: list[int]
    sampling_params: SamplingParams
    rid: int = field(default_factory=lambda: next(_rid_counter))
    output_ids: list[int] = field(default_factory=list)

    # Memory: set when the request is admitted into a prefill batch.
    req_pool_idx: int | None = None
    kv_len: int = 0                       # tokens whose K/V is in the pool
    prefix_len: int = 0                   # of those, how many the radix tree supplied
    last_node: Any = None                 # radix tree node locked while we use its prefix

    # Constraint layer: whatever the stage keeps per request (FSM + state, a matcher...).
    grammar: Any = None
    # s4: bumped whenever output_ids are rewritten, so the detokenizer restarts (#665).
    version: int = 0

    # Output.
    finished_reason: dict | None = None
    released: bool = False                # left the engine: memory and grammar given back
    output_text: str = ""                 # decoded output so far (stop strings trimmed at end)
    sent_text_len: int = 0                # characters already streamed to the caller
    detokenizer: Any = None
    detok_offset: int = 0                 # output ids already fed to the detokenizer
    generator: torch.Generator | None = None

    # Accounting.
    cached_tokens: int = 0                # prompt tokens the radix tree supplied (all admissions)
    sampled_tokens: int = 0               # tokens chosen by the sampler (not jumped)
    arrival_time: float = field(default_factory=time.perf_counter)
    first_token_time: float | None = None
    finish_time: float | None = None

    @property
    def fill_ids(self) -> list[int]:
        return self.origin_input_ids + self.output_ids

    @property
    def finished(self) -> bool:
        return self.finished_reason is not None

    def finish(self, reason_type: str, **info: Any) -> None:
        """Mark finished once; later calls keep the first reason."""
        if self.finished_reason is None:
            self.finished_reason = {"type": reason_type, **info}
            self.finish_time = time.perf_counter()

    def meta_info(self) -> dict[str, Any]:
        """The `meta_info` dict the Engine returns (shape of SGLang's)."""
        end = self.finish_time or time.perf_counter()
        return {
            "id": self.rid,
            "finish_reason": self.finished_reason,
            "prompt_tokens": len(self.origin_input_ids),
            "completion_tokens": len(self.output_ids),
            "completion_tokens_wo_jump_forward": self.sampled_tokens,
            "cached_tokens": self.cached_tokens,
            "e2e_latency": end - self.arrival_time,
            "ttft": None if self.first_token_time is None else self.first_token_time - self.arrival_time,
        }
