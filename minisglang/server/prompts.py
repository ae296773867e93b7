"""From a request's text to a queued-ready `Req`: the model it names, and its prompt
tokenized (in the thread pool, never on the scheduler's or the event loop's thread) and
checked against the model's context."""

from __future__ import annotations

from ..constrained.json_schema import short_value
from ..core import Req, SamplingParams
from ..protocol import RequestError
from ..tokenizer import ChatPrompt
from .state import ServerState


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
) -> Req:
    """Tokenize (in the thread pool, never on the scheduler or event-loop thread); errors
    name `field`, the request's field the prompt came from. A chat comes encoded already.

    `length_field` names the field the client set the output's length with (None: it set
    none). An unset length is the engine's default cut to what the context has room for,
    as in OpenAI's API: a long prompt is not refused for a limit the client never gave."""
    max_context = state.max_context
    text = prompt.text if isinstance(prompt, ChatPrompt) else prompt
    if len(text.encode("utf-8", "surrogatepass")) > state.max_prompt_bytes:
        raise RequestError(
            f"{field}: the prompt is longer than the model's context of {max_context} tokens", param=field
        )
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
        )
    room = max_context - prompt_len
    if params.max_new_tokens > room:
        if length_field is not None:
            raise RequestError(
                f"{length_field}: the prompt has {prompt_len} tokens, so at most {room} new "
                f"tokens fit in the model's context of {max_context}; got {params.max_new_tokens}",
                param=length_field,
            )
        params.max_new_tokens = room  # this request's own params (built from its body)
    return req
