"""One request's place in our eager automaton: `FSMState`, the `Req.grammar` of stages s1-s4.

It implements the `Grammar` protocol (core.py) that every stage's per-request grammar
answers, as s5's backend matchers do (backends/base.py `BaseGrammarObject`), so the parts
stages share (s4's `JumpForward`) speak to either through the same methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .token_fsm import TokenFSM


@dataclass
class FSMState:
    """One request's position in its regex's FSM (stages s1-s4). Masking and advancing read
    `fsm` and `state` directly: how they do it is each stage's lesson."""

    fsm: TokenFSM
    state: int
    version: int = 0

    def is_terminated(self) -> bool:
        return self.fsm.is_complete(self.state)

    def jump_forward(self, tokenizer: Any = None) -> tuple[bytes, int] | None:
        if self.fsm.jump_map is None:
            raise ValueError("this FSM was compiled without its jump map (stage s4 compiles with jump_map=True)")
        return self.fsm.jump_map.jump_forward(self.state)

    def allowed_after(self, output_ids: list[int]) -> list[int]:
        return self.fsm.index.allowed_token_ids(self.fsm.walk(output_ids))

    def jump_and_retokenize(self, old_output_ids: list[int], new_output_ids: list[int], next_state: int) -> None:
        # The new ids may end before the jump chain's end (s4's seam rule), so the state is
        # walked over them rather than taken from the chain's end.
        self.state = self.fsm.walk(new_output_ids)
