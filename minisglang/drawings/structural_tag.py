"""Graphviz DOT text for the automaton of a structural tag (chapter 07).

A structural tag (constrained/structural_tag.py) is free text until a trigger, then one of
the tags that trigger starts: the rest of its begin, a JSON value under its schema, its
end, then free text again. The drawing shows that shape, not every state of the regex it
compiles to:

- free text is the triggers' own automaton (`FreeText`): one state per prefix of a
  trigger, "how much of a trigger the text ends with"; each edge is drawn with the
  characters that take it. Every other character goes back to free text (the empty
  prefix): those edges, one from every state, are not drawn, and the title says so.
  Double outlines are where the output may end (EOS is allowed there and only there);
- a completed trigger leads into a tag: a bold edge with the rest of its begin (forced
  text, a long one in several quoted lines), a box for the JSON value (the schema's own
  automaton, chapter 05), a bold edge with the end, and back to free text, or, with
  `stop_after_first`, to a state where only EOS is left; with `at_least_one` the output
  starts with a tag: from the start state, a whole trigger.

A long trigger is a long chain of prefix states, each with edges back: the layout wraps
it into rows (`Layout.place` with `cut_back`), and an edge into another row (back, as a
fallback, or on, as the chain goes on) ends at a dashed copy of its state at the end of
its own row.

Wrap the text in `minisglang.drawings.Drawing` to see or save it.
"""

from __future__ import annotations

import re

from minisglang.constrained.structural_tag import FreeText, StructuralTag
from minisglang.drawings.layout import Layout
from minisglang.drawings.render import dot_escape, show_text

BOLD = "style=bold, penwidth=2"  # forced text: the rest of a begin, an end
# An edge that extends the match weighs more, so that graphviz keeps the chain of
# prefixes straight and bends the edges back around it.
CHAIN = "weight=10"


def _chars_label(chars: list[str]) -> str:
    """The characters of one edge: one as literal text, several as a bracketed list."""
    if len(chars) == 1:
        return show_text(chars[0])
    return "[" + "".join(show_text(c)[1:-1] for c in sorted(chars)) + "]"


def _text_lines(text: str, width: int = 24) -> str:
    """Forced text as drawn on an edge: in quotes, and when longer than `width`, cut before
    a space into lines, each in its own quotes, read one after the other (as Python reads
    'a' 'b'): the lines joined are exactly `text`."""
    lines = [""]
    for piece in re.split(r"(?= )", text):  # each piece but the first starts with its space
        if lines[-1] and len(lines[-1]) + len(piece) > width:
            lines.append(piece)
        else:
            lines[-1] += piece
    return "\n".join(show_text(line) for line in lines)


