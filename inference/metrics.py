"""Server metrics: counters, batch-size histogram, queue-wait and compute-time percentiles.

Percentiles come from bounded reservoirs of the most recent samples (a deque), so they describe
recent behaviour and cost O(1) memory. ``evals_per_s`` is over a sliding window of ``window_s``
seconds. Exposed as ``kgrpc.v1.InferenceStats`` (GetInferenceStats), as a log line, and as
Prometheus metrics (:meth:`Metrics.families`, served by ``--metrics-listen``; the names are
listed in docs/operations.md), where queue wait and compute time are histograms since start.
"""

from __future__ import annotations

import bisect
import time
from collections import deque
from typing import Any

import numpy as np

from kgrpc.net.metrics import Histogram, MetricsServer, counter, gauge, histogram
from kgrpc.v1 import inference_pb2

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
# Seconds: a request's wait for its batch, and one batch's evaluation.
WAIT_BUCKETS_S = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)
COMPUTE_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
PREFIX = "kgrpc_inference_"


def _pct(samples: deque[float], q: float) -> float:
    if not samples:
        return 0.0
    return float(np.percentile(np.fromiter(samples, dtype=np.float64), q))


class Metrics:
    def __init__(self, reservoir: int = 4096, window_s: float = 10.0) -> None:
        self.started = time.monotonic()
        self.requests = 0
        self.positions = 0  # positions answered (cache hits included)
        self.batches = 0
        self.batched_positions = 0
        self.cache_hits = 0
        self.cache_misses = 0
        self.rejected_queue_full = 0
        self.errors = 0
        self.batch_counts = [0] * len(BATCH_BUCKETS)
        self.queue_wait_ms: deque[float] = deque(maxlen=reservoir)
        self.compute_ms: deque[float] = deque(maxlen=reservoir)
        self._window_s = window_s
        self._recent: deque[tuple[float, int, str]] = deque()  # (time, positions, model)
        self.positions_by_model: dict[str, int] = {}
        self.batch_hist = Histogram(BATCH_BUCKETS)
        self.wait_hist = Histogram(WAIT_BUCKETS_S)
        self.compute_hist = Histogram(COMPUTE_BUCKETS_S)

    def record_batch(self, size: int, compute_ms: float, waits_ms: list[float]) -> None:
        self.batches += 1
        self.batched_positions += size
        i = bisect.bisect_left(BATCH_BUCKETS, size)
        self.batch_counts[min(i, len(BATCH_BUCKETS) - 1)] += 1
        self.compute_ms.append(compute_ms)
        self.queue_wait_ms.extend(waits_ms)
        self.batch_hist.observe(size)
        self.compute_hist.observe(compute_ms / 1000.0)
        self.wait_hist.observe_many(w / 1000.0 for w in waits_ms)

    def record_answered(self, positions: int, model: str = "") -> None:
        """A request of ``positions`` answered, by ``model`` when known."""
        self.requests += 1
        self.positions += positions
        if model:
            self.positions_by_model[model] = self.positions_by_model.get(model, 0) + positions
        now = time.monotonic()
        self._recent.append((now, positions, model))
        while self._recent and self._recent[0][0] < now - self._window_s:
            self._recent.popleft()

    def _span(self) -> float:
        now = time.monotonic()
        while self._recent and self._recent[0][0] < now - self._window_s:
            self._recent.popleft()
        return min(self._window_s, now - self.started)

    def evals_per_s(self) -> float:
        span = self._span()
        return sum(n for _, n, _ in self._recent) / span if span > 0 else 0.0

    def evals_per_s_by_model(self) -> dict[str, float]:
        """Positions per second over the window, by model (answered requests that named it)."""
        span = self._span()
        out = dict.fromkeys(self.positions_by_model, 0.0)
        if span > 0:
            for _, n, model in self._recent:
                if model:
                    out[model] += n / span
        return out

    def families(self, queue_depth: int = 0, models_loaded: int = 0) -> list[Any]:
        """The Prometheus metric families (prometheus_client needed)."""
        p = PREFIX
        return [
            counter(p + "requests", "Evaluation requests answered", self.requests),
            counter(
                p + "positions",
                "Positions evaluated (cache hits included), by model",
                {(m,): n for m, n in self.positions_by_model.items()},
                ["model"],
            ),
            gauge(
                p + "evals_per_second",
                f"Positions per second over the last {self._window_s:g} s, by model",
                {(m,): v for m, v in self.evals_per_s_by_model().items()},
                ["model"],
            ),
            counter(p + "batches", "Batches run", self.batches),
            histogram(p + "batch_size", "Positions per batch", self.batch_hist),
            histogram(
                p + "queue_wait_seconds", "Time a request waited for its batch", self.wait_hist
            ),
            histogram(
                p + "evaluation_seconds",
                "Time to evaluate one batch (ONNX Runtime)",
                self.compute_hist,
            ),
            counter(
                p + "cache_hits", "Positions answered from the evaluation cache", self.cache_hits
            ),
            counter(
                p + "cache_misses",
                "Positions looked up in the cache and not found",
                self.cache_misses,
            ),
            counter(
                p + "rejected_queue_full",
                "Requests refused with a full queue",
                self.rejected_queue_full,
            ),
            counter(p + "errors", "Requests that failed in evaluation", self.errors),
            gauge(p + "queue_depth", "Positions waiting for a batch", queue_depth),
            gauge(p + "models_loaded", "Models loaded", models_loaded),
            gauge(
                p + "uptime_seconds",
                "Seconds since the server started",
                time.monotonic() - self.started,
            ),
        ]

    @property
    def mean_batch_size(self) -> float:
        return self.batched_positions / self.batches if self.batches else 0.0

    def to_proto(self, queue_depth: int = 0) -> inference_pb2.InferenceStats:
        return inference_pb2.InferenceStats(
            requests=self.requests,
            positions=self.positions,
            batches=self.batches,
            mean_batch_size=self.mean_batch_size,
            evals_per_s=self.evals_per_s(),
            batch_size_buckets=list(BATCH_BUCKETS),
            batch_size_counts=self.batch_counts,
            queue_wait_ms_p50=_pct(self.queue_wait_ms, 50),
            queue_wait_ms_p99=_pct(self.queue_wait_ms, 99),
            compute_ms_p50=_pct(self.compute_ms, 50),
            compute_ms_p99=_pct(self.compute_ms, 99),
            cache_hits=self.cache_hits,
            cache_misses=self.cache_misses,
            rejected_queue_full=self.rejected_queue_full,
            errors=self.errors,
            queue_depth=queue_depth,
            uptime_s=time.monotonic() - self.started,
        )

    def log_line(self, queue_depth: int = 0) -> str:
        s = self.to_proto(queue_depth)
        looked_up = s.cache_hits + s.cache_misses
        hit_rate = s.cache_hits / looked_up if looked_up else 0.0
        return (
            f"evals/s {s.evals_per_s:.0f} | requests {s.requests} positions {s.positions} "
            f"batches {s.batches} mean batch {s.mean_batch_size:.1f} | queue wait ms "
            f"p50 {s.queue_wait_ms_p50:.2f} p99 {s.queue_wait_ms_p99:.2f} | compute ms "
            f"p50 {s.compute_ms_p50:.2f} p99 {s.compute_ms_p99:.2f} | cache hit "
            f"{hit_rate:.1%} | queue {queue_depth} rejected {s.rejected_queue_full} "
            f"errors {s.errors}"
        )


def metrics_server(registry: Any) -> MetricsServer:
    """``GET /metrics`` of a :class:`~inference.models.ModelRegistry`'s figures (start it with
    ``await server.start(listen)``)."""
    return MetricsServer(
        lambda: registry.metrics.families(registry.queue_depth, len(registry.models))
    )
