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
   validation pool, :mod:`kgrpc.coordinator.cut`, between :meth:`Store.plan_cut` and
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
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kgrpc import shards
from kgrpc.blobstore import BlobStore, LocalBlobStore
from kgrpc.coordinator import cut, db, replica, workers
from kgrpc.coordinator.blobs import prune_local, put_shard, shard_key
from kgrpc.coordinator.journal import Journal, JournalEntry
from kgrpc.coordinator.outcome import GameOutcome
from kgrpc.digest import file_digest
from kgrpc.durable import fsync_dir

log = logging.getLogger(__name__)

SHARD_RE = re.compile(r"^games_(\d{5,})\.npz$")
COUNTER_NAMES = (
    "games_received",
    "games_accepted",
    "games_rejected",
    "games_duplicate",
    "positions_received",
    "positions_accepted",
    "shards_written",
)


def group_komi(komi: float) -> float:
    """The komi of a game's shard group: rounded to the nearest half point (half-points away
    from zero), so games of nearby komi share shards and the number of open groups stays
    bounded. Each row's global features carry the game's own komi."""
    return math.copysign(math.floor(abs(komi) * 2 + 0.5) / 2, komi) + 0.0


def group_of(e: JournalEntry) -> tuple[int, float, str]:
    """The shard group of a journal entry: (board size, :func:`group_komi`, rules)."""
    return (e.board_size, group_komi(e.komi), e.rules)


def shard_file_name(index: int) -> str:
    return f"games_{index:05d}.npz"


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class CutPlan:
    """A shard cut between :meth:`Store.plan_cut` and :meth:`Store.finish_cut`."""

    key: tuple[int, float, str]  # the group: board size, komi, rules
    take: list[JournalEntry]  # its oldest pending games, the shard's content
    index: int
    positions: int
    latest: bool  # rebuild latest_games.npz when due (not for a group cut early)
    job: cut.CutJob  # the file work, picklable for the validation pool


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


