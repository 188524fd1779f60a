"""Crash recovery when the coordinator's storage opens: the ``Recovery`` methods of
:class:`kgrpc.coordinator.store.Store` and the report they make.

On open: temp files are deleted; a shard file the index lacks is adopted (its row, and rows
for games an older index lacks) or, when it cannot be read, renamed to ``NAME.corrupt``;
journal entries of games already in a shard, or held by another replica, are dropped; entries
whose games have no row yet are kept as accepted. Which kill leaves which of these is
described once, with the order of writes, in :mod:`kgrpc.coordinator.store`.

Split from ``store.py`` because it runs once, before the storage serves anything, and reads
every part of the state (journal, index, shard files) to repair it; the methods stay methods
of ``Store`` (a mixin) since they rebuild its state in place, and the attributes they read are
listed on the class and set by ``Store.__init__``.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kgrpc import shards
from kgrpc.blobstore import BlobStore
from kgrpc.coordinator import db, replica
from kgrpc.coordinator.blobs import put_shard, shard_key
from kgrpc.coordinator.journal import Journal
from kgrpc.coordinator.shard_cuts import SHARD_RE, now_ms, shard_file_name
from kgrpc.durable import fsync_dir

# The Store's log lines keep the one logger name they always had (see shard_cuts.py).
log = logging.getLogger("kgrpc.coordinator.store")


@dataclass
class RecoveryReport:
    adopted_shards: list[str] = field(default_factory=list)
    dropped_entries: int = 0
    restored_games: int = 0
    pending_games: int = 0
    # Games the index says are pending but the journal lacks (should never happen).
    missing_games: list[str] = field(default_factory=list)
    # Unreadable unindexed shard files renamed to NAME.corrupt (new names).
    quarantined_shards: list[str] = field(default_factory=list)
    # A damaged ingest journal (not a torn last entry): what was dropped, where the copy is.
    journal_damage: str = ""


class Recovery:
    """The recovery methods of :class:`kgrpc.coordinator.store.Store` (a mixin), run by
    ``Store.__init__`` once its state is set up."""

    # Set by Store.__init__ before it calls _recover.
    conn: sqlite3.Connection
    run: str
    run_dir: Path
    current_dir: Path
    blobs: BlobStore
    journal: Journal
    replica: str

    def _recover(self) -> RecoveryReport:
        report = RecoveryReport()
        if self.journal.damage is not None:
            report.journal_damage = str(self.journal.damage)
        for d in (self.run_dir, self.current_dir):
            for tmp in d.glob(".*.tmp*"):
                tmp.unlink(missing_ok=True)
        known = {
            r["file_name"]
            for r in self.conn.execute("SELECT file_name FROM shards WHERE run = ?", (self.run,))
        }
        for path in sorted(self.run_dir.glob("games_*.npz")):
            m = SHARD_RE.match(path.name)
            if not m or path.name in known:
                continue
            try:
                data = shards.load_shard(path)
                game_ids = [str(g) for g in data["game_ids"]]
                _check_adoptable(data, game_ids)
            except shards.ShardFormatError as exc:
                # Not a shard this coordinator wrote whole (a truncated or partial copy, say):
                # starting must not depend on it. Its games, if they are still pending, stay
                # in the journal and go into a new shard.
                report.quarantined_shards.append(self._quarantine(path, exc))
                continue
            # Into the store before its row (a no-op when the store is DATA_DIR itself).
            put_shard(self.blobs, shard_key(self.run, path.name), path)
            self._index_shard(int(m.group(1)), path, data, game_ids)
            report.adopted_shards.append(path.name)
            log.warning("recovery: adopted shard %s written before a crash", path.name)
        keep: set[int] = set()
        kept_games: set[str] = set()
        with db.transaction(self.conn):
            for e in self.journal:
                row = self.conn.execute(
                    "SELECT shard_index, replica FROM games WHERE game_id = ?", (e.game_id,)
                ).fetchone()
                theirs = row is not None and row["replica"] not in (self.replica, "")
                if (
                    (row is not None and row["shard_index"] is not None)
                    or theirs
                    or e.game_id in kept_games
                ):
                    # Already in a shard, held by another replica (which stored it first), or
                    # a second entry of one game (left by a failed index commit whose journal
                    # entries could not be cut back): one copy only.
                    report.dropped_entries += 1
                    continue
                kept_games.add(e.game_id)
                if row is None:
                    self._insert_game(e.game_id, e.worker_id, e.board_size, e.positions, e.seq)
                    self._bump(
                        {
                            "games_received": 1,
                            "games_accepted": 1,
                            "positions_received": e.positions,
                            "positions_accepted": e.positions,
                        }
                    )
                    report.restored_games += 1
                keep.add(e.seq)
        if report.dropped_entries:
            self.journal.rewrite(keep)
        journal_ids = {e.game_id for e in self.journal}
        held, params = replica.mine(self.replica)
        for r in self.conn.execute(
            f"SELECT game_id FROM games WHERE shard_index IS NULL AND {held}", params
        ):
            if r["game_id"] not in journal_ids:
                report.missing_games.append(r["game_id"])
        if report.missing_games:
            log.error(
                "recovery: %d pending games missing from the journal", len(report.missing_games)
            )
        for e in self.journal:
            self._add_pending(e)
        report.pending_games = len(self.journal.entries)
        return report

    def _quarantine(self, path: Path, exc: Exception) -> str:
        """Rename an unreadable, unindexed shard to ``NAME.corrupt`` (kept for inspection, out
        of every ``games_*.npz`` listing); return the new name."""
        target = path.with_name(path.name + ".corrupt")
        if target.exists():
            target = path.with_name(f"{path.name}.corrupt-{now_ms()}")
        os.rename(path, target)
        fsync_dir(path.parent)
        log.error(
            "recovery: shard %s is not in the index and cannot be read (%s); moved it aside to %s",
            path.name,
            exc,
            target.name,
        )
        return target.name

    def _adopt_games(
        self, index: int, data: Mapping[str, np.ndarray], game_ids: Sequence[str], board_size: int
    ) -> None:
        """Index rows for an adopted shard's games that the index lacks (an index restored from a
        backup older than the shards): without them the journal could hand those games out again."""
        known = self.known_games(game_ids)
        per_game = np.bincount(
            np.asarray(data["game_index"], dtype=np.int64), minlength=len(game_ids)
        )
        added = positions = 0
        for gi, gid in enumerate(game_ids):
            if gid in known:
                continue
            self.conn.execute(
                "INSERT INTO games (game_id, worker_id, run, board_size, positions, shard_index, "
                "accepted_ms) "
                "VALUES (?, '', ?, ?, ?, ?, ?)",
                (gid, self.run, board_size, int(per_game[gi]), index, now_ms()),
            )
            added += 1
            positions += int(per_game[gi])
        if added:
            log.warning(
                "recovery: %d games of adopted shard %s were not in the index",
                added,
                shard_file_name(index),
            )
            self._bump(
                {
                    "games_received": added,
                    "games_accepted": added,
                    "positions_received": positions,
                    "positions_accepted": positions,
                }
            )


def _check_adoptable(data: Mapping[str, np.ndarray], game_ids: Sequence[str]) -> None:
    """What adopting a shard relies on beyond the file format: rows point at its games, one
    entry per game."""
    gi = np.asarray(data["game_index"])
    if len(gi) and (gi.min() < 0 or gi.max() >= len(game_ids)):
        raise shards.ShardFormatError(f"game_index outside 0..{len(game_ids) - 1}")
    if len(set(game_ids)) != len(game_ids):
        raise shards.ShardFormatError("a game id appears twice in game_ids")
