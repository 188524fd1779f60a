"""Several coordinator replicas on one PostgreSQL index and one store (issue 26).

Real parts: a PostgreSQL server (tests/pg_helpers.py), two in-process coordinators with data
directories of their own (their own ingest journals) sharing the index and a store directory,
real uploads over gRPC. What is checked: a game sent to both is stored once, uploads spread
over both are all indexed under distinct shard numbers, a release published through one
reaches a WatchModels stream on the other, and the index going down is UNAVAILABLE (not a
traceback) and recovers without a restart.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from kgrpc.coordinator import db
from kgrpc.coordinator.testing import RunningCoordinator, start_coordinator, upload_requests
from kgrpc.net.channel import grpc_target, make_channel
from kgrpc.randgame import make_random_game
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from tests.dashboard_helpers import publish

ACCEPTED = coordinator_pb2.GAME_STATUS_ACCEPTED
DUPLICATE = coordinator_pb2.GAME_STATUS_DUPLICATE


@pytest.fixture
async def replicas(tmp_path: Any, pg_index: str) -> Any:
    """Two replicas on one index and one store directory; stopped after the test."""
    started: list[RunningCoordinator] = []

    async def start(n: int) -> RunningCoordinator:
        coord = await start_coordinator(
            tmp_path / f"r{n}",
            index=pg_index,
            store=str(tmp_path / "store"),
            flush_interval_s=3600,
            gating_games=4,
            match_chunk_games=2,
        )
        started.append(coord)
        return coord

    a = await start(0)
    b = await start(1)
    yield a, b
    for coord in started:
        await coord.stop()


async def upload(coord: RunningCoordinator, games: list[Any]) -> list[int]:
    await coord.store_tasks_for(games)
    async with coord.channel("worker") as ch:
        resp = await coordinator_pb2_grpc.CoordinatorStub(ch).UploadGames(
            iter(upload_requests(games, 8))
        )
    return [a.status for a in resp.acks]


def stored_games(coord: RunningCoordinator) -> list[tuple[str, str]]:
    conn = db.connect(coord.data_dir, index=coord.app.cfg.index)
    try:
        return [tuple(r) for r in conn.execute("SELECT game_id, replica FROM games")]
    finally:
        conn.close()


async def test_replicas_have_distinct_ids(replicas: Any) -> None:
    a, b = replicas
    assert a.app.store.replica != b.app.store.replica
    # The id is kept in the data dir: the same replica after a restart.
    assert (a.data_dir / "replica.id").read_text().strip() == a.app.store.replica


async def test_a_game_sent_to_both_replicas_is_stored_once(replicas: Any) -> None:
    a, b = replicas
    game = make_random_game(9, seed=11)
    first = await upload(a, [game])
    second = await upload(b, [game])
    assert (first, second) == ([ACCEPTED], [DUPLICATE])
    # At once, on both: one of them stores it, the other answers duplicate.
    other = make_random_game(9, seed=12)
    both = await asyncio.gather(upload(a, [other]), upload(b, [other]))
    assert sorted(s for statuses in both for s in statuses) == sorted([ACCEPTED, DUPLICATE])
    rows = stored_games(a)
    assert sorted(g for g, _ in rows) == sorted([game.game_id, other.game_id])
    # Each game is pending in exactly one replica's journal.
    pending = {e.game_id for e in a.app.store.journal} | {e.game_id for e in b.app.store.journal}
    in_both = {e.game_id for e in a.app.store.journal} & {e.game_id for e in b.app.store.journal}
    assert pending == {game.game_id, other.game_id} and not in_both


async def test_uploads_spread_over_both_are_indexed_under_distinct_shards(replicas: Any) -> None:
    a, b = replicas
    games = [make_random_game(9, seed=100 + i) for i in range(6)]
    assert await upload(a, games[:3]) == [ACCEPTED] * 3
    assert await upload(b, games[3:]) == [ACCEPTED] * 3
    await asyncio.gather(a.app.ingest.cut(older_than_s=0.0), b.app.ingest.cut(older_than_s=0.0))
    async with b.channel("trainer") as ch:
        listed = (
            await coordinator_pb2_grpc.CoordinatorStub(ch).ListShards(
                coordinator_pb2.ListShardsRequest()
            )
        ).shards
    names = [s.file_name for s in listed]
    assert len(names) == 2 and len(set(names)) == 2, names
    assert sum(s.games for s in listed) == 6
    # Both replicas index their own shards and list the other's.
    async with a.channel("trainer") as ch:
        again = (
            await coordinator_pb2_grpc.CoordinatorStub(ch).ListShards(
                coordinator_pb2.ListShardsRequest()
            )
        ).shards
    assert [s.file_name for s in again] == names


async def test_a_release_through_one_replica_reaches_watchers_of_the_other(
    replicas: Any,
) -> None:
    a, b = replicas
    async with b.channel("worker") as ch:
        watch = coordinator_pb2_grpc.CoordinatorStub(ch).WatchModels(
            coordinator_pb2.WatchModelsRequest()
        )
        await publish(a, "kg-b2c16-s0-d0")
        # Bounded wait for the news (the follower looks every 0.25 s): not a speed claim.
        msg = await asyncio.wait_for(watch.read(), timeout=10)
        assert msg.model.name == "kg-b2c16-s0-d0"
        watch.cancel()


async def test_the_index_down_is_unavailable_and_recovers(replicas: Any, pg_server: Any) -> None:
    a, _ = replicas
    pg_server.stop()
    try:
        async with a.channel("worker") as ch:
            stub = coordinator_pb2_grpc.CoordinatorStub(ch)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.Register(coordinator_pb2.RegisterRequest())
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "index" in (err.value.details() or "")
    finally:
        pg_server.start()
    async with a.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        assert (await stub.Register(coordinator_pb2.RegisterRequest())).worker_id
        assert await upload(a, [make_random_game(9, seed=77)]) == [ACCEPTED]


async def test_a_channel_over_a_list_of_replicas_uses_both_and_survives_one(replicas: Any) -> None:
    a, b = replicas
    both = f"{a.address},{b.address}"
    channel = make_channel(both, token=a.worker_token)
    try:
        await asyncio.wait_for(channel.channel_ready(), timeout=10)
        games = [make_random_game(9, seed=300 + i) for i in range(12)]
        await a.store_tasks_for(games)
        stub = coordinator_pb2_grpc.CoordinatorStub(channel)
        for g in games:  # one call per game: round_robin sends each to the next replica
            resp = await stub.UploadGames(iter(upload_requests([g], 1)))
            assert [x.status for x in resp.acks] == [ACCEPTED]
        holders = {r for _, r in stored_games(a)}
        assert holders == {a.app.store.replica, b.app.store.replica}
        await a.stop()
        # With one replica gone the same channel goes on through the other.
        for _ in range(3):
            assert (await stub.Register(coordinator_pb2.RegisterRequest())).worker_id
    finally:
        await channel.close()


def test_a_bad_address_list_is_refused_with_its_part() -> None:
    with pytest.raises(ValueError, match="'nohost'"):
        grpc_target("127.0.0.1:1,nohost")
    target, options = grpc_target("127.0.0.1:5001,127.0.0.1:5002")
    assert target == "ipv4:127.0.0.1:5001,127.0.0.1:5002"
    assert ("grpc.lb_policy_name", "round_robin") in options


async def test_match_chunks_are_handed_out_once_across_replicas(replicas: Any) -> None:
    a, b = replicas
    await publish(a, "kg-b2c16-s0-d0")  # released at once: the first model of the run
    await publish(a, "kg-b2c16-s2000-d100")  # a candidate: a gating match of 4 games
    kinds = []
    for coord in (a, b, a, b):
        async with coord.channel("worker") as ch:
            stub = coordinator_pb2_grpc.CoordinatorStub(ch)
            w = (await stub.Register(coordinator_pb2.RegisterRequest())).worker_id
            task = await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=w))
            kinds.append(task.WhichOneof("kind"))
    # Two chunks of 2 games, from whichever replica, then self-play: never a third chunk.
    assert kinds == ["match", "match", "selfplay", "selfplay"]
