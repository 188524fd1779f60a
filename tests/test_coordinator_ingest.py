"""Coordinator ingest: validation (one test per rejection reason), duplicates, concurrency, "
"storage."""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from pathlib import Path

import grpc
import numpy as np
import pytest
import zstandard

from kgrpc.coordinator.store import Store
from kgrpc.coordinator.testing import upload_request, upload_requests
from kgrpc.go.board import Board
from kgrpc.randgame import make_random_game, make_random_games
from kgrpc.records.build import game_to_proto
from kgrpc.schema import packed_row_bytes
from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc, records_pb2

ACCEPTED = coordinator_pb2.GAME_STATUS_ACCEPTED
DUPLICATE = coordinator_pb2.GAME_STATUS_DUPLICATE
REJECTED = coordinator_pb2.GAME_STATUS_REJECTED


async def upload(coord, games, per_message=8) -> coordinator_pb2.UploadGamesResponse:
    """Upload ``games``, each naming a task stored for it (the ingest's mechanics are tested
    here; tests/test_coordinator_tasks.py tests tasks as GetTask issues them)."""
    await coord.store_tasks_for(games)
    async with coord.channel("worker") as ch:
        return await coordinator_pb2_grpc.CoordinatorStub(ch).UploadGames(
            iter(upload_requests(games, per_message))
        )


def shard_game_ids(data_dir: Path, run: str = "run_001") -> list[str]:
    ids: list[str] = []
    for p in sorted((data_dir / "training_data" / run).glob("games_*.npz")):
        with np.load(p) as z:
            ids.extend(str(g) for g in z["game_ids"])
            assert len(set(z["game_index"].tolist())) == len(z["game_ids"])
    return ids


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


def _mutations():
    def occupied(g):
        g.moves[2] = g.moves[0]

    def policy_sum(g):
        t = g.targets[5]
        t.policy_probs[:] = [2 * p for p in t.policy_probs]

    def policy_illegal(g):
        # mass on a point occupied since move 0
        t = g.targets[6]
        t.policy_moves[-1] = g.moves[0] if g.moves[0] not in t.policy_moves else g.moves[2]

    def negative(g):
        t = g.targets[3]
        t.policy_probs[0] = -t.policy_probs[0]

    def nan_policy(g):
        g.targets[3].policy_probs[0] = math.nan

    def resigned_after_passes(g):
        # Issue 11, item 8: ended by two passes, marked resigned with the loser as winner.
        assert list(g.moves[-2:]) == [81, 81]
        g.result.winner = LOSER[g.result.winner]
        g.result.score = -g.result.score
        g.result.resigned = True

    def played_unvisited(g):
        # Issue 11, item 10: a full-search target giving the played move no probability.
        t = g.targets[4]
        assert t.full_search and g.moves[4] in t.policy_moves
        pairs = zip(t.policy_moves, t.policy_probs, strict=True)
        keep = [(m, p) for m, p in pairs if m != g.moves[4]]
        del t.policy_moves[:], t.policy_probs[:]
        t.policy_moves.extend(m for m, _ in keep)
        t.policy_probs.extend(p / sum(q for _, q in keep) for _, p in keep)
        t.played_visits = 0

    return {
        "resign_inconsistent": ({}, resigned_after_passes),
        "unfinished_12_moves": ({}, lambda g: cut(g, 12)),  # issue 11, item 9
        "unfinished_40_moves_area_scored": ({}, lambda g: cut(g, 40)),  # issue 11, item 9
        "played_move_unvisited": ({}, played_unvisited),
        "too_short": (dict(max_moves=5), None),
        "unsupported_rules": (dict(rules="japanese"), None),
        "illegal_move": ({}, occupied),
        "policy_invalid": ({}, policy_sum),
        "policy_illegal_move": ({}, policy_illegal),
        "policy_negative": ({}, negative),
        "policy_nan": ({}, nan_policy),
        "value_invalid": ({}, lambda g: setattr(g.targets[4], "root_value", 3.0)),
        "result_mismatch": ({}, lambda g: setattr(g.result, "score", g.result.score + 2)),
        "ownership_mismatch": (
            {},
            lambda g: g.result.ownership.__setitem__(0, -g.result.ownership[0] or 1),
        ),
        "targets_mismatch": ({}, lambda g: g.targets.pop()),
        "bad_board_size": ({}, lambda g: setattr(g, "board_size", 20)),
        "bad_komi": ({}, lambda g: setattr(g, "komi", math.inf)),
        "bad_game_id": ({}, lambda g: setattr(g, "game_id", "")),
        "game_id_with_nul": (
            {},
            lambda g: setattr(g, "game_id", "game-1\x00"),
        ),  # "<U36" in shards drops it
    }


