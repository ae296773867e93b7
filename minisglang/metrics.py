"""`GET /metrics`: the server's Prometheus metrics (text format, through `prometheus-client`).

Two kinds of numbers:
- counted by the server as requests finish: requests by finish reason, prompt / cached /
  generated tokens, request latency (a histogram);
- read from the engine when Prometheus scrapes: queue lengths, free KV and request slots,
  the radix cache's hit rate, and the grammar cache's size and hits when the stage reports
  them (`ServerMetrics.collect`).

Each app has its own registry, so several servers (tests) in one process never share counts.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:  # pragma: no cover
    from .engine import Engine

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class ServerMetrics:
    """The counters the request handlers update, plus a collector that reads the engine."""

    def __init__(self, engine: "Engine"):
        self.engine = engine
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("minisglang_requests", "Finished requests by finish reason",
                                ["finish_reason"], registry=r)
        self.refused = Counter("minisglang_refused_requests", "Requests refused before queuing, by HTTP status",
                               ["status"], registry=r)
        self.prompt_tokens = Counter("minisglang_prompt_tokens", "Prompt tokens of finished requests", registry=r)
        self.cached_tokens = Counter("minisglang_cached_prompt_tokens",
                                     "Prompt tokens the radix cache supplied", registry=r)
        self.generation_tokens = Counter("minisglang_generation_tokens", "Output tokens of finished requests",
                                         registry=r)
        self.latency = Histogram("minisglang_request_latency_seconds", "Arrival to finish of a request",
                                 buckets=_LATENCY_BUCKETS, registry=r)
        self._prompt_sum = self._cached_sum = 0   # for the hit-rate gauge
        r.register(_EngineCollector(self))

    def finished(self, meta: dict[str, Any]) -> None:
        """Count one finished request from its meta_info."""
        reason = meta["finish_reason"]["type"] if meta.get("finish_reason") else "unknown"
        self.requests.labels(finish_reason=reason).inc()
        cached = min(meta["cached_tokens"], meta["prompt_tokens"])
        self.prompt_tokens.inc(meta["prompt_tokens"])
        self.cached_tokens.inc(cached)
        self._prompt_sum += meta["prompt_tokens"]
        self._cached_sum += cached
        self.generation_tokens.inc(meta["completion_tokens"])
        self.latency.observe(meta["e2e_latency"])

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _EngineCollector:
    """Gauges read from the engine at scrape time (a read of a few lengths; no lock needed)."""

    def __init__(self, metrics: ServerMetrics):
        self.metrics = metrics

    def describe(self) -> list[Metric]:
        return []   # no fixed set: the grammar gauges exist only when the stage reports them

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        hit_rate = m._cached_sum / m._prompt_sum if m._prompt_sum else 0.0
        yield GaugeMetricFamily("minisglang_radix_hit_rate", "Cached prompt tokens / prompt tokens so far",
                                value=hit_rate)
        for name, help_text, value in engine_gauges(m.engine):
            yield GaugeMetricFamily(f"minisglang_{name}", help_text, value=float(value))


def engine_gauges(engine: "Engine") -> list[tuple[str, str, float]]:
    """(name, help, value) of every engine number /metrics shows."""
    s = engine.scheduler
    tree = s.tree_cache
    gauges = [
        ("grammar_queue_length", "Requests waiting for their grammar", len(s.grammar_queue)),
        ("waiting_queue_length", "Requests waiting to be prefilled", len(s.waiting_queue)),
        ("running_requests", "Requests in the running (decode) batch", len(s.running)),
        ("free_kv_slots", "KV slots neither in use nor held by the radix tree",
         s.token_to_kv_pool.available_size()),
        ("evictable_kv_slots", "KV slots the radix tree holds and could evict", tree.evictable_size()),
        ("total_kv_slots", "KV slots in the pool", s.config.max_total_tokens),
        ("free_request_slots", "Free rows of the request-to-token table", s.req_to_token_pool.available_size()),
    ]
    stats = getattr(engine.stage, "stats", None)
    if callable(stats):   # the grammar cache's numbers, where the stage reports them
        for key, value in sorted(stats().items()):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                gauges.append((f"grammar_{key}", f"Constraint layer: {key}", value))
    return gauges
