"""`Engine`: the user-facing object, shaped like SGLang's offline engine.

    import minisglang as sgl
    engine = sgl.Engine()                                   # bundled model, s6 (stages.default_stage)
    out = engine.generate("prompt", {"regex": r"[0-9]+", "max_new_tokens": 8})
    out["text"], out["meta_info"]["finish_reason"]

It owns a tokenizer, a model and a `Scheduler`, and runs the scheduler's `step()` until
the requests it was given are finished. For notebooks there is a step API: `submit()`
queues a request, `step()` runs one scheduler step, `trace` lists what happened.

Bad input raises ValueError before anything is queued (a list is checked whole first);
whatever way a call ends (done, error, Ctrl-C, a stream dropped early) its requests leave
the engine and give back their memory. `stats()` tells whether the engine is quiet.
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from .core import AbortKind, Req, SamplingParams, check_text
from .model.loader import load_model
from .scheduler import Scheduler
from .scheduler_config import SchedulerConfig
from .stages import default_stage, get_stage_class
from .stages.base import StageContext
from .tokenizer import ChatPrompt, Tokenizer


def stream_chunk(req: Req) -> dict[str, Any] | None:
    """The text of `req` not yet streamed, as a chunk; None if there is nothing new.

    While the request runs, enough characters are held back that a stop string still
    being generated is never sent (it is trimmed from the final text). The chunk after
    the request is released carries the rest and the finish reason. The hold is enough
    because the scheduler cuts a stop string out of the text the step it appears, however
    many characters that step brought (`scheduler.cut_at_stop_string`): only the last
    len(stop) - 1 characters can still begin one. So the chunks join to the final text.
    """
    done = req.released
    if not done and len(req.output_text) <= req.sent_text_len:
        # Nothing new (what the code below returns then, read first): the server asks this of
        # every request it holds at every step, and 8,192 queued ones cost 18 ms a step.
        return None
    hold = max((len(s) for s in req.sampling_params.stop), default=1) - 1
    end = len(req.output_text) if done else max(len(req.output_text) - hold, req.sent_text_len)
    delta = req.output_text[req.sent_text_len : end]
    req.sent_text_len = end
    if delta or done:
        return {"text": delta, "meta_info": req.meta_info()}
    return None


def default_torch_threads() -> int:
    """The engine's intra-op thread count when none is given: every core this process may
    run on, less one when there are at least two.

    The spare core is for the grammar compile workers (s3 and later compile in other
    processes while the batch decodes) and for whatever else shares the machine: torch's
    threads wait for each other at the end of every matmul, so one thread that loses its
    core to another process stalls all of them (benchmarks/bench_threads.py measures it).
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(cores - 1, 1)


@dataclass
class EngineStats:
    """A snapshot of the engine's memory, queues and totals (for /health and /metrics)."""

    free_request_slots: int
    total_request_slots: int
    free_kv_slots: int
    total_kv_slots: int
    radix_cached_tokens: int  # KV slots the radix tree holds
    radix_evictable_tokens: int  # of those, not locked by a running request
    grammar_queue: int  # requests waiting for their grammar
    waiting_queue: int  # requests ready for prefill
    running: int  # requests decoding
    finished_by_reason: dict[str, int]
    prompt_tokens: int  # of finished requests
    cached_prompt_tokens: int  # of those, supplied by the radix tree
    generated_tokens: int
    errors: int  # exceptions a step caught (each aborted only its requests)
    grammar_errors: int = 0  # requests aborted by their own grammar (refused, failed, or past a limit)
    retractions: int = 0  # running requests sent back to wait when the KV pool ran out
    new_token_ratio: float = 1.0  # the share of remaining max_new_tokens admission reserves now

    @property
    def radix_hit_rate(self) -> float:
        """Share of finished requests' prompt tokens the radix tree supplied."""
        return self.cached_prompt_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def idle(self) -> bool:
        """No request is queued or running."""
        return not (self.grammar_queue or self.waiting_queue or self.running)

    @property
    def pools_full(self) -> bool:
        """Nothing leaked: every request slot free, every KV slot free or evictable in the tree."""
        return (
            self.free_request_slots == self.total_request_slots
            and self.radix_evictable_tokens == self.radix_cached_tokens
            and self.free_kv_slots + self.radix_cached_tokens == self.total_kv_slots
        )


