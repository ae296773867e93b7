"""Graphviz DOT text for the compressed FSM of jump-forward decoding (chapter 4).

The compressed FSM is the character DFA with every chain of forced characters (states
with exactly one single-character edge, see constrained/jump_forward.py) collapsed into
one bold edge labelled with the whole forced string, such as `', "age": '`. Drawn beside
`char_dfa_dot` of the same DFA, it shows what jump-forward skips: the bold edges are text
the model never has to choose, one token at a time.
Wrap the text in `minisglang.drawings.Drawing` to see or save it.
"""

from __future__ import annotations

from minisglang.constrained.jump_forward import JumpForwardMap
from minisglang.constrained.regex_dfa import CharClass, CharDFA, shown_regex
from minisglang.drawings.fsm import _states, class_label, header
from minisglang.drawings.layout import Layout
from minisglang.drawings.render import dot_escape, show_text


def compressed_fsm_dot(
    dfa: CharDFA, jump_map: JumpForwardMap, layout: Layout = Layout(), title: str | None = None
) -> str:
    """DOT text for the compressed FSM of `dfa` (`jump_map` must be built from it).

    Kept states are drawn as in `char_dfa_dot` (double circles accept). A jump chain is one
    bold edge whose label is the forced string as literal text (`show_text`: in quotes,
    spaces as ␣); the other edges are grouped per (source, destination) pair with their
    character classes merged, exactly as `char_dfa_dot` labels them.
    """
    for state, (ch, nxt) in jump_map.char_edges.items():
        # A map from another regex would draw nonsense silently; check each chain link.
        if state >= dfa.num_states or list(dfa.transitions[state].values()) != [nxt] or dfa.step(state, ch) != nxt:
            raise ValueError(
                f"jump_map was not built from this DFA (regex {shown_regex(dfa.pattern)}): its state "
                f"{state} --{ch!r}--> {nxt} is not a single edge of the DFA"
            )
    class_of_label = {c.label(): c for c in dfa.classes}  # compressed_edges gives labels
    chains: list[tuple[int, str, int]] = []
    merged: dict[tuple[int, int], CharClass] = {}
    for src, label, dst in jump_map.compressed_edges(dfa):
        if src in jump_map.char_edges:
            chains.append((src, label, dst))
        else:
            c = class_of_label[label]
            merged[src, dst] = merged[src, dst].union(c) if (src, dst) in merged else c
    edges = [(src, dst, f'label="{dot_escape(show_text(text))}", style=bold, penwidth=2') for src, text, dst in chains]
    edges += [(src, dst, f'label="{dot_escape(class_label(c))}"') for (src, dst), c in merged.items()]
    kept = {dfa.initial} | {state for src, dst, _ in edges for state in (src, dst)}

    title = title or f"regex: {dfa.pattern}  (compressed: {len(kept)} of {dfa.num_states} states)"
    labels = {(src, dst): show_text(text) for src, text, dst in chains}
    labels.update({pair: class_label(c) for pair, c in merged.items()})
    placement = layout.place(dfa.initial, [(src, dst) for src, dst, _ in edges], sorted(kept), labels)
    lines = header("compressed_fsm", title, placement)
    lines += _states(sorted(kept), dfa.initial, dfa.finals, placement)
    for src, dst, attrs in sorted(edges):
        lines.append(f"  {src} -> {placement.target(src, dst)} [{attrs}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
