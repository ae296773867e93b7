"""From a request's text to a queued-ready `Req`: the model it names, and its prompt
tokenized (in the thread pool, never on the scheduler's or the event loop's thread) and
checked against the model's context; and a request's `n` choices as one `Req` each."""

from __future__ import annotations

from dataclasses import replace

from ..constrained.json_schema import short_value
from ..core import Req, SamplingParams
from ..protocol import RequestError
from ..tokenizer import ChatPrompt
from .state import ServerState

# OpenAI's error code for a prompt (and output) that does not fit the model's context.
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"


def prompt_too_long(state: ServerState, field: str) -> RequestError:
    """The refusal of a prompt whose text alone is longer than the context holds (measured
    in bytes before it is tokenized: `max_prompt_bytes`)."""
    return RequestError(
        f"{field}: the prompt is longer than the model's context of {state.max_context} tokens",
        param=field,
        code=CONTEXT_LENGTH_EXCEEDED,
    )


def check_model(state: ServerState, name: str | None) -> None:
    """A request naming a model names this server's (404 otherwise); naming none is fine."""
    if name is not None and name != state.model_id:
        raise RequestError(
            f"the model {short_value(name)} does not exist; this server serves {state.model_id!r}",
            status=404,
            param="model",
            code="model_not_found",
        )


def make_req(
    state: ServerState,
    prompt: str | ChatPrompt,
    params: SamplingParams,
    field: str = "prompt",
    length_field: str | None = None,
    fill_room: bool = False,
) -> Req:
    """Tokenize (in the thread pool, never on the scheduler or event-loop thread); errors
    name `field`, the request's field the prompt came from. A chat comes encoded already.

    `length_field` names the field the client set the output's length with (None: it set
    none). An unset length is what the context (and the KV pool) has room for when
    `fill_room` (a chat, as in OpenAI's API: it runs until the model stops or the context is
    full), else the request's default cut to that room: a long prompt is never refused for a
    limit the client never gave. (Admission reserves a request's whole room in the KV pool: a chat
    without max_tokens holds more of it than one with.)"""
    max_context = state.max_context
    text = prompt.text if isinstance(prompt, ChatPrompt) else prompt
    if len(text.encode("utf-8", "surrogatepass")) > state.max_prompt_bytes:
        raise prompt_too_long(state, field)
    try:
        req = state.engine.make_request(prompt, params)
    except ValueError as e:  # e.g. a lone surrogate in the prompt
        raise RequestError(f"{field}: {e}", param=field) from e
    prompt_len = len(req.origin_input_ids)
    if prompt_len == 0:
        raise RequestError(f"{field}: the prompt is empty (no tokens)", param=field)
    if prompt_len >= max_context:
        raise RequestError(
            f"{field}: the prompt has {prompt_len} tokens, the model's context "
            f"{max_context} (and at least one new token must fit)",
            param=field,
            code=CONTEXT_LENGTH_EXCEEDED,
        )
    # A request's prompt and new tokens must also fit in the KV pool, which may be smaller than
    # the context (a long-context checkpoint beside the default pool): the scheduler refused
    # such a request with "needs N KV slots", naming no field (a stranger's max_tokens).
    pool = state.engine.scheduler.config.max_total_tokens
    if prompt_len >= pool:
        raise RequestError(
            f"{field}: the prompt has {prompt_len} tokens, this server's KV pool {pool} "
            "(max_total_tokens; and at least one new token must fit)",
            param=field,
            code=CONTEXT_LENGTH_EXCEEDED,
        )
    room = min(max_context, pool) - prompt_len
    if length_field is None and fill_room:
        params.max_new_tokens = room
    elif params.max_new_tokens > room:
        if length_field is not None:
            where = (
                f"the model's context of {max_context}" if max_context <= pool else f"this server's KV pool of {pool}"
            )
            raise RequestError(
                f"{length_field}: the prompt has {prompt_len} tokens, so at most {room} new "
                f"tokens fit in {where}; got {params.max_new_tokens}",
                param=length_field,
                code=CONTEXT_LENGTH_EXCEEDED,
            )
        params.max_new_tokens = room  # this request's own params (built from its body)
    return req


def choice_reqs(state: ServerState, req: Req, n: int) -> list[Req]:
    """The `n` choices of one prompt: `req` and n - 1 copies, each an independent sample.

    Choice i samples with seed + i, so choice 0 is the answer n=1 gives with that seed
    (without a seed, every choice draws from the scheduler's generator; at temperature 0
    every choice is the same greedy text). The choices are queued together and may all run
    in one batch, so `n` may not exceed the batch's rows (max_running_requests).

    They share their prompt's KV through the radix cache: the first admitted computes it,
    and the others, which would compute the same tokens beside it in one prefill, wait a
    step and hit them in the tree instead (the scheduler's in-batch prefix check, for at
    least in_batch_prefix_threshold shared tokens): n choices cost one prompt's prefill, not
    n. (A short prompt is computed again: cheaper than a step's wait.)"""
    rows = state.engine.scheduler.config.max_running_requests
    if n > rows:
        raise RequestError(
            f"n: at most {rows} choices (this server runs at most {rows} requests at once); got {n}", param="n"
        )
    params, seed = req.sampling_params, req.sampling_params.seed
    return [req] + [
        Req(req.prompt, list(req.origin_input_ids), replace(params, seed=None if seed is None else seed + i))
        for i in range(1, n)
    ]
