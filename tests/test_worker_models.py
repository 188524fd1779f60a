"""The models a kgrpc-worker plays with: a release mid-run (local and remote inference), the
old model unloaded once its games end, a model the inference server lacks, a file that fails
to load, and the on-disk cache across runs; a real coordinator, real ONNX models (tiny)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from inference.models import ModelRegistry
from inference.server import InferenceServer
from kgrpc.schema import NUM_GLOBALS, NUM_PLANES
from kgrpc.v1 import coordinator_pb2_grpc
from kgrpc.worker.daemon import Worker
from kgrpc.worker.runner import AsyncioGameRunner
from tests.worker_helpers import (
    GATING,
    M1,
    M2,
    RUNNER,
    coordinator_with,
    start_worker,
    stats,
    until,
    worker_config,
)
from trainer.publish import publish_model


async def test_remote_inference_and_model_release_mid_run(
    tmp_path: Path, worker_models: dict
) -> None:
    registry = ModelRegistry(device="cpu", max_batch=16)
    for path in worker_models.values():
        await registry.load(str(path), make_default=False, pinned=True)
    server = InferenceServer(registry)
    port = await server.start("127.0.0.1:0")
    try:
        async with coordinator_with(tmp_path, worker_models[M1], selfplay_task_games=2) as coord:
            cfg = worker_config(
                coord.address,
                coord.worker_token,
                tmp_path / "w",
                inference=f"127.0.0.1:{port}",
                parallel_games=2,
                games=8,
            )
            worker, run = start_worker(cfg)
            await until(lambda: worker.counters.games_finished >= 2, run)
            # Released at once (no gating).
            await publish_model(coord.address, coord.trainer_token, worker_models[M2])
            assert await asyncio.wait_for(run, 120) == 0
            s = await stats(coord.address, coord.worker_token)
            assert s.games_accepted == 8 and s.games_rejected == 0
            # Later games were played with the new model, named in the inference requests.
            assert set(worker.counters.games_by_model) == {M1, M2}
            assert registry.metrics.batches > 0
            assert worker.counters.current_model == M2
            assert not cfg.model_path.exists() or not list(cfg.model_path.glob("*.onnx"))
    finally:
        await server.stop(0.5)


async def test_local_model_unloaded_after_a_release_once_its_games_end(
    tmp_path: Path, worker_models: dict
) -> None:
    async with coordinator_with(tmp_path, worker_models[M1], selfplay_task_games=2) as coord:
        cfg = worker_config(coord.address, coord.worker_token, tmp_path / "w", parallel_games=2)
        worker, run = start_worker(cfg)
        await until(lambda: worker.counters.games_finished >= 2, run)
        # Released at once (no gating).
        await publish_model(coord.address, coord.trainer_token, worker_models[M2])
        registry = worker.models.evaluators.local.registry  # type: ignore[union-attr]
        for _ in range(600):  # the games still playing M1 finish, then M1 goes
            if worker.counters.games_by_model.get(M2, 0) >= 1 and M1 not in registry.models:
                break
            await asyncio.sleep(0.05)
        assert M1 not in registry.models and M2 in registry.models
        worker.request_stop()
        assert await asyncio.wait_for(run, 60) == 0
        assert set(worker.counters.games_by_model) == {M1, M2}


async def test_match_with_a_model_the_inference_server_lacks_is_abandoned(
    tmp_path: Path, worker_models: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = ModelRegistry(device="cpu", max_batch=16)
    await registry.load(str(worker_models[M1]), pinned=True)  # no M2, and no way to fetch it
    server = InferenceServer(registry)
    port = await server.start("127.0.0.1:0")
    failures: list[str] = []
    real_play = RUNNER.play

    async def play(self: AsyncioGameRunner, job: Any) -> Any:
        try:
            return await real_play(self, job)
        except Exception:
            failures.append(job.task.WhichOneof("kind"))
            raise

    monkeypatch.setattr(RUNNER, "play", play)
    try:
        async with coordinator_with(tmp_path, worker_models[M1], **GATING) as coord:
            assert (
                await publish_model(coord.address, coord.trainer_token, worker_models[M2])
            ).gating_scheduled
            cfg = worker_config(
                coord.address,
                coord.worker_token,
                tmp_path / "w",
                games=2,
                parallel_games=1,
                inference=f"127.0.0.1:{port}",
            )
            worker = Worker(cfg)
            assert await asyncio.wait_for(worker.run(install_signals=False), 60) == 0
            # One failed game, not one per game of the match; then self-play with M1.
            assert failures == ["match"]
            assert worker.counters.games_by_model == {M1: 2}
            assert not worker.infer_outage.down and not worker.coord_outage.down
    finally:
        await server.stop(0)


async def test_release_keeps_the_default_model_until_a_kept_one_is_loaded(
    tmp_path: Path, worker_models: dict
) -> None:
    from inference.local import LocalEvaluator
    from kgrpc.worker.evaluators import Evaluators
    from kgrpc.worker.models import ModelCache

    cfg = worker_config("127.0.0.1:1", "t", tmp_path / "w")
    ev = Evaluators(cfg, ModelCache(tmp_path / "models"))
    ev.local = LocalEvaluator(str(worker_models[M1]), device="cpu")
    await ev.local.start()
    ev._local_names[M1] = M1
    registry = ev.local.registry
    try:
        ev.release({M2})  # M2 released but not loaded yet: M1 is all there is
        assert M1 in registry.models
        loaded = await registry.load(str(worker_models[M2]), make_default=False, pinned=True)
        ev._local_names[M2] = loaded.name
        ev.release({M2})  # now M1 goes
        for _ in range(100):
            if M1 not in registry.models:
                break
            await asyncio.sleep(0.02)
        assert M1 not in registry.models and registry.default == M2
        assert ev.get(M2) == (ev.local, M2)
    finally:
        await ev.close()


async def test_a_first_model_that_fails_to_load_does_not_break_later_ones(
    tmp_path: Path, worker_models: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np

    from kgrpc.evaluator import EvaluationError
    from kgrpc.worker.evaluators import Evaluators
    from kgrpc.worker.models import ModelCache, PrecisionAbsent

    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not an onnx file")  # or one this ONNX Runtime cannot run
    cfg = worker_config("127.0.0.1:1", "t", tmp_path / "w")
    cache = ModelCache(tmp_path / "models")

    async def ensure(stub: Any, name: str, sha256: str = "", *, precision: str = "fp32") -> Path:
        if precision != "fp32":  # these models have their fp32 file only
            raise PrecisionAbsent(f"model {name} has no {precision} file")
        return bad if name == "kg-bad" else worker_models[name]

    monkeypatch.setattr(cache, "ensure", ensure)
    ev = Evaluators(cfg, cache)
    try:
        with pytest.raises(Exception):  # noqa: B017 - whatever ONNX Runtime raises
            await ev.prepare(None, "kg-bad")  # type: ignore[arg-type]
        await ev.prepare(None, M1)  # type: ignore[arg-type]
        evaluator, arg = ev.get(M1)
        planes = np.zeros((1, NUM_PLANES, 5, 5), bool)
        planes[:, 0] = True
        try:
            r = await evaluator.evaluate(planes, np.zeros((1, NUM_GLOBALS), np.float32), model=arg)
        except EvaluationError as exc:  # not expected; makes a failure readable
            pytest.fail(str(exc))
        assert r.model == M1 and r.policy.shape == (1, 26)
    finally:
        await ev.close()


async def test_model_cached_by_an_earlier_run_is_not_downloaded_again(
    tmp_path: Path, worker_models: dict
) -> None:
    from kgrpc.net import make_channel
    from kgrpc.worker.models import ModelCache

    async with (
        coordinator_with(tmp_path, worker_models[M1]) as coord,
        make_channel(coord.address, token=coord.worker_token) as ch,
    ):
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        first = ModelCache(tmp_path / "models")
        path = await first.ensure(stub, M1)
        assert first.downloads == 1
        again = ModelCache(tmp_path / "models")  # the next start of the worker
        assert await again.ensure(stub, M1) == path and again.downloads == 0
        assert again.has(M1)
        path.write_bytes(path.read_bytes()[:-1] + b"\0")  # damaged on disk meanwhile
        third = ModelCache(tmp_path / "models")
        await third.ensure(stub, M1)
        assert third.downloads == 1 and path.read_bytes() == worker_models[M1].read_bytes()
