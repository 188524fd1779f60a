"""The coordinator's Prometheus metrics (``/metrics`` on ``--http-listen``).

Live figures of this process are counted here on the event loop (upload latency, games
waiting in upload messages); the stored ones (games, positions, rejections, shards,
models, gating) are read from the index at each scrape
(:func:`kgrpc.coordinator.views.metrics_snapshot`), so they count the whole run across
restarts. Names (all prefixed ``kgrpc_coordinator_``) are listed in docs/operations.md.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from kgrpc.net.metrics import Family, Histogram, counter, gauge, histogram

PREFIX = "kgrpc_coordinator_"
UPLOAD_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class CoordinatorMetrics:
    def __init__(self) -> None:
        self.started = time.time()
        self.upload_seconds = Histogram(UPLOAD_BUCKETS_S)
        self.upload_failures = 0
        self.validation_queue_games = 0
        # Set by refresh() before each exposition.
        self.snapshot: dict[str, Any] = {}
        self.pending_positions = 0
        self.sgf_failures = 0
        self.sgf_refused_records = 0
        self.sgf_pending_bytes = 0
        self.store_outage_s = 0.0  # how long the blob store has been unreachable (0: it works)

    @contextlib.contextmanager
    def upload(self, games: int) -> Iterator[None]:
        """Time one upload message of ``games`` games, counted as waiting meanwhile."""
        start = time.perf_counter()
        self.validation_queue_games += games
        try:
            yield
        except BaseException:
            self.upload_failures += 1
            raise
        finally:
            self.validation_queue_games -= games
            self.upload_seconds.observe(time.perf_counter() - start)

    def families(self) -> list[Family]:
        s = self.snapshot
        c = s.get("counters", {})
        p = PREFIX
        out = [
            counter(
                p + "games",
                "Games uploaded, by result (stored counters, whole run)",
                {(r,): c.get(f"games_{r}", 0) for r in ("accepted", "rejected", "duplicate")},
                ["result"],
            ),
            counter(
                p + "rejections",
                "Rejected games by reason (whole run)",
                {(k,): v for k, v in s.get("rejects", {}).items()},
                ["reason"],
            ),
            counter(
                p + "positions",
                "Training positions of uploaded games, by result",
                {(r,): c.get(f"positions_{r}", 0) for r in ("received", "accepted")},
                ["result"],
            ),
            counter(p + "shards_written", "Shards cut (whole run)", c.get("shards_written", 0)),
            histogram(
                p + "upload_message_seconds",
                "Time to decode, validate and store one UploadGames message",
                self.upload_seconds,
            ),
            counter(
                p + "upload_messages_failed",
                "Upload messages answered with an error",
                self.upload_failures,
            ),
            gauge(
                p + "validation_queue_games",
                "Games of upload messages being decoded, validated or stored now",
                self.validation_queue_games,
            ),
            gauge(
                p + "pending_positions",
                "Accepted positions in the journal, not yet in a shard",
                self.pending_positions,
            ),
            gauge(
                p + "models",
                "Models by status",
                {(k,): v for k, v in s.get("models", {}).items()},
                ["status"],
            ),
            gauge(
                p + "gating_matches",
                "Gating matches by decision",
                {(k,): v for k, v in s.get("matches", {}).items()},
                ["decision"],
            ),
            counter(
                p + "gating_games",
                "Gating games by outcome for the candidate",
                {(k,): v for k, v in s.get("gating_games", {}).items()},
                ["outcome"],
            ),
            gauge(
                p + "workers_online", "Workers with a recent heartbeat", s.get("workers_online", 0)
            ),
            counter(
                p + "sgf_games",
                "Games kept as SGF, by kind (whole run)",
                {(k,): v for k, v in s.get("sgf_games", {}).items()},
                ["kind"],
            ),
            counter(
                p + "sgf_write_failures",
                "Batches of games whose SGF could not be kept (since start)",
                self.sgf_failures,
            ),
            counter(
                p + "sgf_records_refused",
                "Gating game records not kept: they do not replay (since start)",
                self.sgf_refused_records,
            ),
            gauge(
                p + "sgf_pending_bytes",
                "Serialized games waiting to be written as SGF",
                self.sgf_pending_bytes,
            ),
            gauge(
                p + "store_outage_seconds",
                "Seconds the blob store has been unreachable for shard puts (0 while it works)",
                self.store_outage_s,
            ),
            gauge(
                p + "uptime_seconds",
                "Seconds since this coordinator started",
                time.time() - self.started,
            ),
        ]
        outliers = s.get("outliers", [])
        labels = ["candidate", "reference", "token"]
        out.append(
            gauge(
                p + "gating_outlier_p_value",
                "Tokens set aside on a gating pairing: the p-value of their win rate against "
                "the other tokens' (two-sided Fisher exact test)",
                {
                    (o["candidate"], o["reference"], str(o["token_id"])): o["p_value"]
                    for o in outliers
                },
                labels,
            )
        )
        out.append(
            gauge(
                p + "gating_outlier_games",
                "Games of the tokens set aside on a gating pairing, left out of its decision",
                {
                    (o["candidate"], o["reference"], str(o["token_id"])): o["games"]
                    for o in outliers
                },
                labels,
            )
        )
        out.append(
            gauge(
                p + "quarantined_tokens",
                "Worker tokens under quarantine (their games since then are left out)",
                s.get("quarantined_tokens", 0),
            )
        )
        best = s.get("best")
        # A release no gating match rated (gating off or skipped) carries its predecessor's
        # Elo, which is no measurement: the series is left out rather than exported as one.
        if best is not None and best["elo_measured"]:
            out.append(
                gauge(
                    p + "best_model_elo",
                    "Gating Elo of the released model (absent when no gating match rated it)",
                    {(best["name"],): best["elo"]},
                    ["model"],
                )
            )
        return out
