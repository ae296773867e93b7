"""Graphviz DOT text for finite state machines: the character DFA and the token FSM.

`char_dfa_dot` draws what the regex means (edges carry character classes such as
`[0-9]`); `token_fsm_dot` draws what the model can actually do (edges carry tokens such
as `{"` or `2024`). Comparing the two pictures is the point of chapter 1.
Wrap the text in `minisglang.drawings.Drawing` to see or save it.
"""

from __future__ import annotations

from minisglang.constrained.regex_dfa import CharClass, CharDFA
from minisglang.drawings.layout import Layout, Placement
from minisglang.drawings.render import dot_escape, show_char, show_text

_HEADER = [
    '  node [shape=circle, fontname="Helvetica"];',
    '  edge [fontname="Courier"];',
    '  __start [shape=point, label=""];',
]


def header(name: str, title: str, placement: Placement) -> list[str]:
    """The opening lines every automaton drawing shares: its title on top, then the layout."""
    return [f"digraph {name} {{", f'  label="{dot_escape(title)}";', "  labelloc=t;", *_HEADER, *placement.lines]


def _states(num_or_ids, initial: int, finals, placement: Placement) -> list[str]:
    lines = [f"  __start -> {initial};"]
    for s in num_or_ids:
        shape = "doublecircle" if s in finals else "circle"
        lines.append(f'  {s} [shape={shape}, label="{s}"];')
    return lines + placement.copy_lines(finals)


def class_label(char_class: CharClass) -> str:
    """An edge's characters: one character as literal text (`'{'`, `'␣'`), several as a
    bare class in regex syntax with visible whitespace (`[0-9]`, `[^"\\\\]`, `[␣,]`)."""
    if not char_class.negated and len(char_class.chars) == 1:
        return show_text(next(iter(char_class.chars)))
    return "".join(show_char(c) if c in " " else c for c in char_class.label())


def char_dfa_dot(dfa: CharDFA, layout: Layout = Layout(), title: str | None = None) -> str:
    """DOT text for a character DFA: a title (default: the regex), a start arrow, double
    circles for accepting states, and one edge per (source, destination) pair labelled
    with the merged character class."""
    edges: dict[tuple[int, int], CharClass] = {}
    for src in range(dfa.num_states):
        for char_class, dst in dfa.transitions[src].items():
            edges[src, dst] = edges[src, dst].union(char_class) if (src, dst) in edges else char_class
    labels = {pair: class_label(char_class) for pair, char_class in edges.items()}
    placement = layout.place(dfa.initial, list(edges), list(range(dfa.num_states)), labels)
    lines = header("char_dfa", title or f"regex: {dfa.pattern}", placement)
    lines += _states(range(dfa.num_states), dfa.initial, dfa.finals, placement)
    for (src, dst), label in labels.items():
        lines.append(f'  {src} -> {placement.target(src, dst)} [label="{dot_escape(label)}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def _token_text(tokenizer, token_id: int) -> str:
    """A token as literal text (`'{"'`, `'␣the'`), or as bytes for a piece of a
    multi-byte character (`b'\\xe4'`)."""
    data = tokenizer.token_bytes[token_id]
    try:
        return show_text(data.decode("utf-8"))
    except UnicodeDecodeError:
        return repr(data)


def token_fsm_dot(
    index,
    tokenizer,
    max_tokens_per_edge: int = 6,
    max_edges: int = 80,
    layout: Layout = Layout(),
    title: str | None = None,
) -> str:
    """DOT text for a token index (TokenIndex or LazyTokenIndex: the states visited so far).

    Edges are grouped per (source, destination) pair and labelled with up to
    `max_tokens_per_edge` tokens (lowest ids first), then "… +N more"; at most `max_edges`
    edges are drawn, in (source, destination) order, and a note counts the rest.
    `tokenizer` needs `token_bytes`. EOS is not drawn: accepting states (where it is
    allowed) have double circles. The default title counts the states and edges.
    """
    edges: dict[tuple[int, int], list[int]] = {}
    for src in sorted(index.state_to_tokens):
        for token_id, dst in index.state_to_tokens[src].items():
            if token_id != index.eos_token_id:
                edges.setdefault((src, dst), []).append(token_id)
    states = set(index.state_to_tokens) | {dst for _, dst in edges}  # lazy: + not yet visited
    pairs = sorted(edges)
    title = title or f"token FSM: {len(states)} states, {len(pairs)} edges (EOS not drawn)"
    shown: dict[tuple[int, int], list[str]] = {}
    for src, dst in pairs[:max_edges]:
        tokens = sorted(edges[src, dst])
        shown[src, dst] = [_token_text(tokenizer, t) for t in tokens[:max_tokens_per_edge]]
        if len(tokens) > max_tokens_per_edge:
            shown[src, dst].append(f"… +{len(tokens) - max_tokens_per_edge} more")
    placement = layout.place(
        index.initial_state,
        pairs[:max_edges],
        sorted(states),
        {pair: "\n".join(texts) for pair, texts in shown.items()},
    )
    lines = header("token_fsm", title, placement)
    lines += _states(sorted(states), index.initial_state, index.final_states, placement)
    for src, dst in pairs[:max_edges]:
        label = "\\n".join(dot_escape(text) for text in shown[src, dst])  # \n: a line break inside DOT
        lines.append(f'  {src} -> {placement.target(src, dst)} [label="{label}"];')
    if len(pairs) > max_edges:
        lines.append(f'  __more [shape=note, label="… +{len(pairs) - max_edges} more edges"];')
    lines.append("}")
    return "\n".join(lines) + "\n"
