"""The automaton drawn beside a trace, with a map from grammar states to the nodes drawn.

Two drawings, chosen by what the request's grammar is:

- the compressed FSM (drawings/compressed.py, chapter 04) of an eager FSM (stages s1-s4,
  the "fsm" backend with `automaton="eager"`) when it has at most `MAX_COMPRESSED_STATES`
  states: the whole automaton, a state inside a forced chain drawn as the chain's start;
- otherwise the path: the states the request went through and the tokens it took
  between them (a jump's forced text as one bold edge), which is the neighbourhood of
  every current state. A lazy automaton (the "fsm" backend's default) has no whole to draw.

A library that exposes no state (xgrammar, llguidance) gets no drawing, and a note saying so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..drawings.layout import Layout
from ..drawings.render import dot_escape, show_text
from .record import Trace

MAX_COMPRESSED_STATES = 30  # a bigger compressed FSM does not read on a slide: draw the path
MAX_PATH_STATES = 80  # the path view draws the first states visited, up to this many
MAX_LABELS_PER_EDGE = 3


@dataclass
class Automaton:
    """A drawing for the page: `dot` (None: nothing to draw), `node_of` (grammar state,
    as text, -> the name of the node drawn for it), `kind` and a `note` for the reader."""

    dot: str | None
    node_of: dict[str, str] = field(default_factory=dict)
    kind: str = "none"
    note: str = ""
    svg: str | None = None  # the rendering, made once by html.py


def draw_automaton(grammar: Any, trace: Trace, backend: str | None) -> Automaton:
    """The drawing for `trace`, whose request had `grammar` (None: unconstrained)."""
    states = [s.state for s in trace.steps if isinstance(s.state, int)]
    if grammar is None:
        return Automaton(None, note="an unconstrained request: no automaton")
    if not states:
        who = f"the {backend!r} backend" if backend else "this grammar"
        return Automaton(None, note=f"{who} exposes no automaton state, so none is drawn (the 'fsm' backend does)")
    fsm = getattr(getattr(grammar, "inner", grammar), "fsm", None)
    if fsm is not None and type(fsm).__name__ == "TokenFSM":  # eager: its states are the DFA's
        drawn = compressed(fsm.regex, fsm.jump_map)
        if drawn is not None:
            return drawn
    return path_view(trace)


def compressed(regex: str, jump_map: Any = None) -> Automaton | None:
    """The compressed FSM of `regex`, or None when it is too big (or this copy of the
    package predates stage s4's jump map)."""
    try:
        from ..constrained.jump_forward import JumpForwardMap
        from ..constrained.regex_dfa import ByteDFA, compile_regex
        from ..drawings.compressed import compressed_fsm_dot
    except ImportError:  # a checkout of s1-s3 has no jump_forward.py
        return None
    dfa = compile_regex(regex)  # the same construction as the FSM's, so the same state numbers
    jump_map = jump_map or JumpForwardMap.build(dfa, ByteDFA.from_char_dfa(dfa))
    edges = jump_map.compressed_edges(dfa)
    kept = {dfa.initial} | {s for src, _, dst in edges for s in (src, dst)}
    if len(kept) > MAX_COMPRESSED_STATES:
        return None
    node_of = {str(s): str(s) for s in kept}
    for start in kept:  # a state inside a forced chain is drawn as the chain's first state
        state = start
        while state in jump_map.char_edges:
            state = jump_map.char_edges[state][1]
            if str(state) not in node_of:
                node_of[str(state)] = str(start)
    layout = Layout(states_per_row=6) if len(kept) > 8 else Layout()
    try:
        dot = compressed_fsm_dot(dfa, jump_map, layout=layout)
    except ValueError:  # the FSM's jump map numbers its states otherwise: draw the path instead
        return None
    return Automaton(
        dot,
        node_of,
        "compressed",
        f"the compressed FSM ({len(kept)} of {dfa.num_states} states); bold edges are forced text",
    )


def path_view(trace: Trace) -> Automaton:
    """The states the request visited, joined by the tokens it took (jumps in bold)."""
    order: list[int] = []
    edges: dict[tuple[int, int], list[str]] = {}
    bold: set[tuple[int, int]] = set()
    jumps = {e.before_step: e.info["forced"] for e in trace.events if e.kind == "jump"}
    steps = [s for s in trace.steps if isinstance(s.state, int)]
    for s in steps:
        if isinstance(s.state, int) and s.state not in order:
            order.append(s.state)
    order = order[:MAX_PATH_STATES]
    shown = set(order)
    for a, b in zip(steps, steps[1:]):
        src, dst = a.state, b.state
        if src not in shown or dst not in shown:
            continue
        assert isinstance(src, int) and isinstance(dst, int)
        label = show_text(a.token_text)
        if b.index in jumps:
            label += " + " + show_text(jumps[b.index])
            bold.add((src, dst))
        labels = edges.setdefault((src, dst), [])
        if label not in labels:
            labels.append(label)
    layout = Layout(states_per_row=6) if len(order) > 8 else Layout()
    placement = layout.place(order[0], list(edges), order)
    more = f", the first {MAX_PATH_STATES}" if len(shown) < len({s.state for s in steps}) else ""
    lines = [
        "digraph path {",
        f'  label="{dot_escape(f"the states this request visited{more}")}";',
        "  labelloc=t;",
        '  node [shape=circle, fontname="Helvetica", fontsize=20];',
        '  edge [fontname="Courier", fontsize=18];',
        '  __start [shape=point, label=""];',
        *placement.lines,
        f"  __start -> {order[0]};",
    ]
    lines += [f'  {s} [label="{s}"];' for s in order]
    for (src, dst), labels in edges.items():
        text = labels[:MAX_LABELS_PER_EDGE] + (
            [f"… +{len(labels) - MAX_LABELS_PER_EDGE} more"] if len(labels) > MAX_LABELS_PER_EDGE else []
        )
        style = ", style=bold, penwidth=2" if (src, dst) in bold else ""
        label = "\\n".join(dot_escape(t) for t in text)
        lines.append(f'  {src} -> {placement.target(src, dst)} [label="{label}"{style}];')
    lines += placement.copy_lines(())
    lines.append("}")
    node_of = {str(s): str(s) for s in order}
    return Automaton(
        "\n".join(lines) + "\n",
        node_of,
        "path",
        "the states this request went through and the tokens it took"
        + (" (bold: a jump's forced text)" if bold else ""),  # (no jump at s7, nor at s5-s6 without one)
    )
