"""`GET /metrics`: the server's Prometheus metrics (text format, through `prometheus-client`).

Two kinds of numbers:
- counted by the server: request latency (a histogram), requests it refused before
  queuing them (by HTTP status), tool calls made in chat answers, and s7's draft tokens
  fed and kept (from each finished request's meta_info) with their ratio, the acceptance rate;
- counted by the scheduler at each constrained decode step: the probability mass the
  grammar's mask kept (a histogram, `MassKept`): steps that keep little are steps where
  the grammar fights the model, the sign of a whitespace or digit runaway (chapter 06);
- timed by the scheduler loop: the age of its last completed step and the longest step of
  the last minute (a stuck step shows here before anything else does);
- kept by the server's GcGuard (gc_guard.py): freezes after slow full collections, the
  longest full collection, and the idle reclaims with the objects they gave back;
- read from `Engine.stats()` when Prometheus scrapes: requests finished by reason, prompt /
  cached / generated tokens, step errors, queue lengths, free KV and request slots, the
  radix cache's hit rate, and the constraint layer's numbers when the stage has a `stats()`.

Each app has its own registry, so several servers (tests) in one process never share counts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from .stepview.record import Recorders, log_mass, view_temperature

if TYPE_CHECKING:  # pragma: no cover
    from .core import Req
    from .engine import Engine
    from .gc_guard import GcGuard

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# Mass kept: the low end is the signal (a runaway keeps under 1% step after step).
_MASS_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0)


class ServerMetrics:
    """The numbers the request handlers update, plus a collector that reads the engine."""

    def __init__(
        self,
        engine: Engine,
        step_timings: Callable[[], dict[str, float | None]] = dict,
        gc_guard: Callable[[], GcGuard | None] = lambda: None,
    ):
        """`step_timings` returns the scheduler loop's step times (EngineLoop.step_timings),
        `gc_guard` the server's GcGuard (None: no guard, no gc metrics)."""
        self.registry = CollectorRegistry(auto_describe=True)
        self.refused = Counter(
            "minisglang_refused_requests",
            # Every error answer is counted here (server/errors.py), also a queued request whose
            # grammar aborted it before any text: that one is in minisglang_requests too.
            "Error answers by HTTP status: requests refused before queuing, or aborted before any "
            "text was sent (those are also in minisglang_requests, finish_reason abort)",
            ["status"],
            registry=self.registry,
        )
        self.disconnects = Counter(
            "minisglang_client_disconnects",
            "Requests whose client left before the answer (their work aborted)",
            registry=self.registry,
        )
        self.tool_calls = Counter(
            "minisglang_tool_calls", "Tool calls in chat completions' answers", registry=self.registry
        )
        self.latency = Histogram(
            "minisglang_request_latency_seconds",
            "Arrival to finish of a request",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.draft_tokens = Counter(
            "minisglang_spec_draft_tokens", "Draft tokens fed to verify forwards (s7)", registry=self.registry
        )
        self.accepted_tokens = Counter(
            "minisglang_spec_accepted_tokens",
            "Of those, kept: the grammar allowed them and the model agreed",
            registry=self.registry,
        )
        self.drafted = self.kept = 0  # the two counters' values, for the rate (one thread calls `finished`)
        self.mass_kept = Histogram(
            "minisglang_mask_mass_kept",
            "Probability mass the grammar's mask kept, per "
            "constrained decode step (softmax at the request's temperature, 1 if greedy)",
            buckets=_MASS_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_EngineCollector(engine, step_timings))
        self.registry.register(_AcceptRate(self))
        self.registry.register(_GcCollector(gc_guard))
        # The scheduler's step hook (minisglang/stepview) feeds the histogram; it is set before
        # the scheduler loop starts. One engine feeds one app's histogram, the newest's: an
        # older app's recorder is replaced, not kept beside it (tests make many apps per engine).
        scheduler = engine.scheduler
        mass, previous = MassKept(self.mass_kept), scheduler.step_recorder
        alone = previous is None or isinstance(previous, MassKept)
        scheduler.step_recorder = mass if alone else Recorders(previous, mass)

    def finished(self, meta: dict[str, Any]) -> None:
        """Record one finished request from its meta_info."""
        self.latency.observe(meta["e2e_latency"])
        if meta.get("spec_draft_tokens"):  # only a request that was fed drafts moves the rate
            self.drafted += meta["spec_draft_tokens"]
            self.kept += meta["spec_accepted_tokens"]
            self.draft_tokens.inc(meta["spec_draft_tokens"])
            self.accepted_tokens.inc(meta["spec_accepted_tokens"])

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MassKept:
    """A step recorder (the scheduler's `step_recorder`, minisglang/stepview) that observes,
    for each constrained row of a batch, the probability mass its mask kept: the share of
    softmax(logits / T) on the allowed tokens, from two logsumexps per row (s7's verify
    observes each position it verified)."""

    def __init__(self, histogram: Histogram):
        self.histogram = histogram
        self._before: tuple[list[int], torch.Tensor, torch.Tensor] | None = None

    def before_mask(self, logits: torch.Tensor, reqs: list[Req]) -> None:
        rows = [i for i, r in enumerate(reqs) if r.grammar is not None and not r.finished]
        if not rows:
            self._before = None
            return
        temperatures = torch.tensor([view_temperature(reqs[i]) for i in rows])
        self._before = (rows, temperatures, log_mass(logits[rows], temperatures))

    def after_mask(self, logits: torch.Tensor, reqs: list[Req], drafts: list[int] | None = None) -> None:
        if self._before is None:
            return
        rows, temperatures, before = self._before
        self._before = None
        kept = torch.exp(log_mass(logits[rows], temperatures) - before).tolist()
        for i, mass in zip(rows, kept):
            if not reqs[i].finished:  # a row whose mask allowed nothing ended its request instead
                self.histogram.observe(mass)

    def token(self, req: Req, tok: int) -> None:
        return None

    def jump(self, req: Req, new_output_ids: list[int]) -> None:
        return None


class _AcceptRate:
    """`minisglang_spec_accept_rate`: draft tokens kept / fed over the finished requests,
    absent until a request was fed drafts (rather than a made-up 0)."""

    def __init__(self, metrics: ServerMetrics):
        self.metrics = metrics

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        if self.metrics.drafted:
            yield GaugeMetricFamily(
                "minisglang_spec_accept_rate",
                "Draft tokens kept / fed (s7), finished requests",
                value=self.metrics.kept / self.metrics.drafted,
            )


class _GcCollector:
    """The server's GcGuard's counts (absent where no guard runs: tests' in-thread servers)."""

    def __init__(self, guard: Callable[[], GcGuard | None]):
        self.guard = guard

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        guard = self.guard()
        if guard is None:
            return
        for name, help_text, value in [
            ("gc_freezes", "Freezes after a full collection slower than the guard's limit", guard.freezes),
            ("gc_reclaims", "Idle reclaims of what the freezes kept (unfreeze, collect, freeze)", guard.reclaims),
            ("gc_reclaimed_objects", "Unreachable objects those reclaims collected", guard.reclaimed),
        ]:
            yield CounterMetricFamily(f"minisglang_{name}", help_text, value=value)
        yield GaugeMetricFamily(
            "minisglang_gc_longest_full_collection_seconds", "The longest full collection seen", value=guard.longest
        )


class _EngineCollector:
    """Metrics read from `Engine.stats()` at scrape time."""

    def __init__(self, engine: Engine, step_timings: Callable[[], dict[str, float | None]]):
        self.engine, self.step_timings = engine, step_timings

    def describe(self) -> list[Metric]:
        return []  # no fixed set: the constraint layer's gauges exist only when the stage reports them

    def collect(self) -> Iterator[Metric]:
        st = self.engine.stats()
        by_reason = CounterMetricFamily(
            "minisglang_requests", "Finished requests by finish reason", labels=["finish_reason"]
        )
        for reason, n in sorted(st.finished_by_reason.items()):
            by_reason.add_metric([reason], n)
        yield by_reason
        for name, help_text, value in [
            ("prompt_tokens", "Prompt tokens of finished requests", st.prompt_tokens),
            ("cached_prompt_tokens", "Of those, supplied by the radix cache", st.cached_prompt_tokens),
            ("generation_tokens", "Output tokens of finished requests", st.generated_tokens),
            ("step_errors", "Exceptions a step caught (each aborted only its requests)", st.errors),
            (
                "grammar_errors",
                "Requests aborted by their own grammar: refused, failed, or past a limit (the client's error)",
                st.grammar_errors,
            ),
            ("retractions", "Running requests sent back to wait when the KV pool ran out", st.retractions),
        ]:
            yield CounterMetricFamily(f"minisglang_{name}", help_text, value=value)
        gauges: list[tuple[str, str, float]] = [
            ("radix_hit_rate", "Cached prompt tokens / prompt tokens of finished requests", st.radix_hit_rate),
            ("new_token_ratio", "Share of remaining max_new_tokens admission reserves now", st.new_token_ratio),
            ("grammar_queue_length", "Requests waiting for their grammar", st.grammar_queue),
            ("waiting_queue_length", "Requests waiting to be prefilled", st.waiting_queue),
            ("running_requests", "Requests in the running (decode) batch", st.running),
            ("free_kv_slots", "KV slots neither in use nor held by the radix tree", st.free_kv_slots),
            ("radix_cached_tokens", "KV slots the radix tree holds", st.radix_cached_tokens),
            ("radix_evictable_tokens", "Of those, not locked by a running request", st.radix_evictable_tokens),
            ("total_kv_slots", "KV slots in the pool", st.total_kv_slots),
            ("free_request_slots", "Free rows of the request-to-token table", st.free_request_slots),
            ("total_request_slots", "Rows of the request-to-token table", st.total_request_slots),
        ]
        for name, help_text, level in gauges:
            yield GaugeMetricFamily(f"minisglang_{name}", help_text, value=float(level))
        for key, seconds in sorted(self.step_timings().items()):
            if seconds is not None:  # no step yet (or none running): no sample, rather than a made-up 0
                yield GaugeMetricFamily(f"minisglang_{key}", f"Scheduler loop: {key.replace('_', ' ')}", value=seconds)
        stage_stats = getattr(self.engine.stage, "stats", None)
        if callable(stage_stats):  # e.g. the grammar cache's size and hits, where the stage reports them
            for key, value in sorted(stage_stats().items()):
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    yield GaugeMetricFamily(f"minisglang_grammar_{key}", f"Constraint layer: {key}", value=value)
                elif hasattr(value, "bounds"):  # a histogram (backends.base.CompileTimes)
                    buckets = [(str(b), c) for b, c in zip(value.bounds, value.counts)] + [("+Inf", value.count)]
                    yield HistogramMetricFamily(
                        f"minisglang_grammar_{key}", f"Constraint layer: {key}", buckets=buckets, sum_value=value.total
                    )
