"""Issue 31: a release that no single volunteer can force.

What a worker token can send for a gating match, against a real coordinator on loopback:
results without records, records that do not replay or do not fit (refused, nothing
counted), and legal records of games never played between the nets (accepted one by one:
the quorum of distinct tokens, ``gating_min_tokens``, is what stops those).
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from kgrpc.coordinator.testing import match_game
from kgrpc.randgame import make_random_game
from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tests.dashboard_helpers import FIRST, SECOND, publish

B, W = common_pb2.COLOR_BLACK, common_pb2.COLOR_WHITE
GATED = dict(gating_games=4, match_chunk_games=4, release_every_steps=0, gating_elo_threshold=0)


class Volunteer:
    """A worker token's view of one match task."""

    def __init__(self, stub: Any, worker_id: str, task: coordinator_pb2.Task) -> None:
        self.stub, self.w, self.task = stub, worker_id, task

    def report(self, games: list[coordinator_pb2.MatchGame]) -> Any:
        return self.stub.ReportMatchResult(
            coordinator_pb2.ReportMatchResultRequest(
                task_id=self.task.task_id,
                worker_id=self.w,
                candidate_model=self.task.match.candidate_model,
                reference_model=self.task.match.reference_model,
                games=games,
            )
        )


async def volunteer(stub: Any) -> Volunteer:
    w = (await stub.Register(coordinator_pb2.RegisterRequest())).worker_id
    task = await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=w))
    assert task.WhichOneof("kind") == "match" and task.match.candidate_model == SECOND, task
    return Volunteer(stub, w, task)


async def best_and_counts(stub: Any) -> tuple[str, tuple[int, int, int]]:
    st = await stub.GetStats(coordinator_pb2.GetStatsRequest())
    released = [m for m in st.models if m.status == common_pb2.MODEL_STATUS_RELEASED]
    best = max(released, key=lambda m: m.released_unix_ms).name
    (m,) = [m for m in st.matches if m.candidate_model == SECOND]
    return best, (m.wins, m.losses, m.draws)


async def refused(call: Any, fragment: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert fragment in err.value.details(), err.value.details()


async def test_unplayed_wins_without_records_are_refused(coordinator_factory) -> None:
    # The first forgery: two candidate wins, no records, nothing played.
    coord = await coordinator_factory(**GATED)
    await publish(coord, FIRST)
    await publish(coord, SECOND)
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        v = await volunteer(stub)
        claims = [
            coordinator_pb2.MatchGame(game_id=f"f{i}", candidate_color=c, winner=c, moves=60)
            for i, c in enumerate((B, W, B, W))
        ]
        await refused(v.report(claims), "has no record")
        # One game with its record does not carry the others.
        legal = match_game(v.task, B, True, seed=1)
        await refused(v.report([legal, *claims[1:]]), "has no record")
        assert await best_and_counts(stub) == (FIRST, (0, 0, 0))
        # The record alone counts.
        assert (await v.report([legal])).games_recorded == 1
        assert await best_and_counts(stub) == (FIRST, (1, 0, 0))


def _illegal(g: coordinator_pb2.MatchGame) -> None:
    g.record.moves[5] = g.record.moves[4]  # an occupied point


def _unfinished(g: coordinator_pb2.MatchGame) -> None:
    # A game that ended by two passes, without its last pass: over neither by passes, nor
    # by resignation, nor at its cap.
    rec = make_random_game(9, seed=5, task_id=g.record.task_id)
    colour = rec.result.winner
    rec.black_model, rec.white_model = (SECOND, FIRST) if colour == B else (FIRST, SECOND)
    del rec.moves[-1]
    del rec.targets[-1]
    g.CopyFrom(
        coordinator_pb2.MatchGame(
            game_id=rec.game_id,
            candidate_color=colour,
            winner=colour,
            moves=len(rec.moves),
            record=rec,
        )
    )


def _other_pairing(g: coordinator_pb2.MatchGame) -> None:
    g.record.white_model = "kg-b2c16-s9-d9"


def _swapped(g: coordinator_pb2.MatchGame) -> None:
    r = g.record
    r.black_model, r.white_model = r.white_model, r.black_model


def _other_task(g: coordinator_pb2.MatchGame) -> None:
    g.record.task_id = "match-99-made-up"


@pytest.mark.parametrize(
    "spoil,fragment",
    [
        (_illegal, "illegal_move"),
        (_unfinished, "unfinished"),
        (_other_pairing, "names black"),
        (_swapped, "names black"),
        (_other_task, "does not fit its task"),
    ],
)
async def test_a_record_that_does_not_fit_refuses_the_whole_report(
    coordinator_factory, spoil, fragment
) -> None:
    coord = await coordinator_factory(**GATED)
    await publish(coord, FIRST)
    await publish(coord, SECOND)
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        v = await volunteer(stub)
        good = match_game(v.task, B, True, seed=2)
        bad = match_game(v.task, W, True, seed=3)
        spoil(bad)
        await refused(v.report([good, bad]), fragment)
        assert await best_and_counts(stub) == (FIRST, (0, 0, 0))  # nothing of it counted


async def test_the_counted_result_is_the_replays(coordinator_factory) -> None:
    coord = await coordinator_factory(**GATED)
    await publish(coord, FIRST)
    await publish(coord, SECOND)
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        v = await volunteer(stub)
        # A game played to two passes: its score is the final position's.
        rec = make_random_game(9, seed=41, task_id=v.task.task_id)
        colour = rec.result.winner
        rec.black_model, rec.white_model = (SECOND, FIRST) if colour == B else (FIRST, SECOND)
        claim = coordinator_pb2.MatchGame(
            game_id=rec.game_id,
            candidate_color=colour,
            winner=colour,
            score=99.0,  # the report's own figure is not what counts
            moves=len(rec.moves),
            record=rec,
        )
        assert (await v.report([claim])).games_recorded == 1
    conn = coord.connect(readonly=True)
    try:
        (score,) = conn.execute(
            "SELECT score FROM match_games WHERE game_id = ?", (rec.game_id,)
        ).fetchone()
    finally:
        conn.close()
    assert score == pytest.approx(rec.result.score) and score != 99.0


async def test_records_can_be_made_optional_for_a_trusted_setup(coordinator_factory) -> None:
    coord = await coordinator_factory(match_records_required=False, **GATED)
    await publish(coord, FIRST)
    await publish(coord, SECOND)
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        v = await volunteer(stub)
        claims = [
            coordinator_pb2.MatchGame(game_id=f"t{i}", candidate_color=c, winner=c, moves=60)
            for i, c in enumerate((B, W, B, W))
        ]
        assert (await v.report(claims)).decision == "released"
        assert (await best_and_counts(stub))[0] == SECOND


async def test_one_token_with_legal_unplayed_records_still_releases_without_a_quorum(
    coordinator_factory,
) -> None:
    # The second forgery: random legal games with the task's id and the right
    # names. Each replays as a finished game, so with gating_min_tokens 1 they decide the
    # match; what the records cannot show (that the nets chose the moves) is why a public
    # run sets gating_min_tokens (tests/test_gating_quorum.py).
    coord = await coordinator_factory(**GATED)
    await publish(coord, FIRST)
    await publish(coord, SECOND)
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        v = await volunteer(stub)
        forged = [match_game(v.task, c, True, seed=10 + i) for i, c in enumerate((B, W, B, W))]
        assert (await v.report(forged)).decision == "released"
