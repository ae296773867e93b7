"""Stage s4-jump-forward: skip the characters the regex leaves no choice about.

Read with chapters/04-jump-forward.md (SGLang v0.1.12, and the fixes #517/#551/#665/
#1084/#1654). Before each decode step, for every constrained request whose FSM state
starts a jump chain (constrained/jump_forward.py) longer than one character:

1. Give its tokens so far, with their KV slots, to the radix tree (the scheduler's
   `release_memory`: insert `(input + output)[:-1]`, free duplicates and the request's
   row, unlock the old node). The last token has no KV yet, which is fine: it will be
   recomputed.
2. Retokenize prompt text + output text + jump string. The new tokens may cut the text
   differently near the seam (`"age` + `":` may become `"` + `age":`); that is the reason
   to retokenize at all, so the model sees text tokenized the way it was trained.
   Refuse the jump if the prompt's own tokens would change (its last token fusing with
   the output), or if the jump would reach `max_new_tokens`.
3. Move the FSM to the chain's end, bump the request's `version` so its incremental
   detokenizer restarts (#665), and put it back in the waiting queue. The next prefill
   re-admits it; `match_prefix` finds the KV of everything up to the first changed token,
   so only the new suffix is computed.

Counting (#174/#189): `completion_tokens` is every token after the prompt, jumped or not;
`completion_tokens_wo_jump_forward` counts only the sampled ones.
Engine option: `jump_forward=False` turns the jumps off (then this stage is s3).
"""
from __future__ import annotations

from ..constrained.jump_forward import JumpForwardMap
from ..constrained.regex_dfa import ByteDFA
from ..constrained.token_index import TokenIndex
from ..core import Req
from ..tokenizer import IncrementalDetokenizer
from .base import register
from .s1_masked_fill import RegexFSM, compile_dfa
from .s3_fsm_cache import FSMCacheStage


def add_jump_map(fsm: RegexFSM, max_states: int) -> RegexFSM:
    """Attach `fsm.jump_map`, built from the same deterministic DFA so state ids match."""
    dfa = compile_dfa(fsm.regex, max_states)
    fsm.jump_map = JumpForwardMap.build(dfa, ByteDFA.from_char_dfa(dfa))
    return fsm


def walk_tokens(index: TokenIndex, token_ids: list[int]) -> int:
    """The FSM state after `token_ids` from the start (-1 if the index rejects them)."""
    state = index.initial_state
    for t in token_ids:
        state = index.next_state(state, t)
        if state < 0:
            return -1
    return state


