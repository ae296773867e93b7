"""Graphviz DOT text for the automaton of a structural tag (chapter 07).

A structural tag (constrained/structural_tag.py) is free text until a trigger, then one of
the tags that trigger starts: the rest of its begin, a JSON value under its schema, its
end, then free text again. The drawing shows that shape, not every state of the regex it
compiles to:

- free text is the triggers' own automaton (`FreeText`): one state per prefix of a
  trigger, "how much of a trigger the text ends with"; each edge is drawn with the
  characters that take it, and every other character goes back to the empty prefix.
  Double circles are where the output may end (EOS is allowed there and only there);
- a completed trigger leads into a tag: a bold edge with the rest of its begin (forced
  text), a box for the JSON value (the schema's own automaton, chapter 05), a bold edge
  with the end, and back to free text, or, with `stop_after_first`, to a state where only
  EOS is left; with `at_least_one` the output starts with a tag, so the start arrow
  leads straight into one.

Wrap the text in `minisglang.drawings.Drawing` to see or save it.
"""
from __future__ import annotations

from minisglang.constrained.structural_tag import FreeText, StructuralTag
from minisglang.drawings.layout import Layout
from minisglang.drawings.render import dot_escape, show_text


def _chars_label(chars: list[str]) -> str:
    """The characters of one edge: one as literal text, several as a bracketed list."""
    if len(chars) == 1:
        return show_text(chars[0])
    return "[" + "".join(show_text(c)[1:-1] for c in sorted(chars)) + "]"


def structural_tag_dot(tag: StructuralTag, names: list[str] | None = None, title: str | None = None,
                       layout: Layout = Layout()) -> str:
    """DOT text for `tag`'s automaton (see the module doc). `names[k]` labels structure k's
    JSON box (default: "JSON under schema k"); `title` defaults to the flags; `layout`
    gives the direction and the font size (the drawing is small: it does not wrap)."""
    free = FreeText(tag.triggers)
    names = names or [f"schema {k}" for k in range(len(tag.structures))]
    if len(names) != len(tag.structures):
        raise ValueError(f"{len(names)} names for {len(tag.structures)} structures")
    flags = [f for f in ("at_least_one", "stop_after_first") if getattr(tag, f)]
    title = title or ("structural tag, triggers " + ", ".join(show_text(t) for t in tag.triggers)
                      + (f" ({', '.join(flags)})" if flags else ""))
    lines = ["digraph structural_tag {", f'  label="{dot_escape(title)}";', "  labelloc=t;",
             f"  rankdir={layout.rankdir};", *layout.font_lines(),
             '  node [fontname="Helvetica"];', '  edge [fontname="Helvetica"];', "  __start [shape=point];"]
    # Free text: the prefix states, where the output may end (a prefix of a trigger may
    # end it too). Under at_least_one they are reached only after a tag; under
    # stop_after_first a tag leads to "done" instead; with both, there is no free text.
    free_states = {} if tag.at_least_one and tag.stop_after_first else free.states
    alphabet = sorted({c for t in tag.triggers for c in t})
    for prefix, state in free_states.items():
        label = "free text" if not prefix else show_text(prefix)
        lines.append(f'  f{state} [shape=doublecircle, label="{dot_escape(label)}"];')
    for prefix, state in free_states.items():
        by_target: dict[str, list[str]] = {}
        for c in alphabet:
            target = free._next(prefix + c)
            key = f"t_{tag.triggers.index(target[1])}" if isinstance(target, tuple) else f"f{target}"
            by_target.setdefault(key, []).append(c)
        for key, chars in by_target.items():
            if key != "f0":
                lines.append(f'  f{state} -> {key} [label="{dot_escape(_chars_label(chars))}"];')
        other = "any other character" if state == 0 else "other"
        lines.append(f'  f{state} -> f0 [label="{other}", style=dashed];')
    # Each trigger completed: a small state, then one branch per tag that trigger starts.
    after = "f0"
    if tag.stop_after_first:
        after = "done"
        lines.append('  done [shape=doublecircle, label="only EOS"];')
    for i, trigger in enumerate(tag.triggers):
        lines.append(f'  t_{i} [shape=circle, label="{dot_escape(show_text(trigger))}"];')
    for k, s in enumerate(tag.structures):
        i = tag.triggers.index(tag.trigger_of(s))
        rest = s.begin[len(tag.triggers[i]):]
        lines.append(f'  body_{k} [shape=box, style=rounded, label="{dot_escape("JSON value, " + names[k])}"];')
        lines.append(f'  t_{i} -> body_{k} [label="{dot_escape(show_text(rest))}", style=bold, penwidth=2];')
        lines.append(f'  body_{k} -> {after} [label="{dot_escape(show_text(s.end))}", style=bold, penwidth=2];')
    if tag.at_least_one:
        # The output starts with a tag: the start arrow reads a whole trigger at once.
        for i, trigger in enumerate(tag.triggers):
            lines.append(f'  __start -> t_{i} [label="{dot_escape(show_text(trigger))}"];')
    else:
        lines.append("  __start -> f0;")
    lines.append("}")
    return "\n".join(lines) + "\n"