class Store:
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

    # ------------------------------------------------------------------ recovery
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

    # ------------------------------------------------------------------ shards
    def pending_positions(self) -> dict[tuple[int, float, str], int]:
        return {k: sum(e.positions for e in v) for k, v in self.pending.items() if v}

    def next_shard_index(self) -> int:
        row = self.conn.execute(
            "SELECT MAX(idx) AS m FROM shards WHERE run = ?", (self.run,)
        ).fetchone()
        on_disk = [int(m.group(1)) for p in self.run_dir.iterdir() if (m := SHARD_RE.match(p.name))]
        return max([row["m"] or 0, *on_disk]) + 1

    def cut_ready(self, *, older_than_s: float | None = None) -> list[ShardRecord]:
        """Cut every shard that is due (:meth:`cut_next`) until none is."""
        cut: list[ShardRecord] = []
        while (record := self.cut_next(older_than_s=older_than_s)) is not None:
            cut.append(record)
        return cut

    def due(self, older_than_s: float | None = None) -> tuple[tuple[int, float, str], bool] | None:
        """The group to cut next and whether it is forced by the group limit: a full group
        (``positions_per_shard``); else the oldest group beyond ``max_groups`` open ones;
        else, with ``older_than_s``, one whose games waited that long; None when none is."""
        groups = [k for k, q in self.pending.items() if q]
        for key in groups:
            if sum(e.positions for e in self.pending[key]) >= self.positions_per_shard:
                return key, False
        if len(groups) > self.max_groups:
            return min(groups, key=lambda k: self.oldest_pending_ms.get(k, 0)), True
        if older_than_s is not None:
            now = now_ms()
            for key in groups:
                if (now - self.oldest_pending_ms.get(key, now)) / 1000.0 >= older_than_s:
                    return key, False
        return None

    def cut_next(self, *, older_than_s: float | None = None) -> ShardRecord | None:
        """Cut one shard that is due (:meth:`due`), or return None, all on this thread
        (:meth:`plan_cut`, :func:`kgrpc.coordinator.cut.write_cut`, :meth:`finish_cut`, and
        the rebuild of latest_games.npz when :meth:`latest_due`)."""
        plan = self.plan_cut(older_than_s=older_than_s)
        if plan is None:
            return None
        try:
            written = cut.write_cut(plan.job)
            self.put_cut(plan)
        except BaseException:
            self.abort_cut(plan)
            raise
        record = self.finish_cut(plan, written)
        window = self.latest_due(plan)
        if window is not None:
            try:
                cut.write_window(window)
            except (OSError, shards.ShardFormatError) as exc:
                log.error("could not update latest_games.npz: %s", exc)
        return record

    def flush_all(self) -> list[ShardRecord]:
        """Write every pending game into shards, full or not."""
        return self.cut_ready(older_than_s=0.0)

    def plan_cut(self, *, older_than_s: float | None = None) -> CutPlan | None:
        """The next shard that is due (:meth:`due`), as a plan whose file work
        (``plan.job``, :func:`kgrpc.coordinator.cut.write_cut`) may run in another process
        while this thread goes on storing games; :meth:`finish_cut` or :meth:`abort_cut`
        ends it. One cut at a time: None while one is planned and not ended."""
        if self._cut_in_flight is not None:
            return None
        found = self.due(older_than_s)
        if found is None:
            return None
        if self._cut_blocked:
            raise OSError(
                f"an unindexed shard could not be removed: restart the coordinator (recovery "
                f"adopts it): {self._cut_blocked}"
            )
        key, forced = found
        board_size, komi, rules = key
        take: list[JournalEntry] = []
        total = 0
        for e in self.pending[key]:
            if total >= self.positions_per_shard:
                break
            take.append(e)
            total += e.positions
        index = replica.reserve_shard_index(self.conn, self.run, self.next_shard_index())
        job = cut.CutJob(
            journal_path=str(self.journal.path),
            entries=[(e.offset, e.length) for e in take],
            path=str(self.run_dir / shard_file_name(index)),
            board_size=board_size,
            komi=komi,
            rules=rules,
            game_ids=[e.game_id for e in take],
        )
        plan = CutPlan(key, take, index, total, not forced, job)
        self._cut_in_flight = plan
        return plan

    def put_cut(self, plan: CutPlan) -> None:
        """Put the shard ``plan``'s file work wrote into the blob store, before
        :meth:`finish_cut` indexes it (a no-op on the default store). Blocking; it touches
        neither the index nor the journal, so it may run off the storage thread."""
        path = Path(plan.job.path)
        put_shard(self.blobs, shard_key(self.run, path.name), path)

    def abort_cut(self, plan: CutPlan, error: BaseException | None = None) -> None:
        """End a cut whose file work failed: a file it left is removed (its games stay
        pending); ``error``, the failure, is raised again here, on the storage thread, so that
        a full disk is reported as the storage's other writes report it."""
        self._cut_in_flight = None
        self._remove_unindexed(Path(plan.job.path))
        if error is not None:
            raise error

    def _remove_unindexed(self, path: Path) -> None:
        # The games are still pending in the journal: remove the file, or the next cut
        # would store them again in a new shard (and a trainer reading the folder sees both).
        try:
            path.unlink(missing_ok=True)
            fsync_dir(self.run_dir)
        except OSError:
            log.exception("could not remove unindexed shard %s", path)
            self._cut_blocked = str(path)

    def finish_cut(self, plan: CutPlan, written: tuple[int, str]) -> ShardRecord:
        """Index the shard ``plan``'s file work wrote (``written``: its size and sha256),
        then take its games out of the pending ones and the journal. The rebuild of
        latest_games.npz the cut may make due is the caller's (:meth:`latest_due`)."""
        self._cut_in_flight = None
        key = plan.key
        board_size, komi, rules = key
        take = plan.take
        path = Path(plan.job.path)
        queue = self.pending.get(key, [])
        # Games are only ever appended to a group while its cut runs; anything else is a bug
        # that must not index a shard over games it does not hold.
        if [e.seq for e in queue[: len(take)]] != [e.seq for e in take]:
            self._remove_unindexed(path)
            raise RuntimeError(f"pending games of {key} changed during the cut of {path.name}")
        try:
            record = self._index_shard(
                plan.index,
                path,
                None,
                plan.job.game_ids,
                board_size=board_size,
                komi=komi,
                rules=rules,
                positions=plan.positions,
                written=written,
            )
        except BaseException:
            self._remove_unindexed(path)
            raise
        # From here the taken games are in an indexed shard: whatever happens to the journal
        # rewrite, they are no longer pending (a journal still holding them is cleaned by the
        # next rewrite, or by recovery at the next start).
        # The journal is rewritten without the games in shards only once they take as many
        # bytes as the games still pending: each byte is copied a bounded number of times, so
        # many small cuts (many groups) cost in proportion to what they cut, not to the whole
        # journal each. Until then recovery drops their entries (they have a shard).
        self.pending[key] = queue[len(take) :]
        if not self.pending[key]:
            del self.pending[key]
        self._dead_bytes += sum(e.length for e in take)
        live = sum(e.length for q in self.pending.values() for e in q)
        if self._dead_bytes >= live:
            keep = {e.seq for q in self.pending.values() for e in q}
            try:
                self.journal.rewrite(keep)
                self._dead_bytes = 0
            except OSError:
                log.exception(
                    "ingest journal rewrite failed; games of %s stay in it until the next rewrite",
                    path.name,
                )
            # A rewrite moves every entry: rebuild the pending index from the journal's offsets.
            self.pending = {}
            for e in self.journal.entries:
                if e.seq in keep:
                    self.pending.setdefault(group_of(e), []).append(e)
        if key in self.pending:
            self.oldest_pending_ms[key] = now_ms()
        else:
            self.oldest_pending_ms.pop(key, None)
        log.info("wrote shard %s: %d games, %d positions", path.name, len(take), plan.positions)
        return record

    def latest_due(self, plan: CutPlan) -> cut.WindowJob | None:
        """The rebuild of latest_games.npz that the finished cut ``plan`` makes due, as file
        work (:func:`kgrpc.coordinator.cut.write_window`), counted as done from now on; None
        when the last one is younger than ``latest_refresh_s``, or for a group cut early
        because too many are open. Rebuilding a window of 250,000 19x19 rows reads and writes
        about 900 MB: the coordinator runs it in its validation pool, not on this thread."""
        if not plan.latest:
            return None
        refreshed = self._latest_at.get(plan.key)
        if refreshed is not None and time.monotonic() - refreshed < self.latest_refresh_s:
            return None
        self._latest_at[plan.key] = time.monotonic()
        return self.window_job(*plan.key)

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

    def window_job(self, board_size: int, komi: float, rules: str) -> cut.WindowJob:
        """The rebuild of latest_games.npz from the newest shards of this kind (newest rows
        kept), streamed array by array (:func:`kgrpc.shards.write_window`): a window of
        250,000 19x19 rows is about 900 MB, which the coordinator must never hold in memory."""
        rows_needed = self.latest_window_positions
        picked: list[str] = []
        got = 0
        for r in self.conn.execute(
            "SELECT file_name, positions FROM shards WHERE run = ? AND board_size = ? AND komi = "
            "? AND rules = ? ORDER BY idx DESC",
            (self.run, board_size, komi, rules),
        ):
            if got >= rows_needed:
                break
            picked.append(r["file_name"])
            got += r["positions"]
        return cut.WindowJob(
            path=str(self.current_dir / "latest_games.npz"),
            sources=[str(self.run_dir / name) for name in reversed(picked)],
            rows=rows_needed,
            board_size=board_size,
            komi=komi,
            rules=rules,
        )

    def prune_local(self, job: cut.WindowJob) -> int:
        """With a remote blob store: remove the local copies of this run's indexed shards of
        ``job``'s kind that are older than the window just rebuilt from them (newer ones are
        the next window's); see :func:`kgrpc.coordinator.blobs.prune_local`."""
        mine = {Path(s).name for s in job.sources if Path(s).parent == self.run_dir}
        rows = self.conn.execute(
            "SELECT file_name, idx FROM shards WHERE run = ? AND board_size = ? AND komi = ? "
            "AND rules = ? ORDER BY idx",
            (self.run, job.board_size, job.komi, job.rules),
        ).fetchall()
        kept = [r["idx"] for r in rows if r["file_name"] in mine]
        if not kept:
            return 0
        older = [r["file_name"] for r in rows if r["idx"] < min(kept)]
        return prune_local(self.blobs, self.run_dir, older)

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


def _check_adoptable(data: Mapping[str, np.ndarray], game_ids: Sequence[str]) -> None:
    """What adopting a shard relies on beyond the file format: rows point at its games, one
    entry per game."""
    gi = np.asarray(data["game_index"])
    if len(gi) and (gi.min() < 0 or gi.max() >= len(game_ids)):
        raise shards.ShardFormatError(f"game_index outside 0..{len(game_ids) - 1}")
    if len(set(game_ids)) != len(game_ids):
        raise shards.ShardFormatError("a game id appears twice in game_ids")
