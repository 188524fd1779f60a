"""Bounded storage under attack, against a real coordinator (issue 11): uploads of many komi
values keep the shard groups bounded, and a full disk is RESOURCE_EXHAUSTED with one log line
until it has room again."""

from __future__ import annotations

import asyncio
import errno
import logging
import subprocess
from pathlib import Path

import grpc
import numpy as np
import pytest

from kgrpc.coordinator.testing import start_coordinator, upload_request
from kgrpc.randgame import make_random_game, make_random_games
from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc, records_pb2


def _with_komi(game: records_pb2.GameRecord, komi: float, i: int) -> records_pb2.GameRecord:
    """``game`` (scored, not resigned) played under another komi: same moves and ownership,
    score and winner moved by the komi's change."""
    g = records_pb2.GameRecord()
    g.CopyFrom(game)
    g.game_id = f"komi-{i:05d}-{game.game_id[:20]}"
    g.komi = komi
    g.result.score = game.result.score + game.komi - komi
    g.result.winner = (
        common_pb2.COLOR_BLACK
        if g.result.score > 0
        else common_pb2.COLOR_WHITE
        if g.result.score < 0
        else common_pb2.COLOR_UNSPECIFIED
    )
    return g


@pytest.mark.slow
async def test_many_komi_values_keep_shard_groups_bounded(coordinator_factory, monkeypatch) -> None:
    # 3,000 games of 3,000 komi values forced 3,000 one-game shard cuts, each rewriting the
    # whole ingest journal on the storage thread: a legitimate upload missed its deadline.
    coord = await coordinator_factory(
        positions_per_shard=100_000, max_shard_groups=4, flush_interval_s=3600
    )
    store = coord.app.store
    rewrites = 0
    real_rewrite = store.journal.rewrite

    def counted(keep: set[int]) -> None:
        nonlocal rewrites
        rewrites += 1
        real_rewrite(keep)

    monkeypatch.setattr(store.journal, "rewrite", counted)
    base = make_random_game(5, seed=3)
    assert not base.result.resigned
    # Komi a task might hand out (a range): 40 values, five groups once rounded to half points.
    nearby = [_with_komi(base, 6.0 + 0.05 * i, i) for i in range(40)]
    # A hostile spread: 100 values, each its own group.
    spread = [_with_komi(base, -24.75 + 0.5 * i, 100 + i) for i in range(100)]
    legit = make_random_game(5, seed=4)
    # A task for each komi: the store's bound holds whatever the tasks allowed.
    await coord.store_tasks_for([*nearby, *spread, legit])
    async with coord.channel() as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        resp = await stub.UploadGames(
            iter([upload_request(nearby[i : i + 10]) for i in range(0, 40, 10)])
        )
        assert resp.accepted == 40
        await coord.app.ingest.cut()
        # five groups; one over the limit of four: the oldest is cut early
        assert sorted(k[1] for k in store.pending) == [6.5, 7.0, 7.5, 8.0]
        assert [(s.komi, s.games) for s in store.list_shards()] == [(6.0, 5)]

        async def attack() -> None:
            for i in range(0, 100, 10):
                r = await stub.UploadGames(iter([upload_request(spread[i : i + 10])]))
                assert r.accepted == 10

        attacker = asyncio.ensure_future(attack())
        await asyncio.sleep(0.5)
        resp = await stub.UploadGames(iter([upload_request([legit])]), timeout=10)
        assert resp.accepted == 1
        await attacker
    # Cuts run one per storage-thread task after each message, between other callers' work:
    # groups beyond the limit are cut as fast as the disk allows, never more than one per game.
    await coord.app.ingest.cut()
    assert len(store.pending) <= 4
    cuts = len(store.list_shards())
    assert cuts >= 100 - 4 and rewrites <= cuts // 2, (cuts, rewrites)
    await coord.app.db(store.flush_all)
    shards = store.list_shards()
    stored = [
        gid
        for s in shards
        for gid in _shard_ids(coord.data_dir / "training_data" / "run_001" / s.file_name)
    ]
    assert sorted(stored) == sorted(g.game_id for g in [*nearby, *spread, legit])
    assert {s.komi for s in shards} >= {6.0, 6.5, 7.0, 7.5, 8.0}
    assert all(s.komi * 2 == int(s.komi * 2) for s in shards)
    first = next(s for s in shards if s.komi == 6.0)
    with np.load(coord.data_dir / "training_data" / "run_001" / first.file_name) as z:
        # each row's globals carry its game's own komi (mover's view / 20), not the group's
        komi_black = -z["globals"][z["move_number"] == 0][:, 0] * 20
    np.testing.assert_allclose(sorted(komi_black), [6.0, 6.05, 6.1, 6.15, 6.2], atol=1e-5)


def _shard_ids(path: Path) -> list[str]:
    with np.load(path) as z:
        return [str(g) for g in z["game_ids"]]


class FullDisk:
    """A data dir on a disk that can be filled and freed: a small tmpfs where this process
    may mount one (root), else the ingest journal's writes patched to fail with ENOSPC."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.monkeypatch = monkeypatch
        root.mkdir()
        self.mounted = (
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(root)], capture_output=True
            ).returncode
            == 0
        )
        self.filler = root / "filler"

    def fill(self) -> None:
        if not self.mounted:
            from kgrpc.coordinator import journal

            def no_space(fd: int, data: bytes) -> int:
                raise OSError(errno.ENOSPC, "No space left on device")

            self.monkeypatch.setattr(journal.os, "write", no_space)
            return
        block = b"\0" * 4096  # tmpfs allocates pages: fill every one
        with open(self.filler, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC

    def free(self) -> None:
        if not self.mounted:
            self.monkeypatch.undo()
            return
        self.filler.unlink()

    def close(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.root)], capture_output=True)


async def test_full_disk_is_resource_exhausted_with_one_log_line(
    tmp_path, monkeypatch, caplog
) -> None:
    disk = FullDisk(tmp_path / "disk", monkeypatch)
    coord = await start_coordinator(disk.root, positions_per_shard=100_000)
    try:
        games = make_random_games(8, 9, seed=70)
        await coord.store_tasks_for(games)
        async with coord.channel() as ch:
            stub = coordinator_pb2_grpc.CoordinatorStub(ch)
            assert (await stub.UploadGames(iter([upload_request(games[:2])]))).accepted == 2
            disk.fill()
            with caplog.at_level(logging.INFO):
                for i in range(2, 6):
                    with pytest.raises(grpc.aio.AioRpcError) as err:
                        await stub.UploadGames(iter([upload_request(games[i : i + 1])]))
                    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                    assert "disk is full" in err.value.details()
                disk.free()
                resp = await stub.UploadGames(iter([upload_request(games[2:])]))
            assert resp.accepted == 6
            stats = await stub.GetStats(coordinator_pb2.GetStatsRequest())
        assert stats.games_accepted == 8
    finally:
        await coord.stop()
        disk.close()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage().split(" (")[0] for r in errors] == ["storage full"], errors
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert [r for r in caplog.records if r.getMessage().startswith("storage works again")]
