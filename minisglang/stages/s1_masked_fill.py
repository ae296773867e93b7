"""Stage s1-masked-fill: SGLang's first release of constrained decoding (January 2024).

Read with chapters/01-masked-fill.md. What this stage adds to the bare engine:

1. When a request with a `regex` arrives, compile it right there, on the scheduler's
   thread: regex -> character DFA -> byte DFA -> token index
   `{state: {token_id: next_state}}` (minisglang/constrained/).
2. Before sampling, each constrained request gets one bool row over the vocabulary
   (True = allowed) and `logits[i].masked_fill_(~row, -inf)`: a Python loop over the batch,
   exactly the first release's `Batch.sample`.
3. After sampling, the request's FSM state (an `FSMState`, constrained/grammar.py: its
   FSM and the state it is in) moves along the chosen token. EOS is allowed
   only in accepting states; sampling it there finishes the request, and so does reaching
   an accepting state from which nothing can follow.

What it costs: the compile blocks every other request (s3 fixes that), and the mask loop
is one Python iteration and one full-vocabulary row per request per step (s2 fixes that).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..constrained.grammar import FSMState
from ..constrained.regex_dfa import RegexError, shown_regex
from ..constrained.token_fsm import ConstraintError, TokenFSM, compile_token_fsm
from ..core import AbortKind, Req
from .base import Stage, StageOptions, register


@dataclass(frozen=True)
class MaskedFillOptions(StageOptions):
    max_fsm_states: int = 10_000  # a regex whose DFA has more states is refused
    max_regex_chars: int | None = 100_000  # a longer regex is refused before anything is built


@register("s1-masked-fill")
class MaskedFillStage(Stage):
    Options = MaskedFillOptions
    options: MaskedFillOptions  # what __init__ parses with Options
    supports = frozenset({"regex"})
    grammar_errors = (ConstraintError, RegexError)

    # -- compile (hook 1: on arrival) ----------------------------------------------------
    def compile_fsm(self, regex: str) -> TokenFSM:
        """regex -> TokenFSM (constrained/token_fsm.py); raises ConstraintError."""
        return compile_token_fsm(
            regex, self.ctx.tokenizer, self.options.max_fsm_states, max_regex_chars=self.options.max_regex_chars
        )

    def on_arrival(self, req: Req) -> None:
        constraint = req.sampling_params.constraint()
        if constraint is None or self.refuse_unsupported(req):
            return
        kind, text = constraint
        try:
            fsm = self.compile_fsm(text)  # blocks the scheduler: the point of s3
        except ConstraintError as e:
            req.finish("abort", AbortKind.GRAMMAR, message=str(e))
            return
        req.grammar = FSMState(fsm, fsm.index.initial_state)

    # -- mask (hook 4) ---------------------------------------------------------------------
    def allowed_mask(self, grammar: FSMState) -> torch.Tensor:
        """Bool row [vocab_size]: True where the token may come next in this state.

        Columns past the tokenizer's vocabulary (padding of the logits) stay False.
        """
        # BEGIN SOLUTION task1_3
        row = torch.zeros(self.ctx.vocab_size, dtype=torch.bool)
        allowed = grammar.fsm.index.allowed_token_ids(grammar.state)
        if allowed:
            row[torch.tensor(allowed, dtype=torch.long)] = True
        return row
        # END SOLUTION

    def mask_logits(self, logits: torch.Tensor, reqs: list[Req[FSMState]]) -> None:
        """logits [B, vocab_size] in place: one bool row and one masked_fill_ per request."""
        # BEGIN SOLUTION task1_4
        for i, req in enumerate(reqs):
            if req.grammar is None or req.finished:
                continue
            row = self.allowed_mask(req.grammar).to(logits.device)
            if not bool(row.any()):
                # Never sample from an all -inf row: end this request with a clear reason.
                req.finish(
                    "abort",
                    AbortKind.GRAMMAR,
                    message=f"no token is allowed in FSM state {req.grammar.state} "
                    f"of regex {shown_regex(req.grammar.fsm.regex)}",
                )
                continue
            logits[i].masked_fill_(~row, float("-inf"))
        # END SOLUTION

    # -- advance (hook 5) ------------------------------------------------------------------
    def advance(self, req: Req[FSMState], token_id: int) -> None:
        """Move the FSM along the sampled token; finish at EOS or a dead-end accepting state."""
        g = req.grammar
        if g is None:
            return
        # BEGIN SOLUTION task1_5
        index = g.fsm.index
        if token_id == index.eos_token_id:
            # The mask only offers EOS in accepting states, so this is a clean stop.
            req.finish("stop", matched=token_id)
            return
        g.state = index.next_state(g.state, token_id)
        if g.state < 0:
            regex = shown_regex(g.fsm.regex)
            req.finish("abort", AbortKind.GRAMMAR, message=f"token {token_id} is not allowed by regex {regex}")
        elif g.fsm.is_complete(g.state):
            # Accepting and nothing can follow: the match is complete without waiting for EOS.
            req.finish("stop", matched=None)
        # END SOLUTION
