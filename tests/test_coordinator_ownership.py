"""Which token may act for which worker: uploads, Register, Heartbeat, match results."""

from __future__ import annotations

import hashlib

import grpc
import pytest

from kgrpc.coordinator import auth
from kgrpc.coordinator.server import CoordinatorApp
from kgrpc.coordinator.testing import upload_request
from kgrpc.net import make_channel
from kgrpc.randgame import make_random_game
from kgrpc.schema import FEATURE_VERSION
from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tests.model_files import model_bytes

ACCEPTED = coordinator_pb2.GAME_STATUS_ACCEPTED
REJECTED = coordinator_pb2.GAME_STATUS_REJECTED


def new_token(coord, role: str = "worker", label: str = "other") -> str:
    conn = coord.connect()
    try:
        text, _ = auth.create_token(conn, role, label)
    finally:
        conn.close()
    return text


def stub_for(coord, token: str):
    ch = make_channel(coord.address, token=token)
    return ch, coordinator_pb2_grpc.CoordinatorStub(ch)


async def register(stub, previous: str = "", username: str = "u") -> str:
    resp = await stub.Register(
        coordinator_pb2.RegisterRequest(username=username, previous_worker_id=previous)
    )
    return resp.worker_id


# The task every game here names: stored, open to any worker, by each test (open_task).
TASK = "selfplay-ownership"


def game(seed: int, worker_id: str = ""):
    g = make_random_game(9, seed=seed, task_id=TASK)
    g.worker_id = worker_id
    return g


async def open_task(coord) -> None:
    await coord.store_tasks_for([game(0)])


def workers(coord) -> dict[str, dict]:
    conn = coord.connect(readonly=True)
    try:
        return {r["worker_id"]: dict(r) for r in conn.execute("SELECT * FROM workers")}
    finally:
        conn.close()


async def test_upload_may_name_only_a_worker_of_the_callers_token(coordinator) -> None:
    await open_task(coordinator)
    other = new_token(coordinator)
    ch_a, a = stub_for(coordinator, coordinator.worker_token)
    ch_b, b = stub_for(coordinator, other)
    async with ch_a, ch_b:
        wa = await register(a)
        wb = await register(b)
        resp = await b.UploadGames(
            iter(
                [
                    upload_request(
                        [
                            game(1, wa),  # A's worker: refused
                            game(
                                2, "w-0123456789abcdef"
                            ),  # registered by nobody: refused, and no row made for it
                            game(3, wb),  # B's own worker
                            game(4, ""),  # no worker id: B's bucket
                        ]
                    )
                ]
            )
        )
        assert [a.status for a in resp.acks] == [REJECTED, REJECTED, ACCEPTED, ACCEPTED]
        assert [a.reason for a in resp.acks[:2]] == ["worker_mismatch", "worker_mismatch"]
        assert "another token" in resp.acks[0].detail and "not registered" in resp.acks[1].detail
        stats = await a.GetStats(coordinator_pb2.GetStatsRequest())
    assert stats.rejects_by_reason["worker_mismatch"] == 2
    rows = workers(coordinator)
    assert "w-0123456789abcdef" not in rows
    assert (
        rows[wa]["games_accepted"] == rows[wa]["games_rejected"] == 0
    )  # nothing is put on A's record
    assert rows[wb]["games_accepted"] == 1
    (bucket,) = [w for w in rows if w.startswith("token-")]
    assert rows[bucket]["games_accepted"] == 1 and rows[bucket]["games_rejected"] == 2
    assert rows[bucket]["token_id"] == rows[wb]["token_id"] != rows[wa]["token_id"]
    by_id = {w.worker_id: w for w in stats.workers}
    assert by_id[bucket].rejects_by_reason["worker_mismatch"] == 2


async def test_register_never_hands_over_another_tokens_worker(coordinator) -> None:
    await open_task(coordinator)
    other = new_token(coordinator)
    ch_a, a = stub_for(coordinator, coordinator.worker_token)
    ch_b, b = stub_for(coordinator, other)
    async with ch_a, ch_b:
        wa = await register(a)
        assert await register(a, previous=wa) == wa  # own worker, e.g. after a restart
        wb = await register(b, previous=wa)
        assert wb != wa
        # B's bucket (games uploaded without a worker id) is B's too
        assert (await b.UploadGames(iter([upload_request([game(5)])]))).accepted == 1
        bucket = next(w for w in workers(coordinator) if w.startswith("token-"))
        assert await register(a, previous=bucket) != bucket
        # an id unknown to the index (restored from an older backup) goes back to whoever asks
        # first, under that token: afterwards it is that token's worker
        restored = "w-00000000000000aa"
        assert await register(b, previous=restored) == restored
        assert await register(a, previous=restored) != restored
        assert (await a.UploadGames(iter([upload_request([game(6, restored)])]))).acks[
            0
        ].reason == "worker_mismatch"
        assert (await b.UploadGames(iter([upload_request([game(6, restored)])]))).accepted == 1
        # ids not in Register's format are never taken over
        assert await register(a, previous="token-999") != "token-999"
    rows = workers(coordinator)
    assert rows[wa]["token_id"] != rows[wb]["token_id"] and "token-999" not in rows


