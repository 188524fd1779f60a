"""Coordinator ingest, storage: accepted games in shards, stored once (duplicates, concurrent
uploaders), group commits, listing and downloading shards, the time-based flush and the
rolling window rebuilt in the validation pool."""

from __future__ import annotations

import asyncio
from collections import Counter

import grpc
import numpy as np
import pytest

from kgrpc.coordinator.store import Store
from kgrpc.randgame import make_random_games
from kgrpc.schema import packed_row_bytes
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from tests.ingest_helpers import DUPLICATE, shard_game_ids, upload


async def test_valid_games_are_stored_in_shards(coordinator_factory) -> None:
    coord = await coordinator_factory(positions_per_shard=250, latest_window_positions=300)
    games = make_random_games(6, 9, seed=100)
    resp = await upload(coord, games, per_message=4)
    assert resp.accepted == 6 and resp.rejected == 0 and resp.duplicates == 0
    assert [a.game_id for a in resp.acks] == [g.game_id for g in games]
    await coord.stop()
    # The coordinator's window (rebuilt in its validation pool, which stop() waits for).
    latest = np.load(coord.data_dir / "training_data" / "current" / "latest_games.npz")
    assert 0 < len(latest["value"]) <= 300
    # Games of a cut still running at stop() stay pending: a later start cuts them.
    store = Store(coord.data_dir, "run_001", positions_per_shard=250, latest_window_positions=300)
    store.flush_all()
    store.close()
    ids = shard_game_ids(coord.data_dir)
    assert sorted(ids) == sorted(g.game_id for g in games)
    first = np.load(coord.data_dir / "training_data" / "run_001" / "games_00001.npz")
    assert int(first["board_size"]) == 9 and str(first["rules"]) == "chinese"
    assert first["states"].shape[1] == packed_row_bytes(9)
    np.testing.assert_allclose(first["policy"].sum(axis=1), 1.0, rtol=1e-5)
    latest = np.load(coord.data_dir / "training_data" / "current" / "latest_games.npz")
    assert 0 < len(latest["value"]) <= 300


async def test_duplicates_are_stored_once(coordinator_factory) -> None:
    coord = await coordinator_factory(positions_per_shard=10_000)
    games = make_random_games(4, 9, seed=50)
    first = await upload(coord, games + games[:2])  # a repeat inside one stream too
    assert (first.accepted, first.duplicates) == (4, 2)
    again = await upload(coord, games)
    assert (again.accepted, again.duplicates) == (0, 4)
    assert all(a.status == DUPLICATE for a in again.acks)
    await coord.stop()
    store = Store(coord.data_dir, "run_001")
    store.flush_all()
    assert store.counters()["games_accepted"] == 4
    store.close()
    assert Counter(shard_game_ids(coord.data_dir)) == Counter(g.game_id for g in games)


async def test_concurrent_uploaders(coordinator_factory) -> None:
    coord = await coordinator_factory(positions_per_shard=400)
    games = make_random_games(24, 9, seed=1000)
    # 6 uploaders; each game is sent by two of them at the same time
    plans = [games[(i * 4) % 24 : (i * 4) % 24 + 8] for i in range(6)]
    results = await asyncio.gather(*(upload(coord, p, per_message=3) for p in plans))
    assert sum(r.accepted for r in results) == 24
    assert sum(r.duplicates for r in results) == sum(len(p) for p in plans) - 24
    await coord.stop()
    store = Store(coord.data_dir, "run_001", positions_per_shard=400)
    store.flush_all()
    store.close()
    assert Counter(shard_game_ids(coord.data_dir)) == Counter(g.game_id for g in games)


async def test_messages_ready_together_share_one_group_commit(coordinator_factory) -> None:
    from kgrpc.coordinator.validate import ValidationSettings, validate_record_bytes

    coord = await coordinator_factory(positions_per_shard=10_000)
    games = make_random_games(8, 9, seed=2000)
    terms = {t.task_id: t for t in await coord.store_tasks_for(games)}
    settings = ValidationSettings.from_config(coord.app.cfg)
    out = [
        validate_record_bytes(g.SerializeToString(), "anonymous", settings, terms[g.task_id])
        for g in games
    ]
    assert all(o.ok for o in out), [o.reason for o in out if not o.ok]
    ingest = coord.app.ingest
    commits, messages = ingest.commits, ingest.committed_messages
    # Four messages ready at once (game 1 in two of them): one journal write and fsync.
    groups = [[out[0], out[1]], [out[2]], [out[1], out[3]], out[4:]]
    statuses = await asyncio.gather(*(ingest.commit(m, None, "anonymous") for m in groups))
    assert (ingest.commits - commits, ingest.committed_messages - messages) == (1, 4)
    accepted, duplicate = "accepted", "duplicate"
    assert statuses == [[accepted] * 2, [accepted], [duplicate, accepted], [accepted] * 4]
    # One after the other: a commit each, and every game is now a duplicate.
    again = [await ingest.commit([o], None, "anonymous") for o in out[:2]]
    assert again == [[duplicate], [duplicate]] and ingest.commits - commits == 3
    await coord.stop()
    store = Store(coord.data_dir, "run_001")
    store.flush_all()
    assert store.counters()["games_accepted"] == 8
    store.close()
    assert Counter(shard_game_ids(coord.data_dir)) == Counter(g.game_id for g in games)


