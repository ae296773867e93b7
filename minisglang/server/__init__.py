"""`minisglang serve`: an OpenAI-compatible HTTP server (and SGLang's native /generate).

    minisglang serve --port 30000            # loopback only unless --host says otherwise

One thread owns the scheduler and runs `step()` in a loop (`EngineLoop`); HTTP handlers
validate the body (`protocol.py`), tokenize it in the web server's thread pool (a client's
calls in turns: `client_threads.py`), put the
ready `Req` into the loop's inbox and read chunks from their own queue. So the scheduler
stays single-threaded, exactly as in the offline `Engine`, and neither a slow compile nor
a 5 MB prompt stalls anybody else's decoding.

Endpoints: GET /health, /metrics (Prometheus), /get_server_info, /v1/models;
POST /v1/completions, /v1/chat/completions (stream=true gives server-sent events), with
`response_format` {"type": "json_schema" | "json_object" | "structural_tag"} (a structural tag in
either shape: v2's {"type": "structural_tag", "format": {...}}, or the old structures and
triggers) and the extra fields `regex`, `ebnf`, `json_schema`; chat also takes OpenAI's `tools`, `tool_choice` and
`parallel_tool_calls` (the calls are a structural tag, see function_call.py; stage s6 on);
POST /v1/responses (OpenAI's Responses API: `input`, `instructions`, `text.format`, flat
`tools`; served as the chat completion it is, nothing stored); POST /generate (native).

Every error is OpenAI's body `{"error": {"message", "type", "param", "code"}}`: a bad field
is a 400 naming it, an unknown model a 404, a body over `max_body_bytes` a 413, a body that
is not JSON a 415, too many or too large headers a 431; a client value the message quotes
is shortened. If the scheduler loop itself dies, every request in flight gets an error
(a stream ends with an error event and `[DONE]`), /health turns 503 and `serve` exits
non-zero; /health is 503 as well while the loop is stuck (one step running longer than
`stall_timeout`). On SIGTERM the requests in flight get `drain_timeout` seconds, then are aborted.

One module per job:

    app.py            create_app (the app, its lifespan, the API key), serve, serving_in_thread
    state.py          ServerOptions, and ServerState: what every route reads (engine, options, metrics)
    engine_loop.py    EngineLoop: the scheduler's thread, its inbox and the chunks it publishes
    routes_openai.py  /v1/models, /v1/completions, /v1/chat/completions (tools included)
    routes_responses.py  /v1/responses: OpenAI's Responses API, served as the chat it is
    routes_native.py  /generate, /health, /metrics, /get_server_info
    prompts.py        a request's model checked and its prompt tokenized into a Req
    streaming.py      one Req answered: a JSON body or server-sent events, a leaving client noticed
    openai_shapes.py  OpenAI's response objects (completion, chat, tool calls, usage)
    responses_shapes.py  the Responses API's response object and stream events, from chat's
    errors.py         OpenAI's error body, ABORT_ANSWERS (an abort's kind -> its status), the handlers
    http_limits.py    what is refused before parsing: headers (431) and bodies (415, 413, 408)
    client_threads.py  handler work in the thread pool in turns by client; the body parsed so

The routes call only the `Engine`'s public methods; the engine never imports the server.
"""

from .app import create_app, serve, serving_in_thread
from .engine_loop import EngineLoop, EngineUnavailable
from .errors import ABORT_ANSWERS, MAX_ERROR_MESSAGE, error_body
from .openai_shapes import openai_finish_reason, usage
from .routes_openai import TOOLS_STAGE, stage_serves_tools
from .state import ServerOptions, ServerState

__all__ = [
    "ABORT_ANSWERS",
    "MAX_ERROR_MESSAGE",
    "TOOLS_STAGE",
    "EngineLoop",
    "EngineUnavailable",
    "ServerOptions",
    "ServerState",
    "create_app",
    "error_body",
    "openai_finish_reason",
    "serve",
    "serving_in_thread",
    "stage_serves_tools",
    "usage",
]
