"""A coordinator with something to show: games, a gated release, kept SGFs; fed through the
real RPCs (Register, Heartbeat, UploadGames, PublishModel, GetTask, ReportMatchResult)."""

from __future__ import annotations

from dataclasses import dataclass, field

import aiohttp

from kgrpc.coordinator.testing import RunningCoordinator, upload_requests
from kgrpc.randgame import make_random_game
from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc, records_pb2
from tests.model_files import publish  # also the name the dashboard and gating tests import

FIRST = "kg-b2c16-s0-d0"
SECOND = "kg-b2c16-s2000-d100"


def match_game(
    seed: int, candidate: str, reference: str, task_id: str = ""
) -> tuple[records_pb2.GameRecord, coordinator_pb2.MatchGame]:
    """A gating game of match task ``task_id`` the candidate won (it plays the colour that
    wins this random game)."""
    rec = make_random_game(9, seed=seed, task_id=task_id)
    winner = rec.result.winner
    assert winner != common_pb2.COLOR_UNSPECIFIED  # komi 7.5: no draws
    black_is_candidate = winner == common_pb2.COLOR_BLACK
    rec.black_model = candidate if black_is_candidate else reference
    rec.white_model = reference if black_is_candidate else candidate
    game = coordinator_pb2.MatchGame(
        game_id=rec.game_id,
        candidate_color=winner,
        winner=winner,
        score=rec.result.score,
        moves=len(rec.moves),
        record=rec,
    )
    return rec, game


@dataclass
class Fed:
    worker_id: str
    selfplay: list[records_pb2.GameRecord] = field(default_factory=list)
    gating: list[records_pb2.GameRecord] = field(default_factory=list)
    positions: int = 0


async def populate(
    coord: RunningCoordinator,
    *,
    username: str = "alice",
    hostname: str = "box-1",
    games: int = 6,
    seed: int = 500,
) -> Fed:
    """Release FIRST, upload ``games`` self-play games of it (for a task GetTask issued)
    from a worker of ``username``, publish SECOND and play its 2-game gating match (won, so
    it is released); wait until every kept SGF is written. Needs gating_games=2,
    match_chunk_games=2."""
    await publish(coord, FIRST)
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        w = (
            await stub.Register(
                coordinator_pb2.RegisterRequest(username=username, hostname=hostname)
            )
        ).worker_id
        await stub.Heartbeat(coordinator_pb2.HeartbeatRequest(worker_id=w))
        fed = Fed(w)
        selfplay = await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=w))
        assert selfplay.selfplay.model == FIRST and selfplay.board_size == 9, selfplay
        fed.selfplay = [
            make_random_game(9, seed=seed + i, worker_id=w, model=FIRST, task_id=selfplay.task_id)
            for i in range(games)
        ]
        resp = await stub.UploadGames(iter(upload_requests(fed.selfplay, per_message=4)))
        assert resp.accepted == games, resp
        fed.positions = sum(sum(t.full_search for t in g.targets) for g in fed.selfplay)
        out = await publish(coord, SECOND)
        assert out.gating_scheduled
        task = await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=w))
        assert task.match.games == 2, task
        played = [match_game(seed + 100 + i, SECOND, FIRST, task.task_id) for i in range(2)]
        report = await stub.ReportMatchResult(
            coordinator_pb2.ReportMatchResultRequest(
                task_id=task.task_id,
                worker_id=w,
                candidate_model=SECOND,
                reference_model=FIRST,
                games=[g for _, g in played],
            )
        )
        assert report.decision == "released", report
        fed.gating = [r for r, _ in played]
    await coord.app.archive.drain()
    return fed


def http_url(coord: RunningCoordinator) -> str:
    return coord.app.dashboard.url.rstrip("/")


async def get_text(url: str) -> tuple[int, str, dict[str, str]]:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        return r.status, await r.text(), dict(r.headers)


async def get_json(url: str) -> object:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        assert r.status == 200, (url, r.status, await r.text())
        assert r.headers["Content-Type"].startswith("application/json")
        return await r.json()
