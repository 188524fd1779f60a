"""The coordinator's calls: what the servicer (:mod:`kgrpc.coordinator.servicer`) and the
dashboard ask of the application, one method per RPC (and the figures ``/metrics`` shows).
Each calls the module that owns the job: on the storage thread (``db``) when it writes or
reads what that thread owns in memory, on the reader (``reader.run``) when it reads
committed rows only (docs/architecture.md, "A new RPC").

:class:`Calls` is the answering half of :class:`kgrpc.coordinator.server.CoordinatorApp`,
which builds, starts and stops the parts the calls use.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Hashable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kgrpc import protocol
from kgrpc.blobstore import BlobStore, BlobStoreError
from kgrpc.coordinator import (
    auth,
    blobs,
    db,
    kept_games,
    match_records,
    publish,
    quorum,
    sgf_index,
    stats,
    views,
    workers,
)
from kgrpc.coordinator.archive import GameArchive
from kgrpc.coordinator.config import Config
from kgrpc.coordinator.downloads import check_offset
from kgrpc.coordinator.errors import denied, invalid, not_found, precondition
from kgrpc.coordinator.gating import Gating, ReportOutcome
from kgrpc.coordinator.ingest import Ingest, Taken
from kgrpc.coordinator.metrics import CoordinatorMetrics
from kgrpc.coordinator.models import Models
from kgrpc.coordinator.pace import HeartbeatPace
from kgrpc.coordinator.ratings import RatingReport, Ratings
from kgrpc.coordinator.reader import Reader
from kgrpc.coordinator.releases import Releases
from kgrpc.coordinator.storage_health import StorageHealth
from kgrpc.coordinator.store import ShardRecord, Store
from kgrpc.coordinator.tasks import Tasks
from kgrpc.coordinator.validation_pool import ValidationPool
from kgrpc.net.server import bearer_token
from kgrpc.precision import from_proto
from kgrpc.v1 import common_pb2, coordinator_pb2

log = logging.getLogger("kgrpc.coordinator")
T = TypeVar("T")


class Calls:
    """The application's calls, on the parts :class:`~kgrpc.coordinator.server.CoordinatorApp`
    owns: declared here, set up there (the storage thread's parts once it started)."""

    cfg: Config
    data_dir: Path
    started: float
    blobs: BlobStore
    health: StorageHealth
    releases: Releases
    metrics: CoordinatorMetrics
    reader: Reader
    checker: auth.TokenChecker | None
    validation: ValidationPool | None
    store: Store
    models: Models
    gating: Gating
    tasks: Tasks
    ratings: Ratings
    archive: GameArchive
    ingest: Ingest
    pace: HeartbeatPace

    if TYPE_CHECKING:  # CoordinatorApp's storage thread

        async def db(self, fn: Callable[..., T], *args: Any) -> T: ...

    # ------------------------------------------------------------------ callers
    def caller(self, metadata: Iterable[tuple[str, Any]] | None) -> auth.TokenInfo | None:
        """The token a call carries (the interceptor has let it in); None with auth off."""
        if not self.cfg.auth or self.checker is None:
            return None
        token = bearer_token(metadata)
        return self.checker.lookup(token) if token else None

    # ------------------------------------------------------------------ workers
    async def register(
        self,
        previous_id: str,
        username: str,
        hostname: str,
        version: str,
        caller: auth.TokenInfo | None,
    ) -> str:
        self._check_worker_version(version)
        token_id = caller.id if caller else None

        def register() -> str:
            with db.transaction(self.store.conn, durable=False):  # lost: the worker re-registers
                return workers.register(
                    self.store.conn, previous_id, token_id, username, hostname, version
                )

        wid = await self.db(register)
        self.pace.registered()
        log.info("worker %s registered (user %r, host %r)", wid, username, hostname)
        return wid

    async def heartbeat_interval_s(self) -> int:
        """The interval to tell a worker now (RegisterResponse, HeartbeatResponse)."""
        return await self.pace.current_s()

    async def _count_online(self, interval_s: float) -> int:
        """Workers online in the index with the cutoff of ``interval_s`` (for the pace)."""
        s = dataclasses.replace(self.view_settings, heartbeat_interval_s=interval_s)
        return await self.reader.run(views.workers_online, s, views.now_ms())

    def _check_worker_version(self, version: str) -> None:
        """Refuse a worker older than ``min_worker_version``, saying what to install (a worker
        that plays with an older search or record format than the run expects would upload
        games that are refused, or worse, accepted)."""
        minimum = self.cfg.min_worker_version
        if minimum and protocol.older_than(version, minimum):
            raise precondition(
                f"{protocol.VERSION_TOO_OLD}: this coordinator accepts kgrpc workers {minimum} or "
                f"newer, and this one is {version or 'of no stated version'}: install kgrpc "
                f"{minimum} or newer (docs/worker.md, 'Installing'), then start the worker again",
                protocol.VERSION_TOO_OLD,
                {"minimum": minimum, "version": version},
            )

    async def heartbeat(
        self, worker_id: str, stats_json: str, caller: auth.TokenInfo | None
    ) -> common_pb2.ModelInfo | None:
        """Record a heartbeat of one of ``caller``'s workers; the best model."""

        def beat() -> None:
            with db.transaction(self.store.conn, durable=False):
                workers.check_owner(self.store.conn, worker_id, caller)
                workers.record_heartbeat(self.store.conn, worker_id, stats_json)

        await self.db(beat)
        return await self.db(self.models.best_info)

    async def next_task(
        self, worker_id: str, caller: auth.TokenInfo | None
    ) -> coordinator_pb2.Task:
        def pick() -> coordinator_pb2.Task:
            # Bound to the id its games will count under: the worker when the caller may act
            # for it, else the caller's upload bucket.
            owner = workers.is_owner(self.store.conn, worker_id, caller)
            bound = worker_id if owner else workers.upload_bucket(caller)
            return self.tasks.issue(
                self.models, self.gating, bound, owner, caller.id if caller else None
            )

        return await self.db(pick)

    async def ingest_message(
        self,
        req: coordinator_pb2.UploadGamesRequest,
        caller: auth.TokenInfo | None,
        stream: Hashable = None,
    ) -> Taken:
        with self.metrics.upload(req.game_count):
            return await self.ingest.message(req, caller, stream)

    # ------------------------------------------------------------------ models
    async def best_model(self) -> common_pb2.ModelInfo | None:
        return await self.db(self.models.best_info)

    async def list_models(self) -> list[common_pb2.ModelInfo]:
        return await self.db(self.models.all)

    async def model_file(
        self, name: str, offset: int, precision: int = 0
    ) -> tuple[common_pb2.ModelInfo, common_pb2.ModelFile, Path | blobs.BlobRef]:
        """The model ``name``, its file in ``precision`` (a kgrpc.v1.Precision; unspecified =
        fp32) and that file's path (its object, with a remote store), to be sent from
        ``offset``."""
        try:
            wanted = from_proto(precision)
        except ValueError as exc:
            raise invalid(f"precision: {exc}") from None
        info, file, path = await self.db(self.models.file, name, wanted)
        check_offset(offset, file.size_bytes)
        key = blobs.model_key(path.name)
        if not blobs.in_place(self.blobs, key, path):
            return info, file, blobs.BlobRef(self.blobs, key)
        return info, file, path

    def watch_models(self, known_model: str) -> AsyncIterator[common_pb2.ModelInfo]:
        return self.releases.watch(known_model, self.best_model)

    async def publish(
        self, requests: AsyncIterator[coordinator_pb2.PublishModelRequest]
    ) -> publish.Published:
        max_bytes = self.cfg.max_receive_mb << 20 << 4  # models may span many messages
        try:
            out = await publish.receive_model(
                requests,
                self.models,
                self.data_dir / "models",
                max_bytes,
                self.db,
                self.cfg.curriculum,
                self.cfg.parity_bounds,
                self.blobs,
            )
        except OSError as exc:  # writing the model file
            error = self.health.failed(exc)
            if error is None:
                raise
            raise error from None
        if out.announce:
            self.releases.announce(out.model)
        return out

    async def report_match(
        self, req: coordinator_pb2.ReportMatchResultRequest, caller: auth.TokenInfo | None
    ) -> ReportOutcome:
        check = functools.partial(
            workers.check_owner,
            self.store.conn,
            caller=caller,
            action="report match results for",
            missing=denied,
        )
        assert self.validation is not None
        # Who may report for this task is checked before any record is replayed (cheap).
        await self.db(self.gating.check_report, req, check)
        validate = functools.partial(self.validation.validate, owner=workers.upload_bucket(caller))
        required = self.cfg.match_records_required
        terms = None  # the stored match task, which the records sent must fit
        if required or any(g.HasField("record") for g in req.games):
            terms = (await self.db(self.tasks.terms, [req.task_id])).get(req.task_id)
        # Required: every game replayed, and req's winners and scores become the replay's.
        records, refused = await match_records.check_match_records(
            req, validate, terms, required=required
        )
        out = await self.db(self.gating.report, req, check, caller.id if caller else None)
        self.archive.refused_records += refused
        await self.archive.keep_match(req, records)
        if out.released is not None:
            self.releases.announce(out.released)
        return out

    # ------------------------------------------------------------------ ratings
    async def report_rating(
        self, report: RatingReport, caller: auth.TokenInfo | None
    ) -> coordinator_pb2.Rating:
        """Store a ladder result (the interceptor let only a trainer token in)."""
        out = await self.db(self.ratings.report, report, caller.id if caller else None)
        log.info(
            "rating %s vs %s: %d-%d-%d, Elo %+.0f",
            out.model,
            out.opponent,
            out.wins,
            out.losses,
            out.draws,
            out.elo,
        )
        return out

    async def list_ratings(
        self, model: str, opponent: str, latest_only: bool, limit: int
    ) -> tuple[list[coordinator_pb2.Rating], bool]:
        return await self.db(self.ratings.list, model, opponent, latest_only, limit)

    # ------------------------------------------------------------------ stats and shards
    async def stats(
        self, max_ratings: int, page: coordinator_pb2.GetStatsRequest | None = None
    ) -> coordinator_pb2.Stats:
        """The GetStats answer: one page of workers, models and matches (as ``page`` asks),
        at most ``max_ratings`` ratings."""
        s = await self.db(
            stats.collect,
            self.store,
            self.models,
            self.gating,
            self.ratings,
            self.cfg.run,
            self.started,
            max_ratings,
            page,
            self.cfg.display_names,
        )
        extra = await self.reader.run(views.stats_extra, self.view_settings, self.reader.activity)
        views.fill_stats(s, extra)
        return s

    @property
    def view_settings(self) -> views.Settings:
        return views.Settings(
            self.cfg.run,
            self.pace.cutoff_interval_s,  # the interval workers were told (kgrpc.coordinator.pace)
            self.started,
            self.cfg.gating_min_tokens,
            self.cfg.display_names,
        )

    async def refresh_metrics(self) -> None:
        """Read the stored figures /metrics shows (before each scrape)."""
        m = self.metrics
        m.snapshot = await self.reader.run(views.metrics_snapshot, self.view_settings)
        m.pending_positions = sum((await self.db(self.store.pending_positions)).values())
        m.sgf_failures = self.archive.failures
        m.sgf_refused_records = self.archive.refused_records
        m.sgf_pending_bytes = self.archive.pending_bytes
        outage = self.ingest.outage
        m.store_outage_s = time.time() - outage.since if outage.down else 0.0

    # ------------------------------------------------------------------ kept games
    async def list_games(
        self, model: str, kind: str, limit: int, before_seq: int
    ) -> list[kept_games.KeptGame]:
        return await self.reader.run(sgf_index.list_kept, model, kind, limit, before_seq)

    async def game_sgf(self, game_id: str) -> tuple[kept_games.KeptGame, str]:
        game = await self.reader.run(sgf_index.find, game_id)
        if game is None:
            raise not_found(f"no kept game {game_id!r}: ListGames lists the games kept as SGF")
        return game, await self.archive.read_text(game)

    async def list_shards(self, run: str | None, after_index: int) -> list[ShardRecord]:
        """The run's shards after ``after_index``, without those holding games of a
        quarantined token (:func:`kgrpc.coordinator.quorum.excluded_shards`)."""

        def listed() -> list[ShardRecord]:
            rows = self.store.list_shards(run, after_index)
            held = quorum.excluded_shards(self.store.conn, run or self.cfg.run)
            return [r for r in rows if r.index not in held] if held else rows

        return await self.db(listed)

    async def shard_file(
        self, run: str, file_name: str, offset: int
    ) -> tuple[Path | blobs.BlobRef, int]:
        """The shard ``file_name`` of ``run`` (this run when empty) and its size, to be sent
        from ``offset``."""
        run = run or self.cfg.run
        path = await self.db(self.store.shard_path, run, file_name)
        if path is None:
            raise not_found(f"no shard {file_name!r} in run {run!r}")
        key = blobs.shard_key(run, path.name)
        if not blobs.in_place(self.blobs, key, path):
            ref = blobs.BlobRef(self.blobs, key)
            try:
                size = await asyncio.to_thread(self.blobs.size, ref.key)
            except BlobStoreError as exc:
                raise blobs.unavailable(exc) from None
            check_offset(offset, size)
            return ref, size
        size = path.stat().st_size
        check_offset(offset, size)
        return path, size
