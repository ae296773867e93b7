"""``load_model``: a Hugging Face checkpoint directory -> ``LlamaForCausalLM``.

A checkpoint directory holds ``config.json`` and its weights either in one
``model.safetensors`` or in shards listed by ``model.safetensors.index.json``.
Tensors are copied by name into a model whose parameters were never initialised
(built on the ``meta`` device), so loading a large model costs no random init.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from tqdm.auto import tqdm

from minisglang.model.config import ModelConfig
from minisglang.model.llama import LlamaForCausalLM

SINGLE_FILE = "model.safetensors"
SHARD_INDEX = "model.safetensors.index.json"
# Old checkpoints store RoPE tables as tensors; we recompute them, so they are ignored.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def find_weight_files(path: Path) -> list[Path]:
    """The safetensors files of a checkpoint directory, in shard order. One
    ``model.safetensors`` wins over an index, as in transformers: re-saving a sharded
    checkpoint unsharded into its directory leaves the old index behind (its shards deleted)."""
    if (path / SINGLE_FILE).is_file():
        return [path / SINGLE_FILE]
    index_file = path / SHARD_INDEX
    if index_file.is_file():
        with open(index_file, encoding="utf-8") as f:
            weight_map = json.load(f)["weight_map"]
        files = [path / name for name in sorted(set(weight_map.values()))]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise FileNotFoundError(f"{index_file} lists shards that do not exist: {', '.join(missing)}")
        return files
    raise FileNotFoundError(f"no weights in model directory {path}: looked for {SINGLE_FILE} and {SHARD_INDEX}")


def load_model(
    path: str | Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    attention_dtype: torch.dtype = torch.float32,
) -> LlamaForCausalLM:
    """Load a LlamaForCausalLM or Qwen2ForCausalLM checkpoint, in eval mode, onto ``device``
    with parameters in ``dtype``. Raises ``FileNotFoundError`` / ``ValueError`` with a
    message naming what was missing or unsupported."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"model directory {path} does not exist (expected config.json + *.safetensors)")
    config = ModelConfig.from_pretrained(path)
    weight_files = find_weight_files(path)

    with torch.device("meta"):
        model = LlamaForCausalLM(config, attention_dtype=attention_dtype)
    model = model.to(dtype).to_empty(device=device)
    params = dict(model.named_parameters())

    loaded: set[str] = set()
    tied_head: torch.Tensor | None = None  # a tied checkpoint's own copy of the output matrix
    with torch.no_grad():
        for file in tqdm(weight_files, desc="loading shards", disable=len(weight_files) == 1):
            with safe_open(str(file), framework="pt") as f:
                for name in tqdm(list(f.keys()), desc=f"loading {file.name}", leave=False):
                    if name.endswith(_IGNORED_SUFFIXES):
                        continue
                    if name == "lm_head.weight" and config.tie_word_embeddings:
                        tied_head = f.get_tensor(name)  # some tied checkpoints save the shared matrix twice
                        continue
                    if name not in params:
                        raise ValueError(f"unexpected tensor {name!r} in {file}: not part of {config.architecture}")
                    tensor = f.get_tensor(name)
                    if tensor.shape != params[name].shape:
                        raise ValueError(
                            f"tensor {name!r} in {file} has shape {tuple(tensor.shape)}, "
                            f"config.json implies {tuple(params[name].shape)}"
                        )
                    params[name].copy_(tensor)
                    loaded.add(name)

    embed = params["model.embed_tokens.weight"]
    if tied_head is not None and not (tied_head.shape == embed.shape and torch.equal(tied_head.to(embed), embed)):
        # transformers 5 then unties them and uses lm_head.weight; older versions tied them,
        # one overwriting the other: refused rather than one of them chosen.
        raise ValueError(
            f"checkpoint {path}: config.json says tie_word_embeddings=true but its lm_head.weight differs "
            "from model.embed_tokens.weight; set tie_word_embeddings to false to use lm_head.weight"
        )
    missing = sorted(set(params) - loaded)
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ValueError(f"checkpoint {path} lacks {len(missing)} tensors: {shown}")
    return model.eval()
