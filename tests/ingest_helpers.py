"""Shared by the coordinator's ingest tests (tests/test_coordinator_ingest*.py,
test_coordinator_upload_payloads.py, test_coordinator_bounds.py): an upload naming stored
tasks, the game ids in a run's shards, and the wire's varint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kgrpc.coordinator.testing import upload_requests
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc, records_pb2

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


def shard_game_ids(data_dir: Path, run: str = "run_001") -> list[str]:
    """The game ids in the shards of ``run`` under ``data_dir``, shard by shard; fails on a
    shard whose rows name a game index twice over."""
    ids: list[str] = []
    for p in sorted((data_dir / "training_data" / run).glob("games_*.npz")):
        with np.load(p) as z:
            ids.extend(str(g) for g in z["game_ids"])
            assert len(set(z["game_index"].tolist())) == len(z["game_ids"])
    return ids


def varint(n: int) -> bytes:
    """``n`` as a protobuf varint: for hand-made wire bytes (a length, a bomb's size)."""
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)
