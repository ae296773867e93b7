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
            `BaseGrammarObject` turns into the `Grammar` protocol s4's `JumpForward` speaks;
- budget:   `prepare` does the work a matcher's next mask needs (our lazy automaton's row)
            within `GrammarWork`'s per-step budget; a request whose work did not fit sits
            out the step, so one client's grammar never stalls the others (chapter 05 §9).

So the same scheduler runs our automaton ("fsm"), xgrammar, outlines-core or llguidance
(`Engine(grammar_backend=...)`). A failed compile arrives as an `InvalidGrammarObject`
and aborts only its request. The reasoning gate (`think_end` in the sampling params)
leaves the model free until it has written that token, then the grammar applies.
Engine options: `BackendOptions` below. Our own backend ("fsm") is lazy by default
(constrained/lazy_token_fsm.py: a start row in about a millisecond, the other states and
rows made as generation reaches them); with `automaton="eager"` it compiles the whole
automaton in s3's worker processes (constrained/compile_service.py) with its bounds and
disk cache. xgrammar and outlines-core compile in kept child processes that
`compile_timeout` kills (constrained/child_process.py; `compile_in="thread"` keeps them on
threads), llguidance on a thread, bounded by the timeout from the caller's side only.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import torch

from ..backends.base import (
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarError,
    GrammarLimitError,
    InvalidGrammarObject,
    get_backend_class,
)
from ..backends.fsm_backend import FSMBackend
from ..constrained.bitmask import warm_up_apply_kernel
from ..constrained.json_schema import IN_PROCESS_SECONDS
from ..constrained.regex_dfa import RegexError
from ..constrained.token_fsm import ConstraintError
from ..constrained.work_slices import Baton, OutOfTime, deadline
from ..core import AbortKind, Req
from ..sampler import is_greedy
from .base import Readmit, Stage, StageContext, StageOptions, register
from .s3_fsm_cache import GrammarQueue
from .s4_jump_forward import JumpForward

if TYPE_CHECKING:  # pragma: no cover
    from ..tokenizer import Tokenizer


class ReasonerGrammar(BaseGrammarObject):
    """Lets everything but EOS through until the think-end token, then defers to `inner`.

    EOS stays forbidden while thinking: the answer after the marker must still satisfy
    the grammar, so the request may not end before it.
    """

    def __init__(self, inner: BaseGrammarObject, think_end_id: int, eos_token_id: int):
        self.inner, self.think_end_id, self.eos_token_id, self.thinking = inner, think_end_id, eos_token_id, True
        self.thought = 0  # tokens accepted while thinking, the marker included

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
        word, bit = divmod(self.eos_token_id, 32)  # the row stays all ones, but for EOS
        vocab_mask[idx, word] &= ~(torch.tensor(1, dtype=torch.int32) << bit)

    def try_jump_forward(self, tokenizer: Tokenizer) -> Any | None:
        return None if self.thinking else self.inner.try_jump_forward(tokenizer)

    def jump_forward_str_state(self, helper: Any) -> tuple[bytes, Any]:
        return self.inner.jump_forward_str_state(helper)

    def search_was_slow(self) -> None:
        self.inner.search_was_slow()

    def jump_and_retokenize(self, old_output_ids: list[int], new_output_ids: list[int], next_state: Any) -> None:
        """The inner matcher saw only the answer: hand it the ids after the thinking. If the
        re-encoding re-cut the thinking itself, the answer starts where its text did."""
        n = self.thought
        if new_output_ids[:n] == old_output_ids[:n]:
            self.inner.jump_and_retokenize(old_output_ids[n:], new_output_ids[n:], next_state)
            return
        if self.think_end_id not in new_output_ids:
            raise GrammarError("a jump re-encoded the think_end marker into another token")
        self.thought = new_output_ids.index(self.think_end_id) + 1
        self.inner = self.inner.copy()  # at its start: it accepts the whole answer again
        for token_id in new_output_ids[self.thought :]:
            self.inner.accept_token(token_id)

    def copy(self) -> ReasonerGrammar:
        return ReasonerGrammar(self.inner.copy(), self.think_end_id, self.eos_token_id)

    def prepare(self, seconds: float | None = None) -> bool:
        return self.thinking or self.inner.prepare(seconds)  # (thinking: every token but EOS, no work)

    def needs_work(self) -> bool:
        return not self.thinking and self.inner.needs_work()

    def is_over(self) -> bool:
        return not self.thinking and self.inner.is_over()


