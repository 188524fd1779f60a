"""Which token may act for which worker: uploads, Register, Heartbeat, match results."""

from __future__ import annotations

import pytest

from kgrpc.coordinator import auth, db
from kgrpc.coordinator.testing import upload_request
from kgrpc.net import make_channel
from kgrpc.randgame import make_random_game
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc

ACCEPTED = coordinator_pb2.GAME_STATUS_ACCEPTED
REJECTED = coordinator_pb2.GAME_STATUS_REJECTED


def new_token(coord, role: str = "worker", label: str = "other") -> str:
    conn = db.connect(coord.data_dir)
    try:
        text, _ = auth.create_token(conn, role, label)
    finally:
        conn.close()
    return text


def stub_for(coord, token: str):
    ch = make_channel(coord.address, token=token)
    return ch, coordinator_pb2_grpc.CoordinatorStub(ch)


async def register(stub, previous: str = "", username: str = "u") -> str:
    resp = await stub.Register(coordinator_pb2.RegisterRequest(username=username, previous_worker_id=previous))
    return resp.worker_id


def game(seed: int, worker_id: str = ""):
    g = make_random_game(9, seed=seed)
    g.worker_id = worker_id
    return g


def workers(coord) -> dict[str, dict]:
    conn = db.connect(coord.data_dir, readonly=True)
    try:
        return {r["worker_id"]: dict(r) for r in conn.execute("SELECT * FROM workers")}
    finally:
        conn.close()


async def test_upload_may_name_only_a_worker_of_the_callers_token(coordinator) -> None:
    other = new_token(coordinator)
    ch_a, a = stub_for(coordinator, coordinator.worker_token)
    ch_b, b = stub_for(coordinator, other)
    async with ch_a, ch_b:
        wa = await register(a)
        wb = await register(b)
        resp = await b.UploadGames(iter([upload_request([
            game(1, wa),                    # A's worker: refused
            game(2, "w-0123456789abcdef"),  # registered by nobody: refused, and no row made for it
            game(3, wb),                    # B's own worker
            game(4, ""),                    # no worker id: B's bucket
        ])]))
        assert [a.status for a in resp.acks] == [REJECTED, REJECTED, ACCEPTED, ACCEPTED]
        assert [a.reason for a in resp.acks[:2]] == ["worker_mismatch", "worker_mismatch"]
        assert "another token" in resp.acks[0].detail and "not registered" in resp.acks[1].detail
        stats = await a.GetStats(coordinator_pb2.GetStatsRequest())
    assert stats.rejects_by_reason["worker_mismatch"] == 2
    rows = workers(coordinator)
    assert "w-0123456789abcdef" not in rows
    assert rows[wa]["games_accepted"] == rows[wa]["games_rejected"] == 0  # nothing is put on A's record
    assert rows[wb]["games_accepted"] == 1
    (bucket,) = [w for w in rows if w.startswith("token-")]
    assert rows[bucket]["games_accepted"] == 1 and rows[bucket]["games_rejected"] == 2
    assert rows[bucket]["token_id"] == rows[wb]["token_id"] != rows[wa]["token_id"]
    by_id = {w.worker_id: w for w in stats.workers}
    assert by_id[bucket].rejects_by_reason["worker_mismatch"] == 2


async def test_register_never_hands_over_another_tokens_worker(coordinator) -> None:
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
        assert (await a.UploadGames(iter([upload_request([game(6, restored)])]))).acks[0].reason == "worker_mismatch"
        assert (await b.UploadGames(iter([upload_request([game(6, restored)])]))).accepted == 1
        # ids not in Register's format are never taken over
        assert await register(a, previous="token-999") != "token-999"
    rows = workers(coordinator)
    assert rows[wa]["token_id"] != rows[wb]["token_id"] and "token-999" not in rows


async def test_a_worker_row_without_a_token_cannot_be_claimed(coordinator) -> None:
    # Rows that earlier versions made from uploaded records carry no token.
    conn = db.connect(coordinator.data_dir)
    conn.execute("INSERT INTO workers (worker_id, registered_ms) VALUES ('w-1111111111111111', 0)")
    conn.close()
    ch, a = stub_for(coordinator, coordinator.worker_token)
    async with ch:
        assert await register(a, previous="w-1111111111111111") != "w-1111111111111111"
        resp = await a.UploadGames(iter([upload_request([game(7, "w-1111111111111111")])]))
        assert resp.acks[0].reason == "worker_mismatch"
    assert workers(coordinator)["w-1111111111111111"]["token_id"] is None


@pytest.mark.parametrize("auth_on", [True, False])
async def test_games_without_a_worker_id_count_under_the_bucket(coordinator_factory, auth_on) -> None:
    coord = await coordinator_factory(auth=auth_on)
    ch, a = stub_for(coord, coord.worker_token)
    async with ch:
        resp = await a.UploadGames(iter([upload_request([game(8)])]))
        assert resp.accepted == 1
        if not auth_on:  # trusted: any registered worker may be named, nothing else
            w = await register(a)
            assert (await a.UploadGames(iter([upload_request([game(9, w)])]))).accepted == 1
            assert (await a.UploadGames(iter([upload_request([game(10, "w-2222222222222222")])]))).rejected == 1
    rows = workers(coord)
    bucket = "token-1" if auth_on else "anonymous"
    assert rows[bucket]["games_accepted"] == 1
    assert "w-2222222222222222" not in rows
