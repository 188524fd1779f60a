"""The worker's spool against damaged or foreign files: nothing crash-loops, nothing blocks
the upload queue, every finished game still gets through."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kgrpc.coordinator.testing import start_coordinator
from kgrpc.randgame import make_random_game
from kgrpc.worker.daemon import Worker
from kgrpc.worker.spool import Spool
from kgrpc.worker.uploader import Uploader
from tests.worker_helpers import COORD, M1, worker_config, write_models
from trainer.publish import publish_model


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_models(tmp_path_factory.mktemp("models"), (M1,))[M1]


async def test_damaged_and_mismatched_spool_files_are_quarantined(
    tmp_path: Path, model: Path
) -> None:
    coord = await start_coordinator(tmp_path, **COORD)
    try:
        await publish_model(coord.address, coord.trainer_token, model)
        cfg = worker_config(coord.address, coord.worker_token, tmp_path / "w", games=1)
        spool = Spool(cfg.spool_path)
        (spool.dir / "empty-file.game").write_bytes(b"")  # parses as a record without an id
        (spool.dir / "garbage.game").write_bytes(b"\xff\xfe not a protobuf \x00\x01")
        foreign = make_random_game(5, seed=3, game_id="the-real-id", max_moves=10)
        (spool.dir / "renamed.game").write_bytes(foreign.SerializeToString())
        (spool.dir / ".half.game.abc.tmp").write_bytes(b"\x0a")  # a crash mid-write
        (spool.dir / "copied by hand.game").write_bytes(foreign.SerializeToString())
        worker = Worker(cfg)
        assert await asyncio.wait_for(worker.run(install_signals=False), 60) == 0
        assert spool.pending_ids() == []
        assert set(spool.rejected_ids()) == {"empty-file", "garbage", "renamed", "copied by hand"}
        assert not list(spool.dir.glob("*.tmp"))
        for gid in ("empty-file", "garbage", "renamed"):
            assert (
                (spool.rejected_dir / f"{gid}.reason.txt").read_text().startswith("corrupt_spool")
            )
        assert worker.counters.games_uploaded == 1
    finally:
        await coord.stop()


async def test_an_unexpected_upload_error_does_not_end_the_uploads(
    tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    coord = await start_coordinator(tmp_path, **COORD)
    try:
        await publish_model(coord.address, coord.trainer_token, model)
        cfg = worker_config(coord.address, coord.worker_token, tmp_path / "w", games=2)
        worker = Worker(cfg)
        real = Uploader._apply_acks
        failures = []

        def flaky(self, *args):  # type: ignore[no-untyped-def]
            if not failures:
                failures.append(1)
                raise OSError("disk hiccup while deleting acknowledged games")
            return real(self, *args)

        monkeypatch.setattr(Uploader, "_apply_acks", flaky)
        assert await asyncio.wait_for(worker.run(install_signals=False), 60) == 0
        assert failures and Spool(cfg.spool_path).count() == 0
        assert worker.counters.games_uploaded == 2  # the re-sent games came back DUPLICATE
    finally:
        await coord.stop()
