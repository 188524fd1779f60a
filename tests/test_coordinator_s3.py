"""A real coordinator (gRPC on loopback) on the S3 blob store (a real SeaweedFS): shards,
models and SGF land in the bucket and are served from it; a bad store is one line and exit
code 2; a store outage is absorbed by the ingest journal up to its bound, then UNAVAILABLE,
and drained when the store is back."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
from typing import Any

import aiohttp
import grpc
import numpy as np
import pytest

from kgrpc.blobstore import open_store
from kgrpc.coordinator.testing import upload_requests
from kgrpc.randgame import make_random_games
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from tests.model_files import model_bytes, publish


def s3_settings(server: Any, url: str) -> dict[str, Any]:
    return {
        "store": url,
        "store_endpoint": server.endpoint,
        "store_region": "us-east-1",
        "store_access_key_id": server.options().access_key_id,
        "store_secret_access_key": server.options().secret_access_key,
    }


async def upload(coord: Any, games: list[Any]) -> coordinator_pb2.UploadGamesResponse:
    await coord.store_tasks_for(games)
    async with coord.channel("worker") as ch:
        return await coordinator_pb2_grpc.CoordinatorStub(ch).UploadGames(
            iter(upload_requests(games, 4))
        )


async def listed_shards(coord: Any, want: int, tries: int = 400) -> list[Any]:
    async with coord.channel("trainer") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        for _ in range(tries):
            shards = list((await stub.ListShards(coordinator_pb2.ListShardsRequest())).shards)
            if len(shards) >= want:
                return shards
            await asyncio.sleep(0.05)
    return shards


async def download_shard(coord: Any, name: str) -> bytes:
    data = b""
    async with coord.channel("trainer") as ch:
        async for chunk in coordinator_pb2_grpc.CoordinatorStub(ch).DownloadShard(
            coordinator_pb2.DownloadShardRequest(file_name=name)
        ):
            assert chunk.offset == len(data)
            data += chunk.data
    return data


@pytest.fixture(params=["s3", "directory"])
def other_store(request: Any, tmp_path: Any) -> tuple[dict[str, Any], Any]:
    """A store that is not the data directory, as (settings, the store): a bucket prefix of
    the S3 server, or another directory (a shared file system)."""
    if request.param == "directory":
        return {"store": str(tmp_path / "shared")}, open_store(str(tmp_path / "shared"))
    server = request.getfixturevalue("s3_server")
    url = server.new_url()
    return s3_settings(server, url), open_store(url, options=server.options())


async def test_shards_models_and_sgf_live_in_the_bucket(coordinator_factory, other_store) -> None:
    settings, bucket = other_store
    coord = await coordinator_factory(
        positions_per_shard=200,
        latest_window_positions=300,
        http_listen="127.0.0.1:0",
        **settings,
    )
    games = make_random_games(6, 9, seed=900)
    resp = await upload(coord, games)
    assert resp.accepted == 6
    shards = await listed_shards(coord, 1)
    assert shards and shards[0].file_name == "games_00001.npz"
    key = "training_data/run_001/games_00001.npz"
    obj = bucket.get_bytes(key)
    assert hashlib.sha256(obj).hexdigest() == shards[0].sha256 and len(obj) == shards[0].size_bytes
    # DownloadShard reads the bucket's object: the same bytes.
    assert await download_shard(coord, "games_00001.npz") == obj
    # Served from the bucket, not the data directory: once the window rebuild that the cut
    # started is done (it reads the local copy), remove the local copy, read again.
    for _ in range(400):
        if bucket.exists("training_data/current/latest_games.npz"):
            break
        await asyncio.sleep(0.05)
    (coord.data_dir / key).unlink(missing_ok=True)
    assert await download_shard(coord, "games_00001.npz") == obj

    data = model_bytes("kg-b2c16-s0-d0")
    await publish(coord, "kg-b2c16-s0-d0", data)
    assert bucket.get_bytes("models/kg-b2c16-s0-d0.onnx") == data
    (coord.data_dir / "models" / "kg-b2c16-s0-d0.onnx").unlink()
    got = b""
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        async for chunk in stub.DownloadModel(
            coordinator_pb2.DownloadModelRequest(name="kg-b2c16-s0-d0", offset=100)
        ):
            assert chunk.offset == 100 + len(got)
            got += chunk.data
        assert got == data[100:]
        # Kept games' SGF: packed, one object per archive flush (sgf_packs.py), no files.
        await coord.app.archive.drain()
        listed = await stub.ListGames(coordinator_pb2.ListGamesRequest())
        assert {g.game_id for g in listed.games} == {g.game_id for g in games}
        packs = [o.key for o in bucket.list("sgf/")]
        assert 1 <= len(packs) < 6 and all(k.startswith("sgf/packs/") for k in packs)
        assert not list((coord.data_dir / "sgf").rglob("*.sgf"))
        body = b"".join(bucket.get_bytes(k) for k in packs)
        texts = []
        for g in games:
            one = await stub.DownloadGame(coordinator_pb2.DownloadGameRequest(game_id=g.game_id))
            assert "(;FF[4]" in one.sgf and one.sgf.encode() in body
            texts.append(one.sgf.encode())
        assert sum(map(len, texts)) == len(body)  # each game is its own slice of a pack
        # The dashboard reads the same packs.
        base = coord.app.dashboard.url.rstrip("/")
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/sgf?id={games[0].game_id}") as r:
                assert r.status == 200 and (await r.read()) == texts[0]
            async with http.get(f"{base}/models/kg-b2c16-s0-d0.onnx") as r:
                assert r.status == 200 and (await r.read()) == data
    await coord.stop()
    assert bucket.exists("training_data/current/latest_games.npz")


async def test_a_shard_left_unindexed_is_put_and_adopted_at_start(
    coordinator_factory, s3_server
) -> None:
    """Killed after the cuts' file work, before their puts and rows: the next start puts the
    local shards into the bucket and indexes them."""
    url = s3_server.new_url()
    settings = s3_settings(s3_server, url)
    coord = await coordinator_factory(positions_per_shard=200, **settings)
    await upload(coord, make_random_games(6, 9, seed=910))
    await listed_shards(coord, 1)
    await coord.stop()
    bucket = open_store(url, options=s3_server.options())
    bodies = {o.key: bucket.get_bytes(o.key) for o in bucket.list("training_data/run_001/")}
    assert bodies
    # The state a kill between the file work and the put leaves: local files, no rows, no
    # objects.
    for key in bodies:
        bucket.delete(key)
    from kgrpc.coordinator.store import Store

    store = Store(coord.data_dir, "run_001", index=coord.app.cfg.index)
    from kgrpc.coordinator import db

    with db.transaction(store.conn):
        store.conn.execute("DELETE FROM shards")
        store.conn.execute("UPDATE games SET shard_index = NULL")
    store.close()
    from kgrpc.coordinator.testing import start_coordinator

    # The same data dir, index and store (KGRPC_TEST_INDEX=postgresql: the same database).
    again = await start_coordinator(coord.data_dir.parent, index=coord.app.cfg.index, **settings)
    try:
        names = sorted(k.rsplit("/", 1)[1] for k in bodies)
        assert again.app.store.recovery.adopted_shards == names
        assert {k: bucket.get_bytes(k) for k in bodies} == bodies
        listed = await listed_shards(again, len(names))
        assert [s.file_name for s in listed] == names
        assert {s.sha256 for s in listed} == {
            hashlib.sha256(b).hexdigest() for b in bodies.values()
        }
    finally:
        await again.stop()


def _serve(env: dict[str, str], tmp_path: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kgrpc.coordinator", "--listen", "127.0.0.1:0", "--data-dir"]
        + [str(tmp_path / "d"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
def test_bad_store_is_one_line_and_exit_2(s3_server, tmp_path) -> None:
    env = {**os.environ, **s3_server.env()}
    # The wrong secret through its variable, as operators are told to give it: a flag would
    # add the warning that a secret on the command line is visible to every user (ps).
    wrong_secret = {**env, "KGRPC_COORDINATOR_STORE_SECRET_ACCESS_KEY": "wrong"}
    for args, words, args_env in [
        (("--store", "s3://Bad_Bucket"), "not an S3 bucket name", env),
        (("--store", "gs://x/y"), "unknown scheme", env),
        (("--store", "s3://no-such-bucket-kgrpc"), "bucket does not exist", env),
        (("--store", s3_server.new_url()), "credentials", wrong_secret),
    ]:
        out = _serve(args_env, tmp_path, *args)
        assert out.returncode == 2, (args, out.stderr)
        assert words in _error_line(out.stderr), (args, out.stderr)
    # The AWS variables are where the endpoint and keys come from without settings.
    down = {**env, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}
    out = _serve(down, tmp_path, "--store", s3_server.new_url())
    assert out.returncode == 2 and "cannot be reached" in _error_line(out.stderr)


def _error_line(stderr: str) -> str:
    """The one error line (the log line naming the Go engine may come before it)."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("kgrpc-coordinator:")]
    assert len(lines) == 1, stderr
    return lines[0]