# A request whose uncuttable call took t past the step's budget sits out SIT_OUT * t of
# steps' budgets: the other requests keep at least SIT_OUT / (SIT_OUT + 1) of the scheduler
# (an ambiguous EBNF on xgrammar: with 1, a bystander's p99 went 9 -> 612 ms; see
# benchmarks/results/server_faults.md). That many times more for each other request of its
# client that is paying back too: a client's slow grammars together keep one request's share.
SIT_OUT = 4
# Steps in a row a greedy or seeded request waits for its cut jump search (`wait_for_search`).
MAX_SEARCH_WAITS = 64


class GrammarWork:
    """The scheduler thread's budget for grammar work (constrained/work_slices.py).

    Each step, the requests' grammars share `step_seconds` of work on the scheduler thread
    (the rows their next masks need, jump-forward searches) and the compile threads are
    lent as much again; a request whose work did not fit sits out the step and goes on
    from where it stopped in the next. A request whose grammar needed more than
    `max_seconds` of such work in all is aborted, naming the limit. So an expensive
    grammar costs its own request time, and every other request a few milliseconds a step.
    """

    def __init__(self, step_seconds: float, max_seconds: float, baton: Baton, max_call_seconds: float = 0.1):
        self.step_seconds, self.max_seconds, self.baton = step_seconds, max_seconds, baton
        self.max_call_seconds = max_call_seconds
        self.clock = time.perf_counter  # what times the uncuttable calls (`charge`): what others waited
        # and the scheduler thread's own CPU time: a call is aborted for its length only when
        # both are long, so a loaded machine (other processes on its cores) aborts no one
        # (two strangers' valid requests got 400s at a load of 5 on 2 cores)
        self.cpu_clock = time.thread_time
        self.left = step_seconds
        self.spent: dict[int, float] = {}  # rid -> seconds of grammar work so far
        self.owed: dict[int, float] = {}  # rid -> uncuttable seconds past the step's budget, not yet sat out
        self.charged: set[int] = set()  # rids with an uncuttable call charged
        # rid -> its client, for the requests paying back a call that took more than a step's
        # budget (the payback of one is multiplied by its client's count: `charge`)
        self.slow: dict[int, str] = {}
        self.client_of: dict[int, str] = {}  # rid -> its client, for the requests in the engine (`arrived`)
        self.present: Counter[str] = Counter()  # client -> its requests in the engine
        self.client_took: dict[str, float] = {}  # client -> its uncuttable seconds this step
        # rid -> the step in which it first found the budget spent before its work began,
        # longest waiting first: from the next step on, the first of them works anyway (`ready`)
        self.starved: dict[int, int] = {}
        self.asked: dict[int, int] = {}  # rid -> the last step it asked for its row (`ready`)
        self.steps = 0
        self.rescued = False  # this step's one slice past the budget is given
        self.waiting: dict[int, int] = {}  # rid -> the step it sits out, its jump search cut (`wait_for_search`)
        self.streak: dict[int, int] = {}  # rid -> steps in a row it has sat out for its cut search

    def begin_step(self) -> None:
        self.baton.hold()
        self.baton.lend(self.step_seconds)  # compile threads run only now (none running: no wait)
        self.left = self.step_seconds
        self.steps += 1
        self.rescued = False
        self.client_took.clear()

    def arrived(self, req: Req) -> None:
        """`req` is in the engine until `forget`: its client, if it has one, is present."""
        if req.client is not None and req.rid not in self.client_of:
            self.client_of[req.rid] = req.client
            self.present[req.client] += 1

    def others_present(self, client: str) -> bool:
        """Whether a client other than `client` has a request in the engine."""
        return len(self.present) > (1 if client in self.present else 0)

    @contextlib.contextmanager
    def slice(self, req: Req) -> Iterator[None]:
        """Run the block as `req`'s grammar work: cut (OutOfTime) when this step's budget is
        spent, charged to the request, which is aborted past `max_seconds` in all."""
        start, start_cpu = time.perf_counter(), time.thread_time()
        try:
            with deadline(max(self.left, 0.0)):
                yield
        finally:
            took = time.perf_counter() - start
            self.left -= took  # the step's budget is what everyone waits: the wall clock
            # max_seconds adds up the work its grammar did, not time the OS gave other
            # processes (as the call limit reads both): with two CPU burners beside it a 1 us
            # budget's slices, added up by the wall, passed 2 s where quiet they needed 0.3 s.
            cost = min(took, time.thread_time() - start_cpu)
            spent = self.spent[req.rid] = self.spent.get(req.rid, 0.0) + cost
            if spent > self.max_seconds:
                raise GrammarError(
                    f"the grammar needed more than {self.max_seconds:g} s of work to choose its "
                    f"tokens (limit max_grammar_seconds)"
                )

    def stamp(self) -> tuple[float, float]:
        """(wall, thread CPU) now: the start of an uncuttable call (`charge`)."""
        return self.clock(), self.cpu_clock()

    def since(self, start: tuple[float, float]) -> tuple[float, float]:
        """(wall, thread CPU) seconds since `start` (a `stamp`)."""
        return self.clock() - start[0], self.cpu_clock() - start[1]

    def charge(self, req: Req, took: float, what: str, cpu: float | None = None) -> str | None:
        """Charge `took` seconds of one uncuttable call of `req`'s grammar (a library's mask
        or token: native code no slice can stop) to the request; the reason to abort it when
        that one call passed `max_call_seconds` (every request of the batch waited for it: an
        ambiguous EBNF grammar's masks grew to 2-3 s a token in xgrammar and llguidance, a
        stranger's attack) or its grammar's work in all passed `max_seconds`, else None. What
        of the call passed the step's budget is paid back by sitting out steps; while another
        client has a request in the engine (`arrived`), the budget is the client's for all
        its calls of the step. A request's first charged call is never aborted for its length
        (a library may build its lexer then: llguidance's first mask of a large schema), only
        paid back. `cpu`: the call's thread CPU seconds (None: as `took`). The limits that
        abort read the smaller of the two, so a loaded machine aborts no one: the call limit
        needs both past it, and `max_seconds` adds up that smaller one; what is paid back by
        sitting out is the wall clock, what the others waited."""
        first = req.rid not in self.charged
        self.charged.add(req.rid)
        cost = took if cpu is None else min(took, cpu)
        spent = self.spent[req.rid] = self.spent.get(req.rid, 0.0) + cost
        over = took - self.step_seconds
        if req.client is not None and self.others_present(req.client):
            # While another client has a request in the engine (decoding, or waiting for this
            # step to end), a client's calls in one step count together: 64 choices of an
            # ambiguous EBNF on llguidance, each mask 4 ms (under a step's budget alone), made
            # every step 0.3 s for everyone.
            in_step = self.client_took[req.client] = self.client_took.get(req.client, 0.0) + took
            over = min(took, in_step - self.step_seconds)
        if over > 0:  # paid back by sitting out steps (`ready`), SIT_OUT times over,
            # and once more for each other slow request of its client: paid back one by one, a
            # client's n requests (n choices: 64 of an ambiguous EBNF on xgrammar) had n shares
            # of the scheduler, and every other client's tokens took 0.22 s instead of 8 ms
            peers = 1
            if req.client is not None:
                self.slow[req.rid] = req.client
                peers = self.slow_of[req.client]
            self.owed[req.rid] = self.owed.get(req.rid, 0.0) + SIT_OUT * over * peers
        if cost > self.max_call_seconds and not first:
            return (
                f"one {what} of its grammar took {took:.2f} s on the scheduler thread, where every "
                f"request waits for it (limit max_grammar_call_seconds, {self.max_call_seconds:g} s)"
            )
        if spent > self.max_seconds:
            return f"the grammar needed more than {self.max_seconds:g} s of work (limit max_grammar_seconds)"
        return None

    def ready(self, req: Req[BaseGrammarObject]) -> bool:
        """Whether the grammar's next mask is ready, after a slice of work on it if not.
        Once the step's budget is spent no work begins: a slice always does one unit of
        work before it may stop, and a unit can be a whole trie walk (several ms)."""
        grammar = req.grammar
        assert grammar is not None  # the stage asks only about requests with a grammar
        self.asked[req.rid] = self.steps
        if self.waiting.get(req.rid) == self.steps:
            return False
        owed = self.owed.get(req.rid, 0.0)
        if owed > 0:  # its last uncuttable call took more than a step's budget: it sits out
            self.owed[req.rid] = owed - self.step_seconds  # a step's budget per step sat out
            if self.owed[req.rid] <= 0:
                self.slow.pop(req.rid, None)
            return False
        if self.left <= 0 and grammar.needs_work():
            # Work done earlier in the step (s4's jump searches come first) can spend the whole
            # budget step after step: with grammar_step_seconds=1e-6 a request waited 5.9
            # million steps for a row until max_grammar_seconds aborted it. So the request that
            # has waited longest, since a step before this one, works anyway: one slice a step,
            # one unit of work, then it stops.
            # The longest waiting of those still asking: one that left the batch (a jump
            # re-admits it to prefill, where a full batch may keep it) asks no more, and
            # standing first it held every rescue: 7 running requests sat out 700,000 steps.
            since = self.starved.setdefault(req.rid, self.steps)
            first = next((rid for rid in self.starved if self.asked.get(rid, -1) >= self.steps - 1), None)
            if self.rescued or since == self.steps or first != req.rid:
                return False
            self.rescued = True
        self.starved.pop(req.rid, None)
        with self.slice(req):
            return grammar.prepare(max(self.left, 0.0))

    def wait_for_search(self, req: Req) -> None:
        """`req`'s jump-forward search was cut this step: a greedy or seeded request sits the
        step out, rather than decode the text a jump would have skipped. Each token sampled
        draws from its seeded generator, so a cut moved every later draw: the same request
        and seed gave other text on a loaded machine (a stranger's test: 2 in 80). A greedy
        request decodes the forced text in other tokens than the jump's, and the model, fed
        other tokens, went on otherwise: `"n": 4211` with a 60 s budget, `"n":-3908` with
        10 us in a batch (another stranger's test: 1 in 60). It waits as long as the search
        is cut, up to MAX_SEARCH_WAITS steps in a row: every slice of a search keeps at least
        one unit of work (`checkpoint`), so the search ends; waiting once only, a search cut
        two steps running was decoded, and 2 seeded texts in 60 changed with a 10 us budget
        and arrivals every third step. Past the limit it is left to decoding (a budget spent
        step after step by others, on a long search, would hold it too long)."""
        if not (is_greedy(req) or req.sampling_params.seed is not None):
            return
        streak = self.streak.get(req.rid, 0) + 1 if self.waiting.get(req.rid) == self.steps - 1 else 1
        if streak > MAX_SEARCH_WAITS:
            return
        self.streak[req.rid] = streak
        self.waiting[req.rid] = self.steps

    @property
    def slow_of(self) -> Counter[str]:
        """client -> its requests in `slow` (paying back a slow call)."""
        return Counter(self.slow.values())

    def forget(self, req: Req) -> None:
        self.waiting.pop(req.rid, None)
        self.streak.pop(req.rid, None)
        self.spent.pop(req.rid, None)
        self.owed.pop(req.rid, None)
        self.charged.discard(req.rid)
        self.slow.pop(req.rid, None)
        client = self.client_of.pop(req.rid, None)
        if client is not None:
            self.present[client] -= 1
            if not self.present[client]:
                del self.present[client]
        self.starved.pop(req.rid, None)
        self.asked.pop(req.rid, None)


