"""Issued tasks (issue 11): GetTask stores every task it hands out; an uploaded game is
accepted only for a stored task whose terms it fits (board size, rules, komi, model, worker),
across coordinator restarts and model releases, within the retention; the per-worker cap;
komi ranges and the shard groups they make; GetStats pages of models and gating matches."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from kgrpc.coordinator.config import config_from
from kgrpc.coordinator.server import CoordinatorApp
from kgrpc.coordinator.testing import RunningCoordinator, upload_requests
from kgrpc.net.limits import STATS_MAX_PAGE, STATS_PAGE, stats_page
from kgrpc.randgame import make_random_game
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc, records_pb2
from tests.dashboard_helpers import FIRST, SECOND, publish
from tests.test_coordinator_stats_cli import cli

ACCEPTED = coordinator_pb2.GAME_STATUS_ACCEPTED
GATING_OFF = dict(gating_enabled=False)


def game_for(
    task: coordinator_pb2.Task, worker_id: str, seed: int, **changes: object
) -> records_pb2.GameRecord:
    """A game played for ``task`` by ``worker_id``, with ``changes`` to what the task asked
    (board_size, komi, model)."""
    kw: dict[str, object] = dict(
        board_size=task.board_size,
        komi=task.komi,
        model=task.selfplay.model,
        max_moves=task.max_moves,
        worker_id=worker_id,
        task_id=task.task_id,
    )
    kw.update(changes)
    size = int(kw.pop("board_size"))  # type: ignore[call-overload]
    if size != task.board_size:
        kw["max_moves"] = None  # the default cap of that board
    return make_random_game(size, seed=seed, **kw)  # type: ignore[arg-type]


async def upload(coord: RunningCoordinator, games: list) -> list[tuple[str, str]]:
    """(reason, detail) of each game's ack ("" reason: accepted)."""
    async with coord.channel() as ch:
        resp = await coordinator_pb2_grpc.CoordinatorStub(ch).UploadGames(
            iter(upload_requests(games))
        )
    assert [a.game_id for a in resp.acks] == [g.game_id for g in games]
    for a in resp.acks:
        assert (a.status == ACCEPTED) == (a.reason == ""), a
    return [(a.reason, a.detail) for a in resp.acks]


async def get_task(stub, worker_id: str) -> coordinator_pb2.Task:  # type: ignore[no-untyped-def]
    return await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=worker_id))


async def register(stub) -> str:  # type: ignore[no-untyped-def]
    return (await stub.Register(coordinator_pb2.RegisterRequest(username="u"))).worker_id


async def test_a_game_must_name_an_issued_task_and_fit_its_terms(coordinator_factory) -> None:
    coord = await coordinator_factory(**GATING_OFF)
    await publish(coord, FIRST)
    async with coord.channel() as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        w, other = await register(stub), await register(stub)
        task = await get_task(stub, w)
        stray = await get_task(stub, "w-not-registered")  # bound to the caller's bucket
    assert task.selfplay.model == FIRST and task.board_size == 9 and task.max_moves == 162
    assert not task.HasField("komi_range")
    unknown = game_for(task, w, 2)
    unknown.task_id = "selfplay-0123456789abcdef"
    nameless = game_for(task, w, 3)
    nameless.task_id = ""
    games = [
        game_for(task, w, 1),
        unknown,
        nameless,
        game_for(task, w, 4, komi=6.5),
        game_for(task, w, 5, board_size=7),
        game_for(task, w, 6, model="kg-b2c16-s9-d9"),
        game_for(task, other, 7),  # another worker of the same token
        game_for(task, "", 8),  # counted under the token's bucket, not under w
        game_for(stray, "", 9),  # a task the bucket was given
    ]
    got = await upload(coord, games)
    reasons = [r for r, _ in got]
    assert reasons == [
        "",
        "unknown_task",
        "unknown_task",
        "task_mismatch",
        "task_mismatch",
        "task_mismatch",
        "task_mismatch",
        "task_mismatch",
        "",
    ], got
    assert "selfplay-0123456789abcdef" in got[1][1] and "names no task" in got[2][1]
    assert "komi 6.5" in got[3][1] and "board size 7" in got[4][1]
    assert "kg-b2c16-s9-d9" in got[5][1] and f"issued to worker {w!r}" in got[6][1]


