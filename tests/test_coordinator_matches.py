"""Coordinator gating matches: the decision's rule, the curriculum's stages, a match's chunks
handed out, reported (idempotent, refused when malformed) and handed out again when silent,
and the release that follows."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from kgrpc.coordinator.config_values import CurriculumStage
from kgrpc.coordinator.gating import gating_decision
from kgrpc.coordinator.models import stage_for
from kgrpc.coordinator.testing import match_game
from kgrpc.records.terms import move_cap
from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tests.model_files import publish


def test_gating_decision_logic() -> None:
    common = dict(games_target=400, elo_threshold=20.0, release_every_steps=10_000, use_sprt=False)
    assert (
        gating_decision(100, 100, 0, candidate_steps=5000, reference_steps=1000, **common)
        == "pending"
    )
    assert (
        gating_decision(230, 170, 0, candidate_steps=5000, reference_steps=1000, **common)
        == "released"
    )  # +52 Elo
    assert (
        gating_decision(205, 195, 0, candidate_steps=5000, reference_steps=1000, **common)
        == "rejected"
    )  # +8.7 Elo
    # a new multiple of release_every_steps lowers the bar to beating the reference, no lower
    milestone = dict(candidate_steps=10_000, reference_steps=9_000, **common)
    assert gating_decision(201, 199, 0, **milestone) == "released"
    assert gating_decision(150, 250, 0, **milestone) == "rejected"
    assert gating_decision(200, 200, 0, **milestone) == "rejected"
    # a negative threshold never releases a model that lost
    loose = {**common, "elo_threshold": -50.0}
    assert (
        gating_decision(190, 210, 0, candidate_steps=5000, reference_steps=1000, **loose)
        == "rejected"
    )
    sprt = {**common, "use_sprt": True}
    assert (
        gating_decision(150, 50, 0, candidate_steps=5000, reference_steps=1000, **sprt)
        == "released"
    )
    assert (
        gating_decision(50, 150, 0, candidate_steps=5000, reference_steps=1000, **sprt)
        == "rejected"
    )
    assert (
        gating_decision(12, 8, 0, candidate_steps=5000, reference_steps=1000, **sprt) == "pending"
    )


def test_curriculum_stages() -> None:
    cur = (
        CurriculumStage(100_000, 9, 200),
        CurriculumStage(500_000, 13, 400),
        CurriculumStage(0, 19, 800),
    )
    assert stage_for(0, cur).board_size == 9
    assert stage_for(99_999, cur).visits == 200
    assert stage_for(100_000, cur) == CurriculumStage(500_000, 13, 400)
    assert stage_for(10**9, cur).board_size == 19


async def test_gating_match_flow_and_curriculum_switch(coordinator_factory) -> None:
    coord = await coordinator_factory(
        gating_games=4, match_chunk_games=2, curriculum="1000:9:50,0:13:80"
    )
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        task = await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id="w"))
        assert task.WhichOneof("kind") == "retry_after_s"
        w = (await stub.Register(coordinator_pb2.RegisterRequest(username="t"))).worker_id
        watch = stub.WatchModels(coordinator_pb2.WatchModelsRequest())
        await publish(coord, "kg-b2c16-s0-d0")
        assert (await watch.read()).model.name == "kg-b2c16-s0-d0"
        task = await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id="w"))
        assert task.selfplay.model == "kg-b2c16-s0-d0" and (task.board_size, task.visits) == (9, 50)
        # The game's move cap itself: min(max_moves, max_moves_per_point * N * N).
        assert task.max_moves == move_cap(9, coord.app.cfg.max_moves, 2.0) == 162
        resp = await publish(coord, "kg-b2c16-s2000-d100")
        assert resp.gating_scheduled and resp.model.status == common_pb2.MODEL_STATUS_CANDIDATE
        tasks = [await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=w)) for _ in range(3)]
        assert [t.WhichOneof("kind") for t in tasks] == [
            "match",
            "match",
            "selfplay",
        ]  # 2 chunks of 2 = 4 games
        m = tasks[0].match
        assert (m.candidate_model, m.reference_model, m.games) == (
            "kg-b2c16-s2000-d100",
            "kg-b2c16-s0-d0",
            2,
        )
        B, W = common_pb2.COLOR_BLACK, common_pb2.COLOR_WHITE

        def report(task, games):
            return stub.ReportMatchResult(
                coordinator_pb2.ReportMatchResultRequest(
                    task_id=task.task_id,
                    worker_id=w,
                    candidate_model=task.match.candidate_model,
                    reference_model=task.match.reference_model,
                    games=[
                        match_game(task, c, win == c, i, game_id=g)
                        for i, (g, c, win) in enumerate(games)
                    ],
                )
            )

        r1 = await report(tasks[0], [("g1", B, B), ("g2", W, W)])
        assert (r1.games_recorded, r1.decision) == (2, "pending")
        r1b = await report(tasks[0], [("g1", B, B), ("g2", W, W)])  # idempotent
        assert (r1b.games_recorded, r1b.decision) == (0, "pending")
        r2 = await report(tasks[1], [("g3", B, B), ("g4", W, B)])
        assert (r2.games_recorded, r2.decision) == (2, "released")
        assert (await watch.read()).model.name == "kg-b2c16-s2000-d100"
        watch.cancel()
        stats = await stub.GetStats(coordinator_pb2.GetStatsRequest())
        (match,) = stats.matches
        assert (match.wins, match.losses, match.draws, match.decision) == (3, 1, 0, "released")
        assert match.elo_low < match.elo_diff < match.elo_high
        released = {m.name: m for m in stats.models}["kg-b2c16-s2000-d100"]
        assert released.elo == pytest.approx(match.elo_diff)
        # curriculum: the released model has 2000 steps -> stage 2
        task = await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id="w"))
        assert task.selfplay.model == "kg-b2c16-s2000-d100" and (task.board_size, task.visits) == (
            13,
            80,
        )


@pytest.mark.parametrize(
    "field,value,fragment",
    [
        ("score", float("nan"), "score must be finite"),
        ("score", float("inf"), "score must be finite"),
        ("winner", 7, "winner must be"),
    ],
)
async def test_bad_match_results_are_invalid_argument(
    coordinator_factory, field, value, fragment
) -> None:
    # The report's own figures are checked where records are optional (with records, the
    # replay's figures are counted: tests/test_gating_forgery.py).
    coord = await coordinator_factory(
        gating_games=4, match_chunk_games=2, match_records_required=False
    )
    await publish(coord, "kg-b2c16-s0-d0")
    await publish(coord, "kg-b2c16-s2000-d100")
    B, W = common_pb2.COLOR_BLACK, common_pb2.COLOR_WHITE
    good = coordinator_pb2.MatchGame(game_id="g1", candidate_color=B, winner=B, score=3.5, moves=60)
    bad = coordinator_pb2.MatchGame(game_id="g2", candidate_color=W, winner=B, score=-3.5, moves=60)
    setattr(bad, field, value)
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        w = (await stub.Register(coordinator_pb2.RegisterRequest(username="t"))).worker_id
        task = await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=w))
        req = coordinator_pb2.ReportMatchResultRequest(
            task_id=task.task_id,
            worker_id=w,
            candidate_model="kg-b2c16-s2000-d100",
            reference_model="kg-b2c16-s0-d0",
            games=[good, bad],
        )
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ReportMatchResult(req)
        assert (
            err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and fragment in err.value.details()
        )
        del req.games[1:]
        assert (
            await stub.ReportMatchResult(req)
        ).games_recorded == 1  # nothing of the refused report was kept


async def test_silent_match_chunk_is_reissued_after_timeout(coordinator_factory) -> None:
    timeout = 0.3
    coord = await coordinator_factory(
        gating_games=2, match_chunk_games=2, match_task_timeout_s=timeout
    )
    await publish(coord, "kg-b2c16-s0-d0")
    await publish(coord, "kg-b2c16-s5-d10")
    B, W = common_pb2.COLOR_BLACK, common_pb2.COLOR_WHITE
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        silent, other_w = [
            (await stub.Register(coordinator_pb2.RegisterRequest(username=u))).worker_id
            for u in ("s", "o")
        ]
        t0 = loop_time()
        first = await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=silent))
        assert first.WhichOneof("kind") == "match" and first.match.games == 2
        other = await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=other_w))
        if loop_time() - t0 < timeout:  # all games are out and the chunk is still fresh
            assert other.WhichOneof("kind") == "selfplay"
        # w-silent never reports: its chunk goes to the next worker asking once it is stale
        for _ in range(200):
            if other.WhichOneof("kind") == "match":
                break
            await asyncio.sleep(0.05)
            other = await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=other_w))
        assert other.WhichOneof("kind") == "match", "stale match chunk was never handed out again"
        assert other.task_id != first.task_id
        assert (other.match.candidate_model, other.match.reference_model, other.match.games) == (
            "kg-b2c16-s5-d10",
            "kg-b2c16-s0-d0",
            2,
        )
        r = await stub.ReportMatchResult(
            coordinator_pb2.ReportMatchResultRequest(
                task_id=other.task_id,
                worker_id=other_w,
                candidate_model=other.match.candidate_model,
                reference_model=other.match.reference_model,
                games=[
                    match_game(other, c, True, i, game_id=g)
                    for i, (g, c) in enumerate((("o1", B), ("o2", W)))
                ],
            )
        )
        assert (r.games_recorded, r.decision) == (2, "released")
        # the silent worker turning up late changes nothing
        late = await stub.ReportMatchResult(
            coordinator_pb2.ReportMatchResultRequest(
                task_id=first.task_id,
                worker_id=silent,
                candidate_model=first.match.candidate_model,
                reference_model=first.match.reference_model,
                games=[match_game(first, B, False, 9, game_id="s1")],
            )
        )
        assert late.decision == "released"
        (match,) = (await stub.GetStats(coordinator_pb2.GetStatsRequest())).matches
        assert match.decision == "released" and match.wins == 2
        assert (await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=silent))).WhichOneof(
            "kind"
        ) == "selfplay"


def loop_time() -> float:
    return asyncio.get_running_loop().time()


async def test_reporting_part_of_a_chunk_does_not_hand_its_games_out_again(
    coordinator_factory,
) -> None:
    # Workers report game by game; a chunk half reported is still out, so the match is not
    # over-issued (it was: 24 games played for a 16-game match).
    coord = await coordinator_factory(gating_games=4, match_chunk_games=2)
    await publish(coord, "kg-b2c16-s0-d0")
    await publish(coord, "kg-b2c16-s5-d10")
    B = common_pb2.COLOR_BLACK
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        w = (await stub.Register(coordinator_pb2.RegisterRequest(username="a"))).worker_id
        chunks = [await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=w)) for _ in range(2)]
        assert [c.WhichOneof("kind") for c in chunks] == ["match", "match"]
        c = chunks[0]
        await stub.ReportMatchResult(
            coordinator_pb2.ReportMatchResultRequest(
                task_id=c.task_id,
                worker_id=w,
                candidate_model=c.match.candidate_model,
                reference_model=c.match.reference_model,
                games=[match_game(c, B, True, game_id="g1")],
            )
        )
        after = await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=w))
        assert after.WhichOneof("kind") == "selfplay"  # 1 recorded + 3 still out = 4