class BudgetedJumpForward(JumpForward):
    """s4's jump forward, its grammar reads (the search for forced text, the check at the
    seam) done within the step's budget: a read cut short is no jump this step (the request
    decodes as usual, or a greedy or seeded one sits the step out, `GrammarWork.wait_for_search`;
    the work goes on next step from the states it made). Moving the
    grammar is never cut: it runs outside any slice."""

    def __init__(self, tokenizer: Tokenizer, work: GrammarWork):
        super().__init__(tokenizer)
        self.work = work
        self.deciding = False  # inside before_decode

    def before_decode(self, running: list[Req]) -> list[Readmit]:
        self.deciding = True  # a search cut here decides what the request samples (not an s7 draft's)
        try:
            return super().before_decode(running)
        finally:
            self.deciding = False

    def find_jump(self, req: Req) -> tuple[bytes, Any] | None:
        try:
            # Past the step's budget no search begins, as no row work does (`ready`): a slice
            # keeps one unit of work before it may stop, and each of one request's 128 choices
            # kept a 15 ms derivative of a large structural tag, 2 s a step for every client
            # (a stranger's stall hunt). A jump is only a speed-up.
            if self.work.left <= 0:
                raise OutOfTime
            start = self.work.stamp()
            with self.work.slice(req):
                found = super().find_jump(req)
            # A library's search is one native call: one found too slow is the last of its
            # grammar (whatever a bound on its forced text said; forced_text.py)
            if min(self.work.since(start)) > self.work.max_call_seconds:
                assert isinstance(req.grammar, BaseGrammarObject)  # (only a constrained request searches)
                req.grammar.search_was_slow()
            return found
        except OutOfTime:
            if self.deciding:
                self.work.wait_for_search(req)
            return None

    def jump_ended(self, req: Req) -> bool:
        """Read from the automaton's structure (`is_over`), not by making the landing state's
        row: s4's `is_terminated` made that row on the scheduler thread outside any slice,
        for every jump. A match that only the row shows complete is finished by `ready`,
        within the budget, before the request's next token."""
        g = req.grammar
        assert isinstance(g, BaseGrammarObject)  # only a constrained request jumps
        return g.is_over()

    def leave_the_seam_to_the_model(self, req: Req, new_output_ids: list[int]) -> list[int] | None:
        try:  # (begun past the budget too: it follows a search that found a jump this step)
            with self.work.slice(req):
                return super().leave_the_seam_to_the_model(req, new_output_ids)
        except OutOfTime:
            self.work.wait_for_search(req)
            return None


