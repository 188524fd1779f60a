"""kgrpc-worker end to end: a real coordinator, real ONNX models (tiny), real gRPC, real files.

Boards are 5x5 with 8 visits and a 25-move cap so a game takes a fraction of a second.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest

import kgrpc.worker
from inference.models import ModelRegistry
from inference.server import InferenceServer
from kgrpc import native
from kgrpc.coordinator.testing import RunningCoordinator, create_tokens, start_coordinator
from kgrpc.schema import NUM_GLOBALS, NUM_PLANES
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from kgrpc.worker.config import WorkerConfig, build_config
from kgrpc.worker.daemon import Worker
from kgrpc.worker.runner import AsyncioGameRunner, NativeGameRunner
from kgrpc.worker.spool import Spool
from trainer.export import init_model
from trainer.publish import publish_model

COORD = dict(
    curriculum="0:5:8",
    min_moves=2,
    cheap_visits=4,
    max_moves_per_point=1.0,
    games_per_batch=2,
    selfplay_task_games=4,
    heartbeat_interval_s=1,
    retry_after_s=1,
    gating_enabled=False,
)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("models")
    out = {}
    for i, name in enumerate(["kg-b1c8-s0-d0", "kg-b1c8-s100-d1000"]):
        path = d / f"{name}.onnx"
        init_model(5, blocks=1, channels=8, out=path, name=name, seed=i)
        out[name] = path
    return out


M1, M2 = "kg-b1c8-s0-d0", "kg-b1c8-s100-d1000"
# The runner a Worker builds here (the native one whenever the native core is in use).
RUNNER = NativeGameRunner if native.ENABLED else AsyncioGameRunner
RUNNERS = [
    "python",
    pytest.param(
        "native",
        marks=pytest.mark.skipif(
            not native.ENABLED, reason=f"native runner needs the native core: {native.describe()}"
        ),
    ),
]


def worker_config(coord_address: str, token: str, work: Path, **kw: Any) -> WorkerConfig:
    base: dict[str, Any] = dict(
        coordinator=coord_address,
        token=token,
        work_dir=work,
        inference="local",
        parallel_games=3,
        quiet=True,
        status_interval_s=0.5,
        retry_base_s=0.05,
        retry_cap_s=0.5,
        max_batch=16,
        seed=1,
    )
    base.update(kw)
    return WorkerConfig(**base)


async def stats(coord_address: str, token: str) -> coordinator_pb2.Stats:
    from kgrpc.net import make_channel

    async with make_channel(coord_address, token=token) as ch:
        return await coordinator_pb2_grpc.CoordinatorStub(ch).GetStats(
            coordinator_pb2.GetStatsRequest(), timeout=10
        )


@pytest.mark.slow
@pytest.mark.parametrize("runner", RUNNERS)
async def test_worker_local_inference_games_accepted(
    tmp_path: Path, models: dict, runner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if runner == "python":
        monkeypatch.setattr(native, "ENABLED", False)  # what KGRPC_NATIVE=0 gives the worker
    coord = await start_coordinator(tmp_path, **COORD)
    try:
        await publish_model(coord.address, coord.trainer_token, models[M1])
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
        assert (cfg.model_path / f"{M1}.onnx").read_bytes() == models[M1].read_bytes()
        assert worker.counters.search.nn_evals > 0 and worker.counters.current_model == M1
        assert cfg.log_path.parent.exists()
    finally:
        await coord.stop()


@pytest.mark.parametrize("runner", RUNNERS)
async def test_games_draw_their_komi_from_the_tasks_range(
    tmp_path: Path, models: dict, runner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if runner == "python":
        monkeypatch.setattr(native, "ENABLED", False)
    coord = await start_coordinator(tmp_path, **{**COORD, "komi_range": "5.5:7.5:1"})
    try:
        await publish_model(coord.address, coord.trainer_token, models[M1])
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
    finally:
        await coord.stop()


async def test_remote_inference_and_model_release_mid_run(tmp_path: Path, models: dict) -> None:
    coord = await start_coordinator(tmp_path, **{**COORD, "selfplay_task_games": 2})
    registry = ModelRegistry(device="cpu", max_batch=16)
    for path in models.values():
        await registry.load(str(path), make_default=False, pinned=True)
    server = InferenceServer(registry)
    port = await server.start("127.0.0.1:0")
    try:
        await publish_model(coord.address, coord.trainer_token, models[M1])
        cfg = worker_config(
            coord.address,
            coord.worker_token,
            tmp_path / "w",
            inference=f"127.0.0.1:{port}",
            parallel_games=2,
            games=8,
        )
        worker = Worker(cfg)
        run = asyncio.ensure_future(worker.run(install_signals=False))
        while worker.counters.games_finished < 2:
            await asyncio.sleep(0.05)
        await publish_model(coord.address, coord.trainer_token, models[M2])  # released at once
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
        await coord.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
async def test_coordinator_down_at_start_then_up(tmp_path: Path, models: dict) -> None:
    port = _free_port()
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
                await publish_model(address, trainer_token, models[M1])
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


async def _spawn_worker(
    coord: RunningCoordinator, work: Path, *extra: str
) -> asyncio.subprocess.Process:
    env = {**os.environ, "KGRPC_TOKEN": coord.worker_token, "GRPC_VERBOSITY": "ERROR"}
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kgrpc.worker",
        "--coordinator",
        coord.address,
        "--work-dir",
        str(work),
        "--parallel-games",
        "3",
        "--quiet",
        "--seed",
        "5",
        *extra,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )


@pytest.mark.slow
async def test_sigkill_then_restart_resends_exactly_the_unacknowledged(
    tmp_path: Path, models: dict
) -> None:
    coord = await start_coordinator(tmp_path, **COORD)
    work = tmp_path / "w"
    try:
        await publish_model(coord.address, coord.trainer_token, models[M1])
        # Run 1: two games, uploaded and acknowledged.
        p = await _spawn_worker(coord, work, "--games", "2")
        _, err = await asyncio.wait_for(p.communicate(), 120)
        assert p.returncode == 0, err.decode()[-2000:]
        assert native.describe() in err.decode()  # the log says which engine plays
        # Run 2: never uploads on its own (huge batch and interval); killed with games spooled.
        toml = tmp_path / "worker.toml"
        toml.write_text("games_per_batch = 1000\nupload_interval_s = 1000.0\n")
        p = await _spawn_worker(coord, work, "--config", str(toml))
        spool = Spool(work / "spool")
        while spool.count() < 3:
            assert p.returncode is None
            await asyncio.sleep(0.05)
        p.send_signal(signal.SIGKILL)
        await p.wait()
        unacked = set(spool.pending_ids())
        assert len(unacked) >= 3
        before = await stats(coord.address, coord.worker_token)
        assert before.games_accepted == 2
        # Run 3: re-sends the spool and plays one more game.
        p = await _spawn_worker(coord, work, "--games", "1", "--games-per-batch", "2")
        _, err = await asyncio.wait_for(p.communicate(), 120)
        assert p.returncode == 0, err.decode()[-2000:]
        after = await stats(coord.address, coord.worker_token)
        assert after.games_duplicate == 0 and after.games_rejected == 0
        assert after.games_accepted == 2 + len(unacked) + 1
        assert spool.count() == 0
    finally:
        await coord.stop()


async def test_gating_task_plays_both_models_and_reports(tmp_path: Path, models: dict) -> None:
    coord = await start_coordinator(
        tmp_path, **{**COORD, "gating_enabled": True, "gating_games": 2, "match_chunk_games": 2}
    )
    try:
        await publish_model(coord.address, coord.trainer_token, models[M1])
        resp = await publish_model(coord.address, coord.trainer_token, models[M2])
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
    finally:
        await coord.stop()


def test_config_toml_and_cli_precedence(tmp_path: Path) -> None:
    toml = tmp_path / "w.toml"
    toml.write_text(
        'coordinator = "h:1"\ntoken = "t"\nparallel-games = 7\n'
        'inference = "a:1,b:2"\n[worker]\nusername = "ann"\n'
    )
    cfg = build_config(toml, parallel_games=9, games=None)
    assert (cfg.coordinator, cfg.username, cfg.parallel_games) == ("h:1", "ann", 9)
    assert cfg.inference_addresses == ["a:1", "b:2"]
    toml.write_text("bogus = 1\n")
    with pytest.raises(ValueError, match=r"w.toml: unknown keys \['bogus'\]"):
        build_config(toml)
    toml.write_text('parallel_games = "many"\n')
    with pytest.raises(ValueError, match="parallel_games must be an integer"):
        build_config(toml)


@pytest.mark.slow
async def test_sigterm_finishes_games_uploads_and_exits(tmp_path: Path, models: dict) -> None:
    coord = await start_coordinator(tmp_path, **COORD)
    work = tmp_path / "w"
    try:
        await publish_model(coord.address, coord.trainer_token, models[M1])
        p = await _spawn_worker(coord, work, "--games-per-batch", "1000")
        spool = Spool(work / "spool")
        while spool.count() < 1:
            assert p.returncode is None
            await asyncio.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(p.communicate(), 120)
        assert p.returncode == 0, err.decode()[-2000:]
        assert spool.count() == 0  # everything finished was uploaded before exiting
        s = await stats(coord.address, coord.worker_token)
        assert s.games_accepted >= 1 and s.games_rejected == 0
        log = (work / "worker.log").read_text()
        assert "stopping: finishing" in log and "uploaded" in log
    finally:
        await coord.stop()


async def test_local_model_unloaded_after_a_release_once_its_games_end(
    tmp_path: Path, models: dict
) -> None:
    coord = await start_coordinator(tmp_path, **{**COORD, "selfplay_task_games": 2})
    try:
        await publish_model(coord.address, coord.trainer_token, models[M1])
        cfg = worker_config(coord.address, coord.worker_token, tmp_path / "w", parallel_games=2)
        worker = Worker(cfg)
        run = asyncio.ensure_future(worker.run(install_signals=False))
        while worker.counters.games_finished < 2:
            assert not run.done()
            await asyncio.sleep(0.05)
        await publish_model(coord.address, coord.trainer_token, models[M2])  # released at once
        registry = worker.models.evaluators.local.registry  # type: ignore[union-attr]
        for _ in range(600):  # the games still playing M1 finish, then M1 goes
            if worker.counters.games_by_model.get(M2, 0) >= 1 and M1 not in registry.models:
                break
            await asyncio.sleep(0.05)
        assert M1 not in registry.models and M2 in registry.models
        worker.request_stop()
        assert await asyncio.wait_for(run, 60) == 0
        assert set(worker.counters.games_by_model) == {M1, M2}
    finally:
        await coord.stop()


@pytest.mark.slow
async def test_inference_restart_mid_game_pauses_games_instead_of_dropping_them(
    tmp_path: Path, models: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    coord = await start_coordinator(tmp_path, **COORD)
    port = _free_port()

    async def inference_server() -> InferenceServer:
        registry = ModelRegistry(device="cpu", max_batch=16)
        await registry.load(str(models[M1]), pinned=True)
        server = InferenceServer(registry)
        await server.start(f"127.0.0.1:{port}")
        return server

    server = await inference_server()
    failed: list[BaseException] = []
    real_play = RUNNER.play

    async def play(self: AsyncioGameRunner, job: Any) -> Any:
        try:
            return await real_play(self, job)
        except Exception as exc:
            failed.append(exc)
            raise

    monkeypatch.setattr(RUNNER, "play", play)
    try:
        await publish_model(coord.address, coord.trainer_token, models[M1])
        cfg = worker_config(
            coord.address,
            coord.worker_token,
            tmp_path / "w",
            inference=f"127.0.0.1:{port}",
            parallel_games=2,
            games=4,
            retry_cap_s=0.2,
        )
        worker = Worker(cfg)
        run = asyncio.ensure_future(worker.run(install_signals=False))
        while worker.counters.search.nn_evals < 20:
            assert not run.done()
            await asyncio.sleep(0.01)
        await server.stop(0)  # games in progress; down longer than the client's own retries
        await asyncio.sleep(4.5)
        assert not run.done() and worker.infer_outage.down
        server = await inference_server()
        assert await asyncio.wait_for(run, 60) == 0
        assert failed == [] and worker.counters.games_uploaded == 4
        assert not worker.infer_outage.down
    finally:
        await server.stop(0)
        await coord.stop()


async def test_token_revoked_mid_run_stops_the_worker_with_status_2(
    tmp_path: Path, models: dict
) -> None:
    from kgrpc.coordinator import auth, db

    coord = await start_coordinator(tmp_path, **COORD)
    try:
        await publish_model(coord.address, coord.trainer_token, models[M1])
        cfg = worker_config(coord.address, coord.worker_token, tmp_path / "w", games_per_batch=1)
        worker = Worker(cfg)
        run = asyncio.ensure_future(worker.run(install_signals=False))
        while worker.counters.games_uploaded < 1:
            assert not run.done()
            await asyncio.sleep(0.05)
        conn = db.connect(coord.data_dir)
        try:
            assert auth.revoke_token(conn, token=coord.worker_token)
            conn.commit()
        finally:
            conn.close()
        assert await asyncio.wait_for(run, 60) == 2  # logged, not a traceback
        games = worker.counters.games_finished
        await asyncio.sleep(0.5)
        assert worker.counters.games_finished == games  # nothing plays on after run()
    finally:
        await coord.stop()


async def test_stop_with_the_coordinator_away_gives_up_on_match_reports(tmp_path: Path) -> None:
    from kgrpc.mcts.config import SelfPlayConfig
    from kgrpc.worker.source import Job

    cfg = worker_config(f"127.0.0.1:{_free_port()}", "t", tmp_path / "w")
    worker = Worker(cfg)
    worker.stop.final_wait_s = 0.5
    worker.link.open()
    try:
        task = coordinator_pb2.Task(
            task_id="m",
            match=coordinator_pb2.MatchTask(candidate_model=M2, reference_model=M1, games=2),
        )
        worker.reporter.submit(
            Job(task, 0, SelfPlayConfig(), "w-1"), coordinator_pb2.MatchGame(game_id="g1")
        )
        worker.request_stop()
        drained = await asyncio.wait_for(  # before: waited for ever
            worker.reporter.drain(worker.stop.final_wait_over), 10
        )
        assert not drained and list(worker.reporter.pending) == ["g1"]
        assert worker.tasks.names() == ["worker:match-report:g1"]
    finally:
        await worker.tasks.cancel_all()
        await worker.link.close()
    assert worker.reporter.pending == {} and len(worker.tasks) == 0


async def test_second_stop_request_quits_at_once_keeping_finished_games(
    tmp_path: Path, models: dict
) -> None:
    coord = await start_coordinator(tmp_path, **COORD)
    try:
        await publish_model(coord.address, coord.trainer_token, models[M1])
        cfg = worker_config(
            coord.address,
            coord.worker_token,
            tmp_path / "w",
            games_per_batch=1000,
            upload_interval_s=1000.0,
        )
        worker = Worker(cfg)
        run = asyncio.ensure_future(worker.run(install_signals=False))
        while worker.counters.games_finished < 2:
            assert not run.done()
            await asyncio.sleep(0.02)
        worker.request_stop()
        worker.request_stop()
        assert await asyncio.wait_for(run, 5) == 130
        finished = worker.counters.games_finished
        await asyncio.sleep(0.2)  # a spool write caught by the cancel completes in its thread
        spool = Spool(cfg.spool_path)
        assert spool.count() + worker.counters.games_uploaded >= finished
        for gid in spool.pending_ids():
            assert spool.load(gid).game_id == gid  # whole games only
        assert len(worker.tasks) == 0, worker.tasks.names()  # nothing it started runs on
        code_dir = str(Path(kgrpc.worker.__file__).parent)
        codes = [getattr(t.get_coro(), "cr_code", None) for t in asyncio.all_tasks()]
        left = [c for c in codes if c is not None and c.co_filename.startswith(code_dir)]
        assert not left, left  # no game slot, upload or report of the worker's code either
    finally:
        await coord.stop()


async def test_worker_forgotten_by_the_coordinator_registers_again(
    tmp_path: Path, models: dict
) -> None:
    from kgrpc.coordinator import db

    coord = await start_coordinator(tmp_path, **COORD)  # heartbeats every second
    try:
        await publish_model(coord.address, coord.trainer_token, models[M1])
        # No uploads meanwhile: the point is the heartbeat noticing the forgotten worker.
        cfg = worker_config(
            coord.address,
            coord.worker_token,
            tmp_path / "w",
            username="ann",
            games_per_batch=1000,
            upload_interval_s=1000.0,
        )
        worker = Worker(cfg)
        run = asyncio.ensure_future(worker.run(install_signals=False))
        while not worker.source.worker_id:
            await asyncio.sleep(0.02)
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
        assert (cfg.work_dir / "worker_id").read_text() == worker_id
        worker.request_stop()
        assert await asyncio.wait_for(run, 60) == 0
    finally:
        await coord.stop()


async def test_match_with_a_model_the_inference_server_lacks_is_abandoned(
    tmp_path: Path, models: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    coord = await start_coordinator(
        tmp_path, **{**COORD, "gating_enabled": True, "gating_games": 2, "match_chunk_games": 2}
    )
    registry = ModelRegistry(device="cpu", max_batch=16)
    await registry.load(str(models[M1]), pinned=True)  # no M2, and no way to fetch it
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
        await publish_model(coord.address, coord.trainer_token, models[M1])
        assert (
            await publish_model(coord.address, coord.trainer_token, models[M2])
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
        await coord.stop()


async def test_release_keeps_the_default_model_until_a_kept_one_is_loaded(
    tmp_path: Path, models: dict
) -> None:
    from inference.local import LocalEvaluator
    from kgrpc.worker.evaluators import Evaluators
    from kgrpc.worker.models import ModelCache

    cfg = worker_config("127.0.0.1:1", "t", tmp_path / "w")
    ev = Evaluators(cfg, ModelCache(tmp_path / "models"))
    ev.local = LocalEvaluator(str(models[M1]), device="cpu")
    await ev.local.start()
    ev._local_names[M1] = M1
    registry = ev.local.registry
    try:
        ev.release({M2})  # M2 released but not loaded yet: M1 is all there is
        assert M1 in registry.models
        loaded = await registry.load(str(models[M2]), make_default=False, pinned=True)
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
    tmp_path: Path, models: dict, monkeypatch: pytest.MonkeyPatch
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
        return bad if name == "kg-bad" else models[name]

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
    tmp_path: Path, models: dict
) -> None:
    from kgrpc.net import make_channel
    from kgrpc.worker.models import ModelCache

    coord = await start_coordinator(tmp_path, **COORD)
    try:
        await publish_model(coord.address, coord.trainer_token, models[M1])
        async with make_channel(coord.address, token=coord.worker_token) as ch:
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
            assert third.downloads == 1 and path.read_bytes() == models[M1].read_bytes()
    finally:
        await coord.stop()
