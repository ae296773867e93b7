"""server/streaming.py's events: each one a single line for every line reader; a stream of n
choices begins with the first that begins, and its choices begin in index order."""

import asyncio
import json

import httpx
import openai
from hypothesis import given
from hypothesis import strategies as st
from openai.lib.streaming.chat import ChatCompletionStreamState

import minisglang as sgl
from minisglang.server import create_app, serving_in_thread
from minisglang.server.openai_shapes import chat_shape
from minisglang.server.streaming import events, sse


@given(st.text())
def test_an_event_is_one_line_for_every_reader_and_reads_back(text):
    """U+0085, U+2028 and U+2029 are line breaks to str.splitlines and to httpx's and requests'
    iter_lines: written raw they cut an event in half (a stranger's find); json.dumps escapes
    every other one."""
    event = sse({"text": text})
    assert event.startswith("data: ") and event.endswith("\n\n")
    line = event[len("data: ") : -2]
    assert line.splitlines() == [line]
    assert json.loads(line) == {"text": text}


def test_a_stream_of_n_choices_begins_with_the_first_choice_not_the_last():
    """A stream began once every choice had begun: with room in the KV cache for one choice
    at a time, choice 0 ran to its end unsent and its 300 events came in one burst after it
    (40 choices of 1000 tokens: 43 s of silence, past a proxy's idle timeout). Now the stream
    begins with the first choice that begins; the joined text is the non-streamed answer's."""
    # Each choice reserves its prompt and max_tokens: two do not fit in 450 slots.
    engine = sgl.Engine(stage="s1", max_total_tokens=450, max_running_requests=4, torch_threads=1)
    body = {"prompt": "Tell me", "n": 2, "max_tokens": 300, "ignore_eos": True, "temperature": 0.8, "seed": 3}
    with serving_in_thread(create_app(engine)) as url:
        whole = httpx.post(url + "/v1/completions", json=body, timeout=120).json()
        finished = sum(engine.stats().finished_by_reason.values())
        texts = {0: "", 1: ""}
        first_seen: dict | None = None
        with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}, timeout=120) as r:
            for line in r.iter_lines():
                if not line.startswith("data: {"):
                    continue
                if first_seen is None:  # choice 1 still waits for choice 0's room
                    stats = engine.stats()
                    first_seen = {
                        "finished": sum(stats.finished_by_reason.values()) - finished,
                        "waiting": stats.waiting_queue,
                    }
                choice = json.loads(line[6:])["choices"][0]
                texts[choice["index"]] += choice["text"]
        assert first_seen == {"finished": 0, "waiting": 1}
        assert texts == {c["index"]: c["text"] for c in whole["choices"]}


def _meta(finished: bool) -> dict:
    reason = {"type": "stop", "matched": 0} if finished else None
    return {
        "finish_reason": reason,
        "prompt_tokens": 3,
        "completion_tokens": 1,
        "cached_tokens": 0,
        "completion_tokens_wo_jump_forward": 1,
    }


def test_the_choices_of_a_stream_begin_in_index_order():
    """A stranger's `client.chat.completions.stream(..., n=4)` raised IndexError inside the
    openai client (or filed one choice's text under another's index): its accumulator takes
    the stream's first choice for choice 0 and each new index for the next one, and choice
    1's text came first (choice 0 held back a stop string's or a tool call's possible start).
    A choice's events now wait until every lower choice has begun."""

    async def arrivals():  # (choice index, chunk) as the engine's choices finish: 2, then 0, then 1
        for i, text in ((2, "c"), (0, "a"), (1, "b")):
            yield i, {"text": text, "meta_info": _meta(True), "final": True}

    async def sent() -> list[dict]:
        shapes = [chat_shape("chatcmpl-1", 0, "m", i) for i in range(3)]
        out = [e async for e in events(arrivals(), shapes, False, None, lambda: None)]
        return [json.loads(e[6:]) for e in out if e.startswith("data: {")]

    chunks = asyncio.run(sent())
    assert [c["choices"][0]["index"] for c in chunks] == [0, 1, 2]
    state = ChatCompletionStreamState()  # what `client.chat.completions.stream` accumulates with
    for c in chunks:
        state.handle_chunk(openai.types.chat.ChatCompletionChunk.model_validate(c))
    choices = state.get_final_completion().choices
    assert [(c.index, c.message.content) for c in choices] == [(0, "a"), (1, "b"), (2, "c")]


def test_the_openai_clients_stream_helper_reads_n_choices_as_the_same_request_answers():
    """End to end: n choices with a stop string, streamed through `chat.completions.stream`,
    are the non-streamed answer's choices (they raised IndexError: see above)."""
    engine = sgl.Engine(max_total_tokens=4000, max_running_requests=8, torch_threads=1)
    with serving_in_thread(create_app(engine)) as url:
        client = openai.OpenAI(api_key="x", base_url=url + "/v1", max_retries=0)
        for seed in range(3):
            kwargs = dict(
                model="tiny-json-llama",
                messages=[{"role": "user", "content": "Extract: Maria Lopez, 41, likes red."}],
                n=4,
                seed=seed,
                max_tokens=30,
                stop=["Maria Lopez is a", "chess was"],
            )
            full = client.chat.completions.create(**kwargs).choices
            with client.chat.completions.stream(**kwargs) as stream:
                for _ in stream:
                    pass
                streamed = stream.current_completion_snapshot.choices
            assert [(c.index, c.message.content) for c in streamed] == [(c.index, c.message.content) for c in full]
