"""The engine's shared state, as plain dataclasses (see chapters/00-the-engine.md).

Everything the scheduler, the constraint layer and the engine pass around lives here:
`SamplingParams` (what the user asked for), `Req` (one request as it moves through the
waiting queue, the running batch and out again) and `AbortKind` (whose fault an abort was).
"""

from __future__ import annotations

import itertools
import json
import math
import numbers
import time
import types
import typing
from collections.abc import Collection
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any, Generic, Protocol, TypeVar

import torch

# The keys a user may put in a sampling-params dict; anything else is a typo we report.
_CONSTRAINT_KEYS = ("json_schema", "regex", "ebnf", "structural_tag")

# Below this temperature sampling is greedy: dividing logits by 1e-40 overflows to inf and
# softmax turns that into nan, so a tiny temperature means "argmax", as in SGLang's sampler.
GREEDY_TEMPERATURE = 1e-5
# Seeds go to `sampler.seeded_generator` (torch.Generator.manual_seed's range, read modulo 2**64).
_SEED_RANGE = (-(2**63), 2**64 - 1)
# Client strings that are tokenized or scanned on arrival are refused above these sizes
# before anything reads them: a 3.6 MB think_end was tokenized (3 s of the scheduler)
# before being refused as "not one token". think_end names one token; a stop string is
# matched against the output's tail at every step.
MAX_THINK_END_CHARS = 256
MAX_STOP_STRINGS = 64
MAX_STOP_CHARS = 4096
# OpenAI's bounds on a request's sampling fields, narrower than the engine's: the server's
# protocol.py refuses past them, and lang.gen too, so that a program means the same on a
# local Engine as on the server.
OPENAI_MAX_TEMPERATURE = 2
OPENAI_SEED_LIMIT = 2**63  # a seed is in [0, OPENAI_SEED_LIMIT)
OPENAI_MAX_STOP = 4  # stop strings


def _is_int(value: Any) -> bool:
    """A true integer: `True` is an int to Python but never a count or a seed to a user."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _finite_float(name: str, value: Any) -> float:
    """`value` as a float, or ValueError if it is not a finite real number."""
    if _is_number(value):
        try:
            as_float = float(value)
        except OverflowError:  # an integer too large for a float
            as_float = math.inf
        if math.isfinite(as_float):
            return as_float
    raise ValueError(f"{name} must be a finite number, got {_type_name(value)}")


def _type_name(value: Any) -> str:
    """How a user's value reads in an error: JSON's words where the value came from JSON."""
    names = {bool: "a boolean", str: "a string", list: "a list", dict: "an object", type(None): "null"}
    if _is_int(value):
        return f"the integer {value}" if abs(value) < 10**30 else "a huge integer"
    if _is_number(value):
        return f"the number {value!r}"
    kind = type(value)
    # A library's type by its full name: numpy's bool_ is "a numpy.bool", not a confusing "a bool".
    where = "" if kind.__module__ == "builtins" else f"{kind.__module__.split('.')[0]}."
    return names.get(kind, f"a {where}{kind.__name__}")


def check_text(name: str, value: Any) -> None:
    """`value` is a str that can be encoded (a lone surrogate from a JSON escape cannot)."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {_type_name(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{name} is not valid Unicode text (a lone surrogate at character {e.start})") from None


