"""The overlap timeline (chapter 08): what the scheduler thread does while the forward runs.

Drawn from the "overlap" events of a real trace (minisglang/overlap.py records one per
overlapped step): each event gives the forward's seconds, the work done during it and the
work on the critical path, by name, but no clock times, so the picture lays each step out
as overlap.py runs it. The scheduler thread builds the batch (unless it was built during
the last forward) and launches the forward; while the forward thread computes, the
scheduler does the `during_forward` parts one after another, then waits; once the logits
are there it samples and records, and the next step begins.

Colours say what the chapter measures: work that ran while the forward did is hidden
(green); work the forward waited for, before its launch or after its end, is exposed
(orange); a part that outlasts the forward is split where the forward ended.

The picture is SVG written directly (a timeline is not a graph, so graphviz is not used):
`OverlapTimeline` shows itself inline in Jupyter and saves as .svg.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WIDTH = 1100
LEFT = 170  # room for the lane names
RIGHT = 20
LANES = {"forward thread": 50, "scheduler thread": 105}
BAR = 34  # a bar's height
HIDDEN, EXPOSED, FORWARD, WAIT = "#66bb6a", "#ffa726", "#42a5f5", "#9e9e9e"
STYLE = "text{font-family:Helvetica,Arial,sans-serif;font-size:15px;fill:#222}.small{font-size:13px;fill:#444}"


@dataclass(frozen=True)
class Bar:
    """One bar of the picture: its lane, start and end (ms from the first step's start),
    its label and whether it is the forward, hidden work, exposed work or a wait."""

    lane: str
    start: float
    end: float
    label: str
    kind: str  # "forward" | "hidden" | "exposed" | "wait"


def layout(events: list[dict[str, Any]]) -> list[Bar]:
    """The bars of consecutive "overlap" events, laid out as overlap.py runs a step."""
    bars: list[Bar] = []
    t = 0.0
    for e in events:
        exposed = {k: 1000 * v for k, v in e["exposed"].items()}
        schedule = exposed.pop("schedule", 0.0)
        bars.append(Bar("scheduler thread", t, t + schedule, "schedule", "exposed"))
        launch = t + schedule
        end = launch + 1000 * e["forward_s"]
        bars.append(Bar("forward thread", launch, end, f"forward ({e['reqs']} requests)", "forward"))
        t = launch
        for name, seconds in e["during_forward"].items():
            stop = t + 1000 * seconds
            if t < end:  # the part of it that ran while the forward did
                bars.append(Bar("scheduler thread", t, min(stop, end), name, "hidden"))
            if stop > end:  # and what outlasted the forward
                bars.append(Bar("scheduler thread", max(t, end), stop, name, "exposed"))
            t = stop
        if t < end:
            bars.append(Bar("scheduler thread", t, end, "wait", "wait"))
            t = end
        for name, ms in exposed.items():  # sample, record: they need the logits
            bars.append(Bar("scheduler thread", t, t + ms, name, "exposed"))
            t += ms
    return [b for b in bars if b.end > b.start]


def hidden_share(bars: list[Bar]) -> tuple[float, float]:
    """(ms of scheduler work hidden, ms of scheduler work in all): the waits are not work."""
    work = [b for b in bars if b.kind in ("hidden", "exposed")]
    return sum(b.end - b.start for b in work if b.kind == "hidden"), sum(b.end - b.start for b in work)


def timeline_svg(bars: list[Bar], title: str) -> str:
    """A standalone SVG picture of `bars` (its own namespace, title and styles)."""
    span = max((b.end for b in bars), default=1.0)
    scale = (WIDTH - LEFT - RIGHT) / span
    x = lambda ms: LEFT + ms * scale  # noqa: E731
    colour = {"forward": FORWARD, "hidden": HIDDEN, "exposed": EXPOSED, "wait": WAIT}
    parts = [f'<text x="{LEFT}" y="24">{html.escape(title)}</text>']
    for lane, y in LANES.items():
        parts.append(f'<text x="{LEFT - 10}" y="{y + BAR / 2 + 5}" text-anchor="end">{lane}</text>')
    for b in bars:
        y, w = LANES[b.lane], (b.end - b.start) * scale
        height = BAR if b.kind != "wait" else 6
        top = y if b.kind != "wait" else y + BAR / 2 - 3
        parts.append(
            f'<rect x="{x(b.start):.1f}" y="{top:.1f}" width="{w:.1f}" height="{height}" fill="{colour[b.kind]}" '
            f'stroke="#fff" stroke-width="1"><title>{html.escape(b.label)}: {b.end - b.start:.2f} ms '
            f"({b.kind})</title></rect>"
        )
        if b.kind != "wait" and w > 9 * len(b.label):  # a label only where it fits
            parts.append(
                f'<text class="small" x="{x(b.start) + w / 2:.1f}" y="{y + BAR / 2 + 5}" '
                f'text-anchor="middle">{html.escape(b.label)}</text>'
            )
    axis = LANES["scheduler thread"] + BAR + 22
    step = next(s for s in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 10**9) if span / s <= 12)
    for k in range(int(span // step) + 1):
        parts.append(f'<text class="small" x="{x(k * step):.1f}" y="{axis}" text-anchor="middle">{k * step} ms</text>')
    hidden, work = hidden_share(bars)
    legend = [("forward", FORWARD), ("CPU work hidden behind it", HIDDEN), ("CPU work exposed", EXPOSED)]
    lx, ly = LEFT, axis + 28
    for name, fill in legend:
        parts.append(f'<rect x="{lx}" y="{ly - 13}" width="16" height="16" fill="{fill}"/>')
        parts.append(f'<text x="{lx + 22}" y="{ly}">{name}</text>')
        lx += 30 + 9 * len(name)
    share = f"{hidden / work:.0%}" if work else "-"
    parts.append(f'<text x="{lx}" y="{ly}">hidden: {hidden:.1f} of {work:.1f} ms of scheduler work ({share})</text>')
    height = ly + 14
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" '
        f'height="{height}" role="img" aria-label="{html.escape(title)}"><title>{html.escape(title)}</title>'
        f"<style>{STYLE}</style>" + "".join(parts) + "</svg>\n"
    )


@dataclass(frozen=True)
class OverlapTimeline:
    """The timeline of some overlapped steps: inline in Jupyter, `.save("x.svg")` to a file."""

    bars: list[Bar]
    title: str

    @property
    def svg(self) -> str:
        return timeline_svg(self.bars, self.title)

    def _repr_svg_(self) -> str:
        return self.svg

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        if path.suffix.lower() != ".svg":
            raise ValueError(f"the timeline is drawn as SVG: save it as .svg, not {path.name!r}")
        path.write_text(self.svg, encoding="utf-8")
        return path


def overlap_timeline(trace: list[dict[str, Any]], steps: int = 3, title: str | None = None) -> OverlapTimeline:
    """The last `steps` overlapped decode steps of the engine's `trace` (its "overlap" events)."""
    events = [e for e in trace if e.get("event") == "overlap" and e.get("mode") == "decode"]
    if not events:
        raise ValueError(
            "the trace has no overlapped decode step: run stage s7 with overlap on "
            "(disable_overlap_schedule=False, no speculative_algorithm) on requests that decode"
        )
    events = events[-steps:]
    if title is None:
        title = f"{len(events)} overlapped decode steps (batch {events[-1]['reqs']})"
    return OverlapTimeline(layout(events), title)
