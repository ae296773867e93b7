"""SGLang's `function` / `gen` frontend style, on a local Engine or a remote server.

    from minisglang import function, gen, system, user, assistant

    @function
    def info_extract(paragraph: str):
        system("You extract information and answer in JSON only.")
        user("Extract the person:\\n" + paragraph)
        assistant(gen("output", json_schema=SCHEMA, max_tokens=128))

    state = info_extract.run(engine, paragraph="张三是一名软件工程师，今年28岁……")
    state["output"]          # the generated text (a str; `.text()` works too)

A program is a list of chat messages. `system`/`user`/`assistant` append one; an
`assistant(gen(...))` asks the backend for that turn. The backend is either a local
`Engine` (the chat template is applied here) or `RuntimeEndpoint(url)`: any
OpenAI-compatible server, ours or a real SGLang/vLLM one (the server applies its own
template; `json_schema` travels as `response_format`, `regex` as SGLang's extra field).
SGLang's explicit style also works: `def f(s, ...)` with `s += user(...)`, as do
`set_default_backend`, `run_batch`, `state.messages()` and `state.get_meta_info(name)`.
What SGLang has and minisglang lacks (select/choices, fork, images, the completion style
`s += "text" + gen(...)`, streaming, run-level sampling defaults, gen's n/logprobs/penalties)
raises an error that names it, the same on both backends (a gen argument at the gen call).
"""

from __future__ import annotations

import contextvars
import inspect
import json
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .core import OPENAI_MAX_STOP, OPENAI_MAX_TEMPERATURE, OPENAI_SEED_LIMIT

_current: contextvars.ContextVar[ProgramState | None] = contextvars.ContextVar("minisglang_program", default=None)


class GenText(str):
    """A generated string; `.text()` returns it (SGLang's frontend writes `state["output"].text()`)."""

    meta_info: dict[str, Any] = {}

    def text(self) -> str:
        return str(self)


# SGLang's completion style (`s += "Q: " + gen(...)`): text and gens in one stream, no roles.
# A minisglang program is chat messages, and a gen is a whole assistant turn.
_TEXT_WITH_GEN = (
    "text joined to a gen(...) (SGLang's completion style) is not supported: a minisglang program is chat "
    "messages, and a gen is a whole assistant turn; write s += user(text) then s += assistant(gen(...))"
)


@dataclass
class Gen:
    """A placeholder for generated text: `gen("name", max_tokens=..., regex=... | json_schema=...)`."""

    name: str
    params: dict[str, Any]

    def __add__(self, other: object):
        raise TypeError(_TEXT_WITH_GEN)

    __radd__ = __add__


@dataclass
class Message:
    role: str
    content: str | Gen


# SGLang's gen() arguments that minisglang does not implement. Each is refused by name: passed
# on, the local Engine would refuse it as an unknown sampling parameter, while a server may
# take some of them (`n` is OpenAI's; RuntimeEndpoint keeps choices[0]) and give the program
# a silently different meaning.
_SGLANG_UNSUPPORTED = {
    "choices": "SGLang's select; write regex='yes|no' (an alternation) instead",
    "choices_method": "SGLang's select",
    "n": "several samples per gen; run the program again with another seed",
    "min_tokens": "a minimum length",
    "stop_token_ids": "stop tokens by id; give stop strings",
    "stop_regex": "stop by regex",
    "frequency_penalty": "penalties",
    "presence_penalty": "penalties",
    "return_logprob": "logprobs",
    "logprob_start_len": "logprobs",
    "top_logprobs_num": "logprobs",
    "return_text_in_logprobs": "logprobs",
    "dtype": "typed gens (gen_int, gen_string); write regex=r'-?[0-9]+' instead",
}
# The other sampling arguments gen passes on: SamplingParams fields both backends take (the
# server refuses structural_tag and think_end by name; they are the local Engine's).
GEN_EXTRA = ("top_p", "top_k", "min_p", "seed", "ignore_eos", "ebnf", "structural_tag", "think_end")


