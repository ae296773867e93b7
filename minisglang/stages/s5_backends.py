"""Stage s5-backends: the scheduler keeps only an interface; grammar libraries do the rest.

Read with chapters/05-backends.md (SGLang v0.4.0 `base_grammar_backend.py` and after).
From s3 and s4 this stage keeps the scheduler-side parts (s3's `GrammarQueue`, s4's
`JumpForward`, and the scheduler's re-admission), and replaces everything that knew about
*our* FSM with calls to the interface of minisglang/backends/base.py:

- arrival:  `backend.get_cached_or_future_value(kind, text)` -> a matcher, or a Future
            that the grammar queue polls (in arrival order, with a timeout);
- mask:     allocate one packed mask for the batch, `fill_vocab_mask_batched`, one
            `apply_vocab_mask`;
- advance:  `accept_token`, and `is_terminated` finishes the request;
- jump:     `try_jump_forward` / `jump_forward_str_state` / `jump_and_retokenize`, which
            `BaseGrammarObject` turns into the `Grammar` protocol s4's `JumpForward` speaks.

So the same scheduler runs our automaton ("fsm"), xgrammar, outlines-core or llguidance
(`Engine(grammar_backend=...)`). A failed compile arrives as an `InvalidGrammarObject`
and aborts only its request. The reasoning gate (`think_end` in the sampling params)
leaves the model free until it has written that token, then the grammar applies.
Engine options: `BackendOptions` below. Our own backend ("fsm") is lazy by default
(constrained/lazy_token_fsm.py: a start row in about a millisecond, the other states and
rows made as generation reaches them); with `automaton="eager"` it compiles the whole
automaton in s3's worker processes (constrained/compile_service.py) with its bounds and
disk cache. The other backends compile on threads, bounded by the timeout from the
caller's side only.
"""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass

import torch

from ..backends.base import BaseGrammarObject, GrammarError, InvalidGrammarObject, get_backend_class
from ..constrained.bitmask import warm_up_apply_kernel
from ..constrained.regex_dfa import RegexError
from ..constrained.token_fsm import ConstraintError
from ..core import Req
from .base import Readmit, Stage, StageOptions, register
from .s3_fsm_cache import GrammarQueue
from .s4_jump_forward import JumpForward


class ReasonerGrammar(BaseGrammarObject):
    """Lets everything but EOS through until the think-end token, then defers to `inner`.

    EOS stays forbidden while thinking: the answer after the marker must still satisfy
    the grammar, so the request may not end before it.
    """

    def __init__(self, inner: BaseGrammarObject, think_end_id: int, eos_token_id: int):
        self.inner, self.think_end_id, self.eos_token_id, self.thinking = inner, think_end_id, eos_token_id, True
        self.thought = 0      # tokens accepted while thinking, the marker included

    def accept_token(self, token_id: int) -> None:
        if self.thinking:
            self.thinking = token_id != self.think_end_id
            self.thought += 1
        else:
            self.inner.accept_token(token_id)

    def is_terminated(self) -> bool:
        return not self.thinking and self.inner.is_terminated()

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        if not self.thinking:
            self.inner.fill_vocab_mask(vocab_mask, idx)
            return
        word, bit = divmod(self.eos_token_id, 32)   # the row stays all ones, but for EOS
        vocab_mask[idx, word] &= ~(torch.tensor(1, dtype=torch.int32) << bit)

    def try_jump_forward(self, tokenizer):
        return None if self.thinking else self.inner.try_jump_forward(tokenizer)

    def jump_forward_str_state(self, helper):
        return self.inner.jump_forward_str_state(helper)

    def jump_and_retokenize(self, old_output_ids, new_output_ids, next_state) -> None:
        """The inner matcher saw only the answer: hand it the ids after the thinking. If the
        re-encoding re-cut the thinking itself, the answer starts where its text did."""
        n = self.thought
        if new_output_ids[:n] == old_output_ids[:n]:
            self.inner.jump_and_retokenize(old_output_ids[n:], new_output_ids[n:], next_state)
            return
        if self.think_end_id not in new_output_ids:
            raise GrammarError("a jump re-encoded the think_end marker into another token")
        self.thought = new_output_ids.index(self.think_end_id) + 1
        self.inner = self.inner.copy()     # at its start: it accepts the whole answer again
        for token_id in new_output_ids[self.thought:]:
            self.inner.accept_token(token_id)

    def copy(self) -> "ReasonerGrammar":
        return ReasonerGrammar(self.inner.copy(), self.think_end_id, self.eos_token_id)


@dataclass(frozen=True)
class BackendOptions(StageOptions):
    grammar_backend: str = "fsm"            # "fsm", "xgrammar", "outlines" or "llguidance"
    jump_forward: bool = True
    compile_timeout: float = 30.0           # seconds; the fsm backend's worker is killed after it
    max_pending_compiles: int = 64          # distinct compiles waited on at once
    max_entries: int = 128                  # compiled grammars kept in memory ...
    grammar_cache_bytes: int | None = 1 << 30   # ... and at most this many bytes of them
    compile_workers: int = 2                # compiles at once
    json_whitespace: str | None = None      # whitespace allowed between JSON tokens (regex)
    # our JSON Schema compiler's other choices (constrained/json_schema.py SchemaOptions:
    # bounded numerals, any_order, extra_properties, unknown_formats, ...); checked at start
    json_schema_options: dict | None = None
    # our own backend ("fsm") only: s1's and s3's bounds, workers and disk cache
    max_fsm_states: int = 10_000
    max_regex_chars: int | None = 100_000
    compile_in: str = "process"
    compile_nice: int = 5
    compile_memory_bytes: int | None = 4 << 30
    grammar_cache_dir: str | None = None
    # our own backend's automaton: "lazy" (states made on first visit) or "eager" (s1-s4's,
    # through the compile service), and the lazy one's bounds (None: its defaults)
    automaton: str = "lazy"
    max_lazy_states: int | None = None
    max_row_expansions: int | None = None
    max_regex_nodes: int | None = None

    def backend_options(self) -> dict:
        """The fields a backend's constructor takes as keywords."""
        return {"automaton": self.automaton, "max_lazy_states": self.max_lazy_states,
                "max_row_expansions": self.max_row_expansions, "max_regex_nodes": self.max_regex_nodes,
                "max_entries": self.max_entries, "max_bytes": self.grammar_cache_bytes,
                "compile_timeout": self.compile_timeout, "threads": self.compile_workers,
                "json_whitespace": self.json_whitespace, "json_schema_options": self.json_schema_options,
                "max_fsm_states": self.max_fsm_states,
                "max_regex_chars": self.max_regex_chars, "compile_in": self.compile_in,
                "compile_nice": self.compile_nice, "compile_memory_bytes": self.compile_memory_bytes,
                "grammar_cache_dir": self.grammar_cache_dir}


