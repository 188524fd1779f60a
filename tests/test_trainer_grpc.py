"""The trainer against a real coordinator: pulling shards, publishing, and a full `run`."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import grpc
import pytest

from kgrpc.coordinator.testing import RunningCoordinator, upload_requests
from kgrpc.randgame import make_random_games
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from trainer.data import ShardIndex, WindowLoader
from trainer.export import init_model
from trainer.publish import build_header, publish_model
from trainer.remote_shards import pull_shards

REPO = Path(__file__).resolve().parents[1]


async def _upload(coord: RunningCoordinator, games: int, seed: int = 0) -> None:
    made = make_random_games(games, 9, seed)
    await coord.store_tasks_for(made)
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        resp = await stub.UploadGames(iter(upload_requests(made)))
    assert resp.accepted == games


async def _settled_shards(coord: RunningCoordinator) -> int:
    """Shards are cut by a task after the upload's reply: wait until the listing is stable."""
    async with coord.channel("trainer") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        last = -1
        for _ in range(300):
            n = len((await stub.ListShards(coordinator_pb2.ListShardsRequest())).shards)
            if n and n == last:
                return n
            last = n
            await asyncio.sleep(0.2)
    raise AssertionError("the coordinator cut no shards")


def _shard_files(root: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in sorted((root / "training_data" / "run_001").glob("games_*.npz"))
    }


async def test_pull_shards_copies_and_resumes(coordinator_factory, tmp_path) -> None:
    coord = await coordinator_factory(positions_per_shard=150)
    await _upload(coord, 6)
    await _settled_shards(coord)
    served = _shard_files(coord.data_dir)
    assert len(served) >= 2
    cache = tmp_path / "cache"
    res = await pull_shards(coord.address, coord.trainer_token, cache)
    assert len(res.downloaded) == len(served) and res.present == 0
    assert _shard_files(cache) == served
    again = await pull_shards(coord.address, coord.trainer_token, cache)
    assert again.downloaded == [] and again.present == len(served)

    # An interrupted download resumes from the .part file's length.
    name, data = next(iter(served.items()))
    dest = cache / "training_data" / "run_001" / name
    dest.unlink()
    dest.with_name(name + ".part").write_bytes(data[: len(data) // 2])
    res = await pull_shards(coord.address, coord.trainer_token, cache)
    assert res.downloaded == [dest] and res.bytes == len(data) - len(data) // 2
    assert dest.read_bytes() == data
    # The pulled cache is a data dir the trainer reads like the coordinator's own.
    shards = ShardIndex(cache).refresh()
    window = WindowLoader(100).load(shards)
    # Games still in the coordinator's journal (not yet in a full shard) are not served.
    assert window.games == sum(s.games for s in shards) >= 2 and list(window.by_size) == [9]

    with pytest.raises(grpc.aio.AioRpcError) as err:
        await pull_shards(coord.address, coord.worker_token, tmp_path / "other")
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_publish_then_listed(coordinator_factory, tmp_path) -> None:
    coord = await coordinator_factory()
    path = tmp_path / "first.onnx"
    name = await asyncio.to_thread(init_model, 9, 1, 8, path)
    header = build_header(path)
    assert (header.name, header.blocks, header.channels, header.size_bytes) == (
        name,
        1,
        8,
        path.stat().st_size,
    )
    resp = await publish_model(coord.address, coord.trainer_token, path, chunk_bytes=4096)
    assert resp.model.name == name and resp.model.sha256 == header.sha256
    async with coord.channel("worker") as ch:
        listed = await coordinator_pb2_grpc.CoordinatorStub(ch).ListModels(
            coordinator_pb2.ListModelsRequest()
        )
    assert name in [m.name for m in listed.models]

    bogus = tmp_path / "bogus.onnx"
    bogus.write_bytes(b"not a model")
    with pytest.raises(Exception, match="bogus.onnx"):
        build_header(bogus)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await publish_model(coord.address, coord.worker_token, path)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED


@pytest.mark.slow
async def test_run_pulls_trains_and_publishes(coordinator_factory, tmp_path) -> None:
    coord = await coordinator_factory(positions_per_shard=150)
    await _upload(coord, 4, seed=50)
    cache, work = tmp_path / "cache", tmp_path / "work"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(REPO),
        "KGRPC_TRAINER_TOKEN": coord.trainer_token,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "trainer",
        "run",
        "--coordinator",
        coord.address,
        "--data-dir",
        str(cache),
        "--work-dir",
        str(work),
        "--pull-shards",
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
    rows = ShardIndex(cache).refresh()
    total = sum(s.rows for s in rows)
    name = f"kg-b1c8-s3-d{total}"
    assert f"published {name}" in text, text[-3000:]
    async with coord.channel("worker") as ch:
        listed = await coordinator_pb2_grpc.CoordinatorStub(ch).ListModels(
            coordinator_pb2.ListModelsRequest()
        )
    assert name in [m.name for m in listed.models]
    assert (work / "models" / f"{name}.onnx").exists()


async def test_pull_shards_fsyncs_the_directory_after_each_rename(
    coordinator_factory, tmp_path, monkeypatch
) -> None:
    import stat

    coord = await coordinator_factory(positions_per_shard=150)
    await _upload(coord, 4)
    n = await _settled_shards(coord)
    synced_dirs: list[int] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            synced_dirs.append(st.st_ino)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    cache = tmp_path / "cache"
    res = await pull_shards(coord.address, coord.trainer_token, cache)
    assert len(res.downloaded) == n
    run_dir = cache / "training_data" / "run_001"
    # once per renamed shard, so a crash after the pull cannot take a shard back
    assert synced_dirs.count(run_dir.stat().st_ino) >= n