def check_declared_type(name: str, value: Any, hint: Any, positive: bool = True) -> None:
    """ValueError naming the option `name` unless `value` has the type `hint` declares (bool,
    int, float, str, a dict, each maybe `| None`; an int where a float is declared) and, when
    `positive`, is a number above 0 if a number. ("false" is truthy: a flag takes True or False.)"""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    kinds = [typing.get_origin(h) or h for h in (typing.get_args(hint) if union else (hint,))]
    if value is None and type(None) in kinds:
        return
    if isinstance(value, bool):
        ok = bool in kinds
    elif isinstance(value, int):
        ok = int in kinds or float in kinds
    elif isinstance(value, float):
        ok = float in kinds and math.isfinite(value)
    else:
        ok = Any in kinds or any(k not in (bool, int, float) and isinstance(value, k) for k in kinds)
    if not ok:
        words = {bool: "True or False", int: "an integer", float: "a finite number", str: "a string", dict: "a dict"}
        wanted = " or ".join(words.get(k, "None" if k is type(None) else getattr(k, "__name__", str(k))) for k in kinds)
        raise ValueError(f"{name} must be {wanted}, not {value!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and positive and value <= 0:
        raise ValueError(f"{name} must be above 0, not {value!r}")


@dataclass
class SamplingParams:
    """What one request asks for. `temperature` 0 (or below `GREEDY_TEMPERATURE`) means greedy.

    Construction checks every field's type and range and raises ValueError naming the field
    and what it allows; `stop` may be given as one string, `json_schema` as a dict.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    # Drop tokens less likely than min_p times the most likely one (0: off; SGLang's, vLLM's).
    min_p: float = 0.0
    max_new_tokens: int = 128
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    ignore_eos: bool = False
    regex: str | None = None
    json_schema: str | None = None
    ebnf: str | None = None
    # s6: free text with triggered, schema-constrained tags (constrained/structural_tag.py);
    # a dict or its JSON text, kept as JSON text
    structural_tag: str | None = None
    # s5's reasoning gate: the grammar applies only after this marker was generated.
    think_end: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        elif self.stop is None:
            self.stop = []
        for name in ("json_schema", "structural_tag"):  # a dict is kept as its JSON text
            value = getattr(self, name)
            if isinstance(value, dict):
                try:
                    setattr(self, name, json.dumps(value, allow_nan=False))
                except (TypeError, ValueError, RecursionError) as e:
                    raise ValueError(
                        f"{name} must be a JSON object or a JSON string; this dict is not JSON ({e})"
                    ) from None
            elif value is not None and not isinstance(value, str):  # check_text would say "a string" only
                raise ValueError(f"{name} must be a JSON object (a dict) or its JSON text, got {_type_name(value)}")
        self.validate()

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None, defaults: dict[str, Any] | None = None) -> SamplingParams:
        """Validate a user dict; unknown keys and bad values raise ValueError naming them.
        `defaults` fill the fields `d` does not give (the model's, `Engine.sampling_defaults`)."""
        if d is None:
            d = {}
        if not isinstance(d, dict):
            raise ValueError(f"sampling params must be an object (a dict), got {_type_name(d)}")
        known = {f.name for f in fields(cls)}
        unknown = sorted((k for k in d if k not in known), key=repr)
        if unknown:
            raise ValueError(f"unknown sampling parameter(s) {unknown}; known: {sorted(known)}")
        return cls(**{**(defaults or {}), **d})

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict; `from_dict(p.to_dict()) == p`."""
        return asdict(self)

    def validate(self) -> None:
        """Check every field's type and range; ValueError names the field and what is allowed."""
        for name in ("temperature", "top_p", "min_p"):
            setattr(self, name, _finite_float(name, getattr(self, name)))
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 means greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p must be in [0, 1] (0 means off), got {self.min_p}")
        for name in ("top_k", "max_new_tokens"):
            value = getattr(self, name)
            if not _is_int(value):
                raise ValueError(f"{name} must be an integer, got {_type_name(value)}")
            setattr(self, name, int(value))
        if self.top_k == 0 or self.top_k < -1:
            raise ValueError(f"top_k must be -1 (off) or an integer >= 1, got {self.top_k}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an integer >= 1, got {self.max_new_tokens}")
        if not isinstance(self.stop, list):
            raise ValueError(f"stop must be a string or a list of strings, got {_type_name(self.stop)}")
        if len(self.stop) > MAX_STOP_STRINGS:
            raise ValueError(f"stop has {len(self.stop)} strings; the limit MAX_STOP_STRINGS is {MAX_STOP_STRINGS}")
        for i, s in enumerate(self.stop):
            if isinstance(s, str) and len(s) > MAX_STOP_CHARS:
                raise ValueError(
                    f"stop[{i}] is {len(s):,} characters long; the limit MAX_STOP_CHARS is {MAX_STOP_CHARS:,}"
                )
            check_text(f"stop[{i}]", s)
            if not s:
                raise ValueError(f"stop[{i}] is empty; a stop string needs at least one character")
        if self.seed is not None:
            if not _is_int(self.seed) or not _SEED_RANGE[0] <= self.seed <= _SEED_RANGE[1]:
                raise ValueError(f"seed must be null or an integer in [-2**63, 2**64 - 1], got {_type_name(self.seed)}")
            self.seed = int(self.seed)
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos must be true or false, got {_type_name(self.ignore_eos)}")
        if isinstance(self.think_end, str) and len(self.think_end) > MAX_THINK_END_CHARS:
            raise ValueError(
                f"think_end is {len(self.think_end):,} characters long; it names one token, and the "
                f"limit MAX_THINK_END_CHARS is {MAX_THINK_END_CHARS}"
            )
        for name in (*_CONSTRAINT_KEYS, "think_end"):
            if getattr(self, name) is not None:
                check_text(name, getattr(self, name))
        if self.think_end == "":
            raise ValueError("think_end is empty; give the marker text (one token) or null")
        if self.structural_tag is not None:
            # Its fields are checked when it compiles (the core knows no grammar); here: an object.
            try:
                spec = json.loads(self.structural_tag)
            except (ValueError, RecursionError) as e:
                raise ValueError(
                    f"structural_tag must be a JSON object or a JSON string; this string is not JSON ({e})"
                ) from None
            if not isinstance(spec, dict):
                raise ValueError(f"structural_tag must be a JSON object, got {_type_name(spec)}")
        given = [k for k in _CONSTRAINT_KEYS if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give at most one of regex / json_schema / ebnf / structural_tag, got {given}")

    def constraint(self) -> tuple[str, str] | None:
        """The (kind, text) of this request's grammar, or None when unconstrained."""
        for kind in _CONSTRAINT_KEYS:
            text = getattr(self, kind)
            if text is not None:
                return kind, text
        return None


class Grammar(Protocol):
    """What every stage's per-request grammar (`Req.grammar`) answers.

    Stages s1-s4 keep an `FSMState` (constrained/grammar.py: a compiled FSM and the state it
    is in), s5 a backend's matcher (backends/base.py `BaseGrammarObject`). The parts that
    stages share (s4's `JumpForward`) speak to either through these methods only. Masking
    and advancing are not here on purpose: how a stage does them is its chapter's lesson (s1
    a bool row per request, s2 one packed row per state, s5 the interface's
    `fill_vocab_mask` and `accept_token`).
    """

    # Times the request's output was rewritten (s4's jumps); a stream restarts its text (#665).
    version: int

    def is_terminated(self) -> bool:
        """True when the grammar accepts nothing more: the request may stop."""

    def jump_forward(self, tokenizer: Any) -> tuple[bytes, Any] | None:
        """(the bytes the grammar forces from here, the state after them), or None."""

    def allowed_after(self, output_ids: list[int]) -> Collection[int] | None:
        """The tokens allowed after `output_ids` (the whole output), or None when this grammar
        cannot list them cheaply (then the vocabulary alone decides s4's seam rule)."""

    def jump_and_retokenize(self, old_output_ids: list[int], new_output_ids: list[int], next_state: Any) -> None:
        """Bring the grammar in line with the request's rewritten output."""


class AbortKind(str, Enum):
    """Whose fault an aborted request was: every `req.finish("abort", ...)` names one, and the
    server answers each kind with its own HTTP status (server/errors.py `ABORT_ANSWERS`)."""

    # The request itself is bad: an empty or too long prompt, a constraint or think_end the stage cannot use.
    CLIENT = "client"
    GRAMMAR = "grammar"  # the request's grammar was refused, failed, or outgrew a limit while decoding
    BUSY = "busy"  # the server could not get to it: the compile queue was full, or it waited too long
    ENGINE = "engine"  # the engine itself failed (a bug or a broken device), not the request
    CANCELLED = "cancelled"  # the client left, or the server shut down


# The grammar a stage keeps per request: `Req[FSMState]` in s1-s4, `Req[BaseGrammarObject]`
# in s5. A stage's own hooks read its own type's fields (s1's `.fsm` and `.state`); code shared
# between stages sees plain `Req` and only the `Grammar` methods.
GrammarT = TypeVar("GrammarT", bound=Grammar)

_rid_counter = itertools.count()


@dataclass(eq=False)
class Req(Generic[GrammarT]):
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
    kv_len: int = 0  # tokens whose K/V is in the pool
    prefix_len: int = 0  # of those, how many the radix tree supplied
    last_node: Any = None  # radix tree node locked while we use its prefix
    radix_mark: Any = None  # where it left the tree unfinished (an s4 jump; radix_cache.Mark)

    # Constraint layer: the request's grammar state (an FSM state in s1-s4, a matcher in s5).
    grammar: GrammarT | None = None

    # Output.
    finished_reason: dict[str, Any] | None = None
    released: bool = False  # left the engine: memory and grammar given back
    output_text: str = ""  # decoded output so far (stop strings trimmed at end)
    sent_text_len: int = 0  # characters already streamed to the caller
    detokenizer: Any = None
    detok_offset: int = 0  # output ids already fed to the detokenizer
    generator: torch.Generator | None = None

    # Accounting.
    cached_tokens: int = 0  # prompt tokens the radix tree supplied (first admission)
    sampled_tokens: int = 0  # tokens chosen by the sampler (not jumped)
    arrival_time: float = field(default_factory=time.perf_counter)
    client: str | None = None  # who sent it (the server's client address): compiles take turns by client
    # Requests of other clients admitted past this one while it did not fit (the scheduler's
    # admission: a client's request too big for the room left holds back only its own client);
    # reset at each admission.
    passed_by: int = 0
    # Sent back to wait by a retraction (reset at its next admission): the room it had running
    # is not kept from a client with nothing running, as an s4 jump's is (scheduler.py).
    retracted: bool = False
    first_token_time: float | None = None
    finish_time: float | None = None
    # s7's speculative decoding (None: the stage does not draft): verify forwards this
    # request took part in, the draft tokens they fed it, and those it kept.
    spec_verify_ct: int | None = None
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0

    def __repr__(self) -> str:
        # A test's failed `assert req in queue` or a log line shows this: the rid, the
        # prompt's start and where the request stands, not thirty fields and its token ids.
        prompt = self.prompt if len(self.prompt) <= 24 else self.prompt[:21] + "..."
        state = "released" if self.released else "running"
        if self.finished_reason is not None:
            state = f"finished {self.finished_reason.get('type')}"
        return f"Req(rid={self.rid}, prompt={prompt!r}, {len(self.output_ids)} output tokens, {state})"

    @property
    def fill_ids(self) -> list[int]:
        return self.origin_input_ids + self.output_ids

    @property
    def last_id(self) -> int:
        """``fill_ids[-1]``, the next decode step's input, without building ``fill_ids`` (a
        copy of prompt and output, every step for every row)."""
        return self.output_ids[-1] if self.output_ids else self.origin_input_ids[-1]

    @property
    def finished(self) -> bool:
        return self.finished_reason is not None

    def finish(self, reason_type: str, kind: AbortKind | None = None, **info: Any) -> None:
        """Mark finished once; later calls keep the first reason. An "abort" needs its `kind`
        (kept as `finished_reason["kind"]`); "stop" and "length" take none."""
        if (reason_type == "abort") != (kind is not None):
            raise ValueError(
                f"finish({reason_type!r}): an abort needs its AbortKind, and only an abort has one; got kind={kind!r}"
            )
        if self.finished_reason is None:
            self.finished_reason = {"type": reason_type, **({} if kind is None else {"kind": AbortKind(kind)}), **info}
            self.finish_time = time.perf_counter()

    def meta_info(self) -> dict[str, Any]:
        """The `meta_info` dict the Engine returns (shape of SGLang's)."""
        end = self.finish_time or time.perf_counter()
        spec = (
            {}
            if self.spec_verify_ct is None
            else {
                "spec_verify_ct": self.spec_verify_ct,
                "spec_draft_tokens": self.spec_draft_tokens,
                "spec_accepted_tokens": self.spec_accepted_tokens,
            }
        )
        return {
            "id": self.rid,
            "finish_reason": self.finished_reason,
            "prompt_tokens": len(self.origin_input_ids),
            "completion_tokens": len(self.output_ids),
            "completion_tokens_wo_jump_forward": self.sampled_tokens,
            "cached_tokens": self.cached_tokens,
            "e2e_latency": end - self.arrival_time,
            "ttft": None if self.first_token_time is None else self.first_token_time - self.arrival_time,
            **spec,
        }
