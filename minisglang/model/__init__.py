"""The model: a Llama-family forward pass over the token-slot KV pool, and its loader."""

from minisglang.model.config import SUPPORTED_ARCHITECTURES, ModelConfig
from minisglang.model.forward_batch import ForwardBatch, ForwardMode
from minisglang.model.llama import LlamaForCausalLM
from minisglang.model.loader import load_model

__all__ = [
    "SUPPORTED_ARCHITECTURES",
    "ForwardBatch",
    "ForwardMode",
    "LlamaForCausalLM",
    "ModelConfig",
    "load_model",
]
