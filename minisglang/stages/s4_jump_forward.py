"""Stage s4-jump-forward: skip the characters the regex leaves no choice about.

Read with chapters/04-jump-forward.md (SGLang v0.1.12, and the fixes #517/#551/#665/
#1084/#1654). Before each decode step, for every constrained request whose FSM state
starts a jump chain (constrained/jump_forward.py) longer than one character:

1. Retokenize prompt text + output text + jump string. The new tokens may cut the text
   differently near the seam (`"age` + `":` may become `"` + `age":`); that is the reason
   to retokenize at all, so the model sees text tokenized the way it was trained.
   Refuse the jump if the prompt's own tokens would change (its last token fusing with
   the output), or if the jump would reach `max_new_tokens`.
2. Move the FSM to the end of the new output (bumping its `version`: the output was
   rewritten), and answer hook 3 with the request and its new output. The scheduler
   performs the re-admission (`Scheduler.readmit`, task 4_4): it gives the tokens so far,
   with their KV slots, to the radix tree (`release_memory`), rewrites the output,
   restarts the request's incremental detokenizer (#665), and puts it back in the waiting
   queue. The next prefill re-admits it; `match_prefix` finds the KV of everything up to
   the first changed token, so only the new suffix is computed.

The jump itself is a part, `JumpForward`, that stage s5 composes too: it speaks to the
request's grammar through the `Grammar` protocol (constrained/grammar.py), which s4's
`FSMState` and s5's matchers both implement. The compile service builds the jump map
from the same DFA as the token index (constrained/token_fsm.py).

Counting (#174/#189): `completion_tokens` is every token after the prompt, jumped or not;
`completion_tokens_wo_jump_forward` counts only the sampled ones.
Engine option: `jump_forward=False` turns the jumps off (then this stage is s3).
"""

from __future__ import annotations

import bisect
import functools
import weakref
from dataclasses import dataclass
from typing import Any

from ..core import Grammar, Req
from ..tokenizer import Tokenizer
from .base import Readmit, StageContext, register
from .s3_fsm_cache import FSMCacheOptions, FSMCacheStage


def constrained(req: Req) -> Grammar:
    """The grammar of a request that jumps: only constrained requests get this far."""
    grammar: Grammar | None = req.grammar
    if grammar is None:
        raise ValueError(f"request {req.rid} has no grammar: only a constrained request jumps")
    return grammar


