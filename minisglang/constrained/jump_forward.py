"""The compressed FSM of SGLang's jump-forward decoding (LMSYS blog, February 2024).

Many states of a regex's DFA leave no choice: after `{"name": "Li", ` the next characters
must be `"age": `. A state *jumps* iff it has exactly one outgoing edge and that edge
carries exactly one character; following such states until the next branching point
gives a string the model does not need to choose, one token at a time.

Two rules keep the walk honest (chapters/04-jump-forward.md):
- An accepting state never jumps if it has any outgoing edge: "may stop here" is a choice
  too (SGLang #1084: `[-+]?[0-9]+[ ]*` made the old walk loop forever).
- Byte level (#517/#551): if the model stopped in the middle of a multi-byte character
  (a byte-DFA state numbered past the character states), the chain starts with the
  continuation bytes that are forced, so Chinese and emoji in fixed text work.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .regex_dfa import ByteDFA, CharDFA


@dataclass(frozen=True)
class JumpForwardMap:
    """`char_edges[state] = (character, next_state)` for every state that jumps.

    `byte_edges[state] = (byte, next_state)` for byte-DFA states in the middle of a
    character that have exactly one possible next byte.
    """

    char_edges: dict[int, tuple[str, int]]
    byte_edges: dict[int, tuple[int, int]]
    num_char_states: int

    @classmethod
    def build(cls, dfa: CharDFA, byte_dfa: ByteDFA) -> JumpForwardMap:
        """Find the jump states of `dfa` (and the forced continuation bytes of `byte_dfa`)."""
        # BEGIN SOLUTION task4_1
        char_edges = {}
        for state, edges in dfa.transitions.items():
            if len(edges) != 1 or state in dfa.finals:
                continue  # a choice of edges, or a choice between stopping and going on
            ((char_class, nxt),) = edges.items()
            if not char_class.negated and len(char_class.chars) == 1:
                char_edges[state] = (next(iter(char_class.chars)), nxt)
        byte_edges = {}
        for state in range(byte_dfa.num_char_states, byte_dfa.num_states):
            (options,) = np.nonzero(byte_dfa.table[state] >= 0)
            if len(options) == 1:
                byte_edges[state] = (int(options[0]), int(byte_dfa.table[state, options[0]]))
        return cls(char_edges, byte_edges, byte_dfa.num_char_states)
        # END SOLUTION

    def jump_forward(self, state: int) -> tuple[bytes, int] | None:
        """The forced bytes from `state` up to the next choice, and the state there.

        Returns None when nothing is forced. The bytes decode as UTF-8 once appended to
        whatever partial character the state was in the middle of.
        """
        # BEGIN SOLUTION task4_2
        out = bytearray()
        while state >= self.num_char_states and state in self.byte_edges:
            byte, state = self.byte_edges[state]
            out.append(byte)
        seen = set()
        while state in self.char_edges and state not in seen:
            seen.add(state)  # a DFA with no dead states cannot cycle here; guard anyway
            ch, state = self.char_edges[state]
            out += ch.encode("utf-8")
        return (bytes(out), state) if out else None
        # END SOLUTION

    def compressed_edges(self, dfa: CharDFA) -> list[tuple[int, str, int]]:
        """(src, label, dst) of the compressed FSM: every jump chain becomes one edge.

        The states kept are the initial state, every state that branches, and every state
        a branching state leads to; a kept state that jumps gets one edge labelled with its
        whole chain. Used by drawings/compressed.py.
        """
        branching = [s for s in range(dfa.num_states) if s not in self.char_edges]
        kept = {dfa.initial, *branching}
        kept |= {nxt for s in branching for nxt in dfa.transitions[s].values()}
        edges = []
        for state in sorted(kept):
            if state in self.char_edges:
                jump = self.jump_forward(state)
                assert jump is not None  # a state with a char edge forces at least that character
                chain, end = jump
                edges.append((state, chain.decode("utf-8"), end))
            else:
                edges += [(state, c.label(), nxt) for c, nxt in dfa.transitions[state].items()]
        return edges
