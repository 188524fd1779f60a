"""What an upload's acknowledgement waits for, and what it does not (issue 26: a fleet's
UploadGames p99 over a second at steady state): games waiting for the validation pool share
its hand-offs (kgrpc.coordinator.validation_pool), and a shard cut's file work or a rebuild of
latest_games.npz runs in a process of its own (kgrpc.coordinator.file_work), never in the
pool an upload's replay waits for."""

from __future__ import annotations

import asyncio
import os
import threading

from kgrpc.coordinator import validate
from kgrpc.coordinator.file_work import NICE, FileWork
from kgrpc.coordinator.validation_pool import JOB_MOVES, FairQueue, ValidationPool, _Job
from kgrpc.randgame import make_random_game, make_random_games
from tests.ingest_helpers import ACCEPTED, upload


async def test_a_hand_off_takes_the_waiting_jobs_round_robin_within_its_moves() -> None:
    loop = asyncio.get_running_loop()

    def job(moves: int) -> _Job:
        return _Job([], moves, loop.create_future())

    q = FairQueue()
    a1, a2, a3, b1, c1 = job(300), job(300), job(300), job(300), job(300)
    for j in (a1, a2, a3):
        q.put("token-a", "stream-1", j)
    q.put("token-b", "stream-2", b1)
    q.put("token-c", "stream-3", c1)
    b1.future.cancel()  # its caller left: skipped, not handed off
    assert q.take_batch(1000) == [a1, c1, a2]  # one turn each, up to 1,000 moves
    assert q.take_batch(100) == [a3]  # the next job goes, whatever its moves
    assert q.take_batch(1000) == [] and len(q) == 0


async def test_games_waiting_for_the_pool_share_its_hand_offs() -> None:
    # Before, each message was one hand-off, and a hand-off costs a few turns of the event
    # loop whatever it carries: a fleet's one-game uploads made the pool's throughput that of
    # the loop's turns.
    pool = ValidationPool(-1, validate.ValidationSettings(require_task=False))
    try:
        games = make_random_games(24, 9, seed=70)
        moves = [len(g.moves) for g in games]
        assert sum(moves[2:]) > 2 * JOB_MOVES  # more than two hand-offs' worth waits
        outs = await asyncio.gather(
            *(
                pool.validate([(g.SerializeToString(), "w-1")], [m], "token", i)
                for i, (g, m) in enumerate(zip(games, moves, strict=True))
            )
        )
    finally:
        pool.stop()
    assert [[o.game_id for o in out] for out in outs] == [[g.game_id] for g in games]
    assert all(out[0].ok for out in outs)
    # The first two take the pool's two slots alone; the 22 that wait go several at a time.
    assert pool.handoffs <= len(games) // 2, pool.handoffs


async def test_an_upload_is_acknowledged_while_file_work_runs(coordinator_factory) -> None:
    # A cut or window rebuild in progress (here a file work job held open) must not hold the
    # replay an upload's ack waits for: in the validation pool, the upload waited for it.
    coord = await coordinator_factory()  # validate_workers -1: one pool thread, one file thread
    release = threading.Event()
    held = asyncio.ensure_future(coord.app.files.run(release.wait, 60))
    try:
        resp = await asyncio.wait_for(upload(coord, [make_random_game(9, seed=71)]), 30)
        assert [a.status for a in resp.acks] == [ACCEPTED]
        assert not held.done()  # acknowledged while the file work still ran
    finally:
        release.set()
        await held


async def test_file_work_runs_in_a_process_below_the_coordinator() -> None:
    files = FileWork()
    try:
        pid, nice = await asyncio.gather(files.run(os.getpid), files.run(os.nice, 0))
    finally:
        files.stop()
    assert pid != os.getpid()
    assert nice == min(19, os.nice(0) + NICE)
