"""kgrpc-worker end to end, playing: self-play games (each runner) and a gating match reach a
real coordinator and pass its replay check; real ONNX models (tiny), real gRPC, real files."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kgrpc import native
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from kgrpc.worker.daemon import Worker
from kgrpc.worker.runner import AsyncioGameRunner, NativeGameRunner
from kgrpc.worker.spool import Spool
from tests.worker_helpers import (
    GATING,
    M1,
    M2,
    RUNNERS,
    coordinator_with,
    stats,
    worker_config,
)
from trainer.publish import publish_model


@pytest.mark.slow
@pytest.mark.parametrize("runner", RUNNERS)
async def test_worker_local_inference_games_accepted(
    tmp_path: Path, worker_models: dict, runner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if runner == "python":
        monkeypatch.setattr(native, "ENABLED", False)  # what KGRPC_NATIVE=0 gives the worker
    async with coordinator_with(tmp_path, worker_models[M1]) as coord:
        cfg = worker_config(coord.address, coord.worker_token, tmp_path / "w", games=6)
        worker = Worker(cfg)
        expected = NativeGameRunner if runner == "native" else AsyncioGameRunner
        assert type(worker.runner) is expected
        assert await asyncio.wait_for(worker.run(install_signals=False), 120) == 0
        # Every game (native ones included) passed the coordinator's full replay check.
        s = await stats(coord.address, coord.worker_token)
        assert s.games_accepted == 6 and s.games_rejected == 0 and s.games_duplicate == 0
        assert worker.counters.games_uploaded == 6
        if runner == "native":
            assert isinstance(worker.runner, NativeGameRunner)
            assert worker.runner.cache_model == M1 and len(worker.runner.cache) > 0
            # One request per step for all games in the set, not one per game's batch.
            search = worker.counters.search
            assert 0 < search.nn_requests < search.nn_evals
        assert Spool(cfg.spool_path).count() == 0
        assert (cfg.model_path / f"{M1}.onnx").read_bytes() == worker_models[M1].read_bytes()
        assert worker.counters.search.nn_evals > 0 and worker.counters.current_model == M1
        assert cfg.log_path.parent.exists()


@pytest.mark.parametrize("runner", RUNNERS)
async def test_games_draw_their_komi_from_the_tasks_range(
    tmp_path: Path, worker_models: dict, runner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if runner == "python":
        monkeypatch.setattr(native, "ENABLED", False)
    async with coordinator_with(tmp_path, worker_models[M1], komi_range="5.5:7.5:1") as coord:
        cfg = worker_config(coord.address, coord.worker_token, tmp_path / "w", games=8)
        assert await asyncio.wait_for(Worker(cfg).run(install_signals=False), 120) == 0
        s = await stats(coord.address, coord.worker_token)
        assert s.games_accepted == 8 and s.games_rejected == 0
        from kgrpc.net import make_channel

        await coord.app.archive.drain()  # every accepted game is kept as SGF, with its komi
        async with make_channel(coord.address, token=coord.worker_token) as ch:
            kept = await coordinator_pb2_grpc.CoordinatorStub(ch).ListGames(
                coordinator_pb2.ListGamesRequest()
            )
        komi = [g.komi for g in kept.games]
        assert len(komi) == 8 and set(komi) <= {5.5, 6.5, 7.5}
        assert len(set(komi)) > 1, komi  # drawn per game (seeded: the same draws every run)


async def test_gating_task_plays_both_models_and_reports(
    tmp_path: Path, worker_models: dict
) -> None:
    async with coordinator_with(tmp_path, worker_models[M1], **GATING) as coord:
        resp = await publish_model(coord.address, coord.trainer_token, worker_models[M2])
        assert resp.gating_scheduled
        cfg = worker_config(
            coord.address, coord.worker_token, tmp_path / "w", games=2, parallel_games=2
        )
        worker = Worker(cfg)
        assert await asyncio.wait_for(worker.run(install_signals=False), 120) == 0
        assert worker.counters.match_games == 2
        s = await stats(coord.address, coord.worker_token)
        (match,) = [m for m in s.matches if m.candidate_model == M2]
        assert match.reference_model == M1
        assert match.wins + match.losses + match.draws == 2
        assert match.decision in ("released", "rejected")
        assert set(worker.reporter.decisions.values()) <= {"pending", "released", "rejected"}
        assert {p.stem for p in cfg.model_path.glob("*.onnx")} == {M1, M2}
