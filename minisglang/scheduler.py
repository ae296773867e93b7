"""The scheduler: queues, batches, KV memory, and the loop that drives the model.

One call to `step()` does what SGLang's first release did in `forward_step`:

    schedule  -> a prefill batch of waiting requests if any fit, else the running batch
                 (with `mixed_prefill`, the running requests decode inside the prefill batch;
                 without it, the step after a prefill of new requests is theirs)
    run       -> one model forward over that batch
    sample    -> the stage masks the logits, the sampler picks one token per request
    process   -> append tokens, advance grammars, finish requests, free their memory

Memory rules (chapters/00-the-engine.md, "Who owns a KV slot"):
- A running request holds the slots `req_to_token[req.req_pool_idx, :req.kv_len]`; the
  first `req.prefix_len` of them belong to the radix tree (locked through `req.last_node`),
  the rest are the request's own.
- Right after its prefill, `cache_prefilled` gives the tokens it computed to the tree (as
  SGLang's `cache_unfinished_req`): the request then locks the longer prefix and owns only
  the slots of its decode steps, so the next prefill batch already hits its prompt.
- When it leaves, `release_memory` inserts its tokens into the tree; the tree keeps the
  slots it did not have yet, the duplicates are freed, the lock is dropped.
- So at any quiet moment every slot is either free or held by the tree.

Mixed prefill (`SchedulerConfig.mixed_prefill`, off by default; SGLang #1013): a step
that prefills also decodes the running requests in the same forward. A decode is an
extend of one token on top of the request's KV, so such a rider simply joins the prefill
batch; and hook 3 runs before the batch is chosen, so a request that jumps (s4) comes
back in that very forward instead of holding everyone back for a forward of its own.

Chunked prefill (`SchedulerConfig.chunked_prefill_size`, off by default; s7 turns it on
through its option of that name, SGLang's): a prompt longer than the chunk is prefilled
a chunk per step, so no forward computes more than that many prompt tokens, and with
`mixed_prefill` the running requests decode in each of those forwards: a 4k-token prompt
no longer stalls everyone's decode for one long forward. The request being cut
(`chunked_req`) is admitted once and then prefilled alone, a chunk a step, in no queue;
each chunk's KV is final (a prompt token's K and V depend only on the tokens before it),
so `cache_prefilled` gives it to the radix tree right away, as SGLang's
`cache_unfinished_req` does. Its row of the logits picks no token until the last chunk:
no mask, no sample, no grammar step before then.

Faults: an exception in a stage hook, the forward, the sampler or the detokenizer aborts only
the requests it concerns, and the next step goes on (scheduler_faults.py says how).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from . import admission_order
from .admission_order import returning
from .core import AbortKind, Req
from .memory_pool import ReqToTokenPool, TokenToKVPool
from .model.forward_batch import ForwardBatch, ForwardMode
from .prefill_budget import PrefillBudget
from .radix_cache import RadixCache
from .recent_use import RecentUse
from .retraction import NewTokenRatio, decode_cushion, retraction_victim, victims_for_room
from .sampler import sample, seeded_generator
from .scheduler_config import SchedulerConfig
from .scheduler_faults import SchedulerFaults
from .stages.base import Stage
from .stop_aliases import StopAliases
from .tokenizer import IncrementalDetokenizer, Tokenizer

# Prefill forwards of new requests in a row (without `mixed_prefill`) that may leave the
# running requests undecoded; then they decode before the next request is admitted. With
# prefill always first, one client whose one-token requests arrived a step apart kept every
# other request at its first token (over HTTP another client's 8-token answer took 72 ms
# alone, 428 ms median and 2.5 s at worst beside it).
MAX_PREFILLS_BEFORE_DECODE = 1


def cut_at_stop_string(req: Req, checked: int = 0) -> None:
    """End the output before the stop string that appears first in it, and finish the
    request there.

    Called wherever the output text grows (a sampled token, s4's jump, the final flush),
    so between steps no request's text holds a stop string: a stream then needs to hold
    back only the last len(stop) - 1 characters (engine.stream_chunk). "First" is the
    stop string whose end comes first (the longest of those, on a tie), as if the text
    had arrived one character at a time: the cut does not depend on how many characters
    a step brings (a jump, a multi-byte character). A stop string in the text outranks
    whatever else finished the request (the grammar, EOS, the length limit), an abort
    aside; its detokenizer is then not flushed, since the cut already ended the text.
    `checked`: how much of the text an earlier call searched (no stop string ends inside
    it): only what follows, and the len(stop) - 1 characters before, are searched (the
    whole text at every token made a long output's steps quadratic).
    """
    stops = req.sampling_params.stop
    text = req.output_text
    hits = [
        (pos + len(s), pos, i) for i, s in enumerate(stops) if (pos := text.find(s, max(0, checked - len(s) + 1))) != -1
    ]
    if not hits:
        return
    _, pos, i = min(hits)
    req.output_text = req.output_text[:pos]
    if req.finished_reason is not None and req.finished_reason["type"] != "abort":
        req.finished_reason = None  # the text ends at the stop string, so that is the reason
    req.finish("stop", matched=stops[i])


def pool_row(req: Req) -> int:
    """`req`'s row of the request-to-token table, which it holds from admission until it leaves."""
    assert req.req_pool_idx is not None, f"{req!r} holds no row of the request-to-token table"
    return req.req_pool_idx


class _PlaceholderSlots:
    """The KV pool of the in-batch scratch tree (`Scheduler._in_batch_tree`): its slot ids are
    placeholders, and it never evicts, so nothing is ever freed."""

    def free(self, slots: torch.Tensor) -> None:
        raise RuntimeError("the in-batch scratch tree holds placeholder slots: it never evicts")


@dataclass
class SchedulerTotals:
    """Running counts since the scheduler started (for `Engine.stats()` and /metrics)."""

    finished_by_reason: dict[str, int] = field(default_factory=dict)  # "stop" / "length" / "abort"
    prompt_tokens: int = 0  # of finished requests
    cached_prompt_tokens: int = 0  # of those, supplied by the radix tree
    completion_tokens: int = 0  # every output token, sampled or jumped
    errors: int = 0  # exceptions caught by a step (each aborted its requests)
    grammar_errors: int = 0  # requests aborted by their own grammar (refused, failed, past a limit): the client's error
    retractions: int = 0  # running requests sent back to wait when the pool ran out (retraction.py)


@dataclass
class ScheduledBatch:
    """What `schedule()` decided to run this step."""

    mode: ForwardMode
    reqs: list[Req]  # every request of the forward, in the order of its logits' rows
    # EXTEND with mixed_prefill: the last `decode_riders` of `reqs` are running requests
    # that decode in this forward (one token each, on top of their KV), not prefills.
    decode_riders: int = 0
    # EXTEND with chunked prefill: a prompt this forward computes only a chunk of. It is fed
    # first, but it is not one of `reqs`: its row of the logits is dropped, it picks no token.
    chunk: Req | None = None
    # EXTEND: another client's running requests wait for this forward (`owe_decode_time`).
    beside_others: bool = False

    @property
    def prefill_reqs(self) -> list[Req]:
        """EXTEND: the requests this forward admits (all of `reqs` but the riders)."""
        return self.reqs[: len(self.reqs) - self.decode_riders]

    @property
    def riders(self) -> list[Req]:
        """EXTEND: the running requests decoding in this forward (mixed_prefill)."""
        return self.reqs[len(self.reqs) - self.decode_riders :]


class Scheduler(SchedulerFaults):
    def __init__(
        self, model, tokenizer: Tokenizer, stage: Stage, config: SchedulerConfig, device: torch.device, seed: int = 0
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.stage = stage
        self.config = config
        self.device = device
        mc = model.config
        # A token ends its request (unless ignore_eos) if it is the tokenizer's EOS or one
        # the checkpoint's generation_config.json lists (Llama 3 Instruct: <|eot_id|> too).
        self.stop_token_ids = frozenset({tokenizer.eos_token_id, *mc.eos_token_ids})
        # Those of them that spell nothing stand for EOS under a grammar (stop_aliases.py).
        self.stop_aliases = StopAliases.of(tokenizer, self.stop_token_ids)
        self.max_context_len = mc.max_position_embeddings
        self.req_to_token_pool = ReqToTokenPool(config.max_running_requests, self.max_context_len, device)
        self.token_to_kv_pool = TokenToKVPool(
            config.max_total_tokens, mc.num_layers, mc.num_kv_heads, mc.head_dim, model.dtype, device
        )
        self.tree_cache = RadixCache(self.token_to_kv_pool, disable=config.disable_radix_cache)
        self.grammar_queue: list[Req] = []  # waiting for their grammar to compile (s3)
        self.waiting_queue: list[Req] = []  # ready to be prefilled, in the order they entered it
        self.running: list[Req] = []  # decoding
        self.chunked_req: Req | None = None  # admitted, its prompt prefilled in part (chunked prefill)
        # rid -> every request accepted and not yet released, whichever queue holds it: an abort
        # finds its request here, not by a scan (a client that left with 8,192 queued choices
        # sent 8,192 aborts, and scanning the queues for each held the scheduler 2.4 s).
        self.live: dict[int, Req] = {}
        # Prefill forwards since the running requests last decoded (without mixed_prefill).
        self.prefills_before_decode = 0
        # Forward seconds the running requests are owed in decodes (`owe_decode_time`), timed by
        # `clock` (a test's own clock can stand in).
        self.decode_seconds_owed = 0.0
        self.clock: Callable[[], float] = time.perf_counter
        self.sat_out = 0  # requests that sat out this step (grammar work not done)
        self.finished: list[Req] = []  # finished since the last step() returned
        self.generator = seeded_generator(seed)  # every bit of the seed counts (see seeded_generator)
        self.step_count = 0
        # "mixed": the prefill forwards (counted in "prefill" too) that carried decode riders.
        self.forward_counts = {"prefill": 0, "decode": 0, "mixed": 0}
        self.totals = SchedulerTotals()
        assert config.min_new_token_ratio is not None  # (SchedulerConfig fills it in)
        self.new_token_ratio = NewTokenRatio(config.new_token_ratio, config.min_new_token_ratio)
        # Each server client's prompt tokens prefilled lately, which orders a turn's clients.
        self.prefilled = RecentUse(admission_order.PREFILL_HALF_LIFE_SECONDS)
        self.trace: collections.deque[dict[str, Any]] = collections.deque(maxlen=config.trace_limit)
        # A step view's recorder (minisglang/stepview): called around the mask and for each
        # token, it adds detail events to `trace`; None (the default) costs one check per hook.
        self.step_recorder: Any = None

    # ------------------------------------------------------------------ requests in/out
    def add_request(self, req: Req) -> None:
        """Accept a request: check it fits, let the stage see it, queue it."""
        req.detokenizer = IncrementalDetokenizer(self.tokenizer)
        if req.sampling_params.seed is not None:
            req.generator = seeded_generator(req.sampling_params.seed)
        need = len(req.origin_input_ids) + req.sampling_params.max_new_tokens
        if not req.origin_input_ids:
            req.finish("abort", AbortKind.CLIENT, message="the prompt is empty (no tokens)")
        elif need > self.max_context_len:
            req.finish(
                "abort",
                AbortKind.CLIENT,
                message=f"prompt ({len(req.origin_input_ids)} tokens) + "
                f"max_new_tokens ({req.sampling_params.max_new_tokens}) exceeds the model's context of "
                f"{self.max_context_len} tokens",
            )
        elif need > self.config.max_total_tokens:
            req.finish(
                "abort",
                AbortKind.CLIENT,
                message=f"the request needs {need} KV slots but the pool has only {self.config.max_total_tokens}",
            )
        else:
            with self.isolate([req], "accepting the request", hook=1):
                self.stage.on_arrival(req)  # hook 1 (s1 compiles the FSM right here)
        self.record_event("arrive", req)
        if req.finished:
            self._finish(req)
        else:
            self.live[req.rid] = req
            self.grammar_queue.append(req)

    def requests(self) -> list[Req]:
        """Every request in the engine: waiting for its grammar, for its prefill, in the middle
        of a chunked prefill, or decoding."""
        chunked = [self.chunked_req] if self.chunked_req is not None else []
        return self.grammar_queue + self.waiting_queue + chunked + self.running

    def live_requests(self) -> list[Req]:
        """Every request accepted and not yet released: `requests()`, in its order, and any an
        error left in no queue (taken from one, not yet put in the next)."""
        queued = self.requests()
        seen = {r.rid for r in queued}
        return queued + [r for r in self.live.values() if r.rid not in seen]

    def abort(self, rid: int, message: str = "aborted by the client") -> bool:
        """Abort a request wherever it is; it leaves at the start of the next step."""
        req = self.live.get(rid)
        if req is None:
            return False
        req.finish("abort", AbortKind.CANCELLED, message=message)
        return True

    def release_aborted(self) -> None:
        """Let every finished request still in the engine leave now (the start of a step does
        this): each queue filtered once, not searched once per request that leaves."""
        gone = [r for r in self.live_requests() if r.finished and not r.released]
        if not gone:
            return
        for queue in (self.grammar_queue, self.waiting_queue, self.running):
            queue[:] = [r for r in queue if not r.finished or r.released]
        for req in gone:
            if req is self.chunked_req:
                self.chunked_req = None
            self._finish(req)

    def release_request(self, req: Req) -> None:
        """Let finished `req` leave now, from whichever queue holds it (from none, when an
        error cut a move between queues short)."""
        if req.released:
            return
        for queue in (self.grammar_queue, self.waiting_queue, self.running):
            if req in queue:
                queue.remove(req)
        if req is self.chunked_req:
            self.chunked_req = None
        self._finish(req)

    def has_work(self) -> bool:
        return bool(self.requests())

    def shutdown(self) -> None:
        """The engine shuts down (s7's overlap stops its forward thread)."""
        return None

    # ------------------------------------------------------------------ the loop
    @torch.inference_mode()
    def step(self) -> list[Req]:
        """Run one scheduler step; return the requests that finished during it."""
        self.step_count += 1
        self.sat_out = 0
        self.stage.begin_step()
        self.release_aborted()
        self._admit_ready_grammars()
        batch = self.schedule()
        if batch is not None:
            with self.isolate_batch(batch) as fault:  # one bad batch must not stop the loop
                start = self.clock()
                logits = self.run(batch)
                next_token_ids = self.sample(batch, logits)
            if fault.error is None:
                self.owe_decode_time(batch, self.clock() - start)
                self.process_results(batch, next_token_ids)
        elif self.grammar_queue and not self.sat_out:
            self.stage.wait_for_compiles(0.005)  # only compiles are pending: leave them the CPU
        done, self.finished = self.finished, []
        return done

    def schedule(self) -> ScheduledBatch | None:
        """A prefill batch if any waiting request fits, else the running batch (decode).

        With `mixed_prefill` the running requests ride in the prefill batch (they decode in
        it), so hook 3 runs first: a request that jumps is admitted again by this forward.
        Without it, running requests that sat out `MAX_PREFILLS_BEFORE_DECODE` prefill
        forwards in a row have the next step (hook 3 and their decode) before another request
        is admitted or a cut prompt's next chunk runs (SGLang runs a cut prompt to its last
        chunk first: one long prompt would hold every decode back for all its chunks).
        A prefill beside another client's decodes owes them its time (`owe_decode_time`).
        """
        mixed = self.config.mixed_prefill
        if not self.running:
            self.decode_seconds_owed = 0.0  # (nobody to owe it to)
        if mixed:
            self.prepare_decode()
            self.release_aborted()  # a jump that finished its request: it leaves, it is not admitted
            if self.running and self.decode_seconds_owed > 0:
                return self.decode_batch(prepare=False)
        elif self.running and (
            self.prefills_before_decode >= MAX_PREFILLS_BEFORE_DECODE or self.decode_seconds_owed > 0
        ):
            return self.decode_batch()
        continuing = self.chunked_req  # (admitted at an earlier step: its next chunk is in no budget of this one)
        new_reqs = self.get_new_prefill_batch()
        if new_reqs:
            # A rider's one slot is in the budget: admission reserved every running request's rest.
            riders = self.ready_reqs(self.riders_for_prefill()) if mixed else []
            if continuing is not None:
                riders = self.retract_for_chunk(continuing, riders)
            # (A re-admission, which has output, is the running batch's own work: an s4 jump.)
            if self.running and not mixed and any(not r.output_ids for r in new_reqs):
                self.prefills_before_decode += 1
            running = {r.client for r in self.running}
            beside_others = any(running - {r.client} for r in new_reqs)  # (in process: one client)
            # A prompt longer than the chunk is admitted alone (see get_new_prefill_batch).
            cut = self.prefill_end(new_reqs[0]) < len(new_reqs[0].fill_ids)
            self.chunked_req = new_reqs[0] if cut else None
            return ScheduledBatch(
                ForwardMode.EXTEND,
                new_reqs[cut:] + riders,
                decode_riders=len(riders),
                chunk=self.chunked_req,
                beside_others=beside_others,
            )
        return self.decode_batch(prepare=not mixed)

    def decode_batch(self, prepare: bool = True) -> ScheduledBatch | None:
        """The running requests ready to decode (hook 3 first, unless `prepare` is False
        because it ran this step already), after any retraction the pool needs; None if none
        is (they sat out or jumped: the step is theirs all the same)."""
        self.prefills_before_decode = 0
        if prepare:
            self.prepare_decode()
        self.retract_for_room()
        decoding = self.ready_reqs(self.running)
        if not decoding:  # (they wait for their grammars, not for forwards: owed nothing)
            self.decode_seconds_owed = 0.0
        return ScheduledBatch(ForwardMode.DECODE, decoding) if decoding else None

    def owe_decode_time(self, batch: ScheduledBatch, seconds: float) -> None:
        """Time share between one client's prefills and another's decodes: a prefill forward
        that another client's running requests waited for (`beside_others`) owes them as many
        seconds of decode forwards, which `schedule` runs before the next prefill; each decode
        (or verify) forward pays its own seconds off. `max_prefill_tokens_beside_others`
        bounds one forward, not the share: a batch's first request goes in whole, and prompts
        under the cap came one a forward, a decode after each; a client's back-to-back
        ~500-token prompts held another client's 8-token answer 1.2-1.7 s (53 ms alone), the
        prompts taking ~95% of the forwards' time."""
        if batch.mode == ForwardMode.EXTEND and batch.beside_others:
            self.decode_seconds_owed += seconds
        elif batch.mode == ForwardMode.DECODE:
            self.decode_seconds_owed = max(0.0, self.decode_seconds_owed - seconds)

    def riders_for_prefill(self) -> list[Req]:
        """The running requests that may decode inside a mixed prefill forward (all of them;
        s7 keeps out those a ride would change, see SpeculativeScheduler)."""
        return self.running

    def ready_reqs(self, reqs: list[Req]) -> list[Req]:
        """The requests of `reqs` whose grammar can mask their next logits now (in their
        order); the others sit out this step while the stage works on their grammar, within
        its per-step budget, so one client's expensive grammar never stalls the others.
        The stage is asked in an order that turns with each step: when the budget runs
        out, a different request goes without next time."""
        ready = set()
        n = len(reqs)
        for k in range(n):
            req = reqs[(k + self.step_count) % n]
            with self.isolate([req], "preparing its grammar for the next token"):
                if req.finished or self.stage.ready(req):
                    ready.add(req.rid)
        out = []
        for req in reqs:
            if req.finished:
                self.release_request(req)  # its grammar completed (or failed) while preparing
            elif req.rid in ready:
                out.append(req)
            else:
                self.record_event("sit_out", req)
        self.sat_out += n - len(out)
        return out

    def prepare_decode(self) -> None:
        """Hook 3 (s4's jumps) on the running requests, which are about to decode: re-admit
        the ones the stage asks for."""
        # One request at a time: a grammar that fails here (e.g. grows past its automaton
        # limit while looking for a jump) aborts only its own request.
        for req in list(self.running):
            with self.isolate([req], "preparing the decode batch", hook=3) as fault:
                for r in self.stage.before_decode([req]):
                    self.readmit(r.req, r.new_output_ids)
            if fault.error is not None:  # a re-admission cut short may have left it in no queue
                self.release_request(req)

    def run(self, batch: ScheduledBatch) -> torch.Tensor:
        """One model forward; returns logits [B, vocab] for the last position of each request."""
        logits = self.model.forward(self.forward_batch(batch))
        return logits[1:] if batch.chunk is not None else logits  # the unfinished prompt picks no token

    def forward_batch(self, batch: ScheduledBatch) -> ForwardBatch:
        """The batch's forward: its new tokens' KV slots allocated, their positions and rows
        of the request-to-token table written (the chunk, if any, is its first request)."""
        reqs = batch.reqs
        if batch.mode == ForwardMode.EXTEND:
            # Each request computes what it has no KV for: a new one, all after its cached
            # prefix (its kv_len since admission); a chunked one, its next chunk; a rider, its
            # last token (the one a decode would feed).
            fed = ([batch.chunk] if batch.chunk is not None else []) + reqs
            starts = [r.kv_len for r in fed]
            new_ids = [req.fill_ids[start : self.prefill_end(req)] for req, start in zip(fed, starts)]
            out_cache_loc = self.alloc_kv(sum(len(x) for x in new_ids))
            with self._free_on_error(out_cache_loc):
                fb = ForwardBatch.extend(
                    [pool_row(r) for r in fed],
                    starts,
                    new_ids,
                    out_cache_loc,
                    self.req_to_token_pool,
                    self.token_to_kv_pool,
                )
            for k, (req, start, ids) in enumerate(zip(fed, starts, new_ids)):
                req.kv_len = start + len(ids)
                if req.client is not None and k < len(fed) - batch.decode_riders:  # (a rider decodes)
                    self.prefilled.add(req.client, len(ids))
            self.forward_counts["prefill"] += 1
            self.forward_counts["mixed"] += batch.decode_riders > 0
            self.record_event(
                "prefill",
                None,
                reqs=[r.rid for r in batch.prefill_reqs],
                tokens=sum(map(len, new_ids)) - batch.decode_riders,
                **({"riders": [r.rid for r in batch.riders]} if batch.decode_riders else {}),
                **({"chunk": batch.chunk.rid} if batch.chunk is not None else {}),
            )
        else:
            fb = self.decode_forward_batch(reqs, [r.last_id for r in reqs])
            self.start_decode(reqs)
        return fb

    def decode_forward_batch(self, reqs: list[Req], last_ids: list[int]) -> ForwardBatch:
        """A DECODE forward of `reqs` feeding `last_ids`: one KV slot allocated per request,
        written in its row of the request-to-token table at its position `kv_len`."""
        out_cache_loc = self.alloc_kv(len(reqs))
        with self._free_on_error(out_cache_loc):
            return ForwardBatch.decode(
                [pool_row(r) for r in reqs],
                [r.kv_len for r in reqs],
                last_ids,
                out_cache_loc,
                self.req_to_token_pool,
                self.token_to_kv_pool,
            )

    def start_decode(self, reqs: list[Req]) -> None:
        """A decode forward of `reqs` is launched: each owns one more KV slot."""
        for req in reqs:
            req.kv_len += 1
        self.forward_counts["decode"] += 1
        self.record_event("decode", None, reqs=[r.rid for r in reqs])

    def sample(self, batch: ScheduledBatch, logits: torch.Tensor) -> list[int]:
        """Mask (hook 4), then sample one token per request; -1 for a request the mask aborted."""
        logits = logits.float()
        recorder = self.step_recorder
        if recorder is not None:
            recorder.before_mask(logits, batch.reqs)
        self.mask_each(logits, batch.reqs)
        if recorder is not None:
            recorder.after_mask(logits, batch.reqs)
        live = [i for i, r in enumerate(batch.reqs) if not r.finished]
        ids = [-1] * len(batch.reqs)
        if live:
            rows = logits if len(live) == len(ids) else logits[live]  # a copy only when some were aborted
            picked = sample(rows, [batch.reqs[i] for i in live], self.generator)
            for i, tok in zip(live, picked):
                ids[i] = tok
        return ids

    def mask_each(self, logits: torch.Tensor, reqs: list[Req]) -> None:
        """Hook 4 on `logits` [len(reqs), V] (row i: reqs[i]), in place; a request whose
        grammar fails is aborted alone (`isolate`), the others masked as if it had not been.
        A row whose grammar allows EOS allows the checkpoint's other EOS tokens too."""
        with self.stop_aliases.kept(logits):
            try:
                self.stage.mask_logits(logits, reqs)
            except Exception:
                # Find whose grammar failed: mask row by row (a mask set again is the same mask) and
                # abort only the requests that fail alone; one grammar must not take its batch down.
                for i, req in enumerate(reqs):
                    if not req.finished:
                        with self.isolate([req], "masking its logits", hook=4):
                            self.stage.mask_logits(logits[i : i + 1], [req])

    def process_results(self, batch: ScheduledBatch, next_token_ids: list[int]) -> None:
        """Append each sampled token, advance its grammar (hook 5), finish whoever is done."""
        if batch.mode == ForwardMode.EXTEND:  # the riders are running already, and own their decode slots
            self.running.extend(batch.prefill_reqs)
            for req in batch.prefill_reqs + ([batch.chunk] if batch.chunk is not None else []):
                self.cache_prefilled(req)
        for req, tok in zip(batch.reqs, next_token_ids):
            if not req.finished:
                self.append_token(req, tok)
        self.leave_finished()

    def append_token(self, req: Req, tok: int) -> None:
        """One new token of `req`: append it, advance its grammar (hook 5), detokenize,
        check the finish conditions (s7 calls this once per token it keeps)."""
        self.record_token(req, tok)
        self.process_token(req, tok)

    def record_token(self, req: Req, tok: int) -> None:
        """Append `tok` to the output (all the next forward needs to know of it)."""
        req.output_ids.append(tok)
        req.sampled_tokens += 1
        if req.first_token_time is None:
            req.first_token_time = time.perf_counter()
        if self.step_recorder is not None:
            self.step_recorder.token(req, tok)

    def process_token(self, req: Req, tok: int) -> None:
        """Hook 5, the text and the finish conditions for `req`'s newest token `tok` (s7's
        overlap does this while the next forward runs)."""
        with self.isolate([req], "processing its new token (advance, detokenize, stop check)"):
            if not (tok in self.stop_aliases.ids and self.ends_at(req, tok)):  # (it ends here: no grammar step)
                self.stage.advance(req, self.stop_aliases.for_grammar(tok))
            self.update_output_text(req)
            self.check_finished(req, tok)

    def leave_finished(self) -> None:
        """The running requests that finished leave the engine (`_finish`)."""
        still = []
        for req in self.running:
            if req.finished:
                self._finish(req)
            else:
                still.append(req)
        self.running = still

    # ------------------------------------------------------------------ finishing
    def update_output_text(self, req: Req) -> None:
        """Feed new tokens to the request's incremental detokenizer (never half a character),
        then cut the text at a stop string."""
        new_ids = req.output_ids[req.detok_offset :]
        req.detok_offset = len(req.output_ids)
        checked = len(req.output_text)
        req.output_text += req.detokenizer.feed(new_ids)
        cut_at_stop_string(req, checked)

    def check_finished(self, req: Req, tok: int) -> None:
        """EOS, then the length limit (the constraint or a stop string may have finished it already)."""
        p = req.sampling_params
        if req.finished:
            return
        if self.ends_at(req, tok):
            req.finish("stop", matched=tok)
            return
        if len(req.output_ids) >= p.max_new_tokens:
            req.finish("length", length=p.max_new_tokens)

    def ends_at(self, req: Req, tok: int) -> bool:
        """Whether `tok` is an end-of-sequence token that ends `req` (not with ignore_eos).

        A constrained request's grammar decides where it may end (it allows the tokenizer's
        EOS there) and reads every other token as its text: a stop token of
        generation_config.json that spells text ("\n" listed beside the EOS) is that text for
        it, not an end (it ended `a\nb` as "a\n", "stop", with every backend)."""
        if tok not in self.stop_token_ids or req.sampling_params.ignore_eos:
            return False
        return req.grammar is None or tok == self.tokenizer.eos_token_id or not self.tokenizer.token_bytes[tok]

    def _finish(self, req: Req) -> None:
        """Leave the engine: flush text, release grammar and memory, report.

        Memory is released whatever the flush or the stage's release raise: a request that
        leaves never keeps its slots.
        """
        assert req.finished_reason is not None  # only a finished request leaves
        with self.isolate([req], "flushing its detokenizer"):
            if req.detokenizer is not None and not isinstance(req.finished_reason.get("matched"), str):
                req.output_text += req.detokenizer.flush()  # a stop string already trimmed the text
                cut_at_stop_string(req)
        with self.isolate([req], "releasing its grammar"):
            self.stage.release(req)
        if req.req_pool_idx is not None:
            self.release_memory(req)
        req.radix_mark = None  # (one left waiting after a jump: it would keep a node, and its tree, alive)
        req.released = True
        self.live.pop(req.rid, None)
        self.count_finished(req)
        self.record_event("finish", req, reason=req.finished_reason)
        self.finished.append(req)

    def count_finished(self, req: Req) -> None:
        t = self.totals
        assert req.finished_reason is not None  # it counts requests that finished
        reason = req.finished_reason["type"]
        t.finished_by_reason[reason] = t.finished_by_reason.get(reason, 0) + 1
        # Counted here, not where each abort is made: s5 aborts past its grammar limits itself.
        t.grammar_errors += reason == "abort" and req.finished_reason["kind"] is AbortKind.GRAMMAR
        t.prompt_tokens += len(req.origin_input_ids)
        t.cached_prompt_tokens += req.cached_tokens  # prompt tokens only (see get_new_prefill_batch)
        t.completion_tokens += len(req.output_ids)

    # ------------------------------------------------------------------ memory
    def alloc_kv(self, n: int) -> torch.Tensor:
        """n free KV slots, evicting least-recently-used radix leaves when short."""
        short = n - self.token_to_kv_pool.available_size()
        if short > 0:
            freed = self.tree_cache.evict(short)
            self.record_event("evict", None, tokens=freed)
        slots = self.token_to_kv_pool.alloc(n)
        if slots is None:  # the admission budget makes this unreachable; say so loudly if not
            raise RuntimeError(f"out of KV slots: need {n}, have {self.token_to_kv_pool.available_size()}")
        return slots

    def release_memory(self, req: Req) -> None:
        """Give a request's tokens to the radix tree, free duplicates and its table row."""
        slots = self.req_to_token_pool.req_to_token[req.req_pool_idx, : req.kv_len].clone()
        if self.tree_cache.disable:
            self.token_to_kv_pool.free(slots[req.prefix_len :])
        else:
            key = req.fill_ids[: req.kv_len]
            already = self.tree_cache.insert(key, slots, start=req.last_node)
            # Slots [prefix_len, already) duplicate tokens another request put in the tree
            # after we were admitted: the tree keeps its own copy, ours are freed.
            self.token_to_kv_pool.free(slots[req.prefix_len : already])
            self.tree_cache.dec_lock_ref(req.last_node)
            req.radix_mark = self.tree_cache.mark(req.last_node, key, slots)  # (for its re-admission)
        self.req_to_token_pool.free(pool_row(req))
        req.req_pool_idx, req.last_node, req.kv_len, req.prefix_len = None, None, 0, 0

    def cache_prefilled(self, req: Req) -> None:
        """Give the tokens `req` just prefilled to the radix tree and lock them (SGLang's
        `cache_filled_batch`, #418, later `cache_unfinished_req`, #977).

        Afterwards `prefix_len == kv_len`: the tree owns every slot the request has, the
        request borrows them through the lock on `last_node`, as it borrowed its cached
        prefix at admission. A request of the same batch that computed the same tokens
        first keeps them in the tree; our duplicate slots are freed and our row is pointed
        at the tree's copies, which the lock keeps from eviction.
        """
        if self.tree_cache.disable or req.req_pool_idx is None:
            return
        row = self.req_to_token_pool.req_to_token[req.req_pool_idx]
        key = req.fill_ids[: req.kv_len]
        slots = row[: req.kv_len].clone()
        # Both walks start at the request's own locked node: the tokens above it are known.
        already = self.tree_cache.insert(key, slots, start=req.last_node)
        self.token_to_kv_pool.free(slots[req.prefix_len : already])
        tree_slots, node = self.tree_cache.match_after(req.last_node, key)
        row[req.prefix_len : req.kv_len] = tree_slots  # the same ids, except where ours were duplicates
        self.tree_cache.move_lock(req.last_node, node)
        req.last_node, req.prefix_len = node, req.kv_len
        self.record_event("cache_prefill", req, tokens=req.kv_len - already)

    def retract_for_room(self) -> None:
        """Before a decode step: while the pool (free slots and what the tree may evict) has
        no slot for each running request's next token, retract one (retraction.py). Only
        admission below `new_token_ratio` 1 can leave the pool this short.

        A step with nothing running decodes nothing: the ratio stays (it fell on every step a
        request waited for its grammar to compile: 0.7 to 0.58 in one xgrammar compile)."""
        if not self.running:
            return
        if len(self.running) <= self.kv_room():
            self.new_token_ratio.decay()
            return
        # One running request alone always fits, unless a prompt in chunked prefill holds KV
        # beside it (its last chunk waiting for its grammar, `continue_chunked_prefill`): the
        # last one then goes too (it was aborted, "out of KV slots"), and the prompt goes on.
        # Once retracting, make room for a few steps, not one (retraction.py, RETRACT_DECODE_STEPS).
        keep = 1 if self.chunked_req is None else 0
        self.retract_until(lambda: decode_cushion(self.running) <= self.kv_room(), keep)

    def retract_for_chunk(self, req: Req, riders: list[Req]) -> list[Req]:
        """Before the next chunk of `req` (chunked prefill): while the pool has no slot for each
        of its tokens and each rider's, retract a running request; the riders left.

        Admission counted the whole prompt, but below `new_token_ratio` 1 the running requests
        may since have written past what it reserved for them (with `mixed_prefill` they decode
        in every chunk's forward): the chunk's forward then found no slot, and the error
        aborted it and its riders. The last running request may go too: admission made room
        for this prompt beside the reservations alone."""
        chunk = self.prefill_end(req) - req.kv_len
        gone = self.retract_until(lambda: self.kv_room() >= chunk + sum(r in self.running for r in riders), keep=0)
        return [r for r in riders if r not in gone]

    def retract_until(self, fits: Callable[[], bool], keep: int) -> list[Req]:
        """Retract running requests (`retraction_victim` first) until `fits()` or only `keep`
        are left; the ratio is then set from those left. Returns the retracted ones."""
        gone: list[Req] = []
        while len(self.running) > keep and not fits():
            gone.append(retraction_victim(self.running))
            self.retract(gone[-1])
        if gone:
            self.new_token_ratio.after_retraction(self.running)
        return gone

    def retract_for_newcomer(self, waiting: list[Req]) -> bool:
        """Below new_token_ratio 1 the running requests outgrow what admission reserved for
        them, and the room kept for clients with nothing running goes with it: another
        client's 8-token request waited 167 steps for one client's batch of long requests to
        end. When the first of `waiting` from a client with nothing running has no room,
        retract requests of the client with the most running (while it has more than one)
        until it has; it then goes first (the re-admissions would take the room back before
        it). Whether any was retracted."""
        if self.new_token_ratio.initial >= 1 or not self.running:
            return False
        busy = {r.client for r in self.running if r.client is not None}
        if not busy:  # (in-process requests have no client: none of them is a newcomer)
            return False
        newcomer = next((r for r in waiting if admission_order.newcomer(r, busy)), None)
        if newcomer is None:
            return False
        # (a retracted request's room is not kept from it: only an s4 jump's, see PrefillBudget)
        kept = sum(self._reserved_new_tokens(r) for r in self.waiting_queue if returning(r) and not r.retracted)
        room = self.unreserved_room() - kept
        short = len(newcomer.fill_ids) + self._reserved_new_tokens(newcomer) - room
        if short <= 0:  # it fits: it goes before the re-admissions that would take the room first
            newcomer.passed_by = max(newcomer.passed_by, admission_order.MAX_PASSED_BY)
            return False
        victims = victims_for_room(self.running, short)
        if not victims:
            return False
        for req in victims:  # (the ratio stays: the pool did not run out, a newcomer's share did)
            self.retract(req)
        newcomer.passed_by = max(newcomer.passed_by, admission_order.MAX_PASSED_BY)
        return True

    def kv_room(self) -> int:
        """KV slots a step can get: the free ones and those the tree may evict."""
        return self.token_to_kv_pool.available_size() + self.tree_cache.evictable_size()

    def unreserved_room(self) -> int:
        """`kv_room` less what admission reserved for the running requests' remaining output:
        the room a waiting request may be admitted into."""
        return self.kv_room() - sum(self._reserved_new_tokens(r) for r in self.running)

    def retract(self, req: Req) -> None:
        """Send running `req` back to the front of the waiting queue, its KV to the radix tree
        (where the pool may evict it), its output and grammar state kept (SGLang's
        `retract_decode`): re-admitted, it prefills what the tree no longer holds and goes on."""
        self.release_memory(req)
        self.running.remove(req)
        self.waiting_queue.insert(0, req)
        req.retracted = True
        self.totals.retractions += 1
        self.record_event("retract", req, tokens=len(req.output_ids))

    def readmit(self, req: Req, new_output_ids: list[int]) -> None:
        """Hook 3's answer (s4's jump forward): take a running request out of the batch, give
        its KV to the radix tree, rewrite its output, and queue it for prefill again. (The
        jump has already moved the request's grammar, and bumped its `version`.)"""
        if self.step_recorder is not None:  # the step view keeps the re-cut seam, before the rewrite
            self.step_recorder.jump(req, new_output_ids)
        # BEGIN SOLUTION task4_4
        self.release_memory(req)  # insert (input+output)[:-1] with its slots, unlock
        req.output_ids = list(new_output_ids)
        # The old detokenizer may hold half a character the new ids spell again (#665).
        req.detokenizer = IncrementalDetokenizer(self.tokenizer)
        req.output_text = req.detokenizer.feed(req.output_ids)
        req.detok_offset = len(req.output_ids)
        self.running.remove(req)
        self.waiting_queue.append(req)  # re-admitted by the next prefill, with a prefix hit
        # END SOLUTION
        cut_at_stop_string(req)  # the forced text may hold a stop string
        self.record_event("jump", req, tokens=len(req.output_ids))

    # ------------------------------------------------------------------ admission
    def get_new_prefill_batch(self) -> list[Req]:
        """Choose waiting requests that fit the token budget; give them slots and prefixes.

        With chunked prefill, a request whose new tokens exceed the chunk is admitted only
        first, and alone: then it alone is prefilled, a chunk a step, until its last chunk
        (one cut prompt at a time; every one of its chunks is a full one but the last)."""
        if self.chunked_req is not None:
            return self.continue_chunked_prefill(self.chunked_req)
        if not self.waiting_queue:
            return []
        rows = self.config.max_running_requests - len(self.running)
        if rows <= 0:
            return []
        # Only the requests this step could admit are ranked (admission_order.candidates).
        waiting = admission_order.candidates(self.waiting_queue, rows)
        if self.retract_for_newcomer(waiting):
            waiting = admission_order.candidates(self.waiting_queue, rows)
        room = self.unreserved_room()
        # Each request needs at least one new token and room for the rest of its output. When
        # no request can get that, none is admitted: skip matching the queue against the tree
        # (in a backlog, the longest part of scheduling).
        if room < min(1 + self._reserved_new_tokens(r) for r in waiting):
            return []
        order = self._admission_order(waiting)
        # A client's re-admission (s4's jump, or a retraction) keeps the room it had while
        # running: no new request may take it (a waiting request passed MAX_PASSED_BY times
        # fitted in the room a jump gave back, and the jumped request waited 119 steps, until
        # another request ended). The re-admissions themselves share it, first come first.
        kept = {r.rid: self._reserved_new_tokens(r) for r in order if returning(r)}
        yielded = sum(kept[r.rid] for r in order if r.rid in kept and r.retracted)
        budget = PrefillBudget(self.config, room - sum(kept.values()), kept, self.running, yielded)

        chosen: list[Req] = []
        # A request too big for the room left holds back its own client's later requests, not
        # another client's (one client's backlog of long requests kept a 20-token request of
        # another client waiting 120 steps with room for it); a request passed MAX_PASSED_BY
        # times holds back everyone. In-process requests (no client) stay plain FCFS.
        held: set[str] = set()
        too_big: Req | None = None
        in_batch = self._in_batch_tree()
        match = {}
        for req in self.ready_reqs(order):
            if req.client in held:
                continue
            if too_big is not None and too_big.passed_by >= admission_order.MAX_PASSED_BY and not returning(req):
                continue  # it holds back everyone but s4 re-admissions, which take back their room
            # Match all but the last token: the model must compute at least one position.
            key = req.fill_ids[:-1]
            prefix, node = match[req.rid] = self.tree_cache.match_prefix(key, req.radix_mark)
            if in_batch is not None:
                # Tokens a request chosen above will put in the tree after this prefill.
                shared = len(in_batch.match_prefix(key)[0])
                if shared - len(prefix) >= self.config.in_batch_prefix_threshold:
                    self.record_event("defer", req, shared=shared)
                    continue  # wait one step and hit them, rather than compute them twice
            extend = len(req.fill_ids) - len(prefix)
            need = extend + self._reserved_new_tokens(req)
            if budget.forward_full(req, extend):
                break
            cut = budget.cut(extend)
            if cut and chosen:
                break  # it would be cut: it waits until it is first, and goes alone
            # Its cached prefix, once locked, can no longer be evicted to make room: the budget
            # counted it as room, so the check is made with the lock taken (and undone if it fails).
            locked = -self.tree_cache.inc_lock_ref(node)
            if not budget.fits(req, need, locked):
                self.tree_cache.dec_lock_ref(node)
                if req.client is None:
                    break
                held.add(req.client)
                if too_big is None or req.passed_by >= admission_order.MAX_PASSED_BY:
                    too_big = req
                continue
            if req.client is not None and budget.in_reserve(req, need, locked):
                self.tree_cache.dec_lock_ref(node)
                held.add(req.client)  # (its later requests wait behind it, as behind one too big)
                continue  # it fits, but in the rows and room kept for a client with nothing running
            if too_big is not None and not req.output_ids:  # a re-admission passes nobody (see below)
                too_big.passed_by += 1
                self.record_event("pass", req, past=too_big.rid)
            budget.take(req, extend, need, locked)
            chosen.append(req)
            if cut:
                break
            if in_batch is not None:
                in_batch.insert(req.fill_ids, torch.zeros(len(req.fill_ids), dtype=torch.int64))
        if chosen:
            self._count_passes_ranked_ahead(chosen, order)
        for req in chosen:
            self.waiting_queue.remove(req)
            prefix, node = match[req.rid]
            req.req_pool_idx = self.req_to_token_pool.alloc()
            req.last_node, req.prefix_len = node, len(prefix)
            self.req_to_token_pool.req_to_token[req.req_pool_idx, : len(prefix)] = prefix
            req.kv_len = len(prefix)  # its KV so far: the cached prefix
            # Its wait is over: an s4 re-admission waits afresh (a count kept from the first
            # wait made its re-admission hold everyone back the first time it did not fit).
            req.passed_by = 0
            req.retracted = False
            if not req.output_ids:
                # Cached PROMPT tokens, counted at the first admission only: an s4 re-admission
                # hits the prompt and output this request computed itself (a 19-token prompt
                # reported 43 and 63 cached tokens when every admission was added).
                req.cached_tokens = len(prefix)
            self.record_event("admit", req, prefix_len=len(prefix))
            if len(prefix):
                self.record_event("prefix_hit", req, tokens=len(prefix))
        return chosen

    def _cached_len(self, req: Req) -> int:
        """How many of the request's tokens (all but the last) the tree holds; read only."""
        return self.tree_cache.match_len(req.fill_ids[:-1], req.radix_mark)

    def _admission_order(self, waiting: list[Req]) -> list[Req]:
        """`waiting` (the queue's candidates) in the order admission tries it (admission_order.py)."""
        return admission_order.ranked(
            waiting, self.running, self.config.schedule_policy, self._cached_len, self.prefilled.of
        )

    def _count_passes_ranked_ahead(self, chosen: list[Req], order: list[Req]) -> None:
        """Count the passes admission's order made by ranking newer requests ahead (admission_order.py)."""
        for head, by in admission_order.passes_ranked_ahead(chosen, order, self.waiting_queue):
            head.passed_by += len(by)
            self.record_event("passed", head, by=by)

    def continue_chunked_prefill(self, req: Req) -> list[Req]:
        """`req` (in chunked prefill), for its next chunk; before its last chunk (whose logits
        are sampled) its grammar must be ready, else it sits out this step."""
        if self.prefill_end(req) == len(req.fill_ids):
            return self.ready_reqs([req])
        return [req]

    def prefill_end(self, req: Req) -> int:
        """Where this step's prefill of `req` ends: its whole `fill_ids`, or with chunked
        prefill at most `chunked_prefill_size` tokens past its KV."""
        chunk = self.config.chunked_prefill_size
        return len(req.fill_ids) if chunk is None else min(len(req.fill_ids), req.kv_len + chunk)

    def _in_batch_tree(self) -> RadixCache | None:
        """An empty token tree for the prompts chosen into one prefill batch (its slot ids
        are placeholders and it frees nothing); None when in-batch sharing is off."""
        if self.tree_cache.disable or self.config.in_batch_prefix_threshold <= 0:
            return None
        return RadixCache(token_to_kv_pool=_PlaceholderSlots())

    @staticmethod
    def _remaining_new_tokens(req: Req) -> int:
        return max(req.sampling_params.max_new_tokens - len(req.output_ids), 0)

    def _reserved_new_tokens(self, req: Req) -> int:
        """The KV slots admission keeps for the tokens `req` may still write (retraction.py)."""
        return self.new_token_ratio.reserve(self._remaining_new_tokens(req))

    def _admit_ready_grammars(self) -> None:
        """Hook 2: move requests whose grammar is ready from the grammar queue to waiting."""
        if not self.grammar_queue:
            return
        ready: list[Req] = []
        # We cannot tell whose grammar failed: the queue is aborted (and leaves below).
        with self.isolate(list(self.grammar_queue), "polling the grammar queue", hook=2) as fault:
            ready = self.stage.poll_grammar_queue(self.grammar_queue)
        if fault.error is not None:
            ready = list(self.grammar_queue)
        for req in ready:
            self.grammar_queue.remove(req)
            if req.finished:
                self._finish(req)
            else:
                self.waiting_queue.append(req)

    def record_event(self, kind: str, req: Req | None, **info: Any) -> None:
        self.trace.append(
            {"step": self.step_count, "event": kind, **({"rid": req.rid} if req is not None else {}), **info}
        )