def gen(
    name: str,
    max_tokens: int | None = None,
    temperature: float | None = None,
    regex: str | None = None,
    json_schema: dict | str | None = None,
    stop: list[str] | str | None = None,
    **extra: Any,
) -> Gen:
    """A generated turn, stored under `name`. Arguments minisglang lacks raise ValueError naming them.

    None is SGLang's "not given", for every argument: max_tokens 128 (SGLang's frontend
    default; 256 left a prompt past 768 tokens no room in the bundled model's 1,024) and
    temperature 0 (greedy), and the backend's default for the others (passed on, the local
    Engine refused a None that the server read as its default).
    """
    for key in extra:
        if key in _SGLANG_UNSUPPORTED:
            raise ValueError(f"gen({key}=...) is not supported by minisglang ({_SGLANG_UNSUPPORTED[key]})")
        if key not in GEN_EXTRA:
            raise ValueError(
                f"gen() got an unknown argument {key!r}; it takes max_tokens, temperature, regex, "
                f"json_schema, stop and {', '.join(GEN_EXTRA)}"
            )
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        # (the local Engine's own check named its field, max_new_tokens, which the program never wrote)
        raise ValueError(f"gen(max_tokens=...) must be an integer >= 1, got {max_tokens!r:.40}")
    _check_bounds(temperature, stop, extra.get("seed"), extra.get("top_p"))
    if json_schema is not None:
        _check_schema(json_schema)
    given = [key for key, value in (("regex", regex), ("json_schema", json_schema)) if value is not None]
    given += [key for key in ("ebnf", "structural_tag") if extra.get(key) is not None]
    if len(given) > 1:
        raise ValueError(f"gen() takes one constraint, got {' and '.join(given)}")
    params = {
        "max_new_tokens": 128 if max_tokens is None else max_tokens,
        "temperature": 0.0 if temperature is None else temperature,
        **{key: value for key, value in extra.items() if value is not None},
    }
    for key, value in (("regex", regex), ("json_schema", json_schema), ("stop", stop)):
        if value is not None:
            params[key] = value
    return Gen(name, params)


def _check_bounds(temperature: Any, stop: Any, seed: Any, top_p: Any) -> None:
    """Where the local Engine and the server disagree, gen takes what both take, so that a
    program means the same on each: the server has OpenAI's bounds (temperature <= 2, a seed in
    [0, 2**63), at most 4 stop strings) and reads top_p=0 as greedy, which SGLang refuses."""
    number = (int, float)
    if isinstance(temperature, number) and not isinstance(temperature, bool) and temperature > OPENAI_MAX_TEMPERATURE:
        raise ValueError(f"gen(temperature=...) must be in [0, {OPENAI_MAX_TEMPERATURE}], got {temperature}")
    if isinstance(seed, int) and not isinstance(seed, bool) and not 0 <= seed < OPENAI_SEED_LIMIT:
        raise ValueError(f"gen(seed=...) must be in [0, 2**63), got {seed}")
    if isinstance(stop, list) and len(stop) > OPENAI_MAX_STOP:
        raise ValueError(f"gen(stop=...) takes at most {OPENAI_MAX_STOP} strings, got {len(stop)}")
    if isinstance(top_p, number) and not isinstance(top_p, bool) and top_p == 0:
        raise ValueError("gen(top_p=...) must be in (0, 1], got 0 (for greedy, give temperature=0)")


def _check_schema(schema: Any) -> None:
    """A json_schema is a JSON object or its text: checked here, where the program calls gen
    (RuntimeEndpoint parses the text to send it as response_format, and died in json.loads)."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as e:
            raise ValueError(f"gen(json_schema=...): this string is not JSON ({e})") from None
    if not isinstance(schema, dict):
        raise ValueError(f"gen(json_schema=...) must be a JSON Schema object (a dict) or its text, got {schema!r:.80}")
    try:
        json.dumps(schema, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"gen(json_schema=...): this dict is not JSON ({e})") from None


def _role(role: str):
    def make(content: str | Gen) -> Message:
        # Checked here, in both styles: the local chat template died on a non-string inside
        # Jinja ("can only concatenate str (not "int")") while the server answered a 400.
        if not isinstance(content, (str, Gen)):
            raise TypeError(f"{role}(...) takes a string or gen(...), got {type(content).__name__}")
        msg = Message(role, content)
        state = _current.get()
        if state is not None:  # implicit style: the call itself adds the message
            state += msg
        return msg

    make.__name__ = role
    make.__doc__ = f"Add a {role} message (a string, or gen(...) for the assistant)."
    return make


system, user, assistant = _role("system"), _role("user"), _role("assistant")


class _Messages(list):
    """The chat so far: a list, and callable as SGLang's `state.messages()` (a method there)."""

    def __call__(self) -> list[dict[str, str]]:
        return self


