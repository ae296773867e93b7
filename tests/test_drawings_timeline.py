"""The overlap timeline (minisglang/drawings/timeline.py, chapter 08): bars laid out from a
trace's "overlap" events as overlap.py runs a step. Oracles: the layout worked out by hand for
made-up events; on a real s7 run, the bars' lengths against the events' own seconds, and the
SVG read back as XML."""

import xml.etree.ElementTree as ET

import pytest

import minisglang as sgl
from minisglang.drawings.timeline import Bar, hidden_share, layout, overlap_timeline


def event(forward_ms, during, exposed, reqs=4):
    return {
        "event": "overlap",
        "mode": "decode",
        "reqs": reqs,
        "forward_s": forward_ms / 1000,
        "during_forward": {k: v / 1000 for k, v in during.items()},
        "exposed": {k: v / 1000 for k, v in exposed.items()},
    }


def close(bars, expected):
    assert [(b.lane, b.label, b.kind) for b in bars] == [(e.lane, e.label, e.kind) for e in expected]
    for b, e in zip(bars, expected):
        assert b.start == pytest.approx(e.start) and b.end == pytest.approx(e.end), (b, e)


def test_a_step_is_schedule_then_the_forward_beside_the_work_then_sample_and_record():
    bars = layout([event(10, {"process_tokens": 2, "fill_masks": 3}, {"schedule": 1, "sample": 1.5, "record": 0.5})])
    s, f = "scheduler thread", "forward thread"
    close(
        bars,
        [
            Bar(s, 0, 1, "schedule", "exposed"),
            Bar(f, 1, 11, "forward (4 requests)", "forward"),
            Bar(s, 1, 3, "process_tokens", "hidden"),
            Bar(s, 3, 6, "fill_masks", "hidden"),
            Bar(s, 6, 11, "wait", "wait"),
            Bar(s, 11, 12.5, "sample", "exposed"),
            Bar(s, 12.5, 13, "record", "exposed"),
        ],
    )
    assert hidden_share(bars) == pytest.approx((5, 8))


def test_work_that_outlasts_the_forward_is_split_where_the_forward_ends_and_the_next_step_follows():
    bars = layout(
        [
            event(2, {"process_tokens": 1.5, "fill_masks": 1.5}, {"schedule": 0.5, "sample": 1, "record": 0}),
            event(3, {"process_tokens": 1}, {"schedule": 0.25, "sample": 0.5, "record": 0.25}),
        ]
    )
    s, f = "scheduler thread", "forward thread"
    close(
        bars,
        [
            Bar(s, 0, 0.5, "schedule", "exposed"),
            Bar(f, 0.5, 2.5, "forward (4 requests)", "forward"),
            Bar(s, 0.5, 2, "process_tokens", "hidden"),
            Bar(s, 2, 2.5, "fill_masks", "hidden"),
            Bar(s, 2.5, 3.5, "fill_masks", "exposed"),  # no wait: the forward was done already
            Bar(s, 3.5, 4.5, "sample", "exposed"),
            Bar(s, 4.5, 4.75, "schedule", "exposed"),  # the record of 0 ms draws nothing
            Bar(f, 4.75, 7.75, "forward (4 requests)", "forward"),
            Bar(s, 4.75, 5.75, "process_tokens", "hidden"),
            Bar(s, 5.75, 7.75, "wait", "wait"),
            Bar(s, 7.75, 8.25, "sample", "exposed"),
            Bar(s, 8.25, 8.5, "record", "exposed"),
        ],
    )
    assert hidden_share(bars) == pytest.approx((3, 6.5))


def test_a_real_s7_run_draws_its_last_steps_without_overlaps_and_as_long_as_the_events_say(tmp_path):
    eng = sgl.Engine(stage="s7", max_total_tokens=4096, max_running_requests=8)
    try:
        regex = r'\{"name": "[a-z ]{1,12}"\}'
        eng.generate(
            [f"<|user|>\nName {i}?\n<|assistant|>\n" for i in range(8)], {"regex": regex, "max_new_tokens": 16}
        )
        trace = list(eng.scheduler.trace)
    finally:
        eng.shutdown()
    drawing = overlap_timeline(trace, steps=3)
    events = [e for e in trace if e["event"] == "overlap" and e["mode"] == "decode"][-3:]
    for lane in ("forward thread", "scheduler thread"):
        bars = [b for b in drawing.bars if b.lane == lane]
        assert all(a.end <= b.start + 1e-9 for a, b in zip(bars, bars[1:])), lane  # one thing at a time
    forwards = [b.end - b.start for b in drawing.bars if b.kind == "forward"]
    assert forwards == pytest.approx([1000 * e["forward_s"] for e in events])
    work = sum(1000 * (sum(e["during_forward"].values()) + sum(e["exposed"].values())) for e in events)
    assert hidden_share(drawing.bars)[1] == pytest.approx(work)
    root = ET.fromstring(drawing.save(tmp_path / "t.svg").read_text())
    assert root.tag.endswith("svg") and len(root.findall("{http://www.w3.org/2000/svg}rect")) >= len(drawing.bars)
    assert drawing._repr_svg_() == drawing.svg
    with pytest.raises(ValueError, match="as .svg"):
        drawing.save(tmp_path / "t.png")


def test_a_trace_without_overlapped_steps_is_refused_by_name():
    with pytest.raises(ValueError, match="no overlapped decode step"):
        overlap_timeline([{"event": "decode", "step": 1}])
