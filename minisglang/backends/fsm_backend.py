"""Our own automaton (stages s1-s4) behind the s5 interface: backend "fsm".

Compiling is s1's regex -> DFA -> token index, s2's packed rows and s4's jump map; JSON
Schema goes through our compiler (constrained/json_schema.py) to a regex first. The
matcher keeps one FSM state and a history of states for `rollback`.
"""
from __future__ import annotations

import torch

from ..stages.s1_masked_fill import RegexFSM, compile_regex_index
from ..stages.s2_batched_mask import add_bitmasks
from ..stages.s4_jump_forward import add_jump_map, walk_tokens
from .base import BaseGrammarBackend, BaseGrammarObject, GrammarError, register_backend


class FSMGrammar(BaseGrammarObject):
    def __init__(self, fsm: RegexFSM):
        self.fsm = fsm
        self.state = fsm.index.initial_state
        self.history: list[int] = []       # states before each accepted token, for rollback
        self.terminated = False

    def accept_token(self, token_id: int) -> None:
        # BEGIN SOLUTION task5_1
        index = self.fsm.index
        if token_id == index.eos_token_id and index.is_final(self.state):
            self.history.append(self.state)
            self.terminated = True
            return
        nxt = index.next_state(self.state, token_id)
        if nxt < 0:
            raise GrammarError(f"token {token_id} is not allowed in state {self.state}")
        self.history.append(self.state)
        self.state = nxt
        # Accepting and nothing but EOS can follow: the match is complete (the cheap test
        # first: listing a state's tokens costs as much as the state allows).
        self.terminated = index.is_final(nxt) and index.allowed_token_ids(nxt) == [index.eos_token_id]
        # END SOLUTION

    def rollback(self, k: int) -> None:
        for _ in range(k):
            self.state = self.history.pop()
        self.terminated = False

    def is_terminated(self) -> bool:
        return self.terminated

    def copy(self) -> "FSMGrammar":
        return FSMGrammar(self.fsm)

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        # BEGIN SOLUTION task5_1
        vocab_mask[idx] = self.fsm.state_row[self.state]
        # END SOLUTION

    @classmethod
    def fill_vocab_mask_batched(cls, entries, vocab_mask: torch.Tensor) -> None:
        """s2's fill: the precomputed rows of all entries, stacked and written in one copy."""
        if entries:
            rows = [idx for _, idx in entries]
            vocab_mask[rows] = torch.stack([grammar.fsm.state_row[grammar.state] for grammar, _ in entries])

    def try_jump_forward(self, tokenizer):
        return self.fsm.jump_map.jump_forward(self.state)

    def jump_forward_str_state(self, helper) -> tuple[bytes, int]:
        return helper

    def jump_and_retokenize(self, old_output_ids, new_output_ids, next_state: int) -> None:
        # The new ids may end before the chain's end (s4's seam rule), so walk them; the
        # old history no longer lines up with the new tokens.
        self.state = walk_tokens(self.fsm.index, new_output_ids)
        self.history = []
        index = self.fsm.index
        self.terminated = index.is_final(self.state) and index.allowed_token_ids(self.state) == [index.eos_token_id]


@register_backend("fsm")
class FSMBackend(BaseGrammarBackend):
    kinds = frozenset({"regex", "json_schema"})

    def compile(self, kind: str, text: str) -> FSMGrammar:
        if kind == "json_schema":
            from ..constrained.json_schema import build_regex_from_schema

            regex = build_regex_from_schema(text, whitespace=self.options.get("json_whitespace"))
        else:
            regex = text
        max_states = int(self.options.get("max_fsm_states", 10_000))
        fsm = RegexFSM(regex, compile_regex_index(regex, self.tokenizer, max_states))
        return FSMGrammar(add_jump_map(add_bitmasks(fsm, self.vocab_size), max_states))