@register("s5-backends")
class BackendStage(Stage):
    Options = BackendOptions
    supports = frozenset({"regex", "json_schema", "ebnf", "think_end"})
    grammar_errors = (ConstraintError, RegexError, GrammarError)

    def __init__(self, ctx):
        super().__init__(ctx)
        warm_up_apply_kernel(ctx.device)     # every backend's apply_vocab_mask uses s2's kernel
        o = self.options
        self.backend = get_backend_class(o.grammar_backend)(ctx.tokenizer, ctx.vocab_size, **o.backend_options())
        self.queue = GrammarQueue(o.compile_timeout, Future.done, self.take_compiled, o.max_pending_compiles)
        self.jump = JumpForward(ctx.tokenizer)

    # -- hook 1: arrival ---------------------------------------------------------------
    def has_grammar(self, constraint: tuple[str, str]) -> bool:
        """Whether this (kind, text) is compiled or compiling already (s3's question, asked
        of the backend's cache)."""
        return self.backend.is_cached(*constraint)

    def on_arrival(self, req: Req) -> None:
        constraint = req.sampling_params.constraint()
        if constraint is None or self.refuse_unsupported(req):
            return
        think_end = req.sampling_params.think_end
        if think_end is not None:
            ids = self.ctx.tokenizer.encode(think_end)
            if len(ids) != 1:
                req.finish("abort", message=f"think_end {think_end!r} must be one token of this tokenizer, "
                           f"it encodes to {len(ids)} tokens")
                return
        if not self.has_grammar(constraint) and self.queue.full():
            self.queue.refuse(req)
            return
        value, ready = self.backend.get_cached_or_future_value(*constraint)
        if ready:
            self.attach(req, value)
        else:
            self.queue.wait_for(req, value)

    def attach(self, req: Req, grammar: BaseGrammarObject) -> None:
        if isinstance(grammar, InvalidGrammarObject):
            req.finish("abort", message=grammar.message)
            return
        think_end = req.sampling_params.think_end
        if think_end is not None:
            grammar = ReasonerGrammar(grammar, self.ctx.tokenizer.encode(think_end)[0], self.ctx.tokenizer.eos_token_id)
        req.grammar = grammar

    # -- hook 2: s3's grammar queue, with futures --------------------------------------------
    def poll_grammar_queue(self, queue: list[Req]) -> list[Req]:
        return self.queue.poll_grammar_queue(queue)

    def take_compiled(self, req: Req, future: Future) -> None:
        self.attach(req, self.backend.result(future))

    # -- hook 3: s4's jump forward, through the interface -----------------------------------
    def before_decode(self, running: list[Req]) -> list[Readmit]:
        return self.jump.before_decode(running) if self.options.jump_forward else []

    @property
    def jumps(self) -> int:
        return self.jump.jumps

    @property
    def refused(self) -> int:
        return self.jump.refused

    # -- hook 4: mask --------------------------------------------------------------------
    def mask_logits(self, logits: torch.Tensor, reqs: list[Req]) -> None:
        """One mask for the batch, filled through the interface, applied once."""
        live = [(r.grammar, i) for i, r in enumerate(reqs) if r.grammar is not None and not r.finished]
        if not live:
            return
        mask = BaseGrammarObject.allocate_vocab_mask(self.ctx.vocab_size, len(reqs))
        by_class: dict[type, list] = {}
        for grammar, i in live:
            by_class.setdefault(type(grammar), []).append((grammar, i))
        for cls, entries in by_class.items():
            cls.fill_vocab_mask_batched(entries, mask)
        for grammar, i in live:
            if not bool(mask[i].any()):
                reqs[i].finish("abort", message="the grammar allows no token here")
        mask = BaseGrammarObject.move_vocab_mask(mask, logits.device)
        BaseGrammarObject.apply_vocab_mask(logits, mask)

    # -- hook 5: advance -----------------------------------------------------------------
    def advance(self, req: Req, token_id: int) -> None:
        g = req.grammar
        if g is None:
            return
        try:
            g.accept_token(token_id)
        except GrammarError as e:
            req.finish("abort", message=f"the grammar rejected a sampled token: {e}")
            return
        if g.is_terminated():
            req.finish("stop", matched=token_id if token_id == self.ctx.tokenizer.eos_token_id else None)

    def release(self, req: Req) -> None:
        self.queue.forget(req)
        super().release(req)

    def stats(self) -> dict:
        """The backend's grammar cache numbers (for the server's /metrics)."""
        return self.backend.stats()

    def shutdown(self) -> None:
        self.backend.shutdown()