class JumpForward:
    """Hook 3 as a part: which running requests jump, and to which output.

    It asks each request's grammar (the `Grammar` protocol, constrained/grammar.py) for the
    forced bytes, the tokens it allows after a prefix (the seam rule), and to follow the
    rewritten output, so s4's FSM states and s5's backend matchers jump the same way.
    """

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.jumps = 0  # jumps taken, for notebooks and benchmarks
        self.refused = 0  # jumps refused because retokenization changed the prompt
        self.longest_token = max((len(b) for b in tokenizer.token_bytes if b), default=1)
        # Requests whose forced text was too long for them once: finding it again costs as much
        # (xgrammar took 1.2 s a step for `"a"{1000000}`), and jumping is only a speed-up.
        self.no_more_jumps: weakref.WeakSet[Req] = weakref.WeakSet()

    def before_decode(self, running: list[Req]) -> list[Readmit]:
        readmit = []
        for req in running:
            if req.grammar is None or req.finished or req in self.no_more_jumps:
                continue
            jump = self.find_jump(req)
            # One character is not worth a prefill round trip: sampling it costs one step.
            if jump is None or len(jump[0].decode("utf-8", errors="replace")) <= 1:
                continue
            # A jump this long needs max_new_tokens tokens or more, so retokenize would refuse it;
            # refuse it before encoding it (`"a"{1000000}` once cost 5 s of encoding per step).
            if len(jump[0]) >= req.sampling_params.max_new_tokens * self.longest_token:
                self.no_more_jumps.add(req)
                continue
            new_output_ids = self.retokenize(req, jump[0])
            if new_output_ids is None:
                self.refused += 1
                continue
            new_output_ids = self.leave_the_seam_to_the_model(req, new_output_ids)
            if new_output_ids is None:
                continue
            self.move_grammar(req, new_output_ids, jump[1])
            readmit.append(Readmit(req, new_output_ids))
            self.jumps += 1
        return readmit

    def find_jump(self, req: Req) -> tuple[bytes, Any] | None:
        """The bytes the request's grammar forces from where it is, and the state after them."""
        return constrained(req).jump_forward(self.tokenizer)

    def move_grammar(self, req: Req, new_output_ids: list[int], next_state: Any) -> None:
        """Bring the grammar to the end of the new output; finish if the jump completed the match."""
        g = constrained(req)
        g.jump_and_retokenize(req.output_ids, new_output_ids, next_state)
        g.version += 1  # the output is rewritten: a stream restarts its text (#665)
        if self.jump_ended(req):  # nothing left to sample: it leaves at the next step
            req.finish("stop", matched=None)

    def jump_ended(self, req: Req) -> bool:
        """Whether the jump completed the match (after `move_grammar` moved the grammar)."""
        return constrained(req).is_terminated()

    def leave_the_seam_to_the_model(self, req: Req, new_output_ids: list[int]) -> list[int] | None:
        """Give back the end of the jump that the model could have merged with what follows.

        A jump ends where the grammar offers a choice, often in the middle of what the model
        would write as one token: after `{"name":` the model was trained on `": "` as one
        token, and a forced `":` leaves it at a seam it never saw (the derailing measured in
        chapter 05). Giving that piece back lets the model choose the merged token itself.
        The piece may be more than one token: a forced `", "arguments": {` ends in `": ` and
        `{`, where the model writes `": {"` (`keep_before_seam`). Returns None when too
        little jump would be left.
        """
        keep = self.keep_before_seam(req, new_output_ids, floor=0)
        if keep == len(new_output_ids):
            return new_output_ids
        kept, tok = new_output_ids[:keep], self.tokenizer
        # (negative: the seam reaches into the old output)
        gained = len(tok.decode_bytes(kept)) - len(tok.decode_bytes(req.output_ids))
        return kept if gained >= 2 else None

    def keep_before_seam(self, req: Req, ids: list[int], floor: int) -> int:
        """How many of the output `ids` to keep (at least `floor`): the tail the model could
        write as part of one longer token is given back, token by token from the end, while
        a token of the vocabulary (one the grammar allows there) starts with the tail's
        bytes and goes on."""
        vocab = self.tokenizer.token_bytes
        keep, given = len(ids), b""
        while keep > floor:
            head = (vocab[ids[keep - 1]] or b"") + given
            if not self.could_merge_further(req, ids[: keep - 1], head):
                break
            keep, given = keep - 1, head
        return keep

    def could_merge_further(self, req: Req, kept: list[int], head: bytes) -> bool:
        """After `kept`, might the model write a longer token that starts with `head`?

        Only if the vocabulary has one; and then, if the grammar can list what it allows
        after `kept` (our FSM can, library matchers cannot cheaply), only if it allows one.
        """
        if not self.starts_a_longer_token(head):
            return False
        allowed = constrained(req).allowed_after(kept)
        if allowed is None:
            return True
        vocab = self.tokenizer.token_bytes
        spelled = (vocab[t] for t in allowed)
        return any(b is not None and len(b) > len(head) and b.startswith(head) for b in spelled)

    def starts_a_longer_token(self, head: bytes) -> bool:
        """Whether some token of the vocabulary starts with `head` and is longer."""
        spellings = self.sorted_spellings
        i = bisect.bisect_right(spellings, head)  # the first spelling after `head` itself
        return i < len(spellings) and spellings[i].startswith(head)

    @functools.cached_property
    def sorted_spellings(self) -> list[bytes]:
        """Every token's bytes, sorted (the tokens that start with some bytes are then one run)."""
        return sorted({b for b in self.tokenizer.token_bytes if b})

    def retokenize(self, req: Req, jump_bytes: bytes) -> list[int] | None:
        """Output ids for prompt + output + jump, re-encoded; None when the jump must be refused."""
        # BEGIN SOLUTION task4_3
        tok = self.tokenizer
        out_bytes = b"".join(tok.token_bytes[t] or b"" for t in req.output_ids)
        try:
            new_text = (out_bytes + jump_bytes).decode("utf-8")
        except UnicodeDecodeError:
            return None
        all_ids = tok.encode_extended(req.prompt, req.origin_input_ids, new_text)  # = encode(prompt + text)
        prompt_len = len(req.origin_input_ids)
        if all_ids[:prompt_len] != req.origin_input_ids:
            return None  # the prompt's last token fused with the output: its KV would be wrong
        new_output_ids = all_ids[prompt_len:]
        if b"".join(tok.token_bytes[t] or b"" for t in new_output_ids) != out_bytes + jump_bytes:
            return None  # the re-encoding is not byte-exact (normalisation): never trust it
        if len(new_output_ids) >= req.sampling_params.max_new_tokens:
            return None  # the jump would end the request at the length limit: decode instead
        return new_output_ids
        # END SOLUTION


@dataclass(frozen=True)
class JumpForwardOptions(FSMCacheOptions):
    jump_forward: bool = True  # False: this stage is s3


@register("s4-jump-forward")
class JumpForwardStage(FSMCacheStage):
    Options = JumpForwardOptions
    options: JumpForwardOptions
    builds_jump_map = True  # the compile service adds the jump map, from the same DFA

    def __init__(self, ctx: StageContext):
        super().__init__(ctx)
        self.jump = JumpForward(ctx.tokenizer)

    # -- hook 3: before a decode step ---------------------------------------------------
    def before_decode(self, running: list[Req]) -> list[Readmit]:
        return self.jump.before_decode(running) if self.options.jump_forward else []

    @property
    def jumps(self) -> int:
        return self.jump.jumps

    @property
    def refused(self) -> int:
        return self.jump.refused
