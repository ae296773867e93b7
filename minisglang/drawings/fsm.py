"""Graphviz DOT text for finite state machines: the character DFA and the token FSM.

`char_dfa_dot` draws what the regex means (edges carry character classes such as
`[0-9]`); `token_fsm_dot` draws what the model can actually do (edges carry tokens such
as `{"` or `2024`). Comparing the two pictures is the point of chapter 1.
Wrap the text in `minisglang.drawings.Drawing` to see or save it.
"""
from __future__ import annotations

from minisglang.constrained.regex_dfa import CharClass, CharDFA
from minisglang.drawings.render import dot_escape

_HEADER = [
    "  rankdir=LR;",
    '  node [shape=circle, fontname="Helvetica"];',
    '  edge [fontname="Courier"];',
    '  __start [shape=point, label=""];',
]


def _states(num_or_ids, initial: int, finals) -> list[str]:
    lines = [f"  __start -> {initial};"]
    for s in num_or_ids:
        shape = "doublecircle" if s in finals else "circle"
        lines.append(f'  {s} [shape={shape}, label="{s}"];')
    return lines


def char_dfa_dot(dfa: CharDFA) -> str:
    """DOT text for a character DFA: a start arrow, double circles for accepting states,
    and one edge per (source, destination) pair labelled with the merged character class."""
    lines = ["digraph char_dfa {", *_HEADER, f'  label="regex: {dot_escape(dfa.pattern)}";', "  labelloc=t;"]
    lines += _states(range(dfa.num_states), dfa.initial, dfa.finals)
    for src in range(dfa.num_states):
        merged: dict[int, CharClass] = {}
        for char_class, dst in dfa.transitions[src].items():
            merged[dst] = merged[dst].union(char_class) if dst in merged else char_class
        for dst, char_class in merged.items():
            lines.append(f'  {src} -> {dst} [label="{dot_escape(char_class.label())}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def _token_text(tokenizer, token_id: int) -> str:
    """A token as Python would print its text: `'{"'`, `' the'`, or bytes for a piece of
    a multi-byte character (`b'\\xe4'`)."""
    data = tokenizer.token_bytes[token_id]
    try:
        return repr(data.decode("utf-8"))
    except UnicodeDecodeError:
        return repr(data)


def token_fsm_dot(index, tokenizer, max_tokens_per_edge: int = 6, max_edges: int = 80) -> str:
    """DOT text for a token index (TokenIndex or LazyTokenIndex: the states visited so far).

    Edges are grouped per (source, destination) pair and labelled with up to
    `max_tokens_per_edge` tokens (lowest ids first), then "… +N more"; at most `max_edges`
    edges are drawn, in (source, destination) order, and a note counts the rest.
    `tokenizer` needs `token_bytes`. EOS is not drawn: accepting states (where it is
    allowed) have double circles.
    """
    edges: dict[tuple[int, int], list[int]] = {}
    for src in sorted(index.state_to_tokens):
        for token_id, dst in index.state_to_tokens[src].items():
            if token_id != index.eos_token_id:
                edges.setdefault((src, dst), []).append(token_id)
    states = set(index.state_to_tokens) | {dst for _, dst in edges}  # lazy: + not yet visited
    lines = ["digraph token_fsm {", *_HEADER]
    lines += _states(sorted(states), index.initial_state, index.final_states)
    pairs = sorted(edges)
    for src, dst in pairs[:max_edges]:
        tokens = sorted(edges[src, dst])
        shown = [_token_text(tokenizer, t) for t in tokens[:max_tokens_per_edge]]
        if len(tokens) > max_tokens_per_edge:
            shown.append(f"… +{len(tokens) - max_tokens_per_edge} more")
        label = "\\n".join(dot_escape(text) for text in shown)  # \n: a line break inside DOT
        lines.append(f'  {src} -> {dst} [label="{label}"];')
    if len(pairs) > max_edges:
        lines.append(f'  __more [shape=note, label="… +{len(pairs) - max_edges} more edges"];')
    lines.append("}")
    return "\n".join(lines) + "\n"