LOSER = {
    common_pb2.COLOR_BLACK: common_pb2.COLOR_WHITE,
    common_pb2.COLOR_WHITE: common_pb2.COLOR_BLACK,
}


def cut(g: records_pb2.GameRecord, k: int) -> None:
    """Cut ``g`` after ``k`` moves and give it the result of that position (area score and
    ownership, as if it had been played out): only its length gives it away."""
    board = Board(g.board_size, komi=g.komi)
    for m in g.moves[:k]:
        board.play(m)
    del g.moves[k:], g.targets[k:]
    g.result.CopyFrom(game_to_proto(board, list(g.targets), game_id=g.game_id).result)


def resigned_game(seed: int) -> records_pb2.GameRecord:
    """A game white resigned after black's 15th move (white to move, black wins)."""
    g = make_random_game(9, seed=seed)
    cut(g, 29)
    g.result.resigned, g.result.winner, g.result.score = True, common_pb2.COLOR_BLACK, 6.5
    return g


EXPECTED_REASON = {
    "unfinished_12_moves": "unfinished",
    "unfinished_40_moves_area_scored": "unfinished",
    "policy_illegal_move": "policy_invalid",
    "policy_negative": "policy_invalid",
    "policy_nan": "policy_invalid",
    "game_id_with_nul": "bad_game_id",
}


@pytest.mark.parametrize("case", list(_mutations()))
async def test_each_rejection_reason(coordinator, case) -> None:
    kwargs, mutate = _mutations()[case]
    game = make_random_game(9, seed=7, **kwargs)
    assert game.moves[0] != 81
    if mutate is not None:
        mutate(game)
    good = make_random_game(9, seed=8)
    resp = await upload(coordinator, [game, good])
    assert resp.rejected == 1 and resp.accepted == 1
    ack = resp.acks[0]
    assert ack.status == REJECTED
    assert ack.reason == EXPECTED_REASON.get(case, case), ack.detail
    assert ack.detail
    async with coordinator.channel() as ch:
        stats = await coordinator_pb2_grpc.CoordinatorStub(ch).GetStats(
            coordinator_pb2.GetStatsRequest()
        )
    assert stats.games_rejected == 1 and stats.rejects_by_reason[ack.reason] == 1
    (worker,) = [w for w in stats.workers if w.games_rejected]
    assert worker.rejects_by_reason[ack.reason] == 1


async def test_games_of_every_ending_are_accepted(coordinator_factory) -> None:
    coord = await coordinator_factory(max_moves=60)
    by_passes = next(
        g for g in (make_random_game(5, seed=s) for s in range(20)) if len(g.moves) < 60
    )
    at_cap = make_random_game(9, seed=3, max_moves=60)  # the coordinator's cap on 9x9
    assert len(at_cap.moves) == 60 and list(at_cap.moves[-2:]) != [81, 81]
    older = make_random_game(9, seed=4, max_moves=60)
    older.format_version = 0  # an older writer: no played_visits
    for t in older.targets:
        t.played_visits = 0
    resigned = resigned_game(5)
    resp = await upload(coord, [by_passes, at_cap, older, resigned])
    assert [a.status for a in resp.acks] == [ACCEPTED] * 4, [a.detail for a in resp.acks]
    # The same 60-move game is unfinished for a coordinator whose cap is 162 on 9x9.
    other = await coordinator_factory()
    resp = await upload(other, [at_cap])
    assert resp.acks[0].reason == "unfinished" and "162" in resp.acks[0].detail