async def test_tasks_survive_a_restart_and_a_release(coordinator_factory) -> None:
    coord = await coordinator_factory(**GATING_OFF)
    await publish(coord, FIRST)
    async with coord.channel() as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        w = await register(stub)
        task = await get_task(stub, w)
    spooled = [game_for(task, w, 10 + i) for i in range(3)]  # played, not yet uploaded
    assert [r for r, _ in await upload(coord, spooled[:1])] == [""]
    # A real restart on the same data directory: the new process knows only the table.
    cfg = dataclasses.replace(coord.app.cfg, listen="127.0.0.1:0")
    await coord.stop()
    app = CoordinatorApp(cfg)
    await app.start()
    again = RunningCoordinator(
        app.address, coord.worker_token, coord.trainer_token, coord.data_dir, app
    )
    try:
        assert await app.db(app.tasks.count, w) == 1
        assert [r for r, _ in await upload(again, spooled[1:2])] == [""]
        await publish(again, SECOND)  # released at once: the task's model is no longer the best
        async with again.channel() as ch:
            newer = await get_task(coordinator_pb2_grpc.CoordinatorStub(ch), w)
        assert newer.selfplay.model == SECOND
        assert [r for r, _ in await upload(again, [spooled[2], game_for(newer, w, 20)])] == [
            "",
            "",
        ]
    finally:
        await again.stop()


async def test_a_task_past_its_retention_is_unknown(coordinator_factory) -> None:
    coord = await coordinator_factory(**GATING_OFF, task_retention_s=0.5)
    await publish(coord, FIRST)
    async with coord.channel() as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        w = await register(stub)
        old = await get_task(stub, w)
        await asyncio.sleep(0.7)
        fresh = await get_task(stub, w)
    got = await upload(coord, [game_for(old, w, 30), game_for(fresh, w, 31)])
    assert got[0][0] == "unknown_task" and "retention" in got[0][1]
    assert got[1][0] == ""
    assert await coord.app.db(coord.app.tasks.prune) == 1  # the expired row goes
    assert await coord.app.db(coord.app.tasks.count) == 1


async def test_the_tasks_stored_per_worker_are_capped(coordinator_factory) -> None:
    coord = await coordinator_factory(**GATING_OFF, max_tasks_per_worker=3)
    await publish(coord, FIRST)
    async with coord.channel() as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        w, other = await register(stub), await register(stub)
        issued = [await get_task(stub, w) for _ in range(5)]
        theirs = await get_task(stub, other)
    tasks = coord.app.tasks
    assert await coord.app.db(tasks.count, w) == 3
    assert await coord.app.db(tasks.count, other) == 1
    assert await coord.app.db(tasks.count) == 4
    got = await upload(
        coord,
        [game_for(issued[0], w, 40), game_for(issued[4], w, 41), game_for(theirs, other, 42)],
    )
    assert [r for r, _ in got] == ["unknown_task", "", ""]


async def test_a_komi_range_is_handed_out_and_keeps_shard_groups_bounded(
    coordinator_factory,
) -> None:
    coord = await coordinator_factory(
        **GATING_OFF,
        komi_range="6.5:8.5:0.5",
        max_shard_groups=5,
        positions_per_shard=100_000,
        flush_interval_s=3600,
    )
    await publish(coord, FIRST)
    async with coord.channel() as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        w = await register(stub)
        task = await get_task(stub, w)
    r = task.komi_range
    assert (r.low, r.high, r.step) == (6.5, 8.5, 0.5) and task.komi == 7.5
    inside = [game_for(task, w, 50 + i, komi=6.5 + 0.5 * (i % 5)) for i in range(10)]
    outside = [game_for(task, w, 60, komi=9.0), game_for(task, w, 61, komi=7.25)]
    got = await upload(coord, [*inside, *outside])
    assert [r for r, _ in got] == [""] * 10 + ["task_mismatch"] * 2, got
    store = coord.app.store
    await coord.app.ingest.cut()
    # Five komi values, five groups within max_shard_groups: none was cut early.
    assert sorted(k[1] for k in store.pending) == [6.5, 7.0, 7.5, 8.0, 8.5]
    assert store.list_shards() == []
    await coord.app.db(store.flush_all)
    shards = store.list_shards()
    assert sorted(s.komi for s in shards) == [6.5, 7.0, 7.5, 8.0, 8.5]
    assert all(s.games == 2 for s in shards)


