"""How an automaton drawing is laid out, so that it reads on a projected slide.

A realistic regex's automaton is a long chain: drawn in one row, a 40-state chain is
4,400 px wide and its text shrinks to 7 px on a 1920-px projector. `Layout` wraps the
chain into rows that fit a 1920 x 1080 slide, with text 18 px high, the least the back row
of a classroom reads.

It wraps only where the drawing can be cut cleanly: at a state that everything before it
leads into, and that nothing after it leads back from. That is a seam between two parts of
the regex's top-level concatenation (`\\{"name": ` | `"[a-z]+"` | ...). An alternation such
as `(red|green|blue)` has no such state inside it, so its branches always stay in one row,
side by side, exactly as graphviz draws them unwrapped.

In DOT, each row is an ordinary left-to-right layout; the rows' first states share a rank
(so the rows start flush left, one under the other). An edge into a later row ends at a
dashed copy of its state, at the end of its own row, as a wrapped line of text ends with a
hyphen: a long edge curving back across the drawing would be harder to follow. Only an
optional part too long for one row (its skip edge spans it) is cut inside; a loop never is.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

PT_PER_PX = 0.75                  # graphviz sizes are in points (72 to the inch), a screen's px 96
SLIDE_PX = (1920, 1080)           # a projected slide (full HD)
SLIDE_MARGIN_PX = 120             # what the title, the start arrow and the margins take
NODE_PT = 36.0                    # graphviz's default state circle: 0.5 inch
SPACING_PT = 60.0                 # around an edge label, between two states (calibrated on renders)
CHAR_EM = 0.6                     # Courier's advance (the edge font): 0.6 of the font size


@dataclass(frozen=True)
class Layout:
    """Layout options of an automaton drawing; unknown options are refused (a dataclass).

    rankdir: "LR" (rows read left to right) or "TB" (columns read top to bottom).
    wrap_px: the most px (at 96 dpi) a row may span in its direction; "slide" fits a
    1920 x 1080 slide (1800 across for LR, 960 down for TB); None never wraps.
    states_per_row: at most this many states in a row as well (None: no count).
    font_px: the text height in px at 96 dpi (18: readable projected; graphviz's default
    14 pt is 18.7 px).
    """

    rankdir: str = "LR"
    wrap_px: int | None | Literal["slide"] = "slide"
    states_per_row: int | None = None
    font_px: float = 18.0

    def __post_init__(self) -> None:
        if self.rankdir not in ("LR", "TB"):
            raise ValueError(f"Layout.rankdir must be 'LR' or 'TB', not {self.rankdir!r}")
        if self.wrap_px not in (None, "slide") and (not isinstance(self.wrap_px, int) or self.wrap_px < 200):
            raise ValueError(f"Layout.wrap_px must be an int >= 200 (px), 'slide' or None, not {self.wrap_px!r}")
        if self.states_per_row is not None and (not isinstance(self.states_per_row, int) or self.states_per_row < 2):
            raise ValueError(f"Layout.states_per_row must be an int >= 2 or None, not {self.states_per_row!r}")
        if not isinstance(self.font_px, (int, float)) or not 8 <= self.font_px <= 72:
            raise ValueError(f"Layout.font_px must be a number from 8 to 72, not {self.font_px!r}")

    @property
    def font_pt(self) -> float:
        """The font size graphviz is given (points)."""
        return round(self.font_px * PT_PER_PX, 2)

    def row_limit_pt(self) -> float | None:
        """The length a row may take in its direction, in points (None: no limit)."""
        if self.wrap_px is None:
            return None
        px = self.wrap_px if self.wrap_px != "slide" else SLIDE_PX[self.rankdir == "TB"] - SLIDE_MARGIN_PX
        return px * PT_PER_PX

    def font_lines(self) -> list[str]:
        """DOT lines that set every text of the drawing (title, states, edges) to font_px."""
        size = f"{self.font_pt:g}"
        return [f"  graph [fontsize={size}];", f"  node [fontsize={size}];", f"  edge [fontsize={size}];"]

    def place(self, initial: int, edges: list[tuple[int, int]], states: list[int],
              labels: dict[tuple[int, int], str] | None = None) -> Placement:
        """Where the states go: the direction, the font, and the rows. `labels` (the edge
        labels' text, lines split by newlines) lets a row's length be estimated; without
        them every edge counts as one character long."""
        lines = [f"  rankdir={self.rankdir};", *self.font_lines()]
        limit = self.row_limit_pt()
        if limit is None and self.states_per_row is None:
            return Placement(lines, {})
        order = chain_order(initial, edges, states)
        rows = self._rows(order, edges, labels or {}, limit)
        if len(rows) == 1:
            return Placement(lines, {})
        # The rows' first states share a rank (flush left, LR) and are chained by invisible
        # edges, which within one rank keep the rows in order, each under the one before.
        firsts = [row[0] for row in rows]
        lines.append("  { rank=same; " + " ".join(f"{s};" for s in firsts) + " }")
        lines += [f"  {a} -> {b} [style=invis];" for a, b in zip(firsts, firsts[1:])]
        row_of = {s: r for r, row in enumerate(rows) for s in row}
        copies = sorted({(row_of[a], b) for a, b in edges if a in row_of and b in row_of and row_of[a] != row_of[b]})
        return Placement(lines, row_of, copies)

    def _rows(self, order: list[int], edges: list[tuple[int, int]], labels: dict[tuple[int, int], str],
              limit: float | None) -> list[list[int]]:
        """Cut `order` into segments at its clean seams, then fill rows with whole segments
        while the row's estimated length stays within `limit` and its state count within
        `states_per_row`. A segment longer than a row is cut, if it is an optional part,
        where only its skip edge goes past (that edge then ends in a dashed copy); a loop
        or an alternation is never cut: it gets a row of its own, however long."""
        weak = seams(order, edges, skip_edges=True)
        pieces: list[list[int]] = []
        start = 0
        for segment in segments_at_seams(order, edges):
            too_long = limit is not None and self._length(segment, edges, labels) > limit
            too_many = self.states_per_row is not None and len(segment) > self.states_per_row
            inside = [k - start for k in weak if start < k < start + len(segment)]
            pieces += cut(segment, inside) if too_long or too_many else [segment]
            start += len(segment)
        rows: list[list[int]] = []
        row: list[int] = []
        length = 0.0
        for piece in pieces:
            piece_length = self._length(piece, edges, labels)
            fits_length = limit is None or length + piece_length <= limit
            fits_count = self.states_per_row is None or len(row) + len(piece) <= self.states_per_row
            if row and not (fits_length and fits_count):
                rows.append(row)
                row, length = [], 0.0
            row += piece
            length += piece_length
        if row:
            rows.append(row)
        if len(rows) > 1 and len(rows[-1]) == 1:
            last = rows.pop()
            rows[-1] += last   # a lone last state: its dashed copy would take as much room
        return rows

    def _length(self, segment: list[int], edges: list[tuple[int, int]], labels: dict[tuple[int, int], str]) -> float:
        """A segment's estimated length in points along the drawing's direction: per state,
        its circle, then the widest label (LR) or the tallest (TB) of the edges leaving it."""
        total = 0.0
        for s in segment:
            out = [labels.get((a, b), "x") for a, b in edges if a == s and b != s] or [""]   # a loop sits above
            if self.rankdir == "LR":
                label = max(len(line) for text in out for line in text.split("\n")) * CHAR_EM * self.font_pt
            else:
                label = max(len(text.split("\n")) for text in out) * 1.2 * self.font_pt
            total += max(NODE_PT, 0.6 * self.font_pt * len(str(s)) + 16) + label + SPACING_PT
        return total


@dataclass(frozen=True)
class Placement:
    """A layout applied to one drawing: its DOT lines, the row of each state, and the
    (row, state) pairs where an edge from that row leads into a later row. Such an edge
    ends at a dashed copy of its state at the end of its own row: a wrapped line's
    "continued below"."""

    lines: list[str]
    row_of: dict[int, int]
    copies: list[tuple[int, int]] = field(default_factory=list)

    def target(self, src: int, dst: int) -> str:
        """The node an edge src -> dst points to: dst, or dst's dashed copy in src's row."""
        row = self.row_of.get(src, 0)
        return f"c{row}_{dst}" if row != self.row_of.get(dst, 0) else str(dst)

    def copy_lines(self, finals) -> list[str]:
        """The dashed copies (double circles where the state accepts)."""
        return [f'  c{row}_{s} [shape={"doublecircle" if s in finals else "circle"}, style=dashed, label="{s}"];'
                for row, s in self.copies]


def chain_order(initial: int, edges: list[tuple[int, int]], states: list[int]) -> list[int]:
    """The states in reading order: by their longest distance from `initial` along edges
    that do not go back (an edge to a state still being explored is a loop's way back),
    so that where branches join, the join comes after every branch. Unreachable states
    come last."""
    out: dict[int, list[int]] = {}
    for src, dst in edges:
        out.setdefault(src, []).append(dst)
    # Depth-first, without recursion: post-order gives a topological order of the forward edges.
    post, on_path, seen = [], set(), {initial}
    stack: list[tuple[int, int]] = [(initial, 0)]
    on_path.add(initial)
    forward: dict[int, list[int]] = {}
    while stack:
        state, i = stack.pop()
        targets = out.get(state, [])
        if i < len(targets):
            stack.append((state, i + 1))
            nxt = targets[i]
            if nxt not in on_path:   # an edge back onto the path is a loop: not a forward edge
                forward.setdefault(state, []).append(nxt)
            if nxt not in seen:
                seen.add(nxt)
                on_path.add(nxt)
                stack.append((nxt, 0))
        else:
            on_path.discard(state)
            post.append(state)
    depth = {initial: 0}
    for state in reversed(post):   # topological order: every forward edge's source first
        for nxt in forward.get(state, []):
            depth[nxt] = max(depth.get(nxt, 0), depth[state] + 1)
    far = max(depth.values()) + 1
    return sorted(states, key=lambda s: (depth.get(s, far), s))


def seams(order: list[int], edges: list[tuple[int, int]], skip_edges: bool = False) -> list[int]:
    """The positions k in `order` where a row may end before order[k]: a clean seam, where
    every edge between the states before and the states from k on goes forward, into
    order[k]. With `skip_edges`, also where one forward edge goes past it (an optional
    part's way around): never inside a loop, nor between an alternation's branches."""
    position = {s: i for i, s in enumerate(order)}
    crossing = [(position[a], position[b]) for a, b in edges if a != b and a in position and b in position]
    found = []
    for k in range(1, len(order)):
        across = [(a, b) for a, b in crossing if min(a, b) < k <= max(a, b)]
        past = len({(a, b) for a, b in across if b != k})
        if all(a < k for a, _ in across) and past <= (1 if skip_edges else 0):
            found.append(k)
    return found


def cut(order: list[int], positions: list[int]) -> list[list[int]]:
    """`order` cut before each of `positions`."""
    bounds = [0, *positions, len(order)]
    return [order[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


def segments_at_seams(order: list[int], edges: list[tuple[int, int]]) -> list[list[int]]:
    """`order` cut at its clean seams (see `seams`)."""
    return cut(order, seams(order, edges))
