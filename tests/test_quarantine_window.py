"""Issue 31: a token quarantine reaches the trainer that reads the coordinator's data directory
in place (``kgrpc-train run --data-dir DATA_DIR``, what kgrpc-cluster and make demo run) and the
rolling window ``latest_games.npz``; ``token unquarantine`` brings both back; nothing is
deleted. A real coordinator on loopback and its real shard files; the commands run on its data
directory while it serves (or while it is stopped), as an operator would run them."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from kgrpc.coordinator import cli
from kgrpc.coordinator.testing import RunningCoordinator, upload_requests
from kgrpc.net import make_channel
from kgrpc.randgame import make_random_games
from kgrpc.v1 import coordinator_pb2_grpc
from tests.test_gating_quarantine import counted_rows, shards_of
from tests.test_gating_quorum import new_token
from trainer.data import ShardIndex, WindowLoader
from trainer.withheld import Withheld


async def upload(coord: RunningCoordinator, token: str, seed: int) -> list[str]:
    """Two self-play games uploaded with ``token``, then cut into a shard of their own."""
    games = make_random_games(2, 9, seed)
    await coord.store_tasks_for(games)
    async with make_channel(coord.address, token=token) as ch:
        resp = await coordinator_pb2_grpc.CoordinatorStub(ch).UploadGames(
            iter(upload_requests(games))
        )
    assert resp.accepted == 2
    await coord.app.ingest.cut(older_than_s=0)
    return [g.game_id for g in games]


def trainer_listing(coord: RunningCoordinator) -> ShardIndex:
    """What ``kgrpc-train run --data-dir DATA_DIR`` lists (trainer.train builds the same
    ShardIndex). The SQLite index is found in the data directory; a coordinator on
    PostgreSQL keeps none there, so the suite's PostgreSQL run names it."""
    index = ShardIndex(coord.data_dir)
    if coord.app.cfg.index:
        index.withheld = Withheld(coord.data_dir, coord.app.cfg.index)
    return index


def ids_of(paths: list[Path]) -> set[str]:
    out: set[str] = set()
    for p in paths:
        with np.load(p) as z:
            out |= {str(g) for g in z["game_ids"]}
    return out


def trainer_window(index: ShardIndex) -> tuple[set[str], int]:
    """The game ids and rows of the trainer's next window."""
    window = WindowLoader(window_games=1000).load(index.refresh())
    return ids_of([s.path for s in window.shards]), window.rows


def latest(coord: RunningCoordinator) -> Path:
    return coord.data_dir / "training_data" / "current" / "latest_games.npz"


def latest_window(coord: RunningCoordinator) -> tuple[set[str], int]:
    with np.load(latest(coord)) as z:
        return {str(g) for g in z["game_ids"]}, len(z["value"])


def rows_of(coord: RunningCoordinator, game_ids: list[str]) -> int:
    conn = coord.connect(readonly=True)
    try:
        marks = ",".join("?" * len(game_ids))
        q = f"SELECT SUM(positions) FROM games WHERE game_id IN ({marks})"
        return int(conn.execute(q, game_ids).fetchone()[0])
    finally:
        conn.close()


def stored_files(coord: RunningCoordinator) -> list[str]:
    return sorted(p.name for p in (coord.data_dir / "training_data" / "run_001").glob("*.npz"))


async def rebuilt(coord: RunningCoordinator) -> None:
    """The coordinator's flush-loop tick that follows the quarantine (called here rather than
    waited for), and the rebuild of latest_games.npz it hands out."""
    task = await coord.app.ingest.follow_quarantine()
    assert task is not None, "the quarantine changed the window: a rebuild was due"
    await task


