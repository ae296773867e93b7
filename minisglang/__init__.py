"""minisglang: a small, readable LLM serving engine that teaches constrained decoding."""
from pathlib import Path

DEFAULT_MODEL_PATH = str(Path(__file__).parent / "assets" / "tiny-json-llama")


def __getattr__(name):
    # Lazy so that `import minisglang` stays cheap (torch loads only when an Engine is made).
    if name == "Engine":
        from .engine import Engine

        return Engine
    if name == "SamplingParams":
        from .core import SamplingParams

        return SamplingParams
    raise AttributeError(f"module 'minisglang' has no attribute {name!r}")


from .lang import RuntimeEndpoint, assistant, function, gen, system, user  # noqa: E402  (no torch here)
