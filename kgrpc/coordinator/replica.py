"""What lets several coordinator replicas share one index: who holds a pending game, and
shard numbers the index hands out.

Each replica has a data directory of its own (its ingest journal is its point of durability
before an acknowledgement) and an id kept there, ``DATA_DIR/replica.id``, made at its first
start. Every ``games`` row names the replica whose journal holds the game until it is in a
shard (``games.replica``); at start a replica recovers only its own rows, so the games
another replica holds are never taken for lost or cut twice. Rows written before replicas
existed have ``replica = ''`` and belong to whichever replica opens that (then single-node)
index.

Shard numbers come from the index (``shard_numbers``: the last number handed out per run),
in the same write transaction as everything else, so two replicas cutting at once never
write the same ``games_NNNNN.npz``. A number whose cut fails is not reused: numbers grow and
may have gaps, and readers take the listing from the ``shards`` table, never from a count.
"""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

from kgrpc.coordinator import db
from kgrpc.durable import atomic_write_bytes

ID_FILE = "replica.id"


def replica_id(data_dir: str | Path) -> str:
    """This data directory's replica id, made (and stored durably) at the first call."""
    path = Path(data_dir) / ID_FILE
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        text = ""
    if text:
        return text
    text = f"r-{uuid.uuid4().hex[:12]}"
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (text + "\n").encode())
    return text


def mine(replica: str) -> tuple[str, tuple[str, str]]:
    """``WHERE`` clause and parameters for the games rows this replica holds."""
    return "replica IN (?, ?)", (replica, "")


def reserve_shard_index(conn: sqlite3.Connection, run: str, floor: int) -> int:
    """The next shard number of ``run``, at least ``floor`` (the highest this replica knows of
    plus one: shards already indexed, or files on its disk), taken in a write transaction."""
    with db.transaction(conn):
        row = conn.execute(
            "INSERT INTO shard_numbers (run, last) VALUES (?, ?) "
            "ON CONFLICT (run) DO UPDATE SET last = CASE WHEN shard_numbers.last + 1 > "
            "excluded.last THEN shard_numbers.last + 1 ELSE excluded.last END RETURNING last",
            (run, floor),
        ).fetchone()
    return int(row[0])
