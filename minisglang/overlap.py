"""Overlap scheduling: the scheduler's CPU work for one step runs while the model computes
the forward of that step (SGLang's overlap scheduler, on by default there since v0.4;
s7's `disable_overlap_schedule=False`).

A step without overlap does one thing after another, and the forward waits for the CPU:

    schedule N | forward N | mask + sample N | process N (hook 5, text, stop strings)

With overlap, the forward runs on a worker thread (torch releases the GIL inside every
operator) and the scheduler thread does, meanwhile, the work that does not need step
N's logits:

    schedule N | forward N ................................. | sample N | record N
               | process N-1 | masks N | hook 2 | build N+1 |

- process N-1: the tokens sampled at the end of the previous step were only appended
  (`record_token`: all the forward of N needs is the ids); their grammar step (hook 5),
  detokenizing and stop-string check run now. A request that finishes here (a stop
  string, the grammar's end) already has a row in forward N: that row is computed for
  nothing and its token dropped; the KV it wrote is valid and goes to the radix tree
  with the rest. A request sure to finish (its length limit reached, or EOS) is
  processed before the batch is built instead: it must not join the batch (the budget
  reserved no slot for it). So a request that its grammar or a stop string ends holds its
  place in the running batch one step longer than without overlap, and a request waiting
  for that place is admitted a step later (SGLang's overlap scheduler does the same). The
  outputs are the same; only an abort at a fixed step can see the delay (fewer tokens).
- masks N: the grammars have taken token N-1, so the packed mask rows for step N can be
  filled (s5's `batch_vocab_mask`); the logits only need them applied. A grammar whose
  row does not fit this step's budget (s5's `ready`) gives its row up: its token is not
  sampled and its KV slot is given back, as if it had sat the step out.
- hook 2: requests whose grammar compiled during the forward move to the waiting queue
  (the next step's admission would find them too: taking them in is work done early).
- next batch: when step N+1 can only be the same requests decoding again (nothing waits
  for admission, every row picks a token), batch N+1 is built now (its KV slots,
  positions and rows of the request-to-token table) with its input ids left blank; after
  sampling N they are written in and it is launched at once. SGLang does the same with
  placeholder ids the GPU resolves (`resolve_future_token_ids`). If anything changed
  meanwhile (a request finished or arrived), the early batch gives its slots back and the
  step schedules as usual.

What stays on the critical path: applying the mask, sampling, appending the ids, and
(when the next batch could not be built early) building batch N. Each step records in the trace an
"overlap" event naming the work done during the forward, how long each part took and
how long the scheduler then waited for the forward (benchmarks/bench_overlap.py).

Why a jump-forward cannot be overlapped (s4; s7 runs such steps one after the other):
a jump rewrites a request's output between two steps (hook 3 replaces the tokens, and
the request is prefilled again from the rewritten text). With overlap, batch N was built,
and its forward launched, before token N-1 was processed; the jump that token makes
possible is known only then, after a forward that fed the old output. That forward's
row is wasted, its KV must be taken back, and the re-admission waits a step: the jump
turns into a stall. The same holds for s7's drafts: the drafts and their mask chain
depend on the tokens the previous verify kept (SGLang also turned its overlap scheduler
off for speculative decoding), so verify steps are not overlapped either.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Any

import torch

from .core import Req
from .model.forward_batch import ForwardBatch, ForwardMode
from .sampler import sample
from .scheduler import ScheduledBatch, Scheduler


class ForwardThread:
    """One worker thread that runs model forwards, so the scheduler thread can work meanwhile."""

    def __init__(self, model: Any):
        self.model = model
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="minisglang-forward")

    def launch(self, fb: ForwardBatch) -> Future:
        """Start the forward of `fb`; the future gives (logits, seconds it took)."""
        return self.pool.submit(self._forward, fb)

    def _forward(self, fb: ForwardBatch) -> tuple[torch.Tensor, float]:
        start = time.perf_counter()
        with torch.inference_mode():  # a thread-local mode: the scheduler's does not reach here
            logits = self.model.forward(fb)
            if logits.is_cuda:  # done means the logits are there: the scheduler thread must not wait on them
                torch.cuda.current_stream(logits.device).synchronize()
        return logits, time.perf_counter() - start

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True)


class OverlapScheduler(Scheduler):
    """The scheduler whose step overlaps its CPU work with the forward (module docstring);
    without a `forward_thread` it is the plain scheduler."""

    forward_thread: ForwardThread | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Requests whose newest token was appended but not yet processed (hook 5, text, stop).
        self.unprocessed: list[Req] = []
        # The next decode batch, built during the last forward (`build_next_decode`).
        self.next_decode: tuple[ScheduledBatch, ForwardBatch] | None = None

    # ------------------------------------------------------------------ the step
    @torch.inference_mode()
    def step(self) -> list[Req]:
        if self.forward_thread is None:
            return super().step()
        self.step_count += 1
        self.sat_out = 0
        parts: dict[str, float] = {}
        with self.timed(parts, "schedule"):
            self.stage.begin_step()
            self.process_tokens([r for r in self.unprocessed if self.sure_to_finish(r)])
            self.release_aborted()
            self._admit_ready_grammars()
            built = self.take_next_decode()
            batch = built[0] if built is not None else self.schedule()
        if batch is None:  # no forward to hide the rest behind
            self.process_tokens(list(self.unprocessed))
            self.leave_finished()
            if self.grammar_queue and not self.sat_out:
                self.stage.wait_for_compiles(0.005)  # only compiles are pending: leave them the CPU
        else:
            self.overlapped_step(batch, parts, built[1] if built is not None else None)
        done, self.finished = self.finished, []
        return done

    def overlapped_step(self, batch: ScheduledBatch, parts: dict[str, float], fb: ForwardBatch | None = None) -> None:
        """Launch the forward of `batch` (`fb`, when it was built during the last forward),
        do what does not need its logits, then sample."""
        assert self.forward_thread is not None
        # As in Scheduler.step: a failure aborts the batch and the loop goes on; the batch's
        # memory is given back only once its forward is done with it (forward_settled).
        with self.isolate_batch(batch) as fault, self.forward_settled() as launched:
            with self.timed(parts, "schedule"):
                forward = self.forward_thread.launch(fb if fb is not None else self.forward_batch(batch))
                launched.append(forward)
            during: dict[str, float] = {}
            with self.timed(during, "process_tokens"):
                self.process_tokens(list(self.unprocessed))
            with self.timed(during, "fill_masks"):
                picking, masks = self.prepare_masks(batch)
            with self.timed(during, "grammar_queue"):
                self._admit_ready_grammars()
            with self.timed(during, "next_batch"):
                self.build_next_decode(batch, picking)
            waited = time.perf_counter()
            logits, forward_s = forward.result()
            waited = time.perf_counter() - waited
            if batch.chunk is not None:
                logits = logits[1:]  # the unfinished prompt picks no token
            with self.timed(parts, "sample"):
                next_token_ids = self.sample_picking(batch, logits, picking, masks)
        if fault.error is not None:  # (the early batch went with its requests: `_finish`)
            return
        self.owe_decode_time(batch, forward_s)
        with self.timed(parts, "record"):
            self.record_results(batch, next_token_ids)
        self.record_event(
            "overlap",
            None,
            mode=batch.mode.value,
            reqs=len(batch.reqs),
            forward_s=forward_s,
            during_forward=during,
            waited_s=waited,
            exposed=parts,
            built_early=fb is not None,
        )

    @staticmethod
    @contextmanager
    def forward_settled() -> Iterator[list[Future]]:
        """The block may launch forwards (into the list it yields): if it raises, they are
        waited for before the exception goes on, since the KV they write must not be freed
        under them."""
        launched: list[Future] = []
        try:
            yield launched
        except BaseException:
            wait(launched)
            raise

    @staticmethod
    @contextmanager
    def timed(parts: dict[str, float], name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            parts[name] = parts.get(name, 0.0) + time.perf_counter() - start

    # ------------------------------------------------------------------ the next batch, early
    def build_next_decode(self, batch: ScheduledBatch, picking: list[bool]) -> None:
        """During forward N of a decode batch, build forward N+1 of the same requests: its KV
        slots, positions and table rows; only its input ids, the tokens forward N is about to
        give, are written later (`take_next_decode`). SGLang builds its next batch the same
        way, with placeholder ids that the GPU fills in (`resolve_future_token_ids`).

        Not built when the next batch could be another: a prefill or chunk may come, a row
        gives its token up, or the pool is short (building must never evict)."""
        self.next_decode = None
        if batch.mode != ForwardMode.DECODE or not all(picking) or self.step_recorder is not None:
            return
        if self.waiting_queue or self.chunked_req is not None:
            return
        # A request whose token N reaches its length limit leaves before step N+1.
        reqs = [r for r in batch.reqs if not r.finished and len(r.output_ids) + 1 < r.sampling_params.max_new_tokens]
        if reqs and self.token_to_kv_pool.available_size() >= len(reqs):
            self.next_decode = (
                ScheduledBatch(ForwardMode.DECODE, reqs),
                self.decode_forward_batch(reqs, [0] * len(reqs)),
            )

    def take_next_decode(self) -> tuple[ScheduledBatch, ForwardBatch] | None:
        """The batch built during the last forward, its input ids written, if `schedule()`
        would give the same one now: every running request in it, in order, each with its
        token of the last step appended, and nothing waiting to be admitted. Otherwise its
        slots go back and the step schedules as usual."""
        if self.next_decode is None:
            return None
        batch, fb = self.next_decode
        sampled = {r.rid for r in self.unprocessed}
        if (
            self.waiting_queue
            or self.chunked_req is not None
            or self.running != batch.reqs
            or not all(r.rid in sampled and not r.finished for r in batch.reqs)
        ):
            self.drop_next_decode()
            return None
        self.next_decode = None
        # A decode step that needed no retraction (building it found a slot for everyone),
        # as `retract_for_room` counts one: the ratio decays here too (it stayed at its initial
        # value while every step's batch was built early: 2 decays in 199 decode steps).
        self.new_token_ratio.decay()
        fb.input_ids = torch.tensor([r.last_id for r in batch.reqs], dtype=torch.int64, device=fb.input_ids.device)
        self.start_decode(batch.reqs)
        return batch, fb

    def drop_next_decode(self) -> None:
        """Give back the slots of a batch built early that will never run."""
        if self.next_decode is not None:
            self.token_to_kv_pool.free(self.next_decode[1].out_cache_loc)
            self.next_decode = None

    # ------------------------------------------------------------------ its parts
    def sure_to_finish(self, req: Req) -> bool:
        """Whether `req`'s unprocessed token ends it whatever hook 5 and the text say: the
        length limit, or EOS (it then must not join the next batch)."""
        return len(req.output_ids) >= req.sampling_params.max_new_tokens or self.ends_at(req, req.output_ids[-1])

    def process_tokens(self, reqs: list[Req]) -> None:
        """Hook 5, the text and the finish conditions of each request's unprocessed token."""
        for req in reqs:
            self.unprocessed.remove(req)
            self.process_token(req, req.output_ids[-1])

    def prepare_masks(self, batch: ScheduledBatch) -> tuple[list[bool], Any]:
        """Which rows of `batch` pick a token, and the mask rows for them (None: the stage
        masks at sampling time). The decoding requests took their previous token just now:
        their grammar must be ready again (s5's budget); one that is not gives its row up."""
        admitted = batch.prefill_reqs if batch.mode == ForwardMode.EXTEND else []
        picking: list[bool] = []
        for req in batch.reqs:
            ready = req in admitted  # asked at admission (and its KV is the tree's now: no giving up)
            if not ready and not req.finished:
                with self.isolate([req], "preparing its grammar for the next token"):
                    ready = self.stage.ready(req)
            picking.append(ready and not req.finished)
        live = [r for r, p in zip(batch.reqs, picking) if p]
        return picking, self.fill_masks(live) if live else None

    def fill_masks(self, reqs: list[Req]) -> Any:
        """The packed mask rows of `reqs` (None: hook 4 masks the logits after the forward);
        a request whose grammar fails here is aborted, its row is not read."""
        return None

    def apply_masks(self, logits: torch.Tensor, reqs: list[Req], masks: Any) -> None:
        """Mask `logits` (row i: reqs[i]) with what `fill_masks` made; by default hook 4
        at sampling time, a failing grammar aborting its own request only (`mask_each`)."""
        self.mask_each(logits, reqs)

    def sample_picking(self, batch: ScheduledBatch, logits: torch.Tensor, picking: list[bool], masks: Any) -> list[int]:
        """One token per picking row (-1 for the others), the masks applied first."""
        rows = [i for i, p in enumerate(picking) if p]
        ids = [-1] * len(batch.reqs)
        if not rows:
            return ids
        reqs = [batch.reqs[i] for i in rows]
        logits = logits.float() if len(rows) == len(batch.reqs) else logits[rows].float()
        recorder = self.step_recorder
        if recorder is not None:
            recorder.before_mask(logits, reqs)
        with self.isolate(reqs, "masking its logits", hook=4) as fault:
            self.apply_masks(logits, reqs, masks)
        if fault.error is not None:
            return ids
        if recorder is not None:
            recorder.after_mask(logits, reqs)
        live = [k for k, r in enumerate(reqs) if not r.finished]
        if not live:  # every picking row's mask ended its request (as Scheduler.sample checks)
            return ids
        picked = sample(logits if len(live) == len(reqs) else logits[live], [reqs[k] for k in live], self.generator)
        for k, tok in zip(live, picked):
            ids[rows[k]] = tok
        return ids

    def record_results(self, batch: ScheduledBatch, next_token_ids: list[int]) -> None:
        """Process_results without the processing: the new prompts start running (their
        KV to the radix tree), each sampled token is appended, to be processed during the
        next forward; a row that picked nothing gives its fed token's KV slot back."""
        if batch.mode == ForwardMode.EXTEND:
            self.running.extend(batch.prefill_reqs)
            for req in batch.prefill_reqs + ([batch.chunk] if batch.chunk is not None else []):
                self.cache_prefilled(req)
        riding = set(batch.riders) if batch.mode == ForwardMode.EXTEND else set(batch.reqs)
        for req, tok in zip(batch.reqs, next_token_ids):
            if req.finished:
                continue
            if tok >= 0:
                self.record_token(req, tok)
                self.unprocessed.append(req)
            elif req in riding:  # gave its row up: it feeds the same token again next step
                req.kv_len -= 1
                row = self.req_to_token_pool.req_to_token[req.req_pool_idx]
                self.token_to_kv_pool.free(row[req.kv_len : req.kv_len + 1])
                self.record_event("sit_out", req)
        self.leave_finished()

    def shutdown(self) -> None:
        self.drop_next_decode()
        if self.forward_thread is not None:
            self.forward_thread.shutdown()

    def abort(self, rid: int, message: str = "aborted by the client") -> bool:
        """As the plain step: a token sampled before the abort is processed first, so a request
        that its last token finished (a stop string, say) keeps that finish, as it would have
        without overlap (where tokens are processed in the step that sampled them)."""
        for req in self.unprocessed:
            if req.rid == rid:
                self.process_tokens([req])
                break
        return super().abort(rid, message)

    def _finish(self, req: Req) -> None:
        if req in self.unprocessed:  # its last token was sampled before it left: it is output
            self.process_tokens([req])
        if self.next_decode is not None and req in self.next_decode[0].reqs:
            # Whichever way it leaves (an aborted batch, an engine fault, a closed stream outside
            # a step), the early batch would hold a KV slot of a request that is gone.
            self.drop_next_decode()
        super()._finish(req)
