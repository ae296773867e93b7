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


# SGLang frontend names that minisglang's lang.py does not have. Each is a function that raises
# NotImplementedError saying so when called: a ported program (`sgl.select(...)` or `from
# minisglang import select`) fails at that line, rather than with a bare "no attribute" /
# "cannot import name" that reads like a typo or a broken install.
_SGLANG_ONLY = {
    "select": "choices; write gen(name, regex='yes|no') instead",
    "gen_int": "typed gens; write gen(name, regex=r'-?[0-9]+') instead",
    "gen_string": "typed gens; write gen(name, regex=...) instead",
    "image": "images (the model reads text only)",
    "video": "videos (the model reads text only)",
    **dict.fromkeys(
        [f"{role}_{end}" for role in ("system", "user", "assistant") for end in ("begin", "end")],
        "open roles; write user(text) and assistant(gen(...)), one whole message each",
    ),
    "separate_reasoning": "reasoning separation",
    "Runtime": "launching a server from Python; run `minisglang serve` and connect with RuntimeEndpoint(url)",
    "flush_cache": "flush_cache",
    "get_server_info": "get_server_info (GET /get_server_info on the server)",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    if name in _SGLANG_ONLY:

        def unsupported(*args, **kwargs):
            raise NotImplementedError(f"minisglang has no {name}: SGLang's {_SGLANG_ONLY[name]} is not supported")

        unsupported.__name__ = name
        return unsupported
    raise AttributeError(f"module 'minisglang' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_LAZY])
