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

A trigger automaton (chapter 07's structural tag) has no such seam: every state there
falls back to an earlier one. Placed with `cut_back`, its rows are cut between two steps
of its chains, and an edge back into an earlier row ends, like one into a later row, at a
dashed copy of its state at the end of its own row. Its rows are as long as their
columns, which graphviz shares between rows, and as their copies allow.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Literal

PT_PER_PX = 0.75  # graphviz sizes are in points (72 to the inch), a screen's px 96
SLIDE_PX = (1920, 1080)  # a projected slide (full HD)
SLIDE_MARGIN_PX = 120  # what the title, the start arrow and the margins take
NODE_PT = 36.0  # graphviz's default state circle: 0.5 inch
SPACING_PT = 60.0  # around an edge label, between two states (calibrated on renders)
CHAR_EM = 0.6  # Courier's advance (the edge font): 0.6 of the font size


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

    def place(
        self,
        initial: int,
        edges: list[tuple[int, int]],
        states: list[int],
        labels: dict[tuple[int, int], str] | None = None,
        state_labels: dict[int, str] | None = None,
        cut_back: bool = False,
    ) -> Placement:
        """Where the states go: the direction, the font, and the rows. `labels` (the edge
        labels' text, lines split by newlines) lets a row's length be estimated; without
        them every edge counts as one character long. `state_labels`: the text drawn in a
        state where it is not its number. `cut_back`: rows may also be cut across edges
        that go back (a trigger automaton, whose every state falls back to an earlier one):
        the states are read by `distances`, rows cut where `seams` allows with `depth`."""
        lines = [f"  rankdir={self.rankdir};", *self.font_lines()]
        limit = self.row_limit_pt()
        if limit is None and self.states_per_row is None:
            return Placement(lines, {})
        depth = (distances if cut_back else chain_depths)(initial, edges, states)
        order = sorted(states, key=lambda s: (depth[s], s))  # chain_order, without cut_back
        rows = self._rows(order, edges, labels or {}, state_labels or {}, limit, depth if cut_back else None)
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

    def _rows(
        self,
        order: list[int],
        edges: list[tuple[int, int]],
        labels: dict[tuple[int, int], str],
        state_labels: dict[int, str],
        limit: float | None,
        depth: dict[int, int] | None,
    ) -> list[list[int]]:
        """Cut `order` into segments at its clean seams, then fill rows with whole segments.
        A segment longer than a row is cut, if it is an optional part, where only its skip
        edge goes past (that edge then ends in a dashed copy); a loop or an alternation is
        never cut: it gets a row of its own, however long. With `depth` (edges back may be
        cut) there are no such cuts: a segment is then one step of each chain, or branches
        that stay together."""
        weak = [] if depth else seams(order, edges, skip_edges=True)
        pieces: list[list[int]] = []
        start = 0
        for segment in cut(order, seams(order, edges, depth=depth)):
            too_long = limit is not None and self._length(segment, edges, labels, state_labels) > limit
            too_many = self.states_per_row is not None and len(segment) > self.states_per_row
            inside = [k - start for k in weak if start < k < start + len(segment)]
            pieces += cut(segment, inside) if too_long or too_many else [segment]
            start += len(segment)
        if depth is None:
            return self._fill_by_length(pieces, edges, labels, state_labels, limit)
        # Rows share their columns (graphviz ranks them together), so a later row can
        # widen an earlier one, and each row ends in a column of dashed copies: take the
        # most columns per row whose rows, so aligned, fit.
        rows: list[list[int]] = []
        for count in range(len(order), 0, -1):
            rows = self._fill_by_columns(pieces, depth, count)
            if limit is None or self._aligned_length(rows, depth, edges, labels, state_labels) <= limit:
                break
        return rows

    def _fill_by_length(
        self,
        pieces: list[list[int]],
        edges: list[tuple[int, int]],
        labels: dict[tuple[int, int], str],
        state_labels: dict[int, str],
        limit: float | None,
    ) -> list[list[int]]:
        """Rows of whole pieces, each filled while its estimated length stays within
        `limit` and its state count within `states_per_row`."""
        rows: list[list[int]] = []
        row: list[int] = []
        length = 0.0
        for piece in pieces:
            piece_length = self._length(piece, edges, labels, state_labels)
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
            rows[-1] += last  # a lone last state: its dashed copy would take as much room
        return rows

    def _fill_by_columns(self, pieces: list[list[int]], depth: dict[int, int], count: int) -> list[list[int]]:
        """Rows of whole pieces, each with at most `count` columns (states of one depth
        share a column) and `states_per_row` states; a longer piece has a row of its own."""
        rows: list[list[int]] = []
        row: list[int] = []
        for piece in pieces:
            columns = len({depth[s] for s in row + piece})
            fits_count = self.states_per_row is None or len(row) + len(piece) <= self.states_per_row
            if row and (columns > count or not fits_count):
                rows.append(row)
                row = []
            row += piece
        return rows + [row] if row else rows

    def _aligned_length(
        self,
        rows: list[list[int]],
        depth: dict[int, int],
        edges: list[tuple[int, int]],
        labels: dict[tuple[int, int], str],
        state_labels: dict[int, str],
    ) -> float:
        """The estimated length of rows that share their columns: each column as long as
        its longest state in any row, then the column of the dashed copies that end rows."""
        columns: list[float] = []
        copies = 0.0
        row_of = {s: r for r, row in enumerate(rows) for s in row}
        for r, row in enumerate(rows):
            first = depth[row[0]]
            for s, length in zip(row, self._widths(row, edges, labels, state_labels)):
                column = depth[s] - first
                columns += [0.0] * (column + 1 - len(columns))
                columns[column] = max(columns[column], length)
            for a, b in edges:
                if row_of.get(a) == r and row_of.get(b, r) != r:
                    copies = max(copies, self._circle(b, state_labels) + SPACING_PT)
        return sum(columns) + copies

    def _length(
        self,
        segment: list[int],
        edges: list[tuple[int, int]],
        labels: dict[tuple[int, int], str],
        state_labels: dict[int, str],
    ) -> float:
        """A segment's estimated length in points along the drawing's direction."""
        return sum(self._widths(segment, edges, labels, state_labels))

    def _widths(
        self,
        segment: list[int],
        edges: list[tuple[int, int]],
        labels: dict[tuple[int, int], str],
        state_labels: dict[int, str],
    ) -> list[float]:
        """Each state's estimated length in points along the drawing's direction: its
        circle, then the widest label (LR) or the tallest (TB) of the edges leaving it."""
        widths = []
        for s in segment:
            out = [labels.get((a, b), "x") for a, b in edges if a == s and b != s] or [""]  # a loop sits above
            if self.rankdir == "LR":
                label = max(len(line) for text in out for line in text.split("\n")) * CHAR_EM * self.font_pt
            else:
                label = max(len(text.split("\n")) for text in out) * 1.2 * self.font_pt
            widths.append(self._circle(s, state_labels) + label + SPACING_PT)
        return widths

    def _circle(self, state: int, state_labels: dict[int, str]) -> float:
        """A state's estimated length in points along the drawing's direction: as wide as
        its number or its text's widest line; a text (drawn in an ellipse) is, down (TB),
        as tall as its lines."""
        lines = state_labels.get(state, str(state)).split("\n")
        if self.rankdir == "TB" and state in state_labels:
            return max(NODE_PT, 1.2 * self.font_pt * len(lines) + 16)
        return max(NODE_PT, 0.6 * self.font_pt * max(len(line) for line in lines) + 16)


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
        return self.copy_name(row, dst) if row != self.row_of.get(dst, 0) else str(dst)

    @staticmethod
    def copy_name(row: int, state: int) -> str:
        """The DOT name of `state`'s dashed copy in `row`."""
        return f"c{row}_{state}"

    def copy_lines(self, finals) -> list[str]:
        """The dashed copies (double circles where the state accepts)."""
        return [
            f"  {self.copy_name(row, s)} [shape={'doublecircle' if s in finals else 'circle'}, style=dashed, "
            f'label="{s}"];'
            for row, s in self.copies
        ]


def chain_order(initial: int, edges: list[tuple[int, int]], states: list[int]) -> list[int]:
    """The states in reading order: by their depth (`chain_depths`), so that where
    branches join, the join comes after every branch. Unreachable states come last."""
    depth = chain_depths(initial, edges, states)
    return sorted(states, key=lambda s: (depth[s], s))


def chain_depths(initial: int, edges: list[tuple[int, int]], states: list[int]) -> dict[int, int]:
    """Each state's longest distance from `initial` along edges that do not go back (an
    edge to a state still being explored is a loop's way back); unreachable states are
    one deeper than the deepest."""
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
            if nxt not in on_path:  # an edge back onto the path is a loop: not a forward edge
                forward.setdefault(state, []).append(nxt)
            if nxt not in seen:
                seen.add(nxt)
                on_path.add(nxt)
                stack.append((nxt, 0))
        else:
            on_path.discard(state)
            post.append(state)
    depth = {initial: 0}
    for state in reversed(post):  # topological order: every forward edge's source first
        for nxt in forward.get(state, []):
            depth[nxt] = max(depth.get(nxt, 0), depth[state] + 1)
    far = max(depth.values()) + 1
    return {s: depth.get(s, far) for s in states}


def distances(initial: int, edges: list[tuple[int, int]], states: list[int]) -> dict[int, int]:
    """Each state's fewest edges from `initial` (breadth first); unreachable states are one
    further than the furthest. In a trigger automaton, whose every state has edges back,
    that is how much of a trigger the text ends with: the order it is read in."""
    out: dict[int, list[int]] = {}
    for src, dst in edges:
        out.setdefault(src, []).append(dst)
    distance = {initial: 0}
    queue = deque([initial])
    while queue:
        state = queue.popleft()
        for nxt in out.get(state, []):
            if nxt not in distance:
                distance[nxt] = distance[state] + 1
                queue.append(nxt)
    far = max(distance.values()) + 1
    return {s: distance.get(s, far) for s in states}


def seams(
    order: list[int], edges: list[tuple[int, int]], skip_edges: bool = False, depth: dict[int, int] | None = None
) -> list[int]:
    """The positions k in `order` where a row may end before order[k]: a clean seam, where
    every edge between the states before and the states from k on goes forward, into
    order[k]. With `skip_edges`, also where one forward edge goes past it (an optional
    part's way around): never inside a loop, nor between an alternation's branches.

    With `depth` (each state's `distances`), edges that do not go deeper are let across
    (each ends in a dashed copy): a seam is then between two depths, where every edge
    deeper across links one state of a chain to the next, the only edge deeper out of the
    one and into the other. So parallel chains (two triggers) are cut together, and
    branches that meet again only through an edge back are never cut apart."""
    position = {s: i for i, s in enumerate(order)}
    crossing = [(position[a], position[b]) for a, b in edges if a != b and a in position and b in position]
    if depth is not None:
        return _chain_seams(order, [(a, b) for a, b in crossing if depth[order[a]] < depth[order[b]]], depth)
    found = []
    for k in range(1, len(order)):
        across = [(a, b) for a, b in crossing if min(a, b) < k <= max(a, b)]
        past = len({(a, b) for a, b in across if b != k})
        if all(a < k for a, _ in across) and past <= (1 if skip_edges else 0):
            found.append(k)
    return found


def _chain_seams(order: list[int], forward: list[tuple[int, int]], depth: dict[int, int]) -> list[int]:
    """`seams` with edges back let across: `forward` are the edges deeper, as positions."""
    out = Counter(a for a, _ in set(forward))
    into = Counter(b for _, b in set(forward))
    found = []
    for k in range(1, len(order)):
        if depth[order[k - 1]] == depth[order[k]]:
            continue
        across = {(a, b) for a, b in forward if a < k <= b}
        if all(depth[order[b]] == depth[order[a]] + 1 and out[a] == 1 and into[b] == 1 for a, b in across):
            found.append(k)
    return found


def cut(order: list[int], positions: list[int]) -> list[list[int]]:
    """`order` cut before each of `positions`."""
    bounds = [0, *positions, len(order)]
    return [order[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


def segments_at_seams(order: list[int], edges: list[tuple[int, int]]) -> list[list[int]]:
    """`order` cut at its clean seams (see `seams`)."""
    return cut(order, seams(order, edges))