def test_komi_range_settings_are_checked() -> None:
    assert config_from(None, {"komi_range": "6.5:8.5:0.5"}).komi_range == (6.5, 8.5, 0.5)
    assert config_from(None, {"komi_range": [7.5, 7.5, 1]}).komi_range == (7.5, 7.5, 1.0)
    assert config_from(None, {}).komi_range == ()
    for bad, fragment in (
        ({"komi_range": "8:6:0.5"}, "LOW <= HIGH"),
        ({"komi_range": "6.5:8.5"}, "LOW:HIGH:STEP"),
        ({"komi_range": "5:9:0.5", "komi": 7.25}, "not one of komi_range's values"),
        ({"komi_range": "0.5:20.5:0.5", "max_shard_groups": 8}, "shard groups"),
        ({"komi_range": "-50:50:0.5"}, "more than 64 values"),
        ({"task_retention_s": 0}, "task_retention_s"),
        ({"max_tasks_per_worker": 0}, "max_tasks_per_worker"),
    ):
        with pytest.raises(ValueError, match=fragment):
            config_from(None, bad)


async def test_get_stats_pages_models_and_matches(coordinator_factory) -> None:
    coord = await coordinator_factory(gating_games=2, match_chunk_games=2)
    names = [FIRST, "kg-b2c16-s1000-d100", "kg-b2c16-s2000-d100", "kg-b2c16-s3000-d100"]
    for name in names:
        await publish(coord, name)  # the first is released, the others wait for gating
    async with coord.channel() as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)

        async def page(**kw: int) -> coordinator_pb2.Stats:
            return await stub.GetStats(coordinator_pb2.GetStatsRequest(**kw))

        whole = await page()
        assert [m.name for m in whole.models] == names[::-1]  # newest first
        assert (whole.models_total, whole.matches_total, len(whole.matches)) == (4, 3, 3)
        first, rest = await page(models_limit=3), await page(models_offset=3, models_limit=3)
        assert [m.name for m in [*first.models, *rest.models]] == names[::-1]
        assert first.models_total == rest.models_total == 4
        m = await page(matches_offset=1, matches_limit=1)
        assert [x.candidate_model for x in m.matches] == [names[2]] and m.matches_total == 3
        assert len((await page(models_limit=-5)).models) == 4  # a negative limit: the default
    assert (stats_page(0), stats_page(10**6), stats_page(-1)) == (
        STATS_PAGE,
        STATS_MAX_PAGE,
        STATS_PAGE,
    )
    rc, text, err = await cli(coord, "stats", "--models", "1", "--matches", "2")
    assert rc == 0, err
    assert "(models 1-1 of 4: --models N, --models-offset N)" in text
    assert "(matches 1-2 of 3: --matches N, --matches-offset N)" in text
    rc, text, err = await cli(coord, "stats", "--models", "2", "--models-offset", "2")
    assert rc == 0, err
    models = text[text.index("models (newest first)") : text.index("gating matches")]
    assert names[1] in models and names[3] not in models and "(models 3-4 of 4" in models
    # The Elo column: the anchor's 0.0; "-" for a candidate no decided match has rated.
    elo_of = {ln.split()[0]: ln.split()[2] for ln in models.splitlines() if "kg" in ln}
    assert (elo_of[names[0]], elo_of[names[1]]) == ("0.0", "-")
