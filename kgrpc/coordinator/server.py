"""The coordinator: :class:`CoordinatorApp` puts the parts together, starts and stops them,
and is the application the servicer (:mod:`kgrpc.coordinator.servicer`) calls; what each
call does is in :mod:`kgrpc.coordinator.calls`, the class it inherits its calls from.

Threads and processes: the event loop only moves messages. Every database and file
operation runs on one storage thread (so SQLite and the journal have a single
owner and need no locks); game validation (the replay) runs in a process pool with
the spawn start method (never fork after gRPC objects exist), and the shard cuts' file work
in one process of its own, at a lower priority (:mod:`kgrpc.coordinator.file_work`).

On start the bound address is logged and written to ``DATA_DIR/coordinator.port``
(``host:port``, atomically), so a caller that asked for port 0 can find it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kgrpc.blobstore import BlobStoreError
from kgrpc.coordinator import auth, blobs, releases, tasks
from kgrpc.coordinator.archive import GameArchive
from kgrpc.coordinator.calls import Calls
from kgrpc.coordinator.config import Config
from kgrpc.coordinator.file_work import FileWork
from kgrpc.coordinator.gating import Gating
from kgrpc.coordinator.ingest import Ingest
from kgrpc.coordinator.metrics import CoordinatorMetrics
from kgrpc.coordinator.models import Models
from kgrpc.coordinator.pace import HeartbeatPace
from kgrpc.coordinator.ratings import Ratings
from kgrpc.coordinator.reader import Reader
from kgrpc.coordinator.releases import Releases
from kgrpc.coordinator.servicer import CoordinatorServicer
from kgrpc.coordinator.storage_health import StorageHealth, check_writable
from kgrpc.coordinator.store import Store
from kgrpc.coordinator.validate import ValidationSettings
from kgrpc.coordinator.validation_pool import ValidationPool
from kgrpc.durable import atomic_write_bytes
from kgrpc.net.server import BearerTokenInterceptor, GrpcServer, tls_credentials
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc

log = logging.getLogger("kgrpc.coordinator")
T = TypeVar("T")
SERVICE_NAME = coordinator_pb2.DESCRIPTOR.services_by_name["Coordinator"].full_name
PORT_FILE = "coordinator.port"


class CoordinatorApp(Calls):
    """Owns the server, the storage thread, the validation pool and the state; answers
    through the calls of :class:`~kgrpc.coordinator.calls.Calls`."""

    def __init__(self, cfg: Config) -> None:
        cfg.check()
        self.cfg = cfg
        self.data_dir = Path(cfg.data_dir)
        # Shards, model files and SGF (kgrpc.coordinator.blobs); DATA_DIR itself by default.
        try:
            self.blobs = blobs.open_for(cfg.data_dir, cfg.store, cfg.store_options())
        except BlobStoreError as exc:
            raise ValueError(str(exc)) from None
        self.started = time.time()
        self.releases = Releases()
        self.health = StorageHealth(self.data_dir)
        self.storage = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kgrpc-storage")
        self.validation: ValidationPool | None = None
        self.files: FileWork | None = None
        self.grpc: GrpcServer | None = None
        self.checker: auth.TokenChecker | None = None
        self.port = 0
        self.metrics = CoordinatorMetrics()
        self.reader = Reader(cfg.data_dir, cfg.index)
        # The heartbeat interval handed out, longer while a large fleet is online.
        self.pace = HeartbeatPace(
            cfg.heartbeat_interval_s, cfg.max_heartbeats_per_s, self._count_online
        )
        self.dashboard: Any = None  # kgrpc.coordinator.web.server.Dashboard with --http-listen
        self._flusher: asyncio.Task[None] | None = None
        self._follower: asyncio.Task[None] | None = None
        self._stopped = False

    async def db(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the storage thread. A full or failing disk becomes
        RESOURCE_EXHAUSTED or UNAVAILABLE, logged once per incident (:mod:`storage_health`)."""

        def run() -> T:
            store = getattr(self, "store", None)
            before = store.conn.total_changes if store is not None else 0
            result = fn(*args)
            if self.health.incident and store is not None and store.conn.total_changes != before:
                self.health.wrote()  # a commit went through: the disk takes writes again
            return result

        try:
            return await asyncio.get_running_loop().run_in_executor(self.storage, run)
        except (OSError, sqlite3.Error) as exc:
            error = self.health.failed(exc)
            if error is None:
                raise
        raise error

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> int:
        cfg = self.cfg
        credentials = tls_credentials(cfg.tls_cert, cfg.tls_key)  # a bad pair fails first
        check_writable(self.data_dir)  # a read-only data dir: one line, not "disk failing"
        try:  # a wrong address, credentials or bucket: one line, before anything is opened
            await asyncio.to_thread(self.blobs.check)
        except BlobStoreError as exc:
            raise ValueError(str(exc)) from None
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "models").mkdir(exist_ok=True)

        def open_state() -> None:
            self.store = Store(
                cfg.data_dir,
                cfg.run,
                positions_per_shard=cfg.positions_per_shard,
                latest_window_positions=cfg.latest_window_positions,
                latest_refresh_s=cfg.latest_refresh_s,
                max_groups=cfg.max_shard_groups,
                blobs=self.blobs,
                index=cfg.index,
            )
            self.models = Models(self.store.conn, self.data_dir / "models", cfg)
            self.gating = Gating(self.models)
            self.tasks = tasks.Tasks(self.store.conn, cfg)
            self.ratings = Ratings(self.store.conn)
            for tmp in (self.data_dir / "models").glob(".*.tmp*"):
                tmp.unlink(missing_ok=True)

        await self.db(open_state)
        rec = self.store.recovery
        if (
            rec.adopted_shards
            or rec.dropped_entries
            or rec.restored_games
            or rec.missing_games
            or rec.quarantined_shards
            or rec.journal_damage
        ):
            log.warning("recovery: %s", rec)
        log.info("%d games pending in the ingest journal", rec.pending_games)
        settings = ValidationSettings.from_config(cfg)
        self.validation = ValidationPool(cfg.resolved_validate_workers(), settings)
        await self.validation.warm_up()
        self.files = FileWork(in_thread=self.validation.workers < 0)
        self.archive = GameArchive(
            self.data_dir, cfg.sgf_share, self.store.conn, self.db, blobs=self.blobs
        )
        self.ingest = Ingest(
            cfg,
            self.store,
            self.validation,
            self.files,
            self.db,
            keep=self.archive.keep_selfplay,
            task_terms=self.tasks.terms,
        )
        self.checker = auth.TokenChecker(cfg.data_dir, cfg.index)
        interceptor = BearerTokenInterceptor(self.checker.lookup, auth.permit) if cfg.auth else None
        self.grpc = GrpcServer(
            (SERVICE_NAME,), max_message_bytes=cfg.max_receive_mb << 20, interceptor=interceptor
        )
        coordinator_pb2_grpc.add_CoordinatorServicer_to_server(
            CoordinatorServicer(self), self.grpc.server
        )
        self.port = await self.grpc.start(cfg.listen, credentials)
        host = cfg.listen.rsplit(":", 1)[0]
        atomic_write_bytes(self.data_dir / PORT_FILE, f"{host}:{self.port}\n".encode())
        log.info(
            "kgrpc-coordinator listening on %s:%d (%s, auth %s), data in %s",
            host,
            self.port,
            "TLS" if cfg.tls_cert else "plaintext",
            "on" if cfg.auth else "OFF",
            self.data_dir,
        )
        self._flusher = asyncio.ensure_future(self.ingest.flush_loop())
        if cfg.index:
            # A shared index: other replicas release too; their releases reach this one's
            # WatchModels streams from the index (kgrpc.coordinator.releases).
            self._follower = asyncio.ensure_future(
                releases.follow_index(
                    self.releases,
                    functools.partial(self.reader.run, releases.release_key, cfg.run),
                    self.best_model,
                )
            )
        if cfg.http_listen:
            try:
                await self._start_dashboard(cfg.http_listen)
            except BaseException:
                await self.stop(0)  # e.g. the HTTP port is taken: no half-started server
                raise
        return self.port

    async def _start_dashboard(self, listen: str) -> None:
        from kgrpc.net.metrics import require

        require()
        from kgrpc.coordinator.web.server import Dashboard

        self.dashboard = Dashboard(self)
        await self.dashboard.start(listen)

    @property
    def address(self) -> str:
        return f"{self.cfg.listen.rsplit(':', 1)[0]}:{self.port}"

    async def stop(self, grace: float | None = None) -> None:
        """Stop taking calls, let in-flight ones finish (``grace`` s), close storage."""
        if self._stopped:
            return
        self._stopped = True
        grace = self.cfg.shutdown_grace_s if grace is None else grace
        if self._flusher is not None:
            self._flusher.cancel()
        if self._follower is not None:
            self._follower.cancel()
        if self.dashboard is not None:
            await self.dashboard.stop()
        if self.grpc is not None:
            await self.grpc.stop(grace)
        if hasattr(self, "ingest"):
            await self.ingest.drain()
        if self.validation is not None:
            self.validation.stop()
        if self.files is not None:
            self.files.stop()
        if hasattr(self, "archive"):
            await self.archive.close()
        await self.reader.close()
        if hasattr(self, "store"):
            await self.db(self.store.close)
        self.storage.shutdown(wait=True)
        if self.checker is not None:
            self.checker.close()
        log.info("coordinator stopped")
