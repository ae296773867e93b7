"""minisglang: a small, readable LLM serving engine that teaches constrained decoding."""

from pathlib import Path

DEFAULT_MODEL_PATH = str(Path(__file__).parent / "assets" / "tiny-json-llama")

# Public names, imported on first use: `import minisglang` stays cheap (torch loads only when
# an Engine is made), and importing the core engine never drags in the front end (lang.py).
_LAZY = {
    "Engine": "engine",
    "SamplingParams": "core",
    "RuntimeEndpoint": "lang",
    "assistant": "lang",
    "function": "lang",
    "gen": "lang",
    "set_default_backend": "lang",
    "system": "lang",
    "user": "lang",
    "trace": "stepview",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'minisglang' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_LAZY])
