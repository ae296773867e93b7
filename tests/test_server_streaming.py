"""server/streaming.py's events: each one a single line for every line reader."""

import json

from hypothesis import given
from hypothesis import strategies as st

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
