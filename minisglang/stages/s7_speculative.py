"""Stage s7-speculative: draft several tokens, verify them in one forward, keep what the
grammar allows and the model agrees with.

Read with chapter 08 (SGLang's NGRAM speculative algorithm, EAGLE's grammar-aware
verification, xgrammar's rollback). s6 decodes one token per forward; on a CPU ~80% of
a step is that forward, and an extraction answer is mostly text the prompt already holds
or the grammar forces. This stage keeps s6 and changes the decode step:

1. draft:   for each decoding request, up to k = `speculative_num_draft_tokens` guesses
            (minisglang/speculative.py): prompt lookup ("NGRAM"), the grammar's forced
            text ("FORCED", what s4 jumped over), or forced text then lookup;
2. mask chain: the grammar fills the mask row at the first position, checks the first
            draft against it, accepts it, fills the next row, ... and `rollback`s all it
            accepted: one packed row per position, and the drafts cut at the first one
            the grammar forbids (it could never be kept);
3. verify:  ONE extend forward of the last token and the drafts on top of the request's
            KV (s0's extend attention) gives the model's logits at every position;
4. accept:  greedy keeps the longest run of drafts equal to the masked argmax, then the
            model's own token; sampling uses rejection sampling against the masked
            distribution, so the output is distributed exactly as s6's (a seeded request
            the same law with its noise fixed by seed and position, `seeded_scores`, so
            its text does not depend on the drafts it was offered);
5. process: the kept tokens go through s6's hook 5 one by one (EOS, a stop string or
            the length limit may end the request inside them: the rest are dropped), and
            the KV slots of everything not kept are freed at once.

The invariant: a draft is kept only if the grammar allows it at its position and the
model would have chosen it there. So greedy output equals s6's (with `jump_forward=False`)
token for token, and the forced text is taken without s4's re-tokenizing and
re-admission. Jump-forward is off here: its forced text is a draft instead.
Each request's `meta_info` counts `spec_verify_ct` (its decode forwards, each a verify of
its drafts or of none, as SGLang counts them),
`spec_draft_tokens` (drafts fed) and `spec_accepted_tokens` (drafts kept); the server's
`/metrics` sums them into the acceptance rate. Engine options: `SpeculativeOptions` below.
"""

from __future__ import annotations

import bisect
import functools
import weakref
from dataclasses import dataclass, field, replace
from typing import Any, cast

import torch

from ..backends.base import BaseGrammarObject, GrammarError
from ..constrained.bitmask import allows
from ..core import AbortKind, Req
from ..model.forward_batch import ForwardBatch, ForwardMode
from ..overlap import ForwardThread, OverlapScheduler
from ..sampler import abort_unsampleable, distribution, is_greedy, unsampleable
from ..scheduler import ScheduledBatch
from ..scheduler_config import SchedulerConfig
from ..speculative import NgramIndex, accept_greedy, accept_sampled, forced_drafts, seam_token, seeded_scores
from .base import register
from .s5_backends import BackendOptions, ReasonerGrammar
from .s6_function_calling import FunctionCallingStage

ALGORITHMS = (None, "NGRAM", "FORCED", "FORCED+NGRAM")


