"""``ModelConfig``: the few numbers of a Hugging Face ``config.json`` our forward needs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM")
# config.json files without an "architectures" list still name their model_type.
_ARCHITECTURE_OF_MODEL_TYPE = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")
# generation_config.json's sampling values a request that does not give them takes (SGLang's
# `--sampling-defaults model` reads these, and repetition_penalty, which we do not implement).
SAMPLING_DEFAULT_KEYS = ("temperature", "top_p", "top_k", "min_p")
# The numbers each scaled rope type reads (transformers refuses a config without them).
_ROPE_FIELDS = {
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}


@dataclass
class ModelConfig:
    """Shape and numerics of a Llama-family decoder, read from ``config.json``."""

    architecture: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    # None, or {"rope_type": "linear" | "llama3", "factor": ..., ...} as in config.json.
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    # q/k/v projections carry a bias (always for Qwen2; Llama's ``attention_bias``).
    attention_bias: bool = False
    # Llama's ``attention_bias`` also puts a bias on o_proj; Qwen2 never does.
    o_proj_bias: bool = False
    # The ids that end a generation: generation_config.json's eos_token_id where that file
    # names one (what transformers' generate stops at: Llama 3 Instruct lists <|eot_id|>
    # beside <|end_of_text|>), else config.json's.
    eos_token_id: int | list[int] | None = None
    torch_dtype: str = "float32"
    # generation_config.json's sampling values (those of SAMPLING_DEFAULT_KEYS it gives): the
    # checkpoint's recommended defaults (Qwen2.5 Instruct: temperature 0.7, top_p 0.8, top_k 20).
    sampling_defaults: dict[str, Any] = field(default_factory=dict)

    @property
    def eos_token_ids(self) -> list[int]:
        """``eos_token_id`` as a list (config.json allows an int, a list, or null)."""
        if self.eos_token_id is None:
            return []
        if isinstance(self.eos_token_id, int):
            return [self.eos_token_id]
        return list(self.eos_token_id)

    @classmethod
    def from_dict(cls, cfg: dict[str, Any]) -> ModelConfig:
        """Build from the parsed ``config.json``; raises ``ValueError`` for models our
        forward does not implement (other architectures, sliding windows, other rope)."""
        archs = cfg.get("architectures") or []
        if archs:
            architecture = archs[0]
        else:
            architecture = _ARCHITECTURE_OF_MODEL_TYPE.get(cfg.get("model_type", ""), "<unknown>")
        if architecture not in SUPPORTED_ARCHITECTURES:
            raise ValueError(
                f"unsupported architecture {architecture!r} "
                f"(model_type={cfg.get('model_type')!r}); supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        if cfg.get("hidden_act", "silu") != "silu":
            raise ValueError(f"unsupported hidden_act {cfg['hidden_act']!r}; only 'silu' (SwiGLU) is implemented")
        if cfg.get("mlp_bias", False):
            raise ValueError("unsupported mlp_bias=True; only bias-free MLPs are implemented")
        if cfg.get("use_sliding_window", False):
            raise ValueError("unsupported use_sliding_window=True; only full attention is implemented")

        # transformers >= 5 nests rope settings in "rope_parameters"; older files keep
        # "rope_theta" and "rope_scaling" at the top level.
        rope = dict(cfg.get("rope_parameters") or {})
        rope_theta = float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))
        scaling = dict(cfg.get("rope_scaling") or rope)
        rope_type = scaling.get("rope_type", scaling.get("type", "default"))
        if rope_type not in SUPPORTED_ROPE_TYPES:
            raise ValueError(f"unsupported rope_type {rope_type!r}; supported: {', '.join(SUPPORTED_ROPE_TYPES)}")
        bad = [
            k
            for k in _ROPE_FIELDS.get(rope_type, ())
            if isinstance(scaling.get(k), bool) or not isinstance(scaling.get(k), (int, float))
        ]
        if bad:
            raise ValueError(
                f"rope_type {rope_type!r} needs a number for {', '.join(bad)} in rope_parameters "
                f"(or rope_scaling), got {', '.join(repr(scaling.get(k)) for k in bad)}"
            )
        rope_scaling = None if rope_type == "default" else {**scaling, "rope_type": rope_type}

        num_heads = cfg["num_attention_heads"]
        is_qwen2 = architecture == "Qwen2ForCausalLM"
        llama_bias = bool(cfg.get("attention_bias", False)) and not is_qwen2
        return cls(
            architecture=architecture,
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=num_heads,
            num_kv_heads=cfg.get("num_key_value_heads") or num_heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // num_heads,
            intermediate_size=cfg["intermediate_size"],
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            max_position_embeddings=cfg.get("max_position_embeddings", 2048),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attention_bias=is_qwen2 or llama_bias,
            o_proj_bias=llama_bias,
            eos_token_id=cfg.get("eos_token_id"),
            torch_dtype=str(cfg.get("dtype") or cfg.get("torch_dtype") or "float32"),
        )

    @classmethod
    def from_pretrained(cls, path: str | Path) -> ModelConfig:
        """Read ``<path>/config.json`` (and ``eos_token_id`` from ``generation_config.json``
        when there is one); raises ``FileNotFoundError`` naming the file."""
        config_file = Path(path) / "config.json"
        if not config_file.is_file():
            raise FileNotFoundError(f"no config.json in model directory {Path(path)} (looked for {config_file})")
        with open(config_file, encoding="utf-8") as f:
            config = cls.from_dict(json.load(f))
        generation_file = Path(path) / "generation_config.json"
        if generation_file.is_file():
            with open(generation_file, encoding="utf-8") as f:
                generation = json.load(f)
            if generation.get("eos_token_id") is not None:
                config.eos_token_id = generation["eos_token_id"]
            given = {k: generation.get(k) for k in SAMPLING_DEFAULT_KEYS}
            if given["top_k"] == 0:  # transformers' "no top-k" (its warper skips 0), our -1
                given["top_k"] = None
            config.sampling_defaults = {k: v for k, v in given.items() if v is not None}
        return config
