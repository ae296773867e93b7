"""minisglang: a small, readable LLM serving engine that teaches constrained decoding."""
from pathlib import Path

DEFAULT_MODEL_PATH = str(Path(__file__).parent / "assets" / "tiny-json-llama")