# ---------------------------------------------------------------- the store down
@pytest.fixture
def own_s3() -> Any:
    """An S3 server of this test's own, to stop and start again."""
    from tests.s3_helpers import seaweed_or_skip

    server = seaweed_or_skip()
    yield server
    server.close()


@pytest.mark.slow
async def test_store_outage_journal_bound_then_drain(coordinator_factory, own_s3) -> None:
    """The store stops: uploads are still acknowledged into the journal (its shards cannot be
    put) until the journal holds store_outage_journal_mb, then UNAVAILABLE naming the store
    and the bound; once it is back every acknowledged game reaches a shard in the bucket."""
    url = own_s3.new_url()
    # flush_interval_s: the refused batch may be stored in part (see below), which can leave
    # a group short of positions_per_shard; it is cut after 2 s, not the default 10 minutes.
    coord = await coordinator_factory(
        positions_per_shard=100,
        store_outage_journal_mb=0.25,
        flush_interval_s=2.0,
        **s3_settings(own_s3, url),
    )
    bucket = open_store(url, options=own_s3.options())
    own_s3.stop()
    acked: list[str] = []
    refused = None
    refused_games: list[Any] = []
    for seed in range(40):  # about 50 KB of journal per batch of 8 9x9 games
        games = make_random_games(8, 9, seed=2000 + seed * 10)
        try:
            resp = await upload(coord, games)
        except grpc.aio.AioRpcError as exc:
            # Refused at the bound: a message of this stream taken before it may be stored;
            # the client resends the whole batch (see below), a stored game is a duplicate.
            refused, refused_games = exc, games
            break
        assert resp.accepted == len(games)
        acked += [g.game_id for g in games]
    assert refused is not None, "the journal bound was never reached"
    assert refused.code() == grpc.StatusCode.UNAVAILABLE
    details = refused.details()
    assert "object store" in details and "store_outage_journal_mb = 0.25" in details
    journal = coord.data_dir / "ingest" / "journal.bin"
    assert journal.stat().st_size >= 1 << 18
    assert acked and not await listed_shards(coord, 1, tries=1)
    await coord.app.refresh_metrics()  # what /metrics shows
    assert coord.app.metrics.store_outage_s > 0
    for _ in range(200):  # the archive's next flush finds the store down too
        if coord.app.archive.waiting_for_store:
            break
        await asyncio.sleep(0.05)
    assert coord.app.archive.waiting_for_store
    own_s3.start()
    # The cuts are tried again (at growing intervals, 10 s at most) and drain the journal.
    for _ in range(1200):
        if not sum((await coord.app.db(coord.app.store.pending_positions)).values()):
            break
        await asyncio.sleep(0.1)
    shards = await listed_shards(coord, 1, tries=1)
    stored: list[str] = []
    for s in shards:
        body = bucket.get_bytes(f"training_data/run_001/{s.file_name}")
        assert hashlib.sha256(body).hexdigest() == s.sha256
        path = coord.data_dir / "check.npz"
        path.write_bytes(body)
        with np.load(path) as z:
            stored += [str(g) for g in z["game_ids"]]
    assert len(stored) == len(set(stored))  # nothing twice
    batch = {g.game_id for g in refused_games}
    assert set(acked) <= set(stored) <= set(acked) | batch  # nothing acknowledged lost
    await coord.app.refresh_metrics()
    assert coord.app.metrics.store_outage_s == 0
    # The SGF of the games kept during the outage waited in memory and is packed now.
    async with coord.channel("trainer") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        for _ in range(300):
            kept = await stub.ListGames(coordinator_pb2.ListGamesRequest(limit=1000))
            if {g.game_id for g in kept.games} >= set(stored):
                break
            await asyncio.sleep(0.1)
        assert {g.game_id for g in kept.games} == set(stored)
    assert coord.app.archive.failures == 0
    # The refused batch sent again: taken, each game once.
    resp = await upload(coord, refused_games)
    assert resp.accepted + resp.duplicates == len(refused_games)
    assert resp.duplicates == len(set(stored) & batch)
    # Uploads are taken again.
    more = make_random_games(2, 9, seed=5000)
    assert (await upload(coord, more)).accepted == 2
    await coord.stop()  # while the store is still up


