"""Coordinator ingest, payloads: malformed uploads are INVALID_ARGUMENT, a batch may come in
several zstd frames, and zstd and protobuf bombs are refused before they cost memory."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
import zstandard

from kgrpc.coordinator.testing import upload_request
from kgrpc.randgame import make_random_game, make_random_games
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc, records_pb2
from tests.ingest_helpers import ACCEPTED, REJECTED, varint


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


async def test_zstd_bomb_is_refused_in_one_frame_or_many(coordinator_factory) -> None:
    coord = await coordinator_factory(max_decompressed_mb=1)
    z = zstandard.ZstdCompressor()
    # A batch whose only field is unknown and 3 MB long: skipped as protobuf would, but its
    # bytes count towards the limit like any other.
    raw = b"\x12" + varint(3 << 20) + b"\0" * (3 << 20)
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
    huge_game = z.compress(b"\x0a" + varint(len(inner)) + inner)
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
            b"\x0a" + varint(len(b)) + b
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
