"""`Engine`: the user-facing object, shaped like SGLang's offline engine.

    import minisglang as sgl
    engine = sgl.Engine()                                   # bundled model, latest stage
    out = engine.generate("prompt", {"regex": r"\\d+", "max_new_tokens": 8})
    out["text"], out["meta_info"]["finish_reason"]

It owns a tokenizer, a model and a `Scheduler`, and runs the scheduler's `step()` until
the requests it was given are finished. For notebooks there is a step API: `submit()`
queues a request, `step()` runs one scheduler step, `trace` lists what happened.
"""
from __future__ import annotations

import threading
from typing import Any, Iterator

import torch

from .core import Req, SamplingParams
from .model.loader import load_model
from .scheduler import Scheduler, SchedulerConfig
from .stages import get_stage_class, latest_stage
from .stages.base import StageContext
from .tokenizer import Tokenizer


def stream_chunk(req: Req) -> dict[str, Any] | None:
    """The text of `req` not yet streamed, as a chunk; None if there is nothing new.

    While the request runs, enough characters are held back that a stop string still
    being generated is never sent (it is trimmed from the final text). The chunk after
    the request is released carries the rest and the finish reason.
    """
    hold = max((len(s) for s in req.sampling_params.stop), default=1) - 1
    done = req.released
    end = len(req.output_text) if done else max(len(req.output_text) - hold, req.sent_text_len)
    delta = req.output_text[req.sent_text_len:end]
    req.sent_text_len = end
    if delta or done:
        return {"text": delta, "meta_info": req.meta_info()}
    return None


class Engine:
    def __init__(self, model_path: str | None = None, stage: str | None = None, device: str = "cpu",
                 dtype: str = "float32", seed: int = 0, max_total_tokens: int = 16384,
                 max_running_requests: int = 128, max_prefill_tokens: int = 4096,
                 schedule_policy: str = "lpm", disable_radix_cache: bool = False,
                 **stage_options: Any):
        from . import DEFAULT_MODEL_PATH

        self.model_path = model_path or DEFAULT_MODEL_PATH
        self.device = torch.device(device)
        self.tokenizer = Tokenizer.from_pretrained(self.model_path)
        self.model = load_model(self.model_path, device=self.device, dtype=getattr(torch, dtype))
        stage_cls = get_stage_class(stage or latest_stage())
        ctx = StageContext(self.tokenizer, self.model.config.vocab_size, self.device, stage_options)
        self.stage = stage_cls(ctx)
        config = SchedulerConfig(max_total_tokens=max_total_tokens, max_running_requests=max_running_requests,
                                 max_prefill_tokens=max_prefill_tokens, schedule_policy=schedule_policy,
                                 disable_radix_cache=disable_radix_cache)
        self.scheduler = Scheduler(self.model, self.tokenizer, self.stage, config, self.device, seed=seed)
        # The scheduler is single-threaded; the lock lets a server thread and direct calls share it.
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ step API
    def submit(self, prompt: str, sampling_params: dict | SamplingParams | None = None) -> Req:
        """Queue one request without running anything; returns its `Req`."""
        params = sampling_params if isinstance(sampling_params, SamplingParams) \
            else SamplingParams.from_dict(sampling_params)
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
        req = Req(prompt=prompt, origin_input_ids=self.tokenizer.encode(prompt), sampling_params=params)
        with self._lock:
            self.scheduler.add_request(req)
        return req

    def step(self) -> list[Req]:
        """One scheduler step (schedule, run, sample, process); the requests that finished."""
        with self._lock:
            return self.scheduler.step()

    @property
    def trace(self) -> list[dict[str, Any]]:
        return list(self.scheduler.trace)

    def abort(self, rid: int) -> bool:
        with self._lock:
            return self.scheduler.abort(rid)

    # ------------------------------------------------------------------ generate
    def generate(self, prompt: str | list[str], sampling_params: dict | list[dict] | None = None,
                 stream: bool = False):
        """Generate for one prompt (returns a dict) or a list (returns a list of dicts).

        With `stream=True` (one prompt) returns an iterator of chunks whose "text" fields,
        joined, equal the final text; the last chunk carries the finish reason.
        """
        if isinstance(prompt, list):
            if stream:
                raise ValueError("stream=True takes a single prompt")
            params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompt)
            if len(params) != len(prompt):
                raise ValueError(f"{len(prompt)} prompts but {len(params)} sampling_params")
            reqs = [self.submit(p, sp) for p, sp in zip(prompt, params)]
            self._run_until_done(reqs)
            return [self._output(r) for r in reqs]
        req = self.submit(prompt, sampling_params)
        if stream:
            return self._stream(req)
        self._run_until_done([req])
        return self._output(req)

    def _run_until_done(self, reqs: list[Req]) -> None:
        while not all(r.released for r in reqs):
            self.step()

    def _stream(self, req: Req) -> Iterator[dict[str, Any]]:
        while True:
            if not req.released:
                self.step()
            chunk = stream_chunk(req)
            if chunk is not None:
                yield chunk
            if req.released:
                return

    @staticmethod
    def _output(req: Req) -> dict[str, Any]:
        return {"text": req.output_text, "output_ids": list(req.output_ids), "meta_info": req.meta_info()}

    def shutdown(self) -> None:
        for req in list(self.scheduler.grammar_queue + self.scheduler.waiting_queue + self.scheduler.running):
            self.scheduler.abort(req.rid, "engine shut down")
        while self.scheduler.has_work():
            self.scheduler.step()
        self.stage.shutdown()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
