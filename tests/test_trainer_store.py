"""The trainer's store mode (trainer/store_shards.py) against a real coordinator: the listing
from its index (PostgreSQL, or its SQLite file), the shards from its store (a real SeaweedFS,
or its data directory), byte for byte; the cache's bound; disjoint shards per DDP rank; a
corrupt object refused; and a whole `kgrpc-train run` in store mode that publishes."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kgrpc.blobstore import BlobStoreError, LocalBlobStore, open_store
from kgrpc.coordinator.testing import RunningCoordinator, upload_requests
from kgrpc.randgame import make_random_games
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from tests.test_coordinator_s3 import s3_settings
from trainer.data import WindowLoader
from trainer.store_shards import (
    StoreShardError,
    StoreShards,
    connect_index,
    fetch_part,
    list_shards,
    open_shard_store,
)

REPO = Path(__file__).resolve().parents[1]
BIG = 1 << 40


async def _upload(coord: RunningCoordinator, games: int, seed: int) -> None:
    made = make_random_games(games, 9, seed)
    await coord.store_tasks_for(made)
    async with coord.channel("worker") as ch:
        resp = await coordinator_pb2_grpc.CoordinatorStub(ch).UploadGames(
            iter(upload_requests(made))
        )
    assert resp.accepted == games


async def _settled(coord: RunningCoordinator, at_least: int = 1) -> list[Any]:
    """The ListShards answer once it stops growing (shards are cut after the reply)."""
    async with coord.channel("trainer") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        last: list[Any] = []
        for _ in range(300):
            now = list((await stub.ListShards(coordinator_pb2.ListShardsRequest())).shards)
            if len(now) >= at_least and len(now) == len(last):
                return now
            last = now
            await asyncio.sleep(0.2)
    raise AssertionError(f"the coordinator cut {len(last)} shards, wanted {at_least}")


async def test_store_mode_reads_pg_index_and_s3_byte_identical(
    coordinator_factory, pg_index, s3_server, tmp_path
) -> None:
    url = s3_server.new_url()
    coord = await coordinator_factory(
        positions_per_shard=150, index=pg_index, **s3_settings(s3_server, url)
    )
    await _upload(coord, 6, seed=70)
    served = await _settled(coord, 2)
    store = open_shard_store(url, pg_index, s3_server.options())
    source = StoreShards(pg_index, store, tmp_path / "cache", BIG, ["run_001"])
    listed = source.refresh()
    # The index's listing is the RPC's (same shards, sizes, digests), oldest first.
    assert [(s.path.name, s.size_bytes, s.sha256) for s in listed] == sorted(
        (s.file_name, s.size_bytes, s.sha256) for s in served
    )
    assert source.total_rows == sum(s.positions for s in served)
    bucket = open_store(url, options=s3_server.options())
    for s in listed:
        path = source.fetch(s)
        assert path.read_bytes() == bucket.get_bytes(f"training_data/run_001/{path.name}")
    assert source.downloads == len(listed)
    # Cached: a second fetch downloads nothing.
    for s in listed:
        source.fetch(s)
    assert source.downloads == len(listed)
    # The loader trains on them as on files of the coordinator's directory.
    windows = WindowLoader(100)
    windows.fetch = source.fetch
    window = windows.load(listed)
    assert window.games == sum(s.games for s in listed) and list(window.by_size) == [9]
    source.close()

    # The store unreachable: the window goes without those shards this time, and takes them
    # once the store answers again.
    port = socket.socket()
    port.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    dead_opts = dataclasses.replace(
        s3_server.options(), endpoint=f"http://127.0.0.1:{port.getsockname()[1]}"
    )
    source = StoreShards(pg_index, open_store(url, options=dead_opts), tmp_path / "c2", BIG)
    listed = source.refresh()
    windows = WindowLoader(100)
    windows.fetch = source.fetch
    assert windows.load(listed).rows == 0
    source.store = store
    again = windows.load(listed)
    assert again.games == window.games and source.downloads == len(listed)
    port.close()
    source.close()


async def test_cache_bound_evicts_least_recently_used(coordinator_factory, tmp_path) -> None:
    coord = await coordinator_factory(positions_per_shard=100)
    await _upload(coord, 8, seed=71)
    await _settled(coord, 3)
    # SQLite index (the coordinator's file, read-only) and its data dir as the store.
    index = str(coord.data_dir / "coordinator.sqlite3")
    store = open_shard_store("", index)
    shards = StoreShards(index, store, tmp_path / "cache", BIG).refresh()
    assert len(shards) >= 3
    first, second, third = shards[:3]
    bound = first.size_bytes + second.size_bytes + third.size_bytes - 1  # two fit, not three
    source = StoreShards(index, store, tmp_path / "cache", bound)
    source.refresh()
    source.fetch(first)
    os.utime(first.path, (1, 1))  # make the order of use unambiguous on a coarse clock
    source.fetch(second)
    os.utime(second.path, (2, 2))
    source.fetch(first)  # used again: now the most recent
    source.fetch(third)
    assert source.evicted == 1 and not second.path.exists()
    assert first.path.exists() and third.path.exists()
    assert source.cache_used() <= bound
    assert source.downloads == 3
    # A cache smaller than the window: a load still gets every shard of it (none is evicted
    # for another of the same load, though several download at once), and the next download
    # evicts them.
    small = StoreShards(index, store, tmp_path / "small", first.size_bytes)
    listed = small.refresh()
    loader = WindowLoader(1000)
    loader.fetch = small.fetch
    window = loader.load(listed[:-1])
    assert len(window.shards) == len(listed) - 1 and not loader.bad
    assert small.evicted == 0 and small.downloads == len(listed) - 1
    small.fetch(listed[-1])
    assert small.evicted == len(listed) - 1
    assert [p.name for _, _, p in small.cached()] == [listed[-1].path.name]


async def test_two_ranks_take_disjoint_shards(coordinator_factory, tmp_path) -> None:
    coord = await coordinator_factory(positions_per_shard=100)
    await _upload(coord, 8, seed=72)
    await _settled(coord, 3)
    index = str(coord.data_dir)  # the data directory names its SQLite file too
    store = open_shard_store("", index)
    windows, sources = [], []
    for rank in (0, 1):
        source = StoreShards(index, store, tmp_path / f"rank{rank}", BIG)
        shards = source.refresh()
        loader = WindowLoader(1000)
        loader.fetch, loader.rank, loader.world = source.fetch, rank, 2
        windows.append(loader.load(shards))
        sources.append(source)
    names = [{s.path.name for s in w.shards} for w in windows]
    assert names[0] and names[1] and not names[0] & names[1]
    assert names[0] | names[1] == {s.path.name for s in shards}
    assert all(w.part == (r, 2) for r, w in enumerate(windows))
    # Each rank downloaded its own shards only.
    for rank, source in enumerate(sources):
        assert {p.name for _, _, p in source.cached()} == names[rank]
    assert sum(w.games for w in windows) == sum(s.games for s in shards)
    # One shard for two ranks: both load it, and split its batches (trainer.batches).
    loader = WindowLoader(1000)
    loader.fetch, loader.rank, loader.world = sources[1].fetch, 1, 2
    assert loader.load(shards[:1]).part == (0, 1)


async def test_corrupt_object_is_refused(coordinator_factory, tmp_path) -> None:
    coord = await coordinator_factory(positions_per_shard=100)
    await _upload(coord, 6, seed=73)
    await _settled(coord, 2)
    copy = tmp_path / "store"
    shutil.copytree(coord.data_dir / "training_data", copy / "training_data")
    index = str(coord.data_dir / "coordinator.sqlite3")
    source = StoreShards(index, LocalBlobStore(copy), tmp_path / "cache", BIG)
    shards = source.refresh()
    bad = copy / "training_data" / shards[0].run / shards[0].path.name
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes
    bad.write_bytes(bytes(data))
    with pytest.raises(StoreShardError, match=r"sha256 .* refusing it"):
        source.fetch(shards[0])
    assert not shards[0].path.exists() and not list(shards[0].path.parent.glob("*.part"))
    # The loader leaves it out (named once) and trains on the rest; strict stops instead.
    loader = WindowLoader(1000)
    loader.fetch = source.fetch
    window = loader.load(shards)
    assert shards[0].path in loader.bad
    assert [s.path for s in window.shards] == [s.path for s in shards[1:]]
    strict = WindowLoader(1000, strict=True)
    strict.fetch = source.fetch
    with pytest.raises(StoreShardError):
        fetch_part(strict, shards)
    # An object missing from the store is a clear error too.
    (copy / "training_data" / shards[1].run / shards[1].path.name).unlink()
    fresh = StoreShards(index, LocalBlobStore(copy), tmp_path / "c2", BIG)
    with pytest.raises(StoreShardError, match="missing from the store"):
        fresh.fetch(fresh.refresh()[1])


def test_store_settings(tmp_path) -> None:
    import argparse

    from trainer import config

    parser = argparse.ArgumentParser()
    config.add_arguments(parser)
    args = parser.parse_args(["--index", str(tmp_path), "--store-secret-access-key", "s3cr3t"])
    cfg = config.from_args(args, env={})
    assert cfg.store_options().secret_access_key == "s3cr3t"
    assert "store_secret_access_key" not in cfg.to_dict()  # never into checkpoints or logs
    warned = config.SETTINGS.secrets_given_as_flags(args, ("token", "store_secret_access_key"))
    assert len(warned) == 1 and "KGRPC_TRAINER_STORE_SECRET_ACCESS_KEY" in warned[0]
    for bad, words in [
        (["--index", "x", "--pull-shards"], "exclude each other"),
        (["--store", "s3://b/p"], "store needs index"),
        (["--index", "x", "--store-cache-mb", "0"], "store_cache_mb must be > 0"),
    ]:
        with pytest.raises(ValueError, match=words):
            config.from_args(parser.parse_args(bad), env={})


def test_bad_index_or_store_is_one_clear_error(tmp_path) -> None:
    with pytest.raises(ValueError, match="no such SQLite file"):
        list_shards(connect_index(str(tmp_path)))
    with pytest.raises(BlobStoreError, match="needs the store setting"):
        open_shard_store("", "postgresql://u@127.0.0.1:1/db")


@pytest.mark.slow
async def test_run_in_store_mode_trains_and_publishes(
    coordinator_factory, pg_index, s3_server, tmp_path
) -> None:
    url = s3_server.new_url()
    coord = await coordinator_factory(
        positions_per_shard=150, index=pg_index, **s3_settings(s3_server, url)
    )
    await _upload(coord, 4, seed=74)
    served = await _settled(coord, 1)
    work = tmp_path / "work"
    opts = s3_server.options()
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(REPO),
        "KGRPC_TRAINER_TOKEN": coord.trainer_token,
        "KGRPC_TRAINER_STORE_SECRET_ACCESS_KEY": opts.secret_access_key,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "trainer",
        "run",
        "--coordinator",
        coord.address,
        "--index",
        pg_index,
        "--store",
        url,
        "--store-endpoint",
        s3_server.endpoint,
        "--store-access-key-id",
        opts.access_key_id,
        "--work-dir",
        str(work),
        "--blocks",
        "1",
        "--channels",
        "8",
        "--batch-size",
        "16",
        "--steps-per-generation",
        "3",
        "--min-new-rows",
        "1",
        "--once",
        "--device",
        "cpu",
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=180)
    text = out.decode() + err.decode()
    assert proc.returncode == 0, text[-3000:]
    total = sum(s.positions for s in served)
    name = f"kg-b1c8-s3-d{total}"
    assert f"published {name}" in text, text[-3000:]
    cached = sorted(p.name for p in (work / "shard_cache" / "rank0").rglob("games_*.npz"))
    assert cached == sorted(s.file_name for s in served)
    async with coord.channel("worker") as ch:
        listed = await coordinator_pb2_grpc.CoordinatorStub(ch).ListModels(
            coordinator_pb2.ListModelsRequest()
        )
    assert name in [m.name for m in listed.models]


def _torchrun_store_mode(data: Path, work: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node"]
    cmd += ["2", "-m", "trainer", "run", "--index", str(data / "coordinator.sqlite3")]
    cmd += ["--work-dir", str(work), "--no-publish", "--blocks", "1", "--channels", "8"]
    cmd += ["--batch-size", "16", "--steps-per-generation", "3", "--min-new-rows", "0"]
    cmd += ["--once", "--device", "cpu", "--checkpoint-every", "0", "--poll-interval-s", "0.2"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("done: step 3, 1 generations") == 1, proc.stdout
    return proc


def _synthetic_indexed_run(data: Path) -> list[Path]:
    from kgrpc.programs.bench.shard_read import index_shards
    from kgrpc.programs.bench.train import write_synthetic_run

    paths = write_synthetic_run(data, 4, 64, 8, 5)
    index_shards(data, paths)
    return paths


@pytest.mark.slow
def test_two_process_gloo_run_in_store_mode_takes_disjoint_shards(tmp_path) -> None:
    """torchrun with two processes in store mode (a SQLite index, its directory as the
    store): each rank downloads only its own shards, and together they train on all."""
    data, work = tmp_path / "coordinator", tmp_path / "work"
    paths = _synthetic_indexed_run(data)
    _torchrun_store_mode(data, work)
    got = [
        {p.name for p in (work / "shard_cache" / f"rank{r}").rglob("games_*.npz")} for r in (0, 1)
    ]
    assert got[0] and got[1] and not got[0] & got[1]
    assert got[0] | got[1] == {p.name for p in paths}
    # Shard numbers split by rank: 2 and 4 on rank 0, 1 and 3 on rank 1.
    assert got[0] == {"games_00002.npz", "games_00004.npz"}
    assert [m.name for m in (work / "models").glob("*.onnx")] == ["kg-b1c8-s3-d256.onnx"]


@pytest.mark.slow
def test_gloo_run_goes_on_when_one_rank_loses_every_shard(tmp_path) -> None:
    """Rank 1's shards (1 and 3) are corrupt in the store: it has no rows while rank 0 has
    some. No rank trains alone (which would hang DDP): both wait a round, and then train on
    what is left."""
    data, work = tmp_path / "coordinator", tmp_path / "work"
    paths = _synthetic_indexed_run(data)
    for p in (paths[0], paths[2]):
        body = bytearray(p.read_bytes())
        body[len(body) // 2] ^= 0xFF
        p.write_bytes(bytes(body))
    proc = _torchrun_store_mode(data, work)
    assert proc.stderr.count("refusing it") >= 2, proc.stderr[-3000:]
    assert [m.name for m in (work / "models").glob("*.onnx")] == ["kg-b1c8-s3-d256.onnx"]


async def test_listing_withholds_what_list_shards_withholds(coordinator_factory, tmp_path) -> None:
    """A quarantined token's shards are out of the store-mode listing as they are out of
    ListShards (docs/coordinator.md, "Setting a token's games aside"), and back once lifted."""
    from kgrpc.coordinator import quorum

    coord = await coordinator_factory(positions_per_shard=100)
    await _upload(coord, 4, seed=75)
    served = await _settled(coord, 2)
    # The coordinator's index as the suite runs it (SQLite in its data directory, or
    # PostgreSQL under KGRPC_TEST_INDEX) and its default store, the data directory.
    index = coord.app.cfg.index or str(coord.data_dir)
    store = open_shard_store(str(coord.data_dir), index)
    source = StoreShards(index, store, tmp_path / "cache", BIG)
    assert [s.path.name for s in source.refresh()] == [s.file_name for s in served]
    conn = coord.connect()
    token_id = conn.execute("SELECT id FROM tokens WHERE role = 'worker'").fetchone()[0]
    assert quorum.quarantine(conn, token_id, 0, 1)
    conn.close()
    assert source.refresh() == [] == await _list_shards_rpc(coord)
    conn = coord.connect()
    assert quorum.lift(conn, token_id)
    conn.close()
    assert [s.path.name for s in source.refresh()] == [s.file_name for s in served]
    source.close()


async def _list_shards_rpc(coord: RunningCoordinator) -> list[Any]:
    async with coord.channel("trainer") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        return list((await stub.ListShards(coordinator_pb2.ListShardsRequest())).shards)
