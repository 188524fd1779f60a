"""The heartbeat interval a coordinator hands out grows with the workers online
(max_heartbeats_per_s, kgrpc.coordinator.pace), in Register's and Heartbeat's replies, and
the online cutoff follows it; a worker takes the interval a Heartbeat reply gives."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from kgrpc.coordinator import db, pace
from kgrpc.coordinator.pace import MAX_INTERVAL_S, HeartbeatPace, paced_interval_s
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc


def test_paced_interval() -> None:
    assert paced_interval_s(30, 50, 1000) == 30  # 33 a second: under the bound
    assert paced_interval_s(30, 50, 10_000) == 200  # 50 a second
    assert paced_interval_s(30, 50, 10_001) == 201
    assert paced_interval_s(30, 0.01, 10_000) == MAX_INTERVAL_S
    assert paced_interval_s(30, 0, 10_000_000) == 30  # 0: pacing off


async def test_a_shrinking_fleet_keeps_the_longer_cutoff_until_its_workers_beat_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pace, "REFRESH_S", 0.0)
    online, now = [100], [1000.0]

    async def count(cutoff_interval_s: float) -> int:
        return online[0]

    p = HeartbeatPace(1, 1.0, count, clock=lambda: now[0])
    assert await p.current_s() == 100 and p.cutoff_interval_s == 100
    online[0] = 10
    await p.current_s()
    await asyncio.sleep(0)  # the recount runs beside the call
    assert p.interval_s == 10
    # Workers told 100 s beat within 100 s: until then they still count as online.
    now[0] += 99
    assert p.cutoff_interval_s == 100
    now[0] += 2
    assert p.cutoff_interval_s == 10


def _add_workers(coord, ages_s: list[float]) -> None:
    """Rows of workers whose last heartbeat is ``ages_s`` old (others' volunteers)."""
    now = int(time.time() * 1000)
    conn = coord.connect()
    try:
        with db.transaction(conn):  # the index's own transaction: SQLite or PostgreSQL
            for i, age in enumerate(ages_s):
                conn.execute(
                    "INSERT INTO workers (worker_id, token_id, username, hostname, version, "
                    "registered_ms, last_heartbeat_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (f"w-other-{i}", None, "other", "h", "", now, now - int(age * 1000)),
                )
    finally:
        conn.close()


async def test_the_interval_grows_with_the_workers_online(
    coordinator_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    coord = await coordinator_factory(heartbeat_interval_s=2, max_heartbeats_per_s=1.0)
    async with coord.channel() as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        given, ids = [], []
        for n in range(3):
            r = await stub.Register(coordinator_pb2.RegisterRequest(username=f"u{n}"))
            given.append(r.heartbeat_interval_s)
            ids.append(r.worker_id)
        # One heartbeat a second at most: n workers online beat every n seconds (at least 2).
        assert given == [2, 2, 3]
        beat = coordinator_pb2.HeartbeatRequest(worker_id=ids[0])
        assert (await stub.Heartbeat(beat)).heartbeat_interval_s == 3

        # Seven more online, one of them last heard 15 s ago: offline by the configured 2 s
        # (cutoff 3 intervals, 6 s), online by the interval handed out (10 s: cutoff 30 s).
        _add_workers(coord, [0, 0, 0, 0, 0, 0, 15])
        monkeypatch.setattr(pace, "REFRESH_S", 0.0)  # count again at every call
        for _ in range(100):
            interval = (await stub.Heartbeat(beat)).heartbeat_interval_s
            if interval == 10:
                break
            await asyncio.sleep(0.02)
        assert interval == 10
        stats = await stub.GetStats(coordinator_pb2.GetStatsRequest())
        assert stats.workers_online == 10


async def test_pacing_off_keeps_the_configured_interval(coordinator_factory) -> None:
    coord = await coordinator_factory(heartbeat_interval_s=2, max_heartbeats_per_s=0.0)
    _add_workers(coord, [0] * 20)
    async with coord.channel() as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        r = await stub.Register(coordinator_pb2.RegisterRequest(username="u"))
        assert r.heartbeat_interval_s == 2
        beat = coordinator_pb2.HeartbeatRequest(worker_id=r.worker_id)
        assert (await stub.Heartbeat(beat)).heartbeat_interval_s == 2


def test_max_heartbeats_per_s_is_checked(tmp_path: Path) -> None:
    from kgrpc.coordinator.config import config_from

    with pytest.raises(ValueError, match="max_heartbeats_per_s"):
        config_from(None, {"data_dir": str(tmp_path), "max_heartbeats_per_s": -1.0}).check()


@pytest.mark.slow
async def test_a_worker_follows_the_interval_a_heartbeat_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.worker_helpers import M1, coordinator_with, start_holding_worker, write_models

    model = write_models(tmp_path, (M1,))[M1]
    async with coordinator_with(tmp_path, model, max_heartbeats_per_s=1.0) as coord:
        worker, run = await start_holding_worker(coord, tmp_path / "w")
        assert worker.source.heartbeat_s == 1  # alone: the configured second
        monkeypatch.setattr(pace, "REFRESH_S", 0.0)
        _add_workers(coord, [0, 0, 0, 0])  # five online, one heartbeat a second: 5 s
        for _ in range(200):
            if worker.source.heartbeat_s == 5:
                break
            await asyncio.sleep(0.05)
        assert worker.source.heartbeat_s == 5
        worker.request_stop()
        assert await asyncio.wait_for(run, 60) == 0