@dataclass(frozen=True)
class SpeculativeOptions(BackendOptions):
    jump_forward: bool = False  # the forced text is drafted instead ("FORCED")
    # None: no drafts (s6 without jump-forward; SGLang's default too: on a CPU with the
    # bundled model prompt lookup costs more than it saves and forced drafts break about even,
    # benchmarks/results/speculative.md);
    # "NGRAM": prompt lookup (SGLang's); "FORCED": the grammar's forced text;
    # "FORCED+NGRAM": forced text, then lookup.
    speculative_algorithm: str | None = None
    speculative_num_draft_tokens: int = 4  # k, drafts per request per verify forward
    # Prompt lookup matches the last n tokens, n from max down to min.
    speculative_ngram_min_match_window_size: int = 1
    speculative_ngram_max_match_window_size: int = 4
    # Prompt tokens one prefill forward computes at most (SGLang's name; None: off): a
    # longer prompt is prefilled a chunk per step; with `mixed_prefill=True` the running
    # requests decode in each of those forwards (scheduler.py, "Chunked prefill").
    chunked_prefill_size: int | None = None
    # Overlap scheduling (SGLang's name; on by default): the CPU work of a step runs while
    # its forward does (minisglang/overlap.py). Steps with drafts or s4's jumps are not
    # overlapped (they depend on the tokens of the step before, overlap.py says why).
    disable_overlap_schedule: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check_choice("speculative_algorithm", self.speculative_algorithm, ALGORITHMS)
        size = self.chunked_prefill_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ValueError(f"chunked_prefill_size must be None (off) or an integer >= 1, not {size!r}")
        if not isinstance(self.disable_overlap_schedule, bool):
            raise ValueError(f"disable_overlap_schedule must be True or False, not {self.disable_overlap_schedule!r}")
        for name in (
            "speculative_num_draft_tokens",
            "speculative_ngram_min_match_window_size",
            "speculative_ngram_max_match_window_size",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, not {value!r}")
        if self.speculative_ngram_min_match_window_size > self.speculative_ngram_max_match_window_size:
            raise ValueError(
                f"speculative_ngram_min_match_window_size ({self.speculative_ngram_min_match_window_size})"
                f" is above speculative_ngram_max_match_window_size "
                f"({self.speculative_ngram_max_match_window_size})"
            )
        if self.grammar_backend == "outlines" and "FORCED" in (self.speculative_algorithm or ""):
            raise ValueError(
                f"speculative_algorithm={self.speculative_algorithm!r} drafts the grammar's forced text, which "
                "the 'outlines' backend cannot find (outlines-core has no jump-forward): it would draft "
                "nothing; use 'NGRAM', or grammar_backend 'fsm', 'xgrammar' or 'llguidance'"
            )
        if self.jump_forward and self.speculative_algorithm is not None:
            raise ValueError(
                "jump_forward=True rewrites a request's output between steps, which drafts cannot "
                "meet; with speculative decoding the forced text is drafted instead "
                "(speculative_algorithm='FORCED'): set jump_forward=False or speculative_algorithm=None"
            )

    @property
    def overlap(self) -> bool:
        """Whether steps overlap their CPU work with the forward: unless switched off, or
        the steps draft or jump (overlap.py says why those cannot)."""
        return not self.disable_overlap_schedule and self.speculative_algorithm is None and not self.jump_forward


class RollbackReasonerGrammar(ReasonerGrammar):
    """s5's reasoning gate, able to roll back: drafts may cross the think-end marker."""

    def __init__(self, inner: BaseGrammarObject, think_end_id: int, eos_token_id: int):
        super().__init__(inner, think_end_id, eos_token_id)
        self.accepted = 0  # tokens accepted in all, thinking and answer

    def accept_token(self, token_id: int) -> None:
        super().accept_token(token_id)
        self.accepted += 1

    def rollback(self, k: int) -> None:
        answer = 0 if self.thinking else self.accepted - self.thought
        if min(k, answer):
            self.inner.rollback(min(k, answer))
        into_thinking = k - min(k, answer)
        if into_thinking:  # back before the marker: thinking again
            self.thought -= into_thinking
            self.thinking = True
        self.accepted -= k

    def copy(self) -> RollbackReasonerGrammar:
        return RollbackReasonerGrammar(self.inner.copy(), self.think_end_id, self.eos_token_id)


def coupled(req: Req) -> bool:
    """A seeded sampling request: its tokens after the first are chosen by `seeded_scores`,
    so its text depends on its seed alone, not on the drafts it was offered."""
    return req.sampling_params.seed is not None and not is_greedy(req)


class ChargedGrammar:
    """`grammar` as the mask chain and the seam guess walk it: each library call (a token, a
    mask row: native code no slice can cut) is timed and charged to `req` as s5 charges
    hook 4's masks and hook 5's tokens (`charge_call`): a call past the step's budget makes
    the request sit out steps, one past max_grammar_call_seconds aborts it. Uncharged, a
    request whose every step was a verify (a seeded sample, drafts each step) filled its
    masks on the scheduler thread at any cost: 1 s masks ran 25 times where s6 aborted
    after the first. Once its request is aborted, a row allows nothing: the chain ends there."""

    def __init__(self, stage: SpeculativeStage, req: Req, grammar: BaseGrammarObject):
        self.stage, self.req, self.grammar = stage, req, grammar

    def accept_token(self, token_id: int) -> None:
        start = self.stage.work.stamp()
        self.grammar.accept_token(token_id)
        self.stage.charge_call(self.req, start, "token")

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        if not self.req.finished:
            start = self.stage.work.stamp()
            self.grammar.fill_vocab_mask(vocab_mask, idx)
            if not self.stage.charge_call(self.req, start, "mask"):
                return
        vocab_mask[idx] = 0

    def is_terminated(self) -> bool:
        return self.grammar.is_terminated()

    def rollback(self, k: int) -> None:
        self.grammar.rollback(k)


@dataclass
class VerifyBatch(ScheduledBatch):
    """A decode step with drafts: request i feeds its last token and `drafts[i]` in one
    extend forward; `masks[i]` holds its grammar's packed rows [len(drafts[i]) + 1, W]
    (None: unconstrained)."""

    drafts: list[list[int]] = field(default_factory=list)
    masks: list[torch.Tensor | None] = field(default_factory=list)


class SpeculativeScheduler(OverlapScheduler):
    """s6's scheduler, whose decode step drafts, verifies in one forward, and keeps what
    the grammar and the model agree on (steps 1-5 of the module's docstring); without
    drafts its steps overlap the CPU work with the forward (minisglang/overlap.py)."""

    stage: SpeculativeStage

    def __init__(
        self, model: Any, tokenizer: Any, stage: SpeculativeStage, config: SchedulerConfig, *args: Any, **kwargs: Any
    ) -> None:
        # s7's scheduling options are the stage's (s1-s6 do not know them).
        config = replace(config, chunked_prefill_size=stage.options.chunked_prefill_size)
        super().__init__(model, tokenizer, stage, config, *args, **kwargs)
        self.forward_counts["verify"] = 0  # decode steps that were verify forwards
        if stage.options.overlap:
            self.forward_thread = ForwardThread(model)

    # -- overlap: hook 4 in two halves, the mask filled during the forward ----------------
    def fill_masks(self, reqs: list[Req]) -> torch.Tensor | None:
        try:
            return self.stage.batch_vocab_mask(reqs)
        except Exception:  # find whose grammar failed, as Scheduler.sample does
            for req in reqs:
                self.try_for(req, "masking its logits", lambda r: self.stage.batch_vocab_mask([r]), None)
            # The failed ones are finished now: their rows stay as allocated (every token
            # allowed), and sample_picking reads no finished request's row.
            return self.stage.batch_vocab_mask(reqs)

    def apply_masks(self, logits: torch.Tensor, reqs: list[Req], masks: Any) -> None:
        if masks is not None:
            with self.stop_aliases.kept(logits):
                self.stage.apply_mask_rows(logits, masks)

    def add_request(self, req: Req) -> None:
        if self.stage.options.speculative_algorithm is not None:
            req.spec_verify_ct = 0  # meta_info reports the counts from now on
        super().add_request(req)

    # -- 1 + 2: drafts and their mask rows, before the forward ---------------------------
    def schedule(self) -> ScheduledBatch | None:
        batch = super().schedule()
        if batch is None or batch.mode != ForwardMode.DECODE or self.stage.options.speculative_algorithm is None:
            return batch
        none: list[int] = []
        drafts = [self.try_for(req, "drafting its next tokens", self.stage.propose_drafts, none) for req in batch.reqs]
        # Drafts take KV slots only where the pool has them to spare: below new_token_ratio 1
        # admission did not keep room for them (retraction.py), and a guess is not worth a retraction.
        spare = self.kv_room() - len(batch.reqs)
        for i, d in enumerate(drafts):
            drafts[i] = d[: max(spare, 0)]
            spare -= len(drafts[i])
        # No guesses this step: a plain decode is cheaper, unless a seeded request samples (it
        # always goes through the verify's acceptance, `seeded_scores`, drafts or none).
        if not any(drafts) and not any(map(coupled, batch.reqs)):
            return batch
        # Every constrained request needs its rows, those without drafts too (one row: s6's mask).
        nothing: tuple[list[int], torch.Tensor | None] = ([], None)
        chains = [
            nothing
            if req.finished
            else self.try_for(req, "masking its drafts", functools.partial(self.stage.mask_chain, drafts=d), nothing)
            for req, d in zip(batch.reqs, drafts)
        ]
        for req in [r for r in batch.reqs if r.finished]:
            self.release_request(req)
        keep = [i for i, r in enumerate(batch.reqs) if not r.finished]
        if not keep:
            return None
        if not any(chains[i][0] for i in keep) and not any(coupled(batch.reqs[i]) for i in keep):
            return ScheduledBatch(ForwardMode.DECODE, [batch.reqs[i] for i in keep])  # the grammar cut every draft
        return VerifyBatch(
            ForwardMode.DECODE,
            [batch.reqs[i] for i in keep],
            drafts=[chains[i][0] for i in keep],
            masks=[chains[i][1] for i in keep],
        )

    # -- 3: one extend forward over every draft ------------------------------------------
    def run(self, batch: ScheduledBatch) -> torch.Tensor:
        """A verify batch: logits [sum(len(drafts) + 1), vocab], one row per fed token."""
        if not isinstance(batch, VerifyBatch):
            return super().run(batch)
        reqs = batch.reqs
        new_ids = [[r.last_id] + d for r, d in zip(reqs, batch.drafts)]
        out_cache_loc = self.alloc_kv(sum(map(len, new_ids)))
        with self._free_on_error(out_cache_loc):
            fb = ForwardBatch.extend(
                [cast(int, r.req_pool_idx) for r in reqs],
                [r.kv_len for r in reqs],
                new_ids,
                out_cache_loc,
                self.req_to_token_pool,
                self.token_to_kv_pool,
            )
        for req, ids in zip(reqs, new_ids):
            req.kv_len += len(ids)  # the drafts' KV too, until `keep_kv` frees what was not kept
        self.forward_counts["verify"] += 1
        self.record_event("verify", None, reqs=[r.rid for r in reqs], drafts=[len(d) for d in batch.drafts])
        logits: torch.Tensor = self.model.forward(fb, return_all_logits=True)
        return logits

    # -- 4: accept ------------------------------------------------------------------------
    def sample(self, batch: ScheduledBatch, logits: torch.Tensor) -> list:
        """A verify batch: for each request, the tokens it keeps (drafts, then the model's)."""
        if not isinstance(batch, VerifyBatch):
            ids = super().sample(batch, logits)
            if batch.mode == ForwardMode.EXTEND and self.stage.options.speculative_algorithm is not None:
                self.race_riders(batch, logits, ids)
            return ids
        logits = logits.float()
        kept: list[list[int]] = []
        start = 0
        for req, drafts, mask in zip(batch.reqs, batch.drafts, batch.masks):
            rows = logits[start : start + len(drafts) + 1]
            start += len(drafts) + 1
            keep: list[int] = []  # what a request whose verify failed keeps
            with self.isolate([req], "verifying its drafts", hook=4):
                keep = self.accept(req, rows, drafts, mask)
            kept.append(keep)
        return kept

    def race_riders(self, batch: ScheduledBatch, logits: torch.Tensor, ids: list[int]) -> None:
        """A seeded sampling request that rode a mixed prefill takes the token a verify of no
        drafts would give it (`accept`: the race of `seeded_scores` at its position), not a
        draw from its generator: its seed then fixes its text whether it rides or verifies.
        (It used to sit out every prefill step instead, and a stream of other clients'
        arrivals, one a step, kept it from decoding at all: 203 steps for a 20-token answer
        beside 200 arrivals, 6 for a greedy or unseeded one.)

        A request re-admitted after a retraction (retraction.py) has output too: its prefill's
        token is one a verify would have chosen, so it races as well (it drew from its
        generator, and its text after a retraction was not the text a roomy pool gave)."""
        for i, req in enumerate(batch.reqs):
            if ids[i] < 0 or req.finished or not coupled(req) or not req.output_ids:
                continue  # (a new request's first token is its generator's, as in s6)
            with self.isolate([req], "sampling its token", hook=4):
                row = logits[i : i + 1].float().clone()  # unmasked: mask it as hook 4 does
                with self.stop_aliases.kept(row):
                    self.stage.mask_logits(row, [req])
                if not req.finished:
                    ids[i] = self.accept(req, row, [], None)[0]

    def accept(self, req: Req, rows: torch.Tensor, drafts: list[int], mask: torch.Tensor | None) -> list[int]:
        """Mask each position's logits with its row of the chain, then keep the drafts the
        model agrees with and one token of its own (minisglang/speculative.py)."""
        recorder = self.step_recorder
        if recorder is not None:
            recorder.before_mask(rows, [req] * len(rows))
        if mask is not None:
            with self.stop_aliases.kept(rows):
                self.stage.apply_mask_rows(rows, mask)
        if recorder is not None:
            recorder.after_mask(rows, [req] * len(rows), drafts)
        # A position with nothing to draw from (a NaN, or -inf on every allowed token): s6
        # aborts the request there (sampler.abort_unsampleable), so the drafts stop before it
        # and the request is aborted if it is the first (torch's sampler raised its own error).
        first, why = next(((i, why) for i, why in enumerate(unsampleable(rows)) if why is not None), (None, ""))
        if first == 0:
            abort_unsampleable(req, why)
            return []
        if first is not None:
            rows, drafts = rows[:first], drafts[: first - 1]
        if is_greedy(req):
            return accept_greedy(rows, drafts)
        rows = rows.cpu()  # the generators are CPU ones (see sampler.sample)
        probs = torch.stack([distribution(row, req) for row in rows])
        if coupled(req):  # its text fixed by its seed, whatever drafts it was offered
            seed = cast(int, req.sampling_params.seed)
            return accept_greedy(seeded_scores(probs, seed, len(req.output_ids)), drafts)
        return accept_sampled(probs, drafts, req.generator or self.generator)

    # -- 5: process the kept tokens, free the rest's KV ------------------------------------
    def process_results(self, batch: ScheduledBatch, next_token_ids: list) -> None:
        if not isinstance(batch, VerifyBatch):
            # A decode with no drafts is a verify of none: SGLang counts every decode step of
            # a speculative server in spec_verify_ct, and its clients read completion_tokens /
            # spec_verify_ct as the accept length (0 verifies divided by zero: a stranger's find).
            for req in batch.reqs if batch.mode == ForwardMode.DECODE else batch.riders:
                if req.spec_verify_ct is not None and not req.finished:
                    req.spec_verify_ct += 1
            super().process_results(batch, next_token_ids)
            return
        for req, drafts, tokens in zip(batch.reqs, batch.drafts, next_token_ids):
            if not req.finished:
                req.spec_verify_ct = (req.spec_verify_ct or 0) + 1
                req.spec_draft_tokens += len(drafts)
                before = len(req.output_ids)
                for j, tok in enumerate(tokens):  # as s6 would, one at a time: a finish drops the rest
                    # Hook 5 finishes a request whose match is complete only when the step's
                    # grammar budget lets it look (s5's `advance`; else `ready` does it next
                    # step, before s6 samples again). Here the next kept token would be fed to
                    # an ended match: look now, on a state the mask chain already prepared.
                    if j and req.grammar is not None and req.grammar.is_terminated():
                        req.finish("stop", matched=None)
                        break
                    self.append_token(req, tok)
                    if req.finished:
                        break
                req.spec_accepted_tokens += min(len(req.output_ids) - before, len(tokens) - 1)
            self.keep_kv(req)
        self.leave_finished()

    def keep_kv(self, req: Req) -> None:
        """Free the KV slots past the request's kept tokens: the verify forward wrote one
        per fed token; the request keeps those of its tokens but the last (whose KV the
        next step computes, as after any decode), the rejected drafts' go back now."""
        if req.req_pool_idx is None:
            return
        keep = len(req.fill_ids) - 1
        if req.kv_len > keep:
            self.token_to_kv_pool.free(self.req_to_token_pool.req_to_token[req.req_pool_idx, keep : req.kv_len])
            req.kv_len = keep


@register("s7-speculative")
class SpeculativeStage(FunctionCallingStage):
    Options = SpeculativeOptions
    options: SpeculativeOptions
    scheduler_class = SpeculativeScheduler

    # -- the reasoning gate learns to roll back --------------------------------------------
    def attach(self, req: Req, grammar: BaseGrammarObject) -> None:
        super().attach(req, grammar)
        if isinstance(req.grammar, ReasonerGrammar):
            g = req.grammar
            req.grammar = RollbackReasonerGrammar(g.inner, g.think_end_id, g.eos_token_id)

    # -- 1: drafts -------------------------------------------------------------------------
    def propose_drafts(self, req: Req) -> list[int]:
        """Up to k guesses at the request's next tokens; fewer near `max_new_tokens` (the
        verify keeps one token of the model's own after the drafts)."""
        o = self.options
        k = min(o.speculative_num_draft_tokens, req.sampling_params.max_new_tokens - len(req.output_ids) - 1)
        if k <= 0:
            return []
        algorithm = o.speculative_algorithm or ""
        drafts: list[int] = []
        if "FORCED" in algorithm and req.grammar is not None:
            drafts = self.forced_text_drafts(req, k)
        if "NGRAM" in algorithm and len(drafts) < k:
            index = self.ngram_indexes.get(req)
            if index is None:  # the request's n-grams, kept as it grows (`ngram_drafts`, indexed)
                index = NgramIndex(o.speculative_ngram_min_match_window_size, o.speculative_ngram_max_match_window_size)
                self.ngram_indexes[req] = index
            drafts += index.drafts(req.fill_ids, k - len(drafts), drafts)
        return drafts

    @functools.cached_property
    def ngram_indexes(self) -> weakref.WeakKeyDictionary[Req, NgramIndex]:
        """Each drafting request's `NgramIndex` (gone with the request)."""
        return weakref.WeakKeyDictionary()

    def forced_text_drafts(self, req: Req, k: int) -> list[int]:
        """The grammar's forced text (s4's jump, found within the step's grammar budget),
        tokenized: no re-tokenizing of the output, no re-admission. Its last token is left
        to the model when the model could write a longer one there (s4's seam rule)."""
        jump = self.jump
        if req in jump.no_more_jumps:
            return []
        found = jump.find_jump(req)
        if found is None:
            return []
        forced = found[0]
        # A forced text that long is found again at every step (xgrammar took 1.2 s a step
        # for `"a"{1000000}`): s4's rule, the request drafts no more forced text.
        if len(forced) >= req.sampling_params.max_new_tokens * jump.longest_token:
            jump.no_more_jumps.add(req)
        ids = forced_drafts(
            forced,
            k,
            self.ctx.tokenizer.encode,
            jump.longest_token,
            lambda ids: jump.keep_before_seam(req, req.output_ids + ids, len(req.output_ids)) - len(req.output_ids),
        )
        # The piece left to the model: draft the token the model writes across it.
        head = forced[len(self.ctx.tokenizer.decode_bytes(ids)) :]
        longer = self.spelled_after(head) if len(ids) < k and head else []
        if longer:  # (none: the forced text was drafted to its end, or k cut it first)
            across = self.seam_draft(req, ids, head, longer)
            if across is not None:
                ids.append(across)
        return ids

    def seam_draft(self, req: Req, ids: list[int], head: bytes, longer: list[tuple[bytes, int]]) -> int | None:
        """After the forced drafts `ids`, the token that continues the forced text's last
        bytes `head` as far as every token the grammar allows there agrees (`seam_token`),
        of the tokens `longer` than `head` that start with it (`spelled_after`): the grammar
        is walked over `ids`, fills that position's row, and is rolled back."""
        if req.grammar is None:
            return None
        g = ChargedGrammar(self, req, req.grammar)
        row = BaseGrammarObject.allocate_vocab_mask(self.ctx.vocab_size, 1)
        accepted = 0
        try:
            for token_id in ids:
                g.accept_token(token_id)
                accepted += 1
            if not self.work.ready(req):  # this step's grammar budget is spent: no guess
                return None
            g.fill_vocab_mask(row, 0)
        except GrammarError:  # a draft the grammar refuses (the mask chain cuts it too): no guess
            return None
        finally:
            g.rollback(accepted)
        return seam_token(head, [(b, t) for b, t in longer if allows(row[0], t)])

    def spelled_after(self, head: bytes) -> list[tuple[bytes, int]]:
        """(spelling, id) of every token longer than `head` that starts with it."""
        spellings = self.sorted_tokens
        i = bisect.bisect_right(spellings, (head, self.ctx.vocab_size))
        out = []
        while i < len(spellings) and spellings[i][0].startswith(head):
            out.append(spellings[i])
            i += 1
        return out

    @functools.cached_property
    def sorted_tokens(self) -> list[tuple[bytes, int]]:
        """Every token's (spelling, id), sorted: those that start with some bytes are one run."""
        return sorted((b, t) for t, b in enumerate(self.ctx.tokenizer.token_bytes) if b)

    # -- 2: the mask chain -------------------------------------------------------------------
    def mask_chain(self, req: Req, drafts: list[int]) -> tuple[list[int], torch.Tensor | None]:
        """(the drafts the grammar allows in a row, their mask rows [m + 1, W]), the grammar
        back where it was. Row i is the mask at the position that chooses token i: the
        grammar fills it, the draft must be in it, the grammar accepts the draft and fills
        the next. The drafts stop at the first one the grammar forbids, and before a
        state whose row this step's grammar budget could not make or that allows nothing
        (the next step meets it as s6 would); after one that ends the match, nothing can
        follow. None for an unconstrained request."""
        if req.grammar is None:
            return drafts, None
        g = ChargedGrammar(self, req, req.grammar)
        rows = BaseGrammarObject.allocate_vocab_mask(self.ctx.vocab_size, len(drafts) + 1)
        g.fill_vocab_mask(rows, 0)  # `ready` made this row before the step
        if not bool(rows[0].any()):
            # (s5's mask_logits' words)
            req.finish("abort", AbortKind.GRAMMAR, message="the grammar allows no token here")
            return [], None
        # BEGIN SOLUTION task7_1
        accepted = 0
        try:
            for i, draft in enumerate(drafts):
                if not allows(rows[i], draft):
                    return drafts[:i], rows[: i + 1]
                g.accept_token(draft)
                accepted += 1
                if not self.work.ready(req):
                    return drafts[:i], rows[: i + 1]
                if g.is_terminated():  # the request ends with this draft: no row after it is read
                    return drafts[: i + 1], rows[: i + 2]
                g.fill_vocab_mask(rows, i + 1)
                if not bool(rows[i + 1].any()):
                    return drafts[:i], rows[: i + 1]
            return drafts, rows
        finally:
            g.rollback(accepted)
        # END SOLUTION

    # -- 4: mask the verify forward's logits ------------------------------------------------
    def apply_mask_rows(self, logits: torch.Tensor, rows: torch.Tensor) -> None:
        """logits [m + 1, V] in place: -inf where the chain's row forbids a token."""
        BaseGrammarObject.apply_vocab_mask(logits, BaseGrammarObject.move_vocab_mask(rows, logits.device))