async def test_too_long_is_configurable(coordinator_factory) -> None:
    coord = await coordinator_factory(max_moves=50)
    resp = await upload(coord, [make_random_game(9, seed=3)])
    assert resp.acks[0].reason == "too_long"


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


async def test_bad_payloads_are_invalid_argument(coordinator) -> None:
    game = make_random_game(9, seed=1)
    await coordinator.store_tasks_for([game])
    good = upload_request([game])
    batch = records_pb2.GameBatch(games=[make_random_game(9, seed=2)])
    bad = {
        "not valid zstd": coordinator_pb2.UploadGamesRequest(games_zstd=b"garbage!", game_count=1),
        "game_count says 2": coordinator_pb2.UploadGamesRequest(
            games_zstd=zstandard.ZstdCompressor().compress(batch.SerializeToString()), game_count=2
        ),
        "does not decode": coordinator_pb2.UploadGamesRequest(
            games_zstd=zstandard.ZstdCompressor().compress(b"\xff\xff\xff\xff"), game_count=1
        ),
        "game_count must be positive": coordinator_pb2.UploadGamesRequest(
            games_zstd=good.games_zstd, game_count=0
        ),
    }
    async with coordinator.channel() as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        for fragment, req in bad.items():
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.UploadGames(iter([req]))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert fragment in err.value.details()
        ok = await stub.UploadGames(iter([good]))
        assert ok.accepted == 1


async def test_upload_of_several_zstd_frames(coordinator) -> None:
    # A streaming compressor may emit the batch as several concatenated frames.
    games = make_random_games(3, 9, seed=77)
    await coordinator.store_tasks_for(games)
    raw = records_pb2.GameBatch(games=games).SerializeToString()
    cut = len(raw) // 2
    z = zstandard.ZstdCompressor()
    req = coordinator_pb2.UploadGamesRequest(
        games_zstd=z.compress(raw[:cut]) + z.compress(raw[cut:]), game_count=3
    )
    async with coordinator.channel() as ch:
        resp = await coordinator_pb2_grpc.CoordinatorStub(ch).UploadGames(iter([req]))
    assert resp.accepted == 3


async def test_process_pool_validation(coordinator_factory) -> None:
    coord = await coordinator_factory(validate_workers=1)
    games = make_random_games(3, 9, seed=9)
    games[1].result.score += 1
    resp = await upload(coord, games)
    assert [a.status for a in resp.acks] == [ACCEPTED, REJECTED, ACCEPTED]
    assert resp.acks[1].reason == "result_mismatch"


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


@pytest.mark.slow
async def test_dead_validation_process_is_replaced(coordinator_factory) -> None:
    import os
    import signal

    coord = await coordinator_factory(validate_workers=1)
    assert (await upload(coord, [make_random_game(9, seed=21)])).accepted == 1
    pool = coord.app.validation.pool
    for pid in list(pool._processes):  # killed for memory, say
        os.kill(pid, signal.SIGKILL)
    for _ in range(200):
        if pool._broken:
            break
        await asyncio.sleep(0.02)
    assert pool._broken
    resp = await upload(coord, [make_random_game(9, seed=22)])
    assert resp.accepted == 1
    assert coord.app.validation.pool is not pool


async def test_zstd_bomb_is_refused_in_one_frame_or_many(coordinator_factory) -> None:
    coord = await coordinator_factory(max_decompressed_mb=1)
    z = zstandard.ZstdCompressor()
    # A batch whose only field is unknown and 3 MB long: skipped as protobuf would, but its
    # bytes count towards the limit like any other.
    raw = b"\x12" + _varint(3 << 20) + b"\0" * (3 << 20)
    one = z.compress(raw)
    many = b"".join(z.compress(raw[i : i + (256 << 10)]) for i in range(0, len(raw), 256 << 10))
    async with coord.channel() as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        for payload in (one, many):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.UploadGames(
                    iter([coordinator_pb2.UploadGamesRequest(games_zstd=payload, game_count=1)])
                )
            assert (
                err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                and "exceeds 1048576 bytes" in err.value.details()
            )
        stats = await stub.GetStats(coordinator_pb2.GetStatsRequest())
    assert stats.games_received == 0