def test_token_and_workers_take_the_same_store(s3_server, tmp_path, monkeypatch, capsys) -> None:
    from kgrpc.coordinator import cli

    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    base = ["--data-dir", str(tmp_path), "--store", s3_server.new_url()]
    assert cli.main(["token", "create", *base, "--role", "worker"]) == 0
    assert cli.main(["workers", "list", *base]) == 0
    capsys.readouterr()
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(SystemExit) as out:
        cli.main(["token", "list", *base])
    assert out.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "refused the credentials" in err[0]
    monkeypatch.setenv("KGRPC_COORDINATOR_STORE", "s3://Bad_Bucket")
    with pytest.raises(SystemExit) as out:
        cli.main(["workers", "list", "--data-dir", str(tmp_path)])
    assert out.value.code == 2 and "not an S3 bucket name" in capsys.readouterr().err


async def test_local_shard_copies_are_pruned_and_fetched_back(
    coordinator_factory, s3_server
) -> None:
    """With S3, DATA_DIR keeps only the shards the next window rebuild reads; a rebuild that
    needs one it no longer has fetches it from the bucket."""
    url = s3_server.new_url()
    settings = {
        **s3_settings(s3_server, url),
        "positions_per_shard": 100,
        "latest_window_positions": 150,
        "latest_refresh_s": 0.0,
    }
    coord = await coordinator_factory(**settings)
    bucket = open_store(url, options=s3_server.options())
    await upload(coord, make_random_games(8, 9, seed=930))
    await listed_shards(coord, 4)
    await coord.stop()  # lets the last window rebuild and its pruning end
    run_dir = coord.data_dir / "training_data" / "run_001"
    in_bucket = sorted(o.key.rsplit("/", 1)[1] for o in bucket.list("training_data/run_001/"))
    local = sorted(p.name for p in run_dir.glob("games_*.npz"))
    assert len(in_bucket) >= 4 and set(local) < set(in_bucket)  # older copies pruned
    assert local and local[-1] == in_bucket[-1]  # the newest stays for the next window
    for p in run_dir.glob("games_*.npz"):
        p.unlink()
    from kgrpc.coordinator.testing import start_coordinator

    # The same data dir, index and store (KGRPC_TEST_INDEX=postgresql: the same database).
    again = await start_coordinator(coord.data_dir.parent, index=coord.app.cfg.index, **settings)
    try:
        await again.store_tasks_for(more := make_random_games(1, 9, seed=940))
        async with again.channel("worker") as ch:
            await coordinator_pb2_grpc.CoordinatorStub(ch).UploadGames(
                iter(upload_requests(more, 4))
            )
        await listed_shards(again, len(in_bucket) + 1)
    finally:
        await again.stop()
    # The window of the new shard (about 110 positions of 150) also read the newest shard of
    # before, which it fetched from the bucket.
    assert (run_dir / in_bucket[-1]).read_bytes() == bucket.get_bytes(
        f"training_data/run_001/{in_bucket[-1]}"
    )
    window = coord.data_dir / "training_data" / "current" / "latest_games.npz"
    assert bucket.get_bytes("training_data/current/latest_games.npz") == window.read_bytes()


