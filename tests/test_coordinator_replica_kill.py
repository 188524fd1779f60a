"""Two coordinator replica processes on one PostgreSQL index and one store directory: one is
killed with SIGKILL mid-ingest and restarted; no acknowledged game is lost, none is stored
twice (issue 26)."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from kgrpc.blobstore import LocalBlobStore
from kgrpc.coordinator import db
from kgrpc.coordinator.config import config_from
from kgrpc.coordinator.store import Store
from kgrpc.coordinator.tasks import Tasks
from kgrpc.coordinator.testing import create_tokens, terms_for_games, upload_request
from kgrpc.net import make_channel
from kgrpc.randgame import make_random_games
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from tests.process_helpers import start_process

ROOT = Path(__file__).resolve().parent.parent
ACCEPTED = coordinator_pb2.GAME_STATUS_ACCEPTED
DUPLICATE = coordinator_pb2.GAME_STATUS_DUPLICATE


async def start_replica(data_dir: Path, index: str, store: Path) -> tuple[Any, str]:
    return await start_process(data_dir, "--index", index, "--store", str(store))


@pytest.mark.slow
async def test_sigkill_of_one_replica_loses_nothing_and_stores_nothing_twice(
    tmp_path: Path, pg_index: str
) -> None:
    store_dir = tmp_path / "store"
    dirs = [tmp_path / "a", tmp_path / "b"]
    token, _ = create_tokens(dirs[0], pg_index)
    games = make_random_games(60, 9, seed=5151)
    conn = db.connect(dirs[0], index=pg_index)
    tasks = Tasks(conn, config_from(None, {"data_dir": str(dirs[0])}))
    for t in terms_for_games(games):
        tasks.store(t, "selfplay")
    conn.close()
    (a, addr_a), (b, addr_b) = [await start_replica(d, pg_index, store_dir) for d in dirs]
    acked: set[str] = set()
    enough = asyncio.Event()

    async def send(address: str, part: list[Any]) -> list[Any]:
        """Upload ``part`` two games a message; the games not acknowledged (died)."""
        async with make_channel(address, token=token) as ch:
            stub = coordinator_pb2_grpc.CoordinatorStub(ch)
            for i in range(0, len(part), 2):
                try:
                    resp = await stub.UploadGames(
                        iter([upload_request(part[i : i + 2])]), timeout=20
                    )
                except grpc.aio.AioRpcError:
                    return part[i:]
                for ack in resp.acks:
                    assert ack.status in (ACCEPTED, DUPLICATE), ack.detail
                    acked.add(ack.game_id)
                if len(acked) >= 12:
                    enough.set()
        return []

    # Every game goes to both replicas (a worker retrying elsewhere), in different orders.
    sending = [
        asyncio.ensure_future(send(addr_a, games)),
        asyncio.ensure_future(send(addr_b, games[::-1])),
    ]
    await asyncio.wait_for(enough.wait(), 60)
    a.send_signal(signal.SIGKILL)
    a.wait()
    left = await asyncio.gather(*sending)
    assert left[1] == []  # replica b never went away
    a, addr_a = await start_replica(dirs[0], pg_index, store_dir)
    assert await send(addr_a, left[0]) == []  # what a never answered, sent again to it
    assert acked == {g.game_id for g in games}
    for proc in (a, b):
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0

    # Each replica cuts what its own journal still holds; then every game is in exactly
    # one shard of the shared store, and the index has one row per game.
    for d in dirs:
        store = Store(
            d, "run_001", positions_per_shard=400, index=pg_index, blobs=LocalBlobStore(store_dir)
        )
        assert store.recovery.missing_games == []
        store.flush_all()
        store.close()
    ids: list[str] = []
    for p in sorted((store_dir / "training_data" / "run_001").glob("games_*.npz")):
        with np.load(p) as z:
            ids.extend(str(g) for g in z["game_ids"])
    counts = Counter(ids)
    assert set(counts) == {g.game_id for g in games}
    assert all(n == 1 for n in counts.values()), [g for g, n in counts.items() if n > 1]
    conn = db.connect(dirs[0], index=pg_index)
    (rows,) = conn.execute("SELECT COUNT(*) FROM games").fetchone()
    (pending,) = conn.execute("SELECT COUNT(*) FROM games WHERE shard_index IS NULL").fetchone()
    conn.close()
    assert (rows, pending) == (len(games), 0)