@dataclass(frozen=True)
class BackendOptions(StageOptions):
    grammar_backend: str = "fsm"  # "fsm", "xgrammar", "outlines" or "llguidance"
    jump_forward: bool = True  # where the backend can jump: outlines-core's matchers offer none (chapter 05)
    compile_timeout: float = 30.0  # seconds; a compile's child process is killed after it
    max_pending_compiles: int = 64  # distinct compiles waited on at once
    max_entries: int = 128  # compiled grammars kept in memory ...
    # ... and at most this many bytes of them, measured again as lazy grammars grow (`trim`):
    # 48 MiB, so a server's memory comes back near its start after hostile grammars (four
    # `([\s\S]*[aeiou][\s\S]{N}){6}` grammars grow 40-60 MB each in 64 tokens: at 128 MiB
    # two of them stayed, and RSS ended 32% over its start; at 48 MiB, 15%)
    grammar_cache_bytes: int | None = 48 << 20
    compile_workers: int = 2  # compiles at once
    # A free compile thread serves the client that used them least lately: its compile
    # seconds, each halving in this many seconds (0: clients take plain turns; work_slices.py)
    compile_usage_half_life: float = 10.0
    json_whitespace: str | None = None  # whitespace allowed between JSON tokens (regex)
    # our JSON Schema compiler's other choices (constrained/json_schema.py SchemaOptions:
    # bounded numerals, any_order, extra_properties, unknown_formats, ...); checked at start
    json_schema_options: dict[str, Any] | None = None
    # our own backend ("fsm") only: s1's and s3's bounds, workers and disk cache
    max_fsm_states: int = 10_000
    max_regex_chars: int | None = 100_000
    # where the fsm backend's eager compiles and large schemas, outlines-core's indexes and
    # xgrammar's grammars are built: "process" (a child, killed at compile_timeout) or
    # "thread"; the child's bounds
    compile_in: str = "process"
    compile_nice: int = 5
    compile_memory_bytes: int | None = 4 << 30
    # CPU seconds a JSON Schema's compile may take in this process (on a compile thread that
    # yields at every subschema) before it is compiled again in a child process
    schema_cpu_seconds: float = IN_PROCESS_SECONDS
    grammar_cache_dir: str | None = None
    # our own backend's automaton: "lazy" (states made on first visit) or "eager" (s1-s4's,
    # through the compile service), and the lazy one's bounds (None: its defaults)
    automaton: str = "lazy"
    # Grammar work on the scheduler thread (the lazy automaton's rows, jump searches) per
    # step, shared by the requests, and as much again for compile threads; and the most one
    # request's grammar may need in all (constrained/work_slices.py).
    grammar_step_seconds: float = 0.004
    max_grammar_seconds: float = 30.0
    # One call of a request's grammar that no slice can cut (a library's mask or token, in
    # native code) may take this long; its request is aborted past it (GrammarWork.charge).
    max_grammar_call_seconds: float = 0.1
    max_lazy_states: int | None = None
    max_row_expansions: int | None = None
    max_regex_nodes: int | None = None

    def __post_init__(self) -> None:
        for name in ("grammar_step_seconds", "max_grammar_seconds", "max_grammar_call_seconds", "schema_cpu_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
        if self.compile_usage_half_life < 0:
            raise ValueError(
                f"compile_usage_half_life must be 0 (plain turns) or above, not {self.compile_usage_half_life!r}"
            )

    def check_read_by(self, backend: type[BaseGrammarBackend]) -> None:
        """ValueError naming an option of BACKEND_SPECIFIC_OPTIONS set away from its default
        that `backend` does not read (its `own_options`): set, it would change nothing, so
        `json_schema_options={"any_order": True}` on xgrammar is an error, not ignored."""
        for f in fields(self):
            if f.name in BACKEND_SPECIFIC_OPTIONS - backend.own_options and getattr(self, f.name) != f.default:
                reads = ", ".join(sorted(backend.own_options)) or "none of them"
                raise ValueError(
                    f"{f.name} is not read by the {self.grammar_backend!r} grammar backend, so it would "
                    f"change nothing (of the backend-specific options it reads {reads}); leave it out"
                )

    def backend_options(self) -> dict[str, Any]:
        """The fields a backend's constructor takes as keywords."""
        return {
            "automaton": self.automaton,
            "max_lazy_states": self.max_lazy_states,
            "max_row_expansions": self.max_row_expansions,
            "max_regex_nodes": self.max_regex_nodes,
            "max_entries": self.max_entries,
            "max_bytes": self.grammar_cache_bytes,
            "compile_timeout": self.compile_timeout,
            "threads": self.compile_workers,
            "compile_usage_half_life": self.compile_usage_half_life,
            "json_whitespace": self.json_whitespace,
            "json_schema_options": self.json_schema_options,
            "max_fsm_states": self.max_fsm_states,
            "max_regex_chars": self.max_regex_chars,
            "compile_in": self.compile_in,
            "compile_nice": self.compile_nice,
            "compile_memory_bytes": self.compile_memory_bytes,
            "schema_cpu_seconds": self.schema_cpu_seconds,
            "grammar_cache_dir": self.grammar_cache_dir,
        }


# The options above that only some backends read (each backend's `own_options` names its
# own; our fsm backend reads every one of them, the libraries fewer); the others every
# backend reads (its cache, compile threads, timeout, child bounds).
BACKEND_SPECIFIC_OPTIONS = FSMBackend.own_options


@register("s5-backends")
class BackendStage(Stage):
    Options = BackendOptions
    options: BackendOptions  # what __init__ parses with Options
    supports = frozenset({"regex", "json_schema", "ebnf", "think_end"})
    grammar_errors = (ConstraintError, RegexError, GrammarError)

    def __init__(self, ctx: StageContext):
        super().__init__(ctx)
        warm_up_apply_kernel(ctx.device)  # every backend's apply_vocab_mask uses s2's kernel
        o = self.options
        backend_class = get_backend_class(o.grammar_backend)
        o.check_read_by(backend_class)
        self.backend = backend_class(ctx.tokenizer, ctx.vocab_size, **o.backend_options())
        self.queue = GrammarQueue(o.compile_timeout, Future.done, self.take_compiled, o.max_pending_compiles)
        self.work = GrammarWork(
            o.grammar_step_seconds, o.max_grammar_seconds, self.backend.baton, o.max_grammar_call_seconds
        )
        self.jump = BudgetedJumpForward(ctx.tokenizer, self.work)
        # grammar classes whose rows are filled one by one, timed (`fill_rows_timed`)
        self.rows_timed: set[type[BaseGrammarObject]] = set()

    # -- hook 1: arrival ---------------------------------------------------------------
    def has_grammar(self, constraint: tuple[str, str]) -> bool:
        """Whether this (kind, text) is compiled or compiling already (s3's question, asked
        of the backend's cache)."""
        return self.backend.is_cached(*constraint)

    def on_arrival(self, req: Req) -> None:
        self.work.arrived(req)  # (every request: a client's grammar calls are paid back while others wait)
        constraint = req.sampling_params.constraint()
        if constraint is None or self.refuse_unsupported(req):
            return
        think_end = req.sampling_params.think_end
        if think_end is not None:
            ids = self.ctx.tokenizer.encode(think_end)
            if len(ids) != 1:
                req.finish(
                    "abort",
                    AbortKind.CLIENT,
                    message=f"think_end {think_end!r} must be one token of this "
                    f"tokenizer, it encodes to {len(ids)} tokens",
                )
                return
        if not self.has_grammar(constraint) and self.queue.full():
            self.queue.refuse(req)
            return
        value, ready = self.backend.get_cached_or_future_value(*constraint, client=req.client)
        if ready:
            self.attach(req, value)
        else:
            self.queue.wait_for(req, value)

    def attach(self, req: Req, grammar: BaseGrammarObject) -> None:
        if isinstance(grammar, InvalidGrammarObject):
            req.finish("abort", AbortKind.GRAMMAR, message=grammar.message)
            return
        think_end = req.sampling_params.think_end
        if think_end is not None:
            grammar = ReasonerGrammar(grammar, self.ctx.tokenizer.encode(think_end)[0], self.ctx.tokenizer.eos_token_id)
        req.grammar = grammar

    # -- hook 2: s3's grammar queue, with futures --------------------------------------------
    def poll_grammar_queue(self, queue: list[Req]) -> list[Req]:
        compiling = {rid: w.handle for rid, w in self.queue.pending.items() if not w.handle.done()}
        ready = self.queue.poll_grammar_queue(queue)
        for req in ready:
            if req.rid in compiling and not compiling[req.rid].done():  # it left on the timeout
                self.timed_out(req, compiling[req.rid])
        return ready

    def timed_out(self, req: Req, future: Future[BaseGrammarObject]) -> None:
        """A request gave up on its compile: stop the compile if no one else waits for it
        (it would go on using CPU and memory), and when the compile spent more than half
        the timeout waiting for a thread, behind other clients' compiles, say the server was
        too busy (a 503 with Retry-After), not that the grammar was too slow (a 400)."""
        queued = self.backend.queued_seconds(future)
        # (a client whose own earlier compiles still run waits for them, not for the server:
        # a stranger's runaway compile made its next grammar a "retry later" that never helped)
        own = self.backend.held_by_own_compiles(future)
        self.cancel_if_unwanted(future)
        timeout = self.queue.timeout
        if queued > timeout / 2 and req.finished_reason is not None:
            constraint = req.sampling_params.constraint()
            assert constraint is not None  # it waited for a compile: it has a grammar
            behind = (
                f"behind this client's own earlier compiles, which still run: a client compiles "
                f"{self.backend.pool.per_client} at a time); retry once they end"
                if own
                else "behind other clients' compiles); retry later"
            )
            req.finished_reason.update(
                kind=AbortKind.BUSY,
                message=f"the server was too busy to compile the {constraint[0]} within "
                f"{timeout:g} s (it waited {queued:.1f} s {behind}",
                retry_after=max(1, round(timeout / 2)),
            )

    def take_compiled(self, req: Req, future: Future[BaseGrammarObject]) -> None:
        grammar = self.backend.result(future)
        assert grammar is not None  # the queue hands a compile over only once it is done
        self.attach(req, grammar)

    # -- every step: grammar work within a budget ----------------------------------------------
    def begin_step(self) -> None:
        self.work.begin_step()

    def wait_for_compiles(self, seconds: float) -> None:
        self.backend.baton.lend(seconds) if self.backend.baton.running else time.sleep(seconds)

    def ready(self, req: Req) -> bool:
        if req.grammar is None:
            return True
        if not self.work.ready(req):
            return False
        if req.grammar.is_terminated():  # the work showed the match complete: nothing to sample
            req.finish("stop", matched=None)
        return True

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
        mask = self.batch_vocab_mask(reqs)
        if mask is not None:
            BaseGrammarObject.apply_vocab_mask(logits, BaseGrammarObject.move_vocab_mask(mask, logits.device))

    def batch_vocab_mask(self, reqs: list[Req]) -> torch.Tensor | None:
        """The batch's packed mask [B, W] (row i: what reqs[i]'s grammar allows), or None when
        no row is constrained; a request whose row allows nothing is aborted. (s7's overlap
        fills it while the forward runs, and applies it once the logits are there.)"""
        live = [(r.grammar, i) for i, r in enumerate(reqs) if r.grammar is not None and not r.finished]
        if not live:
            return None
        mask = BaseGrammarObject.allocate_vocab_mask(self.ctx.vocab_size, len(reqs))
        by_class: dict[type[BaseGrammarObject], list[tuple[BaseGrammarObject, int]]] = {}
        for grammar, i in live:
            by_class.setdefault(type(grammar), []).append((grammar, i))
        for cls, entries in by_class.items():
            if cls in self.rows_timed:  # its batched fill was slow: whose row is it?
                if self.fill_rows_timed(entries, mask, reqs) <= self.work.step_seconds:
                    self.rows_timed.discard(cls)
                continue
            start = self.work.clock()
            cls.fill_vocab_mask_batched(entries, mask)
            if self.work.clock() - start > self.work.step_seconds:
                self.rows_timed.add(cls)  # (a batched call cannot say whose row was slow)
        for _grammar, i in live:
            if reqs[i].finished:
                continue
            if not bool(mask[i].any()):
                reqs[i].finish("abort", AbortKind.GRAMMAR, message="the grammar allows no token here")
        return mask

    def fill_rows_timed(
        self, entries: list[tuple[BaseGrammarObject, int]], mask: torch.Tensor, reqs: list[Req]
    ) -> float:
        """Fill each row alone, timed and charged (GrammarWork.charge), so a slow row's request
        sits out steps or, past max_grammar_call_seconds, is aborted; the seconds they took.
        A class's rows are filled so from the step after its batched fill passed the step's
        budget (the whole batch's rows take ~1 ms in the libraries) until they fit in it again.
        (Filled again at once, llguidance's rows were its cached masks: 30 rows of an
        ambiguous EBNF took 0.2 s batched and 0.4 ms again, and nobody was charged.)"""
        took = 0.0
        for grammar, i in entries:
            start = self.work.stamp()
            grammar.fill_vocab_mask(mask, i)
            took += self.work.clock() - start[0]
            self.charge_call(reqs[i], start, "mask")
        return took

    def charge_call(self, req: Req, start: tuple[float, float], what: str) -> bool:
        """Charge the uncuttable call begun at `start` (GrammarWork.stamp) to `req`
        (GrammarWork.charge), and abort the request if that says so; whether it was aborted."""
        took, cpu = self.work.since(start)
        reason = self.work.charge(req, took, what, cpu)
        if reason is not None:
            req.finish("abort", AbortKind.GRAMMAR, message=reason)
        return reason is not None

    # -- hook 5: advance -----------------------------------------------------------------
    def advance(self, req: Req, token_id: int) -> None:
        g = req.grammar
        if g is None:
            return
        start = self.work.stamp()
        try:
            g.accept_token(token_id)
        except GrammarLimitError as e:  # the library's limit on this grammar: the request's fault
            req.output_ids.pop()
            req.finish("abort", AbortKind.GRAMMAR, message=str(e))
            return
        except GrammarError as e:
            # The token was sampled under this grammar's own mask (an empty mask aborts before
            # sampling), so mask and matcher disagree: the backend's fault, not the request's.
            # (xgrammar 0.2.9 does, after `"{2}` before a class of 3-byte characters.) The token
            # leaves the output: an aborted answer holds only text the grammar accepted.
            req.output_ids.pop()
            req.finish(
                "abort",
                AbortKind.ENGINE,
                message=f"the {self.options.grammar_backend} grammar backend's mask allowed a token its "
                f"matcher then refused ({e}); the request is stopped, its grammar is not at fault",
            )
            return
        if self.charge_call(req, start, "token"):
            return
        # Whether the match is complete is known once the new state's row is made: within
        # this step's budget, else when `ready` finishes the work. A row made already (a
        # library's matcher has none to make; a lazy state visited before) costs nothing to
        # read, whatever is left of the budget: at the length limit, reading it or not chose
        # between "stop" and "length" for the same request (by the load, and s7's mask chains
        # spend the step's budget: s7 said "length" where s6 said "stop"). At the length limit,
        # without the row, the grammar tells from its structure (`is_over`): a client reads
        # "length" as a cut answer (a 10 us budget made a complete match say "length"), and
        # making that row whatever the budget let any request with max_new_tokens=1 and a
        # costly grammar stall every other client.
        at_limit = len(req.output_ids) >= req.sampling_params.max_new_tokens
        if ((not g.needs_work() or self.work.ready(req)) and g.is_terminated()) or (at_limit and g.is_over()):
            req.finish("stop", matched=token_id if token_id == self.ctx.tokenizer.eos_token_id else None)

    def cancel_if_unwanted(self, future: Future[BaseGrammarObject]) -> None:
        """Stop the compile behind `future` when no request waits for it any more: it would go
        on using CPU and memory (a library's child process, for up to compile_timeout)."""
        if not future.done() and not any(w.handle is future for w in self.queue.pending.values()):
            self.backend.cancel(future)

    def release(self, req: Req) -> None:
        waiting = self.queue.pending.get(req.rid)
        self.queue.forget(req)
        if waiting is not None:  # it left while its grammar compiled (an abort, a client gone)
            self.cancel_if_unwanted(waiting.handle)
        self.work.forget(req)
        if req.grammar is not None:
            self.backend.trim()  # its grammar may have grown the cache past grammar_cache_bytes
        super().release(req)

    def stats(self) -> dict[str, Any]:
        """The backend's grammar cache numbers (for the server's /metrics)."""
        return self.backend.stats()

    def shutdown(self) -> None:
        self.backend.shutdown()
