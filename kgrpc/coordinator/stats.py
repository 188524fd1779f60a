"""The GetStats answer: counters, workers, models, matches and the latest ladder ratings.
Runs on the storage thread."""

from __future__ import annotations

import time

from kgrpc.coordinator import quorum, workers
from kgrpc.coordinator.gating import Gating
from kgrpc.coordinator.models import Models
from kgrpc.coordinator.ratings import Ratings
from kgrpc.coordinator.store import Store
from kgrpc.net.limits import stats_page
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
    gating: Gating,
    ratings: Ratings,
    run: str,
    started: float,
    max_ratings: int,
    page: coordinator_pb2.GetStatsRequest | None = None,
    display_names: bool = False,
) -> coordinator_pb2.Stats:
    """Stats of ``run``, with one page of workers (:func:`kgrpc.coordinator.workers.statuses`),
    of models and of gating matches (newest first) as ``page`` asks (each limit 0 =
    :data:`kgrpc.net.limits.STATS_PAGE`, at most ``STATS_MAX_PAGE``), and the latest rating
    of each (model, opponent), at most ``max_ratings``; ``started``: the server's start
    (``time.time()``); ``display_names``: the coordinator's setting of that name."""
    p = page if page is not None else coordinator_pb2.GetStatsRequest()
    c = store.counters()
    s = coordinator_pb2.Stats(run=run, uptime_s=int(time.time() - started))
    for name in COUNTERS:
        setattr(s, name, c.get(name, 0))
    for k, v in c.items():
        if k.startswith("reject:"):
            s.rejects_by_reason[k[len("reject:") :]] = v
    s.workers.extend(workers.statuses(store.conn, p.workers_offset, p.workers_limit, display_names))
    s.workers_total = workers.count(store.conn)
    s.models.extend(models.all(p.models_offset, stats_page(p.models_limit)))
    s.models_total = models.count()
    s.matches.extend(gating.match_summaries(p.matches_offset, stats_page(p.matches_limit)))
    s.matches_total = gating.match_count()
    s.ratings.extend(ratings.latest(max_ratings))
    for q in quorum.quarantined(store.conn):
        s.quarantined_tokens.add(
            token_id=q["token_id"],
            label=q["label"] or "",
            since_unix_ms=q["since_ms"],
            match_games=q["match_games"],
            training_games=q["training_games"],
        )
    return s
