"""`kgrpc-coordinator migrate`: a real run on SQLite and its data directory (games uploaded
and cut, some still in the journal, a model published, SGF kept, tokens) moved into a real
PostgreSQL index and a real S3 store (SeaweedFS), then served by a coordinator started on
the target; and the cases where it must refuse."""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kgrpc.blobstore import open_store
from kgrpc.coordinator import db
from kgrpc.coordinator.migrate import MigrateFailed, MigrateRefused, migrate
from kgrpc.net import make_channel
from kgrpc.randgame import make_random_games
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from tests.model_files import model_bytes, publish
from tests.test_coordinator_s3 import download_shard, listed_shards, s3_settings, upload

MODEL = "kg-b2c16-s0-d0"


def _counts(conn: Any, tables: list[str]) -> dict[str, int]:
    return {t: int(conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]) for t in tables}


def _tables(data_dir: Path) -> list[str]:
    conn = sqlite3.connect(data_dir / db.DB_NAME)
    try:
        return [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
    finally:
        conn.close()


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kgrpc.coordinator", "migrate", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
async def test_migrate_a_run_into_postgresql_and_s3(
    coordinator_factory, pg_index, s3_server, tmp_path
) -> None:
    # The source: SQLite and the data directory, as a run has always been kept.
    src = await coordinator_factory(index="", positions_per_shard=200)
    games = make_random_games(8, 9, seed=930)
    assert (await upload(src, games)).accepted == 8
    before = await listed_shards(src, 4)
    last = make_random_games(1, 9, seed=2930)  # fewer positions than a shard: it waits
    assert (await upload(src, last)).accepted == 1
    games += last
    await publish(src, MODEL, model_bytes(MODEL))
    await src.app.archive.drain()
    await src.stop()
    source = src.data_dir
    pending = (
        db.connect(source)
        .execute("SELECT COUNT(*) FROM games WHERE shard_index IS NULL")
        .fetchone()[0]
    )
    assert pending > 0  # a clean stop leaves a partial shard's games in the journal
    # An id SQLite handed out to a row since gone (AUTOINCREMENT never reuses it).
    from kgrpc.coordinator import auth

    conn = db.connect(source)
    _, gone = auth.create_token(conn, "worker", "made and deleted")
    conn.execute("DELETE FROM tokens WHERE id = ?", (gone.id,))
    conn.close()

    url = s3_server.new_url()
    env = {**os.environ, **s3_server.env()}
    out = _cli(env, "--from", str(source), "--index", pg_index, "--store", url)
    assert out.returncode == 0, out.stderr
    assert f"cut {pending} pending games" in out.stdout
    assert "table games: 9 rows" in out.stdout and "every sha256 verified" in out.stdout

    # Counts per table, and every object, the same on both sides.
    tables = _tables(source)
    src_conn = db.connect(source, readonly=True)
    pg_conn = db.connect("", index=pg_index, readonly=True)
    assert _counts(pg_conn, tables) == _counts(src_conn, tables)
    bucket = open_store(url, options=s3_server.options())
    local = open_store(str(source))
    keys = [o.key for p in ("training_data/", "models/") for o in local.list(p)]
    in_bucket = {o.key for o in bucket.list("")}
    assert {k for k in in_bucket if not k.startswith("sgf/")} == set(keys)
    for key in keys:
        assert bucket.get_bytes(key) == (source / key).read_bytes(), key
    # The kept games' SGF files go into packs, as a coordinator on this store writes them.
    sgf_files = {
        r[0]: (source / "sgf" / r[1]).read_text()
        for r in src_conn.execute("SELECT game_id, path FROM sgf_games")
    }
    assert len(sgf_files) == len(games)
    assert in_bucket - set(keys) and all(k.startswith("sgf/packs/") for k in in_bucket - set(keys))
    all_shards = src_conn.execute("SELECT file_name FROM shards ORDER BY idx").fetchall()
    src_conn.close()
    pg_conn.close()
    assert len(all_shards) > len(before)  # the journal's games were cut before the copy

    # A coordinator on the target, with a fresh data directory, serves the run.
    target = await coordinator_factory(
        data_dir=str(tmp_path / "target"),
        index=pg_index,
        positions_per_shard=200,
        **s3_settings(s3_server, url),
    )
    async with make_channel(target.address, token=src.trainer_token) as ch:  # old tokens work
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        listed = (await stub.ListShards(coordinator_pb2.ListShardsRequest())).shards
        assert [s.file_name for s in listed] == [r[0] for r in all_shards]
        for s in listed:
            data = await download_shard(target, s.file_name)
            assert hashlib.sha256(data).hexdigest() == s.sha256
        got = b""
        async for chunk in stub.DownloadModel(coordinator_pb2.DownloadModelRequest(name=MODEL)):
            got += chunk.data
        assert got == model_bytes(MODEL)
        kept = (await stub.ListGames(coordinator_pb2.ListGamesRequest())).games
        assert {g.game_id for g in kept} == {g.game_id for g in games}
        for game_id, text in sgf_files.items():
            one = await stub.DownloadGame(coordinator_pb2.DownloadGameRequest(game_id=game_id))
            assert one.sgf == text
    # The index goes on past the copied ids: new tokens (made by the factory) got new ids,
    # and new games go into the next shard number.
    conn = target.connect()
    ids = [r[0] for r in conn.execute("SELECT id FROM tokens ORDER BY id")]
    conn.close()
    assert ids[:2] == [1, 2] and ids[2:] == [gone.id + 1, gone.id + 2]
    more = make_random_games(8, 9, seed=1930)
    async with make_channel(target.address, token=src.worker_token) as ch:
        await target.store_tasks_for(more)
        from kgrpc.coordinator.testing import upload_requests

        resp = await coordinator_pb2_grpc.CoordinatorStub(ch).UploadGames(
            iter(upload_requests(more, 4))
        )
    assert resp.accepted == 8
    after = await listed_shards(target, len(all_shards) + 1)
    assert after[-1].file_name > all_shards[-1][0]


def _source(tmp_path: Path) -> Path:
    data = tmp_path / "source"
    db.connect(data).close()  # an empty run: the schema only
    return data


def test_refuses_a_non_empty_index(pg_index, tmp_path) -> None:
    from kgrpc.coordinator import auth

    conn = db.connect("", index=pg_index)
    auth.create_token(conn, "worker", "already here")
    conn.close()
    with pytest.raises(MigrateRefused, match=r"target index is not empty: .*tokens \(1\)"):
        migrate(_source(tmp_path), pg_index, str(tmp_path / "store"))
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").iterdir())


def test_refuses_a_non_empty_store_with_exit_2(pg_index, tmp_path) -> None:
    store = tmp_path / "store"
    (store / "models").mkdir(parents=True)
    (store / "models" / "x.onnx").write_bytes(b"old")
    out = _cli(dict(os.environ), "--from", str(_source(tmp_path)), "--index", pg_index)
    assert out.returncode == 2  # --store is required
    out = _cli(
        dict(os.environ),
        "--from",
        str(_source(tmp_path)),
        "--index",
        pg_index,
        "--store",
        str(store),
    )
    assert out.returncode == 2, out.stderr
    assert "already holds objects" in out.stderr and "models/x.onnx" in out.stderr
    assert "Traceback" not in out.stderr
    # Nothing was written into the index.
    conn = db.connect("", index=pg_index, readonly=True)
    assert conn.execute("SELECT COUNT(*) FROM tokens").fetchone()[0] == 0
    conn.close()


async def test_refuses_while_the_coordinator_runs(coordinator_factory, pg_index, tmp_path) -> None:
    coord = await coordinator_factory(index="")
    with pytest.raises(MigrateRefused, match="still listens"):
        await asyncio.to_thread(migrate, coord.data_dir, pg_index, str(tmp_path / "store"))
    with pytest.raises(MigrateRefused, match="holds no SQLite index"):
        migrate(tmp_path / "nothing", pg_index, str(tmp_path / "store"))
    with pytest.raises(MigrateRefused, match="postgresql:// URL"):
        migrate(coord.data_dir, "", str(tmp_path / "store"))


@pytest.mark.slow
async def test_a_source_file_unlike_its_index_row_stops_the_copy(
    coordinator_factory, pg_index, tmp_path
) -> None:
    src = await coordinator_factory(index="", positions_per_shard=200)
    assert (await upload(src, make_random_games(4, 9, seed=940))).accepted == 4
    shards = await listed_shards(src, 1)
    await src.stop()
    bad = src.data_dir / "training_data" / "run_001" / shards[-1].file_name
    data = bytearray(bad.read_bytes())
    data[100] ^= 0xFF
    bad.write_bytes(bytes(data))
    store = tmp_path / "store"
    with pytest.raises(MigrateFailed, match=f"{shards[-1].file_name}: the source file .* index"):
        migrate(src.data_dir, pg_index, str(store))
    assert not (store / "training_data" / "run_001" / shards[-1].file_name).exists()
    conn = db.connect("", index=pg_index, readonly=True)
    assert conn.execute("SELECT COUNT(*) FROM games").fetchone()[0] == 0  # no row copied
    conn.close()
    with pytest.raises(MigrateRefused, match="unknown scheme"):
        migrate(src.data_dir, pg_index, "gs://bucket/x")
