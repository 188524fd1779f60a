"""The GetStats answer: counters, workers, models, matches and the latest ladder ratings.
Runs on the storage thread."""

from __future__ import annotations

import time

from kgrpc.coordinator import workers
from kgrpc.coordinator.models import Models
from kgrpc.coordinator.ratings import Ratings
from kgrpc.coordinator.store import Store
from kgrpc.v1 import coordinator_pb2

COUNTERS = (
    "games_received",
    "games_accepted",
    "games_rejected",
    "games_duplicate",
    "positions_received",
    "positions_accepted",
    "shards_written",
)


def collect(
    store: Store,
    models: Models,
    ratings: Ratings,
    run: str,
    started: float,
    max_ratings: int,
    workers_offset: int = 0,
    workers_limit: int = 0,
) -> coordinator_pb2.Stats:
    """Stats of ``run``, with one page of workers (:func:`kgrpc.coordinator.workers.statuses`)
    and the latest rating of each (model, opponent), at most ``max_ratings``; ``started``: the
    server's start (``time.time()``)."""
    c = store.counters()
    s = coordinator_pb2.Stats(run=run, uptime_s=int(time.time() - started))
    for name in COUNTERS:
        setattr(s, name, c.get(name, 0))
    for k, v in c.items():
        if k.startswith("reject:"):
            s.rejects_by_reason[k[len("reject:") :]] = v
    s.workers.extend(workers.statuses(store.conn, workers_offset, workers_limit))
    s.workers_total = workers.count(store.conn)
    s.models.extend(models.all())
    s.matches.extend(models.match_summaries())
    s.ratings.extend(ratings.latest(max_ratings))
    return s