async def test_a_worker_row_without_a_token_cannot_be_claimed(coordinator) -> None:
    await open_task(coordinator)
    # Rows that earlier versions made from uploaded records carry no token.
    conn = coordinator.connect()
    conn.execute("INSERT INTO workers (worker_id, registered_ms) VALUES ('w-1111111111111111', 0)")
    conn.close()
    ch, a = stub_for(coordinator, coordinator.worker_token)
    async with ch:
        assert await register(a, previous="w-1111111111111111") != "w-1111111111111111"
        resp = await a.UploadGames(iter([upload_request([game(7, "w-1111111111111111")])]))
        assert resp.acks[0].reason == "worker_mismatch"
    assert workers(coordinator)["w-1111111111111111"]["token_id"] is None


@pytest.mark.parametrize("auth_on", [True, False])
async def test_games_without_a_worker_id_count_under_the_bucket(
    coordinator_factory, auth_on
) -> None:
    coord = await coordinator_factory(auth=auth_on)
    await open_task(coord)
    ch, a = stub_for(coord, coord.worker_token)
    async with ch:
        resp = await a.UploadGames(iter([upload_request([game(8)])]))
        assert resp.accepted == 1
        if not auth_on:  # trusted: any registered worker may be named, nothing else
            w = await register(a)
            assert (await a.UploadGames(iter([upload_request([game(9, w)])]))).accepted == 1
            assert (
                await a.UploadGames(iter([upload_request([game(10, "w-2222222222222222")])]))
            ).rejected == 1
    rows = workers(coord)
    bucket = "token-1" if auth_on else "anonymous"
    assert rows[bucket]["games_accepted"] == 1
    assert "w-2222222222222222" not in rows


# ---------------------------------------------------------------------- match results, heartbeats
B, W = common_pb2.COLOR_BLACK, common_pb2.COLOR_WHITE
CANDIDATE, REFERENCE = "kg-b2c16-s2000-d100", "kg-b2c16-s0-d0"


async def publish_pair(coord) -> None:
    ch, t = stub_for(coord, coord.trainer_token)
    async with ch:
        for name in (REFERENCE, CANDIDATE):
            data = model_bytes(name)
            h = coordinator_pb2.PublishHeader(
                name=name,
                sha256=hashlib.sha256(data).hexdigest(),
                size_bytes=len(data),
                feature_version=FEATURE_VERSION,
            )
            await t.PublishModel(
                iter(
                    [
                        coordinator_pb2.PublishModelRequest(header=h),
                        coordinator_pb2.PublishModelRequest(data=data),
                    ]
                )
            )


def report_req(
    task_id: str, worker_id: str, *games: tuple[str, int, int]
) -> coordinator_pb2.ReportMatchResultRequest:
    return coordinator_pb2.ReportMatchResultRequest(
        task_id=task_id,
        worker_id=worker_id,
        candidate_model=CANDIDATE,
        reference_model=REFERENCE,
        games=[
            coordinator_pb2.MatchGame(game_id=g, candidate_color=c, winner=win, moves=60)
            for g, c, win in games
        ],
    )