class Engine:
    def __init__(
        self,
        model_path: str | None = None,
        stage: str | None = None,
        device: str = "cpu",
        dtype: str = "float32",
        seed: int = 0,
        max_total_tokens: int = 16384,
        max_running_requests: int = 128,
        max_prefill_tokens: int = 4096,
        max_prefill_tokens_beside_others: int = 512,
        schedule_policy: str = "lpm",
        disable_radix_cache: bool = False,
        in_batch_prefix_threshold: int = 32,
        mixed_prefill: bool = False,
        reserved_for_new_clients: int | None = None,
        new_token_ratio: float = 1.0,
        min_new_token_ratio: float | None = None,
        torch_threads: int | None = None,
        freeze_gc: bool = True,
        sampling_defaults: str = "model",
        **stage_options: Any,
    ):
        from . import DEFAULT_MODEL_PATH

        # Checked before the model loads (SchedulerConfig refuses a bad value by name).
        config = SchedulerConfig(
            max_total_tokens=max_total_tokens,
            max_running_requests=max_running_requests,
            max_prefill_tokens=max_prefill_tokens,
            max_prefill_tokens_beside_others=max_prefill_tokens_beside_others,
            schedule_policy=schedule_policy,
            disable_radix_cache=disable_radix_cache,
            in_batch_prefix_threshold=in_batch_prefix_threshold,
            mixed_prefill=mixed_prefill,
            reserved_for_new_clients=reserved_for_new_clients,
            new_token_ratio=new_token_ratio,
            min_new_token_ratio=min_new_token_ratio,
        )
        # torch's thread count is one per process: the last Engine built sets it.
        if torch_threads is None:
            torch_threads = default_torch_threads()
        if isinstance(torch_threads, bool) or not isinstance(torch_threads, int) or torch_threads < 1:
            raise ValueError(f"torch_threads must be a positive int or None, got {torch_threads!r}")
        torch.set_num_threads(torch_threads)

        self.model_path = model_path or DEFAULT_MODEL_PATH
        self.device = torch.device(device)
        self.tokenizer = Tokenizer.from_pretrained(self.model_path)
        self.model = load_model(self.model_path, device=self.device, dtype=getattr(torch, dtype))
        # A padded embedding's extra ids can be sampled: they must detokenize (as nothing).
        self.tokenizer.widen_to(self.model.config.vocab_size)
        self.sampling_defaults = self._sampling_defaults(sampling_defaults)
        stage_cls = get_stage_class(stage or default_stage())
        ctx = StageContext(self.tokenizer, self.model.config.vocab_size, self.device, stage_options)
        self.stage = stage_cls(ctx)
        scheduler_class = self.stage.scheduler_class or Scheduler
        self.scheduler = scheduler_class(self.model, self.tokenizer, self.stage, config, self.device, seed=seed)
        # The scheduler is single-threaded; the lock lets a server thread and direct calls share it.
        self._lock = threading.RLock()
        # Python's generation-2 garbage collection walks every live object, and a process that
        # imported torch and loaded a model has half a million: one pass stalled a step for
        # ~0.2 s while serving (chapter 06). What exists now lives as long as the engine, so it
        # is moved out of the collector's reach until shutdown (SGLang #9241, "GC freezing").
        # The freeze is process-wide, as Python's collector is.
        self.freeze_gc = freeze_gc
        if freeze_gc:
            gc.freeze()

    # ------------------------------------------------------------------ step API
    def submit(self, prompt: str | ChatPrompt, sampling_params: dict | SamplingParams | None = None) -> Req:
        """Queue one request without running anything; returns its `Req`.

        `prompt` is plain text (encoded here) or a chat already encoded by
        `tokenizer.encode_chat` (whose ids are used as they are). Raises ValueError
        (nothing queued) for a prompt that is not text or bad params.
        """
        req = self.make_request(prompt, sampling_params)
        with self._lock:
            self.scheduler.add_request(req)
        return req

    def make_request(self, prompt: str | ChatPrompt, sampling_params: dict | SamplingParams | None = None) -> Req:
        """Check and tokenize one request without queuing it; ValueError names what is wrong.

        A `ChatPrompt` keeps its own ids: `encode(prompt.text)` would turn special-token
        text that a message wrote into real special tokens (see `Tokenizer.encode_chat`).
        """
        text = prompt.text if isinstance(prompt, ChatPrompt) else prompt
        check_text("prompt", text)
        if isinstance(sampling_params, SamplingParams):
            params = sampling_params
            params.validate()  # its fields may have been changed since it was built
        else:
            params = SamplingParams.from_dict(sampling_params, self.sampling_defaults)
        if isinstance(prompt, ChatPrompt):
            ids = list(prompt.ids)
            if not all(isinstance(i, int) and 0 <= i < self.tokenizer.vocab_size for i in ids):
                raise ValueError(f"prompt.ids must be token ids below vocab_size {self.tokenizer.vocab_size}")
        else:
            ids = self.tokenizer.encode_prompt(text)
        return Req(prompt=text, origin_input_ids=ids, sampling_params=params)

    def step(self) -> list[Req]:
        """One scheduler step (schedule, run, sample, process); the requests that finished.

        The scheduler aborts a request or a batch that fails (scheduler.py, "Faults"); an
        exception that escapes the step all the same is an engine fault (`fail`): every
        request is aborted and leaves, then the exception goes on to the caller."""
        with self._lock:
            try:
                return self.scheduler.step()
            except Exception as e:
                self.fail(e)
                raise

    def fail(self, error: BaseException) -> None:
        """The engine-wide fault path: abort every request in the engine (AbortKind.ENGINE,
        `error` in the message) and give back their memory; the engine can serve again."""
        with self._lock:
            self.scheduler.fail_all(error)

    @property
    def trace(self) -> list[dict[str, Any]]:
        return list(self.scheduler.trace)

    def add_request(self, req: Req) -> None:
        """Queue `req`, made by `make_request` (the server tokenizes off the scheduler's thread)."""
        with self._lock:
            self.scheduler.add_request(req)

    def abort(self, rid: int, message: str = "aborted by the client") -> bool:
        """Abort request `rid` wherever it is (it leaves at the next step); False if the engine has
        no such request (never had, or it has left)."""
        with self._lock:
            return self.scheduler.abort(rid, message)

    def has_work(self) -> bool:
        """Whether any request is queued or running (a step would do something)."""
        with self._lock:
            return self.scheduler.has_work()

    @property
    def max_context_len(self) -> int:
        """The model's context: prompt and output tokens of one request together."""
        return self.scheduler.max_context_len

    @property
    def stage_tag(self) -> str:
        """The tag of the stage this engine runs ("s6-function-calling")."""
        return self.stage.tag

    def _sampling_defaults(self, source: str) -> dict[str, Any]:
        """What a request's dict of sampling params falls back to for the fields it does not
        give: the checkpoint's generation_config.json values ("model", SGLang's and vLLM's
        default: Qwen2.5 Instruct samples at temperature 0.7 unless asked otherwise) or
        SamplingParams' own ("openai": temperature 1, top_p 1, no top_k)."""
        if source not in ("model", "openai"):
            raise ValueError(f'sampling_defaults must be "model" or "openai", got {source!r}')
        defaults = dict(self.model.config.sampling_defaults) if source == "model" else {}
        try:
            SamplingParams.from_dict(defaults)
        except (TypeError, ValueError) as e:
            raise ValueError(
                f"{self.model_path}/generation_config.json: {e} (or serve with sampling_defaults='openai')"
            ) from None
        return defaults

    def settings(self) -> dict[str, Any]:
        """What a server reports of this engine: its stage, the stage's plain-valued options,
        the context length and the pools' sizes."""
        config = self.scheduler.config
        return {
            "stage": self.stage.tag,
            "stage_options": {
                k: v for k, v in self.stage.ctx.options.items() if isinstance(v, (str, int, float, bool, type(None)))
            },
            "max_context_len": self.max_context_len,
            "max_total_tokens": config.max_total_tokens,
            "max_running_requests": config.max_running_requests,
            "sampling_defaults": dict(self.sampling_defaults),
        }

    # ------------------------------------------------------------------ grammar compiles (for the server)
    # Stages s3 on compile off the scheduler thread and keep a request in the grammar queue
    # until its compile is done; the server limits how many compiles each client starts.
    # These answer for any stage (s1-s2 compile at arrival: no request ever waits).
    def compile_waited_on(self, rid: int) -> Any | None:
        """The handle of the compile request `rid` waits for (None: it waits for none)."""
        queue = getattr(self.stage, "queue", None)
        waiting = None if queue is None else queue.pending.get(rid)
        return None if waiting is None else waiting.handle

    def compile_done(self, handle: Any) -> bool:
        """Whether the compile of `handle` (from `compile_waited_on`) has finished."""
        queue = getattr(self.stage, "queue", None)  # only stages with a queue hand out handles
        return queue is not None and bool(queue.is_done(handle))

    def grammar_known(self, constraint: tuple[str, str]) -> bool:
        """Whether this (kind, text) is compiled or compiling already: asking for it starts no compile."""
        has_grammar = getattr(self.stage, "has_grammar", None)
        return has_grammar is not None and bool(has_grammar(constraint))

    def stats(self) -> EngineStats:
        """Free slots, queue lengths and totals, read under the engine's lock."""
        with self._lock:
            s = self.scheduler
            t = s.totals
            return EngineStats(
                free_request_slots=s.req_to_token_pool.available_size(),
                total_request_slots=s.config.max_running_requests,
                free_kv_slots=s.token_to_kv_pool.available_size(),
                total_kv_slots=s.config.max_total_tokens,
                # (the two counters, not total_size's walk of the tree: a scrape is O(1))
                radix_cached_tokens=s.tree_cache.evictable_size() + s.tree_cache.protected_size(),
                radix_evictable_tokens=s.tree_cache.evictable_size(),
                # A request in the middle of a chunked prefill still waits for the rest of its prompt.
                grammar_queue=len(s.grammar_queue),
                waiting_queue=len(s.waiting_queue) + (s.chunked_req is not None),
                running=len(s.running),
                finished_by_reason=dict(t.finished_by_reason),
                prompt_tokens=t.prompt_tokens,
                cached_prompt_tokens=t.cached_prompt_tokens,
                generated_tokens=t.completion_tokens,
                errors=t.errors,
                grammar_errors=t.grammar_errors,
                retractions=t.retractions,
                new_token_ratio=s.new_token_ratio.value,
            )

    # ------------------------------------------------------------------ generate
    def generate(
        self,
        prompt: str | ChatPrompt | list[str | ChatPrompt],
        sampling_params: dict | list[dict] | None = None,
        stream: bool = False,
    ):
        """Generate for one prompt (returns a dict) or a list (returns a list of dicts).

        With `stream=True` (one prompt) returns an iterator of chunks whose "text" fields,
        joined, equal the final text; the last chunk carries the finish reason. The request
        is checked at once, queued when iteration starts, and aborted if the iterator is
        closed (or dropped) before the end.

        Bad input raises ValueError before anything is queued; for a list, every item is
        checked first and the message names the item ("item 2: top_k must be ...").
        """
        if not isinstance(stream, bool):  # "no" is truthy: refuse it rather than stream by surprise
            raise ValueError(f"stream must be True or False, got {stream!r}")
        if isinstance(prompt, list):
            if stream:
                raise ValueError("stream=True takes a single prompt")
            params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompt)
            if len(params) != len(prompt):
                raise ValueError(f"{len(prompt)} prompts but {len(params)} sampling_params")
            reqs = []
            for i, (p, sp) in enumerate(zip(prompt, params)):
                try:
                    reqs.append(self.make_request(p, sp))
                except ValueError as e:
                    raise ValueError(f"item {i}: {e}") from None
            self._run_until_done(reqs)
            return [self._output(r) for r in reqs]
        if isinstance(sampling_params, list):
            raise ValueError("a list of sampling_params needs a list of prompts, one each")
        req = self.make_request(prompt, sampling_params)
        if stream:
            return self._stream(req)
        self._run_until_done([req])
        return self._output(req)

    def _run_until_done(self, reqs: list[Req]) -> None:
        """Queue `reqs` and step until all have left; on any exit, none stays behind."""
        try:
            with self._lock:
                for req in reqs:
                    self.scheduler.add_request(req)
            while self._step_unless_released(reqs):
                pass
        finally:
            self._abandon(reqs)

    def _stream(self, req: Req) -> Iterator[dict[str, Any]]:
        try:
            with self._lock:
                self.scheduler.add_request(req)
            while True:
                self._step_unless_released([req])
                chunk = stream_chunk(req)
                if chunk is not None:
                    yield chunk
                if req.released:
                    return
        finally:  # also on close(): a caller that stops iterating aborts the request
            self._abandon([req])

    def _step_unless_released(self, reqs: list[Req]) -> bool:
        """One scheduler step, unless every request of `reqs` has left (then False)."""
        with self._lock:
            if all(r.released for r in reqs):
                return False
            if not self.scheduler.has_work():  # never spin on a request that no queue holds
                raise RuntimeError("a request left every queue without finishing (an engine bug)")
            self.step()
            return True

    def _abandon(self, reqs: list[Req], message: str = "the caller stopped waiting") -> None:
        """Abort the requests of `reqs` that have not left yet and release them now."""
        if all(r.released for r in reqs):
            return
        with self._lock:
            for req in reqs:
                if not req.released:
                    req.finish("abort", AbortKind.CANCELLED, message=message)
                    self.scheduler.release_request(req)

    @staticmethod
    def _output(req: Req) -> dict[str, Any]:
        return {"text": req.output_text, "output_ids": list(req.output_ids), "meta_info": req.meta_info()}

    def shutdown(self) -> None:
        with self._lock:
            for req in self.scheduler.requests():
                self.scheduler.abort(req.rid, "engine shut down")
            self.scheduler.release_aborted()
            self.scheduler.shutdown()
        self.stop_workers()
        if self.freeze_gc:
            gc.unfreeze()  # what the engine held can be collected again

    def stop_workers(self) -> None:
        """Stop the stage's compile workers only, touching neither the lock nor the scheduler:
        for an engine whose scheduler is broken or stuck in a step (a server's dead loop)."""
        self.stage.shutdown()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