@register("s4-jump-forward")
class JumpForwardStage(FSMCacheStage):
    def __init__(self, ctx):
        super().__init__(ctx)
        self.jump_forward = bool(ctx.options.get("jump_forward", True))
        self.jumps = 0            # jumps taken, for notebooks and benchmarks
        self.refused = 0          # jumps refused because retokenization changed the prompt

    def make_fsm(self, regex: str, index: TokenIndex) -> RegexFSM:
        """s3's FSM plus its jump-forward map (built from the same DFA, so state ids match)."""
        return add_jump_map(super().make_fsm(regex, index), self.max_fsm_states)

    # -- hook 3: before a decode step ---------------------------------------------------
    def before_decode(self, scheduler) -> None:
        if not self.jump_forward:
            return
        for req in list(scheduler.running):
            if req.grammar is None or req.finished:
                continue
            jump = self.find_jump(req)
            # One character is not worth a prefill round trip: sampling it costs one step.
            if jump is None or len(jump[0].decode("utf-8", errors="replace")) <= 1:
                continue
            new_output_ids = self.retokenize(req, jump[0])
            if new_output_ids is None:
                self.refused += 1
                continue
            new_output_ids = self.leave_the_seam_to_the_model(req, new_output_ids)
            if new_output_ids is None:
                continue
            old_output_ids = req.output_ids
            self.jump_and_readmit(scheduler, req, new_output_ids)
            self.move_grammar(req, old_output_ids, new_output_ids, jump[1])
            scheduler.record_event("jump", req, version=req.version, tokens=len(new_output_ids))

    def leave_the_seam_to_the_model(self, req: Req, new_output_ids: list[int]) -> list[int] | None:
        """Drop the jump's last token when the model could have merged it with what follows.

        A jump ends where the grammar offers a choice, often in the middle of what the model
        would write as one token: after `{"name":` the model was trained on `": "` as one
        token, and a forced `":` leaves it at a seam it never saw (the derailing measured in
        chapter 05). Giving that last piece back lets the model choose the merged token
        itself. Returns None when too little jump would be left.
        """
        kept = new_output_ids[:-1]
        if not self.could_merge_further(req, kept, new_output_ids[-1]):
            return new_output_ids
        tok = self.ctx.tokenizer
        gained = len(tok.decode_bytes(kept)) - len(tok.decode_bytes(req.output_ids))
        return kept if gained >= 2 else None

    def could_merge_further(self, req: Req, kept: list[int], last: int) -> bool:
        """After `kept`, does the grammar allow a longer token that starts with `last`'s bytes?"""
        index = req.grammar.fsm.index
        vocab = self.ctx.tokenizer.token_bytes
        head = vocab[last]
        return any(vocab[t] is not None and len(vocab[t]) > len(head) and vocab[t].startswith(head)
                   for t in index.allowed_token_ids(walk_tokens(index, kept)))

    def find_jump(self, req: Req) -> tuple[bytes, int] | None:
        """The forced bytes from the request's FSM state, and the state after them."""
        return req.grammar.fsm.jump_map.jump_forward(req.grammar.state)

    def move_grammar(self, req: Req, old_output_ids: list[int], new_output_ids: list[int], next_state: int) -> None:
        """Walk the FSM over the new output; finish if the jump completed the match.

        (The seam rule may have given the chain's last token back, so the state is walked
        rather than taken from the chain's end.)
        """
        index = req.grammar.fsm.index
        req.grammar.state = walk_tokens(index, new_output_ids)
        # Only an accepting state can be complete: asking that first skips listing the tokens of the others.
        if index.is_final(req.grammar.state) and index.allowed_token_ids(req.grammar.state) == [index.eos_token_id]:
            req.finish("stop", matched=None)  # nothing left to sample; leaves at the next step

    def retokenize(self, req: Req, jump_bytes: bytes) -> list[int] | None:
        """Output ids for prompt + output + jump, re-encoded; None when the jump must be refused."""
        # BEGIN SOLUTION task4_3
        tok = self.ctx.tokenizer
        out_bytes = b"".join(tok.token_bytes[t] or b"" for t in req.output_ids)
        try:
            new_text = (out_bytes + jump_bytes).decode("utf-8")
        except UnicodeDecodeError:
            return None
        all_ids = tok.encode(req.prompt + new_text)
        prompt_len = len(req.origin_input_ids)
        if all_ids[:prompt_len] != req.origin_input_ids:
            return None   # the prompt's last token fused with the output: its KV would be wrong
        new_output_ids = all_ids[prompt_len:]
        if b"".join(tok.token_bytes[t] or b"" for t in new_output_ids) != out_bytes + jump_bytes:
            return None   # the re-encoding is not byte-exact (normalisation): never trust it
        if len(new_output_ids) >= req.sampling_params.max_new_tokens:
            return None   # the jump would end the request at the length limit: decode instead
        return new_output_ids
        # END SOLUTION

    def jump_and_readmit(self, scheduler, req: Req, new_output_ids: list[int]) -> None:
        """Hand the KV to the radix tree, rewrite the output, and queue the request again."""
        # BEGIN SOLUTION task4_4
        scheduler.release_memory(req)         # insert (input+output)[:-1] with its slots, unlock
        req.output_ids = new_output_ids
        req.version += 1                      # the detokenizer restarts from the new ids (#665)
        req.detokenizer = IncrementalDetokenizer(self.ctx.tokenizer)
        req.output_text = req.detokenizer.feed(new_output_ids)
        req.detok_offset = len(new_output_ids)
        scheduler.running.remove(req)
        scheduler.waiting_queue.append(req)   # re-admitted by the next prefill, with a prefix hit
        # END SOLUTION
        self.jumps += 1