@pytest.mark.parametrize("validate_workers", [-1, 1], ids=["thread", "process"])
async def test_list_and_download_shards(coordinator_factory, validate_workers) -> None:
    # The cut's file work runs in the validation pool: a thread, or a spawn process whose
    # shard the coordinator indexes with the size and sha256 it reports.
    import hashlib

    coord = await coordinator_factory(positions_per_shard=200, validate_workers=validate_workers)
    await upload(coord, make_random_games(6, 9, seed=600))
    async with coord.channel("trainer") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        listed = (await stub.ListShards(coordinator_pb2.ListShardsRequest())).shards
        for _ in range(100):  # the cut runs just after the ack
            if listed:
                break
            await asyncio.sleep(0.05)
            listed = (await stub.ListShards(coordinator_pb2.ListShardsRequest())).shards
        assert listed and listed[0].file_name == "games_00001.npz" and listed[0].board_size == 9
        data = b""
        async for chunk in stub.DownloadShard(
            coordinator_pb2.DownloadShardRequest(file_name=listed[0].file_name)
        ):
            assert chunk.offset == len(data)
            data += chunk.data
        assert (
            hashlib.sha256(data).hexdigest() == listed[0].sha256
            and len(data) == listed[0].size_bytes
        )
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in stub.DownloadShard(
                coordinator_pb2.DownloadShardRequest(file_name="../coordinator.sqlite3")
            ):
                pass
        assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_time_based_flush_writes_a_partial_shard(coordinator_factory) -> None:
    coord = await coordinator_factory(positions_per_shard=100_000, flush_interval_s=0.2)
    games = make_random_games(3, 9, seed=700)
    resp = await upload(coord, games)
    assert resp.accepted == 3
    async with coord.channel("trainer") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        listed = []
        for _ in range(200):  # the flush loop wakes every 0.5 s at the least
            listed = list((await stub.ListShards(coordinator_pb2.ListShardsRequest())).shards)
            if listed:
                break
            await asyncio.sleep(0.05)
        assert len(listed) == 1, "no shard was cut by the time-based flush"
        stats = await stub.GetStats(coordinator_pb2.GetStatsRequest())
    shard = listed[0]
    assert 0 < shard.positions == stats.positions_accepted < 100_000 and shard.games == 3
    assert sorted(shard_game_ids(coord.data_dir)) == sorted(g.game_id for g in games)
    with np.load(coord.data_dir / "training_data" / "run_001" / shard.file_name) as z:
        assert len(z["value"]) == shard.positions
    latest = coord.data_dir / "training_data" / "current" / "latest_games.npz"
    for _ in range(200):  # rebuilt in the validation pool after the cut
        if latest.exists():
            break
        await asyncio.sleep(0.05)
    assert latest.exists()


@pytest.mark.parametrize("validate_workers", [-1, 1])
async def test_rolling_window_rebuilt_in_the_pool_survives_a_failure(
    coordinator_factory, caplog, validate_workers
) -> None:
    """latest_games.npz is rebuilt in the validation pool after a cut: a rebuild that fails is
    logged and costs no shard, and the next cut's rebuild writes the window."""
    coord = await coordinator_factory(
        positions_per_shard=100,
        latest_window_positions=10**6,
        latest_refresh_s=0.0,
        validate_workers=validate_workers,
    )
    latest = coord.data_dir / "training_data" / "current" / "latest_games.npz"
    latest.mkdir(parents=True)  # os.replace over a directory fails
    games = make_random_games(6, 9, seed=300)
    first, second = games[:3], games[3:]
    assert (await upload(coord, first, per_message=3)).accepted == 3
    for _ in range(200):
        if "could not update latest_games.npz" in caplog.text:
            break
        await asyncio.sleep(0.05)
    assert "could not update latest_games.npz" in caplog.text
    assert latest.is_dir()
    latest.rmdir()
    assert (await upload(coord, second, per_message=3)).accepted == 3
    await coord.stop()  # waits for the rebuild in flight
    window = {str(g) for g in np.load(latest)["game_ids"]}
    in_shards = set(shard_game_ids(coord.data_dir))
    assert window == in_shards and {g.game_id for g in second} & window
