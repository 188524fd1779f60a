"""How a kgrpc-worker stops: SIGKILL and a restart re-send exactly what was not acknowledged,
SIGTERM finishes the games and uploads them, a revoked token ends the run (status 2), a stop
gives up on what an absent coordinator cannot take, and a second stop request quits at once.
The worker as a process (``python -m kgrpc.worker``) and in process; a real coordinator."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

import kgrpc.worker
from kgrpc import native
from kgrpc.v1 import coordinator_pb2
from kgrpc.worker.daemon import Worker
from kgrpc.worker.spool import Spool
from tests.worker_helpers import (
    M1,
    M2,
    coordinator_with,
    free_port,
    spawn_worker,
    start_holding_worker,
    start_worker,
    stats,
    until,
    worker_config,
)


@pytest.mark.slow
async def test_sigkill_then_restart_resends_exactly_the_unacknowledged(
    tmp_path: Path, worker_models: dict
) -> None:
    work = tmp_path / "w"
    async with coordinator_with(tmp_path, worker_models[M1]) as coord:
        # Run 1: two games, uploaded and acknowledged.
        p = await spawn_worker(coord, work, "--games", "2")
        _, err = await asyncio.wait_for(p.communicate(), 120)
        assert p.returncode == 0, err.decode()[-2000:]
        assert native.describe() in err.decode()  # the log says which engine plays
        # Run 2: never uploads on its own (huge batch and interval); killed with games spooled.
        toml = tmp_path / "worker.toml"
        toml.write_text("games_per_batch = 1000\nupload_interval_s = 1000.0\n")
        p = await spawn_worker(coord, work, "--config", str(toml))
        spool = Spool(work / "spool")
        await until(lambda: spool.count() >= 3, p)
        p.send_signal(signal.SIGKILL)
        await p.wait()
        unacked = set(spool.pending_ids())
        assert len(unacked) >= 3
        before = await stats(coord.address, coord.worker_token)
        assert before.games_accepted == 2
        # Run 3: re-sends the spool and plays one more game.
        p = await spawn_worker(coord, work, "--games", "1", "--games-per-batch", "2")
        _, err = await asyncio.wait_for(p.communicate(), 120)
        assert p.returncode == 0, err.decode()[-2000:]
        after = await stats(coord.address, coord.worker_token)
        assert after.games_duplicate == 0 and after.games_rejected == 0
        assert after.games_accepted == 2 + len(unacked) + 1
        assert spool.count() == 0


@pytest.mark.slow
async def test_sigterm_finishes_games_uploads_and_exits(
    tmp_path: Path, worker_models: dict
) -> None:
    work = tmp_path / "w"
    async with coordinator_with(tmp_path, worker_models[M1]) as coord:
        p = await spawn_worker(coord, work, "--games-per-batch", "1000")
        spool = Spool(work / "spool")
        await until(lambda: spool.count() >= 1, p)
        p.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(p.communicate(), 120)
        assert p.returncode == 0, err.decode()[-2000:]
        assert spool.count() == 0  # everything finished was uploaded before exiting
        s = await stats(coord.address, coord.worker_token)
        assert s.games_accepted >= 1 and s.games_rejected == 0
        log = (work / "worker.log").read_text()
        assert "stopping: finishing" in log and "uploaded" in log


async def test_token_revoked_mid_run_stops_the_worker_with_status_2(
    tmp_path: Path, worker_models: dict
) -> None:
    from kgrpc.coordinator import auth, db

    async with coordinator_with(tmp_path, worker_models[M1]) as coord:
        cfg = worker_config(coord.address, coord.worker_token, tmp_path / "w", games_per_batch=1)
        worker, run = start_worker(cfg)
        await until(lambda: worker.counters.games_uploaded >= 1, run)
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


async def test_stop_with_the_coordinator_away_gives_up_on_match_reports(tmp_path: Path) -> None:
    from kgrpc.mcts.config import SelfPlayConfig
    from kgrpc.worker.source import Job

    cfg = worker_config(f"127.0.0.1:{free_port()}", "t", tmp_path / "w")
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
    tmp_path: Path, worker_models: dict
) -> None:
    async with coordinator_with(tmp_path, worker_models[M1]) as coord:
        worker, run = await start_holding_worker(coord, tmp_path / "w")
        await until(lambda: worker.counters.games_finished >= 2, run, 0.02)
        worker.request_stop()
        worker.request_stop()
        assert await asyncio.wait_for(run, 5) == 130
        finished = worker.counters.games_finished
        await asyncio.sleep(0.2)  # a spool write caught by the cancel completes in its thread
        spool = Spool(worker.cfg.spool_path)
        assert spool.count() + worker.counters.games_uploaded >= finished
        for gid in spool.pending_ids():
            assert spool.load(gid).game_id == gid  # whole games only
        assert len(worker.tasks) == 0, worker.tasks.names()  # nothing it started runs on
        code_dir = str(Path(kgrpc.worker.__file__).parent)
        codes = [getattr(t.get_coro(), "cr_code", None) for t in asyncio.all_tasks()]
        left = [c for c in codes if c is not None and c.co_filename.startswith(code_dir)]
        assert not left, left  # no game slot, upload or report of the worker's code either