async def test_quarantine_leaves_the_data_dir_trainer_and_latest_window_and_undo(
    coordinator_factory,
) -> None:
    coord = await coordinator_factory(latest_refresh_s=0)
    bad_token, bad_id = new_token(coord, "faulty box")
    good = await upload(coord, coord.worker_token, 300)
    bad = await upload(coord, bad_token, 100)
    good += await upload(coord, coord.worker_token, 200)
    assert shards_of(coord, bad).isdisjoint(shards_of(coord, good))  # whole shards: see docs
    await coord.app.ingest.window_settled()
    everything = set(good + bad)
    index = trainer_listing(coord)
    assert trainer_window(index) == (everything, rows_of(coord, good + bad))
    assert latest_window(coord) == (everything, rows_of(coord, good + bad))
    assert await coord.app.ingest.follow_quarantine() is None  # nothing changed: no rebuild
    files, rows = stored_files(coord), counted_rows(coord)

    data = ["--data-dir", str(coord.data_dir), "--index", coord.app.cfg.index]
    assert cli.main(["token", "quarantine", *data, "--id", str(bad_id)]) == 0
    # The trainer's next window holds none of the token's rows, at its next listing.
    assert trainer_window(index) == (set(good), rows_of(coord, good))
    await rebuilt(coord)
    assert latest_window(coord) == (set(good), rows_of(coord, good))
    assert await coord.app.ingest.follow_quarantine() is None  # done until it changes again
    assert (stored_files(coord), counted_rows(coord)) == (files, rows)  # nothing deleted

    assert cli.main(["token", "unquarantine", *data, "--id", str(bad_id)]) == 0
    assert trainer_window(index) == (everything, rows_of(coord, good + bad))
    await rebuilt(coord)
    assert latest_window(coord) == (everything, rows_of(coord, good + bad))
    assert (stored_files(coord), counted_rows(coord)) == (files, rows)

    # A file the index has no row for (a cut's, a moment before its row; or one a crashed cut
    # left) is not listed: nothing yet says whose games it holds.
    run_dir = coord.data_dir / "training_data" / "run_001"
    stray = run_dir / "games_00099.npz"
    shutil.copyfile(run_dir / files[0], stray)
    try:
        assert stray.name not in {s.path.name for s in index.refresh()}
        assert {s.path.name for s in index.refresh()} == set(files)
    finally:
        stray.unlink()


async def test_window_of_withheld_shards_only_goes_and_comes_back_across_a_restart(
    coordinator_factory,
) -> None:
    """Every shard of the window's kind withheld: the window is removed (its rows were the
    token's), not left as it was; a quarantine set while the coordinator is stopped is
    followed at its first tick."""
    coord = await coordinator_factory(latest_refresh_s=0)
    bad_token, bad_id = new_token(coord, "faulty box")
    bad = await upload(coord, bad_token, 400)
    await coord.app.ingest.window_settled()
    assert latest_window(coord)[0] == set(bad)
    data_dir, index_url = coord.data_dir, coord.app.cfg.index
    await coord.stop()

    data = ["--data-dir", str(data_dir), "--index", index_url]
    assert cli.main(["token", "quarantine", *data, "--id", str(bad_id)]) == 0
    # Started again on the same index (the suite's PostgreSQL run finds its database by the
    # data directory).
    coord = await coordinator_factory(data_dir=str(data_dir), latest_refresh_s=0)
    assert coord.app.cfg.index == index_url
    assert trainer_window(trainer_listing(coord)) == (set(), 0)
    await rebuilt(coord)
    assert not latest(coord).exists()

    assert cli.main(["token", "unquarantine", *data, "--id", str(bad_id)]) == 0
    assert trainer_window(trainer_listing(coord))[0] == set(bad)
    await rebuilt(coord)
    assert latest_window(coord) == (set(bad), rows_of(coord, bad))


def test_a_coordinator_dir_without_its_index_says_quarantine_is_not_honoured(
    tmp_path: Path, caplog
) -> None:
    """A coordinator on PostgreSQL keeps no index in its data directory: the trainer reading
    that directory lists every shard and says once why a quarantine cannot reach it."""
    from kgrpc.programs.bench.train import write_synthetic_shard

    write_synthetic_shard(tmp_path / "training_data" / "run_001" / "games_00001.npz", 20, 2, 9)
    (tmp_path / "replica.id").write_text("r1\n")
    index = ShardIndex(tmp_path)
    assert len(index.refresh()) == len(index.refresh()) == 1
    assert caplog.text.count("token quarantines cannot be honoured") == 1
