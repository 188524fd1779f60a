"""Server metrics: counters, batch-size histogram, queue-wait and compute-time percentiles.

Percentiles come from bounded reservoirs of the most recent samples (a deque), so they describe
recent behaviour and cost O(1) memory. ``evals_per_s`` is over a sliding window of ``window_s``
seconds. Exposed as ``kgrpc.v1.InferenceStats`` (GetInferenceStats) and as a log line.
"""

from __future__ import annotations

import bisect
import time
from collections import deque

import numpy as np

from kgrpc.v1 import inference_pb2

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)


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
        self._recent: deque[tuple[float, int]] = deque()

    def record_batch(self, size: int, compute_ms: float, waits_ms: list[float]) -> None:
        self.batches += 1
        self.batched_positions += size
        i = bisect.bisect_left(BATCH_BUCKETS, size)
        self.batch_counts[min(i, len(BATCH_BUCKETS) - 1)] += 1
        self.compute_ms.append(compute_ms)
        self.queue_wait_ms.extend(waits_ms)

    def record_answered(self, positions: int) -> None:
        self.requests += 1
        self.positions += positions
        now = time.monotonic()
        self._recent.append((now, positions))
        while self._recent and self._recent[0][0] < now - self._window_s:
            self._recent.popleft()

    def evals_per_s(self) -> float:
        now = time.monotonic()
        while self._recent and self._recent[0][0] < now - self._window_s:
            self._recent.popleft()
        span = min(self._window_s, now - self.started)
        return sum(n for _, n in self._recent) / span if span > 0 else 0.0

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