async def test_protobuf_bombs_are_refused_before_parsing(coordinator) -> None:
    z = zstandard.ZstdCompressor()
    # ~1 KB of zstd: 4 million empty games, or one game of 3 million empty search targets.
    many_games = z.compress(b"\x0a\x00" * 4_000_000)
    inner = b"\x0a\x04abcd" + b"\x42\x00" * 3_000_000
    huge_game = z.compress(b"\x0a" + _varint(len(inner)) + inner)
    async with coordinator.channel() as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        for payload, fragment in (
            (many_games, "more than 1000 games"),
            (huge_game, "more than a game of the accepted length"),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.UploadGames(
                    iter([coordinator_pb2.UploadGamesRequest(games_zstd=payload, game_count=1)])
                )
            assert (
                err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                and fragment in err.value.details()
            )
        # one game that does not parse among good ones: only that one is refused
        good = make_random_games(2, 9, seed=88)
        await coordinator.store_tasks_for(good)
        raw = b"".join(
            b"\x0a" + _varint(len(b)) + b
            for b in (good[0].SerializeToString(), b"\x42\x05\xff", good[1].SerializeToString())
        )
        resp = await stub.UploadGames(
            iter([coordinator_pb2.UploadGamesRequest(games_zstd=z.compress(raw), game_count=3)])
        )
    assert [a.status for a in resp.acks] == [ACCEPTED, REJECTED, ACCEPTED] and resp.acks[
        1
    ].reason == "undecodable"


def test_batch_split_memory_is_bounded() -> None:
    # Parsed whole, 5 million empty games took ~800 MB; split from the wire format, nothing.
    import subprocess
    import sys

    code = (
        "import resource, zstandard\n"
        "from kgrpc.coordinator.upload import decode_batch\n"
        "from kgrpc.v1 import coordinator_pb2\n"
        "bomb = zstandard.ZstdCompressor().compress(b'\\x0a\\x00' * 5_000_000)\n"
        "req = coordinator_pb2.UploadGamesRequest(games_zstd=bomb, game_count=1)\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "try:\n"
        "    decode_batch(req, 256 << 20, 1000)\n"
        "except Exception as exc:  # CoordinatorError: INVALID_ARGUMENT\n"
        "    print(type(exc).__name__)\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent.parent,
    )
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) < 200, out.stdout  # MB above the start


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def test_validation_with_the_terms_of_the_task_a_game_names() -> None:
    # What the ingest passes with each game: the stored terms of its task
    # (kgrpc.records.terms.TaskTerms).
    import dataclasses

    from kgrpc.coordinator import validate
    from kgrpc.records.terms import TaskTerms, move_cap

    g = make_random_game(9, seed=11, task_id="selfplay-x", model="m")
    data = g.SerializeToString()
    strict = validate.ValidationSettings(require_task=True)
    out = validate.validate_record_bytes(data, "w-1", strict)
    assert (out.ok, out.reason) == (False, "unknown_task") and "selfplay-x" in out.detail
    terms = TaskTerms("selfplay-x", 9, "chinese", 7.5, 7.5, 0.0, move_cap(9), ("m",), "w-1")
    assert validate.validate_many([(data, "w-1", terms)], strict)[0].ok
    for change in (dict(board_size=13), dict(komi_low=6.5, komi_high=6.5), dict(worker_id="w-2")):
        out = validate.validate_many([(data, "w-1", dataclasses.replace(terms, **change))], strict)[
            0
        ]
        assert (out.ok, out.reason) == (False, "task_mismatch"), out.detail
    lax = validate.ValidationSettings(require_task=False)
    assert validate.validate_many([(data, "w-1")], lax)[0].ok


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