@pytest.mark.slow
async def test_fp16_file_checked_against_the_fp32_file_in_the_bucket(
    coordinator_factory, s3_server, tmp_path
) -> None:
    """A model's fp16 file published where its fp32 file is only in the bucket (published
    through another replica): the parity check fetches the fp32 file from the store."""
    from kgrpc.precision import variant_path
    from tests.test_precision_release import COORD, A, P, _export, publish_file

    url = s3_server.new_url()
    coord = await coordinator_factory(**COORD, **s3_settings(s3_server, url))
    bucket = open_store(url, options=s3_server.options())
    fp32 = _export(tmp_path / "a" / f"{A}.onnx", A, 3, ["fp32", "fp16"])
    await publish_file(coord, fp32)
    (coord.data_dir / "models" / f"{A}.onnx").unlink()  # as on a replica that did not get it
    fp16 = variant_path(fp32, "fp16")
    resp = await publish_file(coord, fp16)
    assert {f.precision for f in resp.model.files} == {P["fp32"], P["fp16"]}
    assert bucket.get_bytes(f"models/{fp16.name}") == fp16.read_bytes()
    got = b""
    async with coord.channel("worker") as ch:
        async for chunk in coordinator_pb2_grpc.CoordinatorStub(ch).DownloadModel(
            coordinator_pb2.DownloadModelRequest(name=A, precision=P["fp16"])
        ):
            got += chunk.data
    assert got == fp16.read_bytes()
