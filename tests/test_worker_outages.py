"""A kgrpc-worker whose coordinator or inference server goes away: down at the start, an
inference server restarted mid-game, a coordinator that forgot the worker; the games wait and
go on, none dropped. A real coordinator and inference server, real ONNX models (tiny)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest

from inference.models import ModelRegistry
from inference.server import InferenceServer
from kgrpc.coordinator.testing import create_tokens, start_coordinator
from kgrpc.worker.daemon import Worker
from kgrpc.worker.runner import AsyncioGameRunner
from tests.worker_helpers import (
    COORD,
    M1,
    RUNNER,
    coordinator_with,
    free_port,
    start_holding_worker,
    start_worker,
    stats,
    until,
    worker_config,
)
from trainer.publish import publish_model


@pytest.mark.slow
async def test_coordinator_down_at_start_then_up(tmp_path: Path, worker_models: dict) -> None:
    port = free_port()
    coord_dir = tmp_path / "c"
    worker_token, trainer_token = create_tokens(coord_dir / "coordinator")
    address = f"127.0.0.1:{port}"
    cfg = worker_config(address, worker_token, tmp_path / "w", games=3)
    worker = Worker(cfg)
    run = asyncio.ensure_future(worker.run(install_signals=False))
    await asyncio.sleep(1.0)
    assert not run.done() and worker.coord_outage.down
    coord = await start_coordinator(coord_dir, listen=address, **COORD)
    try:
        for _ in range(100):  # the process shares the worker's subchannel, still in backoff
            try:
                await publish_model(address, trainer_token, worker_models[M1])
                break
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAVAILABLE
                await asyncio.sleep(0.1)
        assert await asyncio.wait_for(run, 120) == 0
        s = await stats(address, worker_token)
        assert s.games_received == 3 and s.games_accepted == 3 and s.games_duplicate == 0
        assert not worker.coord_outage.down
    finally:
        await coord.stop()


@pytest.mark.slow
async def test_inference_restart_mid_game_pauses_games_instead_of_dropping_them(
    tmp_path: Path, worker_models: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()

    async def inference_server() -> InferenceServer:
        registry = ModelRegistry(device="cpu", max_batch=16)
        await registry.load(str(worker_models[M1]), pinned=True)
        server = InferenceServer(registry)
        await server.start(f"127.0.0.1:{port}")
        return server

    failed: list[BaseException] = []
    real_play = RUNNER.play

    async def play(self: AsyncioGameRunner, job: Any) -> Any:
        try:
            return await real_play(self, job)
        except Exception as exc:
            failed.append(exc)
            raise

    monkeypatch.setattr(RUNNER, "play", play)
    async with coordinator_with(tmp_path, worker_models[M1]) as coord:
        server = await inference_server()
        try:
            cfg = worker_config(
                coord.address,
                coord.worker_token,
                tmp_path / "w",
                inference=f"127.0.0.1:{port}",
                parallel_games=2,
                games=4,
                retry_cap_s=0.2,
            )
            worker, run = start_worker(cfg)
            await until(lambda: worker.counters.search.nn_evals >= 20, run, 0.01)
            await server.stop(0)  # games in progress; down longer than the client's own retries
            await asyncio.sleep(4.5)
            assert not run.done() and worker.infer_outage.down
            server = await inference_server()
            assert await asyncio.wait_for(run, 60) == 0
            assert failed == [] and worker.counters.games_uploaded == 4
            assert not worker.infer_outage.down
        finally:
            await server.stop(0)


async def test_worker_forgotten_by_the_coordinator_registers_again(
    tmp_path: Path, worker_models: dict
) -> None:
    from kgrpc.coordinator import db

    async with coordinator_with(tmp_path, worker_models[M1]) as coord:  # heartbeats every second
        # No uploads meanwhile: the point is the heartbeat noticing the forgotten worker.
        worker, run = await start_holding_worker(coord, tmp_path / "w", username="ann")
        conn = db.connect(coord.data_dir)
        try:
            conn.execute("DELETE FROM workers")  # e.g. the database restored from a backup
            conn.commit()
            for _ in range(100):
                rows = conn.execute("SELECT worker_id, username FROM workers").fetchall()
                if rows:
                    break
                await asyncio.sleep(0.05)
        finally:
            conn.close()
        worker_id = worker.source.worker_id
        assert [(r["worker_id"], r["username"]) for r in rows] == [(worker_id, "ann")]
        assert (worker.cfg.work_dir / "worker_id").read_text() == worker_id
        worker.request_stop()
        assert await asyncio.wait_for(run, 60) == 0
