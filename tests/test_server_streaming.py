"""server/streaming.py's events: each one a single line for every line reader; a stream of n
choices begins with the first that begins."""

import json

import httpx
from hypothesis import given
from hypothesis import strategies as st

import minisglang as sgl
from minisglang.server import create_app, serving_in_thread
from minisglang.server.streaming import sse


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
