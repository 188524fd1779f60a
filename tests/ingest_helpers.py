"""Shared by the coordinator's ingest and storage tests (tests/test_coordinator_ingest*.py,
test_coordinator_upload_payloads.py, test_coordinator_bounds.py, test_coordinator_store.py,
test_coordinator_journal.py): an upload naming stored tasks, validated games for the store,
the game ids in a run's shards and the check that each game is in exactly one, and the wire's
varint."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from kgrpc.coordinator.store import GameOutcome
from kgrpc.coordinator.testing import upload_requests
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc, records_pb2

RUN = "run_001"  # the run of a new data dir
ACCEPTED = coordinator_pb2.GAME_STATUS_ACCEPTED
DUPLICATE = coordinator_pb2.GAME_STATUS_DUPLICATE
REJECTED = coordinator_pb2.GAME_STATUS_REJECTED


async def upload(
    coord: Any, games: list[records_pb2.GameRecord], per_message: int = 8
) -> coordinator_pb2.UploadGamesResponse:
    """Upload ``games`` to ``coord`` (a RunningCoordinator), each naming a task stored for it
    (the ingest's mechanics are tested with this; tests/test_coordinator_tasks.py tests tasks
    as GetTask issues them)."""
    await coord.store_tasks_for(games)
    async with coord.channel("worker") as ch:
        return await coordinator_pb2_grpc.CoordinatorStub(ch).UploadGames(
            iter(upload_requests(games, per_message))
        )


def shard_game_ids(data_dir: Path, run: str = RUN) -> list[str]:
    """The game ids in the shards of ``run`` under ``data_dir``, shard by shard; fails on a
    shard whose rows do not name each of its games (a game listed without rows)."""
    ids: list[str] = []
    for p in sorted((data_dir / "training_data" / run).glob("games_*.npz")):
        with np.load(p) as z:
            ids.extend(str(g) for g in z["game_ids"])
            assert len(set(z["game_index"].tolist())) == len(z["game_ids"])
    return ids


def validated_games(count: int, seed: int) -> list[GameOutcome]:
    """``count`` random 9x9 games as the validation hands them to the store (no task: the
    storage is what the tests of these check)."""
    from kgrpc.coordinator import validate
    from kgrpc.randgame import make_random_games

    settings = validate.ValidationSettings(require_task=False)
    out = [
        validate.validate_record_bytes(g.SerializeToString(), "w-test", settings)
        for g in make_random_games(count, 9, seed=seed)
    ]
    assert all(o.ok for o in out)
    return out


def check_shards(data_dir: Path, outcomes: list[GameOutcome], run: str = RUN) -> None:
    """Every game of ``outcomes`` in exactly one shard of ``run``, with its own rows."""
    by_id = {o.game_id: o for o in outcomes}
    seen: Counter[str] = Counter()
    for p in sorted((data_dir / "training_data" / run).glob("games_*.npz")):
        with np.load(p) as z:
            for gi, gid in enumerate(z["game_ids"]):
                seen[str(gid)] += 1
                sel = z["game_index"] == gi
                rows = by_id[str(gid)].row_arrays()
                np.testing.assert_array_equal(z["states"][sel], rows["states"])
                np.testing.assert_array_equal(z["value"][sel], rows["value"])
    assert seen == Counter(list(by_id))


def varint(n: int) -> bytes:
    """``n`` as a protobuf varint: for hand-made wire bytes (a length, a bomb's size)."""
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)