@dataclass
class ProgramState:
    """The running program: its backend, the messages so far, and the named outputs."""

    backend: Any
    messages: list[dict[str, str]] = field(default_factory=_Messages)
    outputs: dict[str, GenText] = field(default_factory=dict)

    def __iadd__(self, msg: Message) -> ProgramState:
        if isinstance(msg, (str, Gen)):
            raise TypeError(f"s += {type(msg).__name__}: {_TEXT_WITH_GEN}")
        if not isinstance(msg, Message):
            raise TypeError(f"s += takes system(...), user(...) or assistant(...), got {type(msg).__name__}")
        if isinstance(msg.content, Gen):
            if msg.role != "assistant":
                raise ValueError("gen(...) can only fill an assistant message")
            if not self.messages:  # the server refuses an empty chat; the local Engine generated noise
                raise ValueError("gen(...) needs a message before it: start the program with system(...) or user(...)")
            text, meta = self.backend.chat(self.messages, msg.content.params)
            out = GenText(text)
            out.meta_info = meta
            self.outputs[msg.content.name] = out
            self.messages.append({"role": "assistant", "content": text})
        else:
            self.messages.append({"role": msg.role, "content": msg.content})
        return self

    def __getitem__(self, name: str) -> GenText:
        return self.outputs[name]

    def fork(self, *args: Any, **kwargs: Any):
        """SGLang's parallel branches: not supported (run the program once per branch instead)."""
        raise NotImplementedError("state.fork(...) (SGLang's parallel branches) is not supported by minisglang")

    def get_meta_info(self, name: str) -> dict[str, Any]:
        """SGLang's: the backend's meta_info of the gen `name` (finish_reason, token counts)."""
        return self.outputs[name].meta_info

    def text(self) -> str:
        return "\n".join(f"{m['role']}: {m['content']}" for m in self.messages)


class LocalBackend:
    """Runs a program's turns on an in-process Engine."""

    def __init__(self, engine):
        self.engine = engine

    def chat(self, messages: list[dict[str, str]], params: dict[str, Any]) -> tuple[str, dict]:
        prompt = self.engine.tokenizer.encode_chat(messages, add_generation_prompt=True)
        out = self.engine.generate(prompt, params)
        reason = out["meta_info"]["finish_reason"]
        if reason["type"] == "abort":
            raise RuntimeError(f"generation aborted: {reason.get('message')}")
        return out["text"], out["meta_info"]


