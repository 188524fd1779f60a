"""Helpers to run a real coordinator in-process (tests, benchmarks, demos).

::

    coord = await start_coordinator(tmp_path, positions_per_shard=500)
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        resp = await stub.UploadGames(upload_requests([make_random_game(seed=1)]))
    await coord.stop()

:func:`start_coordinator` starts a coordinator on ``127.0.0.1:0`` in the running
event loop, with its data directory under ``tmp_path`` and one worker and one trainer
token already created. Validation runs in an in-process thread by default
(``validate_workers=-1``) so that tests start in milliseconds; pass
``validate_workers=1`` (or more) for the real spawn process pool. Any other
:class:`~kgrpc.coordinator.config.Config` field can be overridden by keyword.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import zstandard

from kgrpc.coordinator import auth, db
from kgrpc.coordinator.config import config_from
from kgrpc.coordinator.server import CoordinatorApp
from kgrpc.net import make_channel
from kgrpc.v1 import coordinator_pb2, records_pb2


def create_tokens(data_dir: str | Path) -> tuple[str, str]:
    """Create one worker and one trainer token in ``data_dir``'s database."""
    conn = db.connect(data_dir)
    try:
        worker, _ = auth.create_token(conn, "worker", "test worker")
        trainer, _ = auth.create_token(conn, "trainer", "test trainer")
    finally:
        conn.close()
    return worker, trainer


def upload_request(
    games: Iterable[records_pb2.GameRecord], level: int = 3
) -> coordinator_pb2.UploadGamesRequest:
    """One UploadGamesRequest carrying ``games`` (zstd of a GameBatch)."""
    batch = records_pb2.GameBatch(games=list(games))
    data = zstandard.ZstdCompressor(level=level).compress(batch.SerializeToString())
    return coordinator_pb2.UploadGamesRequest(games_zstd=data, game_count=len(batch.games))


def upload_requests(
    games: list[records_pb2.GameRecord], per_message: int = 16
) -> list[coordinator_pb2.UploadGamesRequest]:
    """Requests for one UploadGames stream, ``per_message`` games each."""
    return [upload_request(games[i : i + per_message]) for i in range(0, len(games), per_message)]


@dataclass
class RunningCoordinator:
    address: str
    worker_token: str
    trainer_token: str
    data_dir: Path
    app: CoordinatorApp
    tls_ca: bytes | None = None

    def channel(self, role: str | None = "worker", **kwargs: Any) -> grpc.aio.Channel:
        """A channel with the worker (default) or trainer token, or none (``role=None``)."""
        token = {"worker": self.worker_token, "trainer": self.trainer_token, None: None}[role]
        if self.tls_ca is not None:
            kwargs.setdefault("tls_ca", self.tls_ca)
            kwargs.setdefault("server_name", "localhost")
        return make_channel(self.address, token=token, **kwargs)

    async def stop(self, grace: float = 1.0) -> None:
        await self.app.stop(grace)


async def start_coordinator(tmp_path: str | Path, **config_overrides: Any) -> RunningCoordinator:
    """Start a coordinator in this event loop; ``await coord.stop()`` when done."""
    data_dir = Path(tmp_path) / "coordinator"
    overrides: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "data_dir": str(data_dir),
        "validate_workers": -1,
        "shutdown_grace_s": 1.0,
    }
    overrides.update(config_overrides)
    cfg = config_from(None, overrides)
    worker, trainer = create_tokens(cfg.data_dir)
    app = CoordinatorApp(cfg)
    await app.start()
    ca = Path(cfg.tls_cert).read_bytes() if cfg.tls_cert else None
    return RunningCoordinator(app.address, worker, trainer, Path(cfg.data_dir), app, ca)
