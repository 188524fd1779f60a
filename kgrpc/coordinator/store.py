"""Durable game storage: SQLite index, ingest journal, shard cutting, crash recovery.

Data directory layout::

    DATA_DIR/coordinator.sqlite3            index (kgrpc.coordinator.db)
    DATA_DIR/ingest/journal.bin             accepted games not yet in a shard
    (kgrpc.coordinator.journal)
    DATA_DIR/training_data/<run>/games_00001.npz, ...   shards (kgrpc.shards)
    DATA_DIR/training_data/current/latest_games.npz     newest positions, rolling window
    DATA_DIR/models/NAME.onnx               model files (kgrpc.coordinator.models)

Order of writes, so that a kill at any moment loses no acknowledged game and
duplicates none:

1. ingest: journal append + fsync, then the ``games`` rows (``shard_index`` NULL) are
   committed, then the ack goes out.
2. cut: the shard is written atomically (tmp, fsync, rename, dir fsync; by the server in its
   file work process, :mod:`kgrpc.coordinator.cut`, between :meth:`Store.plan_cut` and
   :meth:`Store.finish_cut`, while this thread stores more games), then one
   transaction adds the ``shards`` row and sets the games' ``shard_index``, then the
   journal is rewritten without those games. An error (not a kill) on the way: a shard
   whose transaction fails is deleted again (its games stay pending); once indexed, its games
   are no longer pending even if the journal rewrite fails (the next rewrite drops them).
3. recovery (on open): temp files are deleted; a shard file with no ``shards`` row
   (killed between 2a and 2b) is adopted, or renamed to ``NAME.corrupt`` (ERROR logged) when
   it cannot be read (a truncated copy: its games, if still pending, are in the journal); journal
   entries of games that already have
   a shard (killed between 2b and 2c) are dropped; journal entries without a ``games``
   row (killed between 1a and 1b: never acknowledged, but valid) are kept as accepted.

All methods are blocking and must be called from one thread (the server uses a
dedicated single-thread executor).

``Store`` is one object with its methods in three modules, split by job: this one holds the
data directory's layout, ingest (the journal append and the ``games`` rows), indexing a shard
(the ``shards`` rows, for a cut and for an adopted file alike) and the queries;
:mod:`kgrpc.coordinator.shard_cuts` when and how pending games become shards (step 2);
:mod:`kgrpc.coordinator.store_recovery` the repair on open (step 3). They share the state
``Store.__init__`` sets, on the one storage thread, so the parts are mixins of ``Store``
rather than objects of their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kgrpc.blobstore import BlobStore, LocalBlobStore
from kgrpc.coordinator import db, replica, workers
from kgrpc.coordinator.journal import Journal, JournalEntry
from kgrpc.coordinator.outcome import GameOutcome
from kgrpc.coordinator.shard_cuts import CutPlan, ShardCuts, group_of, now_ms
from kgrpc.coordinator.store_recovery import Recovery
from kgrpc.digest import file_digest

COUNTER_NAMES = (
    "games_received",
    "games_accepted",
    "games_rejected",
    "games_duplicate",
    "positions_received",
    "positions_accepted",
    "shards_written",
)


@dataclass(frozen=True)
class ShardRecord:
    run: str
    index: int
    file_name: str
    size_bytes: int
    sha256: str
    games: int
    positions: int
    board_size: int
    komi: float
    rules: str


class Store(Recovery, ShardCuts):
    """The coordinator's game storage (this module's docstring): ingest, the ``games`` and
    ``shards`` rows and the queries here; cutting shards in :class:`ShardCuts`
    (:mod:`kgrpc.coordinator.shard_cuts`); recovery on open in :class:`Recovery`
    (:mod:`kgrpc.coordinator.store_recovery`)."""

    def __init__(
        self,
        data_dir: str | Path,
        run: str,
        *,
        positions_per_shard: int = 50_000,
        latest_window_positions: int = 250_000,
        latest_refresh_s: float = 60.0,
        max_groups: int = 32,
        blobs: BlobStore | None = None,
        index: str = "",
    ) -> None:
        self.data_dir = Path(data_dir)
        self.run = run
        self.positions_per_shard = positions_per_shard
        self.latest_window_positions = latest_window_positions
        # Rebuilding the window rewrites up to latest_window_positions rows: at most once per
        # latest_refresh_s per group, or at high ingest rates it would cost more than the
        # shards themselves (a 50,000-row cut every few seconds against a 250,000-row window).
        self.latest_refresh_s = latest_refresh_s
        self._latest_at: dict[tuple[int, float, str], float] = {}
        self.max_groups = max_groups
        # Where shards are kept (kgrpc.coordinator.blobs): DATA_DIR itself by default.
        self.blobs = blobs if blobs is not None else LocalBlobStore(self.data_dir)
        self.training_dir = self.data_dir / "training_data"
        self.run_dir = self.training_dir / run
        self.current_dir = self.training_dir / "current"
        for d in (self.run_dir, self.current_dir, self.data_dir / "ingest"):
            d.mkdir(parents=True, exist_ok=True)
        self.conn = db.connect(self.data_dir, index=index)
        self.replica = replica.replica_id(self.data_dir)
        self.journal = Journal(self.data_dir / "ingest" / "journal.bin")
        # group (board_size, komi rounded, rules; see group_of) -> pending entries, oldest first
        self.pending: dict[tuple[int, float, str], list[JournalEntry]] = {}
        self.oldest_pending_ms: dict[tuple[int, float, str], int] = {}
        self._dead_bytes = 0  # journal bytes of games already in shards (see finish_cut)
        self._cut_blocked = ""  # path of a shard that failed to index and could not be removed
        self._cut_in_flight: CutPlan | None = None  # planned, not yet finished or aborted
        self.recovery = self._recover()

    # ------------------------------------------------------------------ helpers
    def _bump(self, deltas: Mapping[str, int]) -> None:
        for name, delta in deltas.items():
            if delta:
                self.conn.execute(
                    "INSERT INTO counters (name, value) VALUES (?, ?) "
                    "ON CONFLICT(name) DO UPDATE SET value = counters.value + excluded.value",
                    (name, int(delta)),
                )

    def _insert_game(
        self, game_id: str, worker_id: str, board_size: int, positions: int, seq: int
    ) -> None:
        self.conn.execute(
            "INSERT INTO games (game_id, worker_id, run, board_size, positions, journal_seq, "
            "accepted_ms, replica) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (game_id, worker_id, self.run, board_size, positions, seq, now_ms(), self.replica),
        )

    def _add_pending(self, e: JournalEntry) -> None:
        key = group_of(e)
        self.pending.setdefault(key, []).append(e)
        self.oldest_pending_ms.setdefault(key, now_ms())

    # ------------------------------------------------------------------ ingest
    def known_games(self, game_ids: Iterable[str]) -> set[str]:
        # An id with a NUL is never stored (validation refuses it), and PostgreSQL refuses
        # NUL in any text value: such an id is simply not known.
        ids = [g for g in game_ids if "\x00" not in g]
        found: set[str] = set()
        for i in range(0, len(ids), 500):
            part = ids[i : i + 500]
            q = f"SELECT game_id FROM games WHERE game_id IN ({','.join('?' * len(part))})"
            found.update(r["game_id"] for r in self.conn.execute(q, part))
        return found

    def ingest(self, outcomes: Sequence[GameOutcome]) -> list[str]:
        """Store a batch durably; return per game "accepted" | "duplicate" | "rejected"."""
        known = self.known_games(o.game_id for o in outcomes if o.ok)
        statuses: list[str] = []
        to_journal: list[GameOutcome] = []
        seen: set[str] = set()
        for o in outcomes:
            if not o.ok:
                statuses.append("rejected")
            elif o.game_id in known or o.game_id in seen:
                statuses.append("duplicate")
            else:
                statuses.append("accepted")
                seen.add(o.game_id)
                to_journal.append(o)
        entries = self.journal.append(
            (
                {
                    "game_id": o.game_id,
                    "worker_id": o.worker_id,
                    "board_size": o.board_size,
                    "komi": o.komi,
                    "rules": o.rules,
                    "positions": o.positions,
                },
                o.journal_payload(),
            )
            for o in to_journal
        )
        try:
            late = self._commit_ingest(outcomes, statuses, to_journal, entries)
        except BaseException:
            # Not acknowledged: take the entries back out of the journal, or the retry of
            # these games would add a second entry for each (stored twice after a restart).
            self.journal.discard(entries)
            raise
        if late:
            # Stored by another replica between the lookup and the commit: a duplicate here.
            self.journal.discard(late)
            entries = [e for e in entries if e not in late]
        for e in entries:
            self._add_pending(e)
        return statuses

    def _commit_ingest(
        self,
        outcomes: Sequence[GameOutcome],
        statuses: list[str],
        to_journal: list[GameOutcome],
        entries: list[JournalEntry],
    ) -> list[JournalEntry]:
        """Index the journaled games (``statuses`` updated in place); the entries of games
        another replica sharing the index stored first, which are duplicates after all."""
        late: list[JournalEntry] = []
        with db.transaction(self.conn):
            # The lookup before the journal append ran outside this transaction; under the
            # index's write lock, the games stored since then by other replicas are final.
            taken = self.known_games(o.game_id for o in to_journal)
            if taken:
                late = [e for o, e in zip(to_journal, entries, strict=True) if o.game_id in taken]
                for i, (o, st) in enumerate(zip(outcomes, statuses, strict=True)):
                    if st == "accepted" and o.game_id in taken:
                        statuses[i] = "duplicate"
                entries = [
                    e for o, e in zip(to_journal, entries, strict=True) if o.game_id not in taken
                ]
                to_journal = [o for o in to_journal if o.game_id not in taken]
            for o, e in zip(to_journal, entries, strict=True):
                self._insert_game(o.game_id, o.worker_id, o.board_size, o.positions, e.seq)
            # A duplicate is counted as such, not as a game received: a client re-sending
            # stored games (a hostile one, millions of times) does not inflate what came in.
            deltas = {
                "games_received": len(outcomes) - statuses.count("duplicate"),
                "games_accepted": len(to_journal),
                "games_duplicate": statuses.count("duplicate"),
                "games_rejected": statuses.count("rejected"),
                "positions_received": sum(
                    o.positions
                    for o, st in zip(outcomes, statuses, strict=True)
                    if st != "duplicate"
                ),
                "positions_accepted": sum(o.positions for o in to_journal),
            }
            for o, st in zip(outcomes, statuses, strict=True):
                if st == "rejected":
                    deltas[f"reject:{o.reason}"] = deltas.get(f"reject:{o.reason}", 0) + 1
            self._bump(deltas)
            # Per-worker counts, for registered workers only (see kgrpc.coordinator.workers).
            for o, st in zip(outcomes, statuses, strict=True):
                if st != "duplicate" and o.worker_id:
                    workers.count_game(self.conn, o.worker_id, st == "accepted", o.reason)
        return late

    def _index_shard(
        self,
        index: int,
        path: Path,
        data: Mapping[str, np.ndarray] | None,
        game_ids: Sequence[str],
        *,
        board_size: int | None = None,
        komi: float | None = None,
        rules: str | None = None,
        positions: int | None = None,
        written: tuple[int, str] | None = None,
    ) -> ShardRecord:
        """Add the ``shards`` row of the file at ``path`` (``written``: its size and sha256
        when known, else read here) and point its games at it."""
        if data is not None:
            board_size = int(data["board_size"])
            komi = float(data["komi"])
            rules = str(data["rules"])
            positions = int(len(data["value"]))
        assert (
            board_size is not None
            and komi is not None
            and rules is not None
            and positions is not None
        )
        size, digest = written if written is not None else file_digest(path)
        record = ShardRecord(
            self.run,
            index,
            path.name,
            size,
            digest,
            len(game_ids),
            positions,
            board_size,
            komi,
            rules,
        )
        with db.transaction(self.conn):
            self.conn.execute(
                "INSERT INTO shards (run, idx, file_name, size_bytes, sha256, games, positions, "
                "board_size, komi, rules, created_ms) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    self.run,
                    index,
                    path.name,
                    record.size_bytes,
                    record.sha256,
                    record.games,
                    positions,
                    board_size,
                    komi,
                    rules,
                    now_ms(),
                ),
            )
            if data is not None:
                self._adopt_games(index, data, game_ids, board_size)
            for i in range(0, len(game_ids), 500):
                part = list(game_ids[i : i + 500])
                self.conn.execute(
                    f"UPDATE games SET shard_index = ? WHERE game_id IN "
                    f"({','.join('?' * len(part))})",
                    [index, *part],
                )
            self._bump({"shards_written": 1})
        return record

    # ------------------------------------------------------------------ queries
    def list_shards(self, run: str | None = None, after_index: int = 0) -> list[ShardRecord]:
        rows = self.conn.execute(
            "SELECT * FROM shards WHERE run = ? AND idx > ? ORDER BY idx",
            (run or self.run, after_index),
        ).fetchall()
        return [
            ShardRecord(
                r["run"],
                r["idx"],
                r["file_name"],
                r["size_bytes"],
                r["sha256"],
                r["games"],
                r["positions"],
                r["board_size"],
                r["komi"],
                r["rules"],
            )
            for r in rows
        ]

    def shard_path(self, run: str, file_name: str) -> Path | None:
        """Path of an indexed shard (names are looked up, never joined blindly)."""
        row = self.conn.execute(
            "SELECT file_name FROM shards WHERE run = ? AND file_name = ?",
            (run or self.run, file_name),
        ).fetchone()
        if row is None:
            return None
        return self.training_dir / (run or self.run) / row["file_name"]

    def counters(self) -> dict[str, int]:
        out = dict.fromkeys(COUNTER_NAMES, 0)
        for r in self.conn.execute("SELECT name, value FROM counters"):
            out[r["name"]] = r["value"]
        return out

    def close(self) -> None:
        self.journal.close()
        self.conn.close()