async def denied(call, fragment: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, err.value.details()
    assert fragment in err.value.details()


async def test_match_results_count_only_from_the_worker_the_task_was_issued_to(
    coordinator_factory,
) -> None:
    # Who may report is checked before any record (tests/test_gating_forgery.py): these
    # reports carry the results alone.
    coord = await coordinator_factory(
        gating_games=4, match_chunk_games=2, match_records_required=False
    )
    await publish_pair(coord)
    other = new_token(coord)
    ch_a, a = stub_for(coord, coord.worker_token)
    ch_b, b = stub_for(coord, other)
    async with ch_a, ch_b:
        wa, wb = await register(a), await register(b)
        # asking for a task in another token's worker's name hands it no match games
        stolen = await b.GetTask(coordinator_pb2.GetTaskRequest(worker_id=wa))
        assert stolen.WhichOneof("kind") == "selfplay"
        task = await a.GetTask(coordinator_pb2.GetTaskRequest(worker_id=wa))
        assert task.WhichOneof("kind") == "match" and task.match.games == 2
        losses = [("x1", B, W), ("x2", W, B)]
        await denied(
            b.ReportMatchResult(report_req(task.task_id, wb, *losses)), f"issued to worker {wa!r}"
        )
        await denied(
            b.ReportMatchResult(report_req(task.task_id, wa, *losses)),
            "not registered under this token",
        )
        await denied(
            b.ReportMatchResult(report_req("match-1-made-up", wb, *losses)), "not a match task"
        )
        await denied(b.ReportMatchResult(report_req("", wb, *losses)), "not a match task")
        await denied(
            a.ReportMatchResult(report_req(task.task_id, "w-nobody", *losses)),
            f"issued to worker {wa!r}",
        )
        # one task cannot carry more games than it was issued for (nothing of that report is kept)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await a.ReportMatchResult(
                report_req(task.task_id, wa, ("g1", B, B), ("g2", W, W), ("g3", B, B))
            )
        assert (
            err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            and "issued for 2 games" in err.value.details()
        )
        (match,) = (await a.GetStats(coordinator_pb2.GetStatsRequest())).matches
        assert (match.wins, match.losses, match.decision) == (0, 0, "pending")
        r = await a.ReportMatchResult(report_req(task.task_id, wa, ("g1", B, B)))
        assert (r.games_recorded, r.decision) == (1, "pending")
        r = await a.ReportMatchResult(
            report_req(task.task_id, wa, ("g1", B, B), ("g2", W, W))
        )  # idempotent per game id
        assert (r.games_recorded, r.decision) == (1, "pending")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await a.ReportMatchResult(report_req(task.task_id, wa, ("g3", B, B)))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # the issued tasks are in the index: a restarted coordinator still knows whose they are
    await coord.stop()
    app = CoordinatorApp(coord.app.cfg)
    await app.start()
    try:
        async with (
            make_channel(app.address, token=coord.worker_token) as ch_a,
            make_channel(app.address, token=other) as ch_b,
        ):
            a, b = (
                coordinator_pb2_grpc.CoordinatorStub(ch_a),
                coordinator_pb2_grpc.CoordinatorStub(ch_b),
            )
            t2 = await a.GetTask(coordinator_pb2.GetTaskRequest(worker_id=wa))
            assert t2.WhichOneof("kind") == "match"
            await denied(
                b.ReportMatchResult(report_req(t2.task_id, wb, *losses)), f"issued to worker {wa!r}"
            )
            r = await a.ReportMatchResult(report_req(t2.task_id, wa, ("g4", B, B), ("g5", W, W)))
            assert (r.games_recorded, r.decision) == (2, "released")
            (match,) = (await a.GetStats(coordinator_pb2.GetStatsRequest())).matches
            assert (match.wins, match.losses) == (4, 0)
    finally:
        await app.stop(0.5)


async def test_a_trainer_token_may_act_as_a_worker_of_its_own(coordinator_factory) -> None:
    coord = await coordinator_factory(
        gating_games=2, match_chunk_games=2, match_records_required=False
    )
    await publish_pair(coord)
    ch, t = stub_for(coord, coord.trainer_token)
    async with ch:
        w = await register(t)
        await t.Heartbeat(coordinator_pb2.HeartbeatRequest(worker_id=w))
        task = await t.GetTask(coordinator_pb2.GetTaskRequest(worker_id=w))
        r = await t.ReportMatchResult(report_req(task.task_id, w, ("t1", B, B), ("t2", W, W)))
        assert (r.games_recorded, r.decision) == (2, "released")


async def test_heartbeat_only_for_a_worker_of_the_callers_token(coordinator) -> None:
    await open_task(coordinator)
    other = new_token(coordinator)
    ch_a, a = stub_for(coordinator, coordinator.worker_token)
    ch_b, b = stub_for(coordinator, other)
    async with ch_a, ch_b:
        wa = await register(a)
        stats = coordinator_pb2.WorkerStats(games_finished=7, current_model="mine")
        await a.Heartbeat(coordinator_pb2.HeartbeatRequest(worker_id=wa, stats=stats))
        before = workers(coordinator)[wa]
        await denied(
            b.Heartbeat(
                coordinator_pb2.HeartbeatRequest(
                    worker_id=wa, stats=coordinator_pb2.WorkerStats(current_model="forged")
                )
            ),
            "not registered under this token",
        )
        assert workers(coordinator)[wa] == before
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await b.Heartbeat(coordinator_pb2.HeartbeatRequest(worker_id="w-nobody"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND  # a stock worker registers again on it
