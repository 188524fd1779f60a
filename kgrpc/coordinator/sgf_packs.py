"""Kept games packed many to an object, for a blob store other than DATA_DIR (S3).

One object per game would make millions of small objects (a PUT each, per-object overheads
in every store, slow listings and backups). With a remote store the archive
(:mod:`kgrpc.coordinator.archive`) instead puts the SGF of all the games it made durable in
one flush (those of the last ``FLUSH_INTERVAL_S`` seconds) as one object::

    sgf/packs/YYYYMMDD/<ms>-<random>.sgf

the SGF texts one after the other (which is itself an SGF collection: a file of several game
trees), and each game's ``sgf_games`` row records ``pack`` (the key), ``pack_offset`` and
``pack_length``: reading one game is one ranged GET. A pack is put create-only before its
rows are committed, so a row always names bytes that are there; a pack whose rows were never
committed (a crash in between) is left unreferenced, never read. Rows with no pack (written
to DATA_DIR/sgf/ before, or on the default store) name a file, as always.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kgrpc.blobstore import BlobStore

if TYPE_CHECKING:
    from kgrpc.coordinator.kept_games import KeptGame

PACK_PREFIX = "sgf/packs"


def pack_key(now: float | None = None) -> str:
    """A new pack's key: by day, then by time and a random part (replicas never collide)."""
    t = time.time() if now is None else now
    day = time.strftime("%Y%m%d", time.gmtime(t))
    return f"{PACK_PREFIX}/{day}/{int(t * 1000)}-{uuid.uuid4().hex[:12]}.sgf"


def build(
    games: Sequence[KeptGame], texts: Sequence[bytes], key: str
) -> tuple[bytes, list[KeptGame]]:
    """The pack of ``texts`` (one per game, in order) and the games' rows pointing into it."""
    parts: list[bytes] = []
    rows: list[KeptGame] = []
    offset = 0
    for g, data in zip(games, texts, strict=True):
        parts.append(data)
        rows.append(dataclasses.replace(g, pack=key, pack_offset=offset, pack_length=len(data)))
        offset += len(data)
    return b"".join(parts), rows


def put(store: BlobStore, games: Sequence[KeptGame], texts: Sequence[bytes]) -> list[KeptGame]:
    """Put one pack of ``texts`` into ``store`` (create-only) and return the rows to index."""
    key = pack_key()
    body, rows = build(games, texts, key)
    store.put_bytes(key, body, create_only=True)
    return rows


def read(store: BlobStore, game: KeptGame) -> bytes:
    """One packed game's SGF: one ranged read."""
    data = store.get_range(game.pack, game.pack_offset, game.pack_length)
    if len(data) != game.pack_length:
        raise ValueError(
            f"pack {game.pack} holds {len(data)} of game {game.game_id}'s {game.pack_length} "
            f"bytes at {game.pack_offset}"
        )
    return data