def structural_tag_dot(
    tag: StructuralTag, names: list[str] | None = None, title: str | None = None, layout: Layout = Layout()
) -> str:
    """DOT text for `tag`'s automaton (see the module doc). `names[k]` labels structure k's
    JSON box (default: "schema k"); `title` defaults to the triggers and the flags;
    `layout` gives the direction, the font size and where rows wrap."""
    free = FreeText(tag.triggers)
    names = names or [f"schema {k}" for k in range(len(tag.structures))]
    if len(names) != len(tag.structures):
        raise ValueError(f"{len(names)} names for {len(tag.structures)} structures")
    flags = [f for f in ("at_least_one", "stop_after_first") if getattr(tag, f)]
    title = title or (
        "structural tag, triggers "
        + ", ".join(show_text(t) for t in tag.triggers)
        + (f" ({', '.join(flags)})" if flags else "")
    )
    # States are numbered for the layout: the prefix states keep FreeText's numbers (the
    # empty prefix, free text, is 0), then a state per trigger, a box per structure,
    # "only EOS" and the start state (each drawn only where the flags have it).
    shapes: dict[int, str] = {}
    texts: dict[int, str] = {}
    edges: dict[tuple[int, int], tuple[str, str]] = {}  # (src, dst) -> (label, style)
    # Free text: the prefix states, where the output may end (a prefix of a trigger may
    # end it too). Under at_least_one they are reached only after a tag; under
    # stop_after_first a tag leads to "done" instead; with both, there is no free text.
    free_states = {} if tag.at_least_one and tag.stop_after_first else free.states
    trigger_state = {t: len(free.states) + i for i, t in enumerate(tag.triggers)}
    body_state = [len(free.states) + len(tag.triggers) + k for k in range(len(tag.structures))]
    done = body_state[-1] + 1
    start = done + 1
    for prefix, state in free_states.items():
        shapes[state], texts[state] = "may end", "free text" if not prefix else show_text(prefix)
    alphabet = sorted({c for t in tag.triggers for c in t})
    prefix_of = {state: prefix for prefix, state in free_states.items()}
    for prefix, state in free_states.items():
        by_target: dict[int, list[str]] = {}
        for c in alphabet:
            target = free._next(prefix + c)
            by_target.setdefault(trigger_state[target[1]] if isinstance(target, tuple) else target, []).append(c)
        for target, chars in by_target.items():
            if target != 0:  # the characters back to free text are not drawn: the legend says so
                extends = target not in prefix_of or len(prefix_of[target]) > len(prefix)
                edges[state, target] = (_chars_label(chars), CHAIN if extends else "")
    # Each trigger completed: a small state, then one branch per tag that trigger starts.
    after = 0
    if tag.stop_after_first:
        after = done
        shapes[done], texts[done] = "may end", "only EOS"
    for trigger, state in trigger_state.items():
        shapes[state], texts[state] = "state", show_text(trigger)
    for k, s in enumerate(tag.structures):
        shapes[body_state[k]], texts[body_state[k]] = "box", "JSON value\n" + names[k]
        edges[trigger_state[tag.trigger_of(s)], body_state[k]] = (_text_lines(s.begin[len(tag.trigger_of(s)) :]), BOLD)
        edges[body_state[k], after] = (_text_lines(s.end), BOLD)
    initial = 0
    if tag.at_least_one:
        # The output starts with a tag: from the start, a whole trigger is read at once
        # (the output may not end there: a single outline).
        initial = start
        shapes[start], texts[start] = "state", "start"
        for trigger, state in trigger_state.items():
            edges[start, state] = (show_text(trigger), "")
    placement = layout.place(
        initial, list(edges), list(shapes), {pair: label for pair, (label, _) in edges.items()}, texts, cut_back=True
    )
    legend = ["from a state, each character without an edge goes back to free text"] if free_states else []
    lines = [
        "digraph structural_tag {",
        f'  label="{_dot_text(chr(10).join([title, *legend]))}";',
        "  labelloc=t;",
        '  node [fontname="Helvetica"];',
        '  edge [fontname="Helvetica"];',
        "  __start [shape=point];",
        *placement.lines,
        f"  __start -> {initial};",
    ]
    for state, shape in shapes.items():
        lines.append(f"  {state} [{_node_attrs(shape, texts[state])}];")
    for row, state in placement.copies:
        lines.append(f"  {placement.copy_name(row, state)} [{_node_attrs(shapes[state], texts[state], dashed=True)}];")
    for (src, dst), (label, style) in edges.items():
        attrs = ", ".join(a for a in (f'label="{_dot_text(label)}"' if label else "", style) if a)
        lines.append(f"  {src} -> {placement.target(src, dst)}" + (f" [{attrs}]" if attrs else "") + ";")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _node_attrs(shape: str, text: str, dashed: bool = False) -> str:
    """A state's DOT attributes: an ellipse round its text (a circle round a long prefix
    would be as tall as it is wide), doubled where the output may end; a JSON value's
    box has round corners; a copy (where an edge into another row ends) is dashed."""
    styles = (["rounded"] if shape == "box" else []) + (["dashed"] if dashed else [])
    style = f', style="{",".join(styles)}"' if styles else ""
    outline = {"may end": "ellipse, peripheries=2", "state": "ellipse", "box": "box"}[shape]
    return f'shape={outline}{style}, label="{_dot_text(text)}"'


def _dot_text(text: str) -> str:
    """Text for a double-quoted DOT string: escaped, its lines joined by DOT's line break."""
    return dot_escape(text).replace("\n", "\\n")