class RuntimeEndpoint:
    """Runs a program's turns on an OpenAI-compatible server at `base_url`."""

    def __init__(self, base_url: str, model: str | None = None, api_key: str | None = None, timeout: float = 120):
        self.base_url, self.api_key, self.timeout = base_url.rstrip("/"), api_key, timeout
        self.model = model or self._get("/v1/models")["data"][0]["id"]

    def chat(self, messages: list[dict[str, str]], params: dict[str, Any]) -> tuple[str, dict]:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        for key, value in params.items():
            if key == "max_new_tokens":
                body["max_tokens"] = value
            elif key == "json_schema":
                schema = json.loads(value) if isinstance(value, str) else value
                body["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
            else:
                body[key] = value  # regex, ebnf: SGLang-style extra fields
        resp = self._post("/v1/chat/completions", body)
        choice, usage = resp["choices"][0], resp.get("usage", {})
        # meta_info as the local Engine's: its finish_reason is how a program tells a json_schema
        # answer cut by max_tokens (not JSON) from a whole one
        reason: dict[str, Any] = {"type": choice.get("finish_reason")}
        if reason["type"] == "stop":  # (None where the grammar ended it)
            reason["matched"] = choice.get("matched_stop")
        elif reason["type"] == "length" and "completion_tokens" in usage:
            reason["length"] = usage["completion_tokens"]
        return choice["message"]["content"], {**usage, "finish_reason": reason}

    def _headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def _get(self, path: str) -> dict:
        return self._request(urllib.request.Request(self.base_url + path, headers=self._headers()), path)

    def _post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(self.base_url + path, data=json.dumps(body).encode(), headers=self._headers())
        return self._request(req, path)

    def _request(self, req: urllib.request.Request, path: str) -> dict:
        """One call; an error names the URL (urllib's say "Not Found" or "Connection refused" alone)."""
        url = self.base_url + path
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            hint = " (base_url is the server's root, without /v1)" if e.code == 404 and "/v1/v1/" in url else ""
            raise RuntimeError(f"{url} answered {e.code}{hint}: {e.read().decode(errors='replace')}") from e
        except (urllib.error.URLError, OSError, ValueError) as e:  # refused, timed out, not a URL
            raise ConnectionError(f"{url}: {getattr(e, 'reason', e)}") from e


# SGLang's SglFunction.run takes these as defaults for every gen (and streaming, threads).
_SGLANG_RUN_ARGS = frozenset(
    {
        "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k", "min_p",
        "frequency_penalty", "presence_penalty", "ignore_eos", "return_logprob", "logprob_start_len",
        "top_logprobs_num", "return_text_in_logprobs", "stream", "use_thread",
    }
)  # fmt: skip


_default_backend: Any = None


def set_default_backend(backend: Any) -> None:
    """SGLang's: the backend (an Engine or a RuntimeEndpoint) that `run` uses when given none."""
    global _default_backend
    _default_backend = backend


class SglFunction:
    """What `@function` makes: call `.run(backend, **arguments)`."""

    def __init__(self, fn: Callable):
        if inspect.iscoroutinefunction(fn) or inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            # run calls the body once and reads nothing back: such a body would never run
            raise TypeError(f"@function takes a plain def; {fn.__name__} is async or a generator")
        self.fn = fn
        params = list(inspect.signature(fn).parameters)
        self.explicit_state = bool(params) and params[0] == "s"

    def run(self, backend=None, **kwargs: Any) -> ProgramState:
        """Run the program on `backend` (an Engine or a RuntimeEndpoint; None: the one given to
        set_default_backend, as in SGLang) with the program's arguments by name."""
        given = [key for key in kwargs if key in _SGLANG_RUN_ARGS]
        if given:  # passed on, they reached the program as its own arguments
            raise ValueError(
                f"run({given[0]}=...) is SGLang's run-level default for every gen, which minisglang does not "
                "support: give sampling arguments to each gen(...) (streaming and threads are not supported)"
            )
        if backend is None:
            backend = _default_backend
            if backend is None:
                raise ValueError("run(): no backend; pass one (run(engine, ...)) or call set_default_backend first")
        if not hasattr(backend, "chat"):
            if not (hasattr(backend, "generate") and hasattr(backend, "tokenizer")):
                raise TypeError(
                    f"run(backend, ...): the first argument is the backend (an Engine or a RuntimeEndpoint), got "
                    f"{type(backend).__name__}; the program's own arguments are passed by name"
                )
            backend = LocalBackend(backend)
        state = ProgramState(backend)
        # The implicit style's current state is this program's, or none in the explicit style:
        # an explicit program run inside an implicit one otherwise added its messages (and ran
        # its gens) in the outer program too, through the outer's current state.
        token = _current.set(None if self.explicit_state else state)
        try:
            if self.explicit_state:
                self.fn(state, **kwargs)
            else:
                self.fn(**kwargs)
        finally:
            _current.reset(token)
        return state

    def run_batch(
        self, batch_kwargs: list[dict[str, Any]], backend=None, num_threads: Any = "auto", progress_bar: bool = False
    ) -> list[ProgramState]:
        """SGLang's run_batch: one state per dict of arguments, in order. The programs run one
        after another (num_threads and progress_bar are taken and change nothing)."""
        if not isinstance(batch_kwargs, list) or not all(isinstance(kw, dict) for kw in batch_kwargs):
            raise TypeError("run_batch(batch_kwargs): a list of dicts, one dict of the program's arguments per run")
        return [self.run(backend, **kwargs) for kwargs in batch_kwargs]


def function(fn: Callable) -> SglFunction:
    """Decorator: turn a Python function of messages and gens into a runnable program."""
    return SglFunction(fn)
