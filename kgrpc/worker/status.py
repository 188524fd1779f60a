"""The worker's figures: one status line for people, the same numbers in heartbeats.

:class:`StatusReporter` shows the line on stderr every ``status_interval_s`` (in the log every
minute; with ``--quiet`` only in the log) and once more, marked final, at the end.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from kgrpc.mcts.search import SearchStats
from kgrpc.v1 import coordinator_pb2

log = logging.getLogger(__name__)


@dataclass
class WorkerCounters:
    search: SearchStats = field(default_factory=SearchStats)
    games_started: int = 0
    games_failed: int = 0  # games dropped because of an unexpected error (logged)
    games_finished: int = 0
    games_uploaded: int = 0  # acknowledged ACCEPTED or DUPLICATE
    games_rejected: int = 0
    uploads: int = 0  # upload streams completed
    match_games: int = 0
    false_resignations: int = 0
    playouts_checked: int = 0  # played-out games where someone would have resigned
    spooled: int = 0
    games_by_model: dict[str, int] = field(default_factory=dict)
    current_model: str = ""
    paused: bool = False  # kgrpc-worker pause (kgrpc.worker.lifecycle.Pause)
    # Mean positions per net evaluation, as the evaluator reports it (in-process batcher or
    # the inference server); None until known.
    mean_batch: float | None = None


class RateMeter:
    """Rates over a sliding window of (time, counters) samples."""

    def __init__(self, window_s: float = 30.0) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, int, int, int, int]] = deque()

    def sample(self, c: WorkerCounters, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self._samples.append(
            (now, c.search.searches, c.search.visits, c.search.nn_evals, c.search.nn_requests)
        )
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
            self._samples.popleft()

    def rates(self) -> tuple[float, float, float, float]:
        """(moves/s, visits/s, evals/s, leaves per request) over the window."""
        if len(self._samples) < 2:
            return 0.0, 0.0, 0.0, 0.0
        t0, m0, v0, e0, r0 = self._samples[0]
        t1, m1, v1, e1, r1 = self._samples[-1]
        dt = max(t1 - t0, 1e-9)
        per_req = (e1 - e0) / (r1 - r0) if r1 > r0 else 0.0
        return (m1 - m0) / dt, (v1 - v0) / dt, (e1 - e0) / dt, per_req


def status_line(c: WorkerCounters, meter: RateMeter) -> str:
    moves_s, visits_s, evals_s, per_req = meter.rates()
    batch = c.mean_batch if c.mean_batch is not None else per_req
    return (
        ("PAUSED (kgrpc-worker resume to go on) | " if c.paused else "")
        + f"games {c.games_finished} (+{c.games_started - c.games_finished} playing) | "
        f"{moves_s:.1f} moves/s | {visits_s:.0f} visits/s | {evals_s:.0f} NN evals/s | "
        f"batch {batch:.1f} | uploaded {c.games_uploaded} in {c.uploads} uploads, "
        f"spool {c.spooled}"
        + (f", rejected {c.games_rejected}" if c.games_rejected else "")
        + f" | model {c.current_model or '-'}"
    )


def to_proto(c: WorkerCounters, meter: RateMeter) -> coordinator_pb2.WorkerStats:
    moves_s, visits_s, evals_s, per_req = meter.rates()
    return coordinator_pb2.WorkerStats(
        games_finished=c.games_finished,
        games_uploaded=c.games_uploaded,
        moves_played=c.search.searches,
        moves_per_s=moves_s,
        visits_per_s=visits_s,
        nn_evals_per_s=evals_s,
        mean_batch_size=c.mean_batch if c.mean_batch is not None else per_req,
        current_model=c.current_model,
        spooled_games=c.spooled,
    )


class StatusReporter:
    def __init__(
        self,
        counters: WorkerCounters,
        meter: RateMeter,
        *,
        interval_s: float,
        quiet: bool,
        mean_batch: Callable[[], Awaitable[float | None]],
    ) -> None:
        self.counters = counters
        self.meter = meter
        self.interval_s = interval_s
        self.quiet = quiet
        self.mean_batch = mean_batch  # the engine's own figure, when it has one

    async def run(self) -> None:
        last_log = 0.0
        while True:
            self.meter.sample(self.counters)
            mb = await self.mean_batch()
            if mb:
                self.counters.mean_batch = mb
            now = time.monotonic()
            if now - last_log >= 60:
                log.info("%s", status_line(self.counters, self.meter))
                last_log = now
            self.show()
            await asyncio.sleep(self.interval_s)

    def show(self, final: bool = False) -> None:
        line = status_line(self.counters, self.meter)
        if self.quiet:
            if final:
                log.info("final: %s", line)
            return
        print(("final: " if final else "") + line, file=sys.stderr, flush=True)
