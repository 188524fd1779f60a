"""Cutting pending games into shards: the ``ShardCuts`` methods of
:class:`kgrpc.coordinator.store.Store`, and the grouping of games into shards.

A cut is planned on the storage thread (:meth:`ShardCuts.plan_cut`: which group is due, its
oldest games, the shard's number), its file work runs elsewhere (:mod:`kgrpc.coordinator.cut`,
in the file work process of :mod:`kgrpc.coordinator.file_work`), and it is ended on the
storage thread again (:meth:`ShardCuts.finish_cut` indexes the shard and takes its games out
of the pending ones and the journal, or :meth:`ShardCuts.abort_cut`); then the rebuild of
latest_games.npz it makes due (:meth:`ShardCuts.latest_due`, :meth:`ShardCuts.window_job`)
and, with a remote blob store, the pruning of local copies (:meth:`ShardCuts.prune_local`).
The order of writes that makes a kill at any moment safe is described once, in
:mod:`kgrpc.coordinator.store`.

Split from ``store.py`` where the state changes hands: ingest adds games to the pending
groups, this module takes them out into shards. The methods stay methods of ``Store`` (a
mixin, as the native core keeps its one ``GameSet`` class over the ``search*.cpp`` files)
because they share its state on the one storage thread; the attributes they read are listed
on the class and set by ``Store.__init__``.
"""

from __future__ import annotations

import logging
import math
import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kgrpc import shards
from kgrpc.blobstore import BlobStore
from kgrpc.coordinator import cut, quorum, replica
from kgrpc.coordinator.blobs import prune_local, put_shard, shard_key
from kgrpc.coordinator.journal import Journal, JournalEntry
from kgrpc.durable import fsync_dir

if TYPE_CHECKING:
    from kgrpc.coordinator.store import ShardRecord

# The Store's log lines keep the one logger name they always had, whichever of its modules
# writes them (operators filter on it).
log = logging.getLogger("kgrpc.coordinator.store")

SHARD_RE = re.compile(r"^games_(\d{5,})\.npz$")


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
    job: cut.CutJob  # the file work, picklable for the file work process


class ShardCuts:
    """The shard-cutting methods of :class:`kgrpc.coordinator.store.Store` (a mixin)."""

    # Set by Store.__init__; shared with ingest and recovery, all on the storage thread.
    conn: sqlite3.Connection
    run: str
    run_dir: Path
    current_dir: Path
    blobs: BlobStore
    journal: Journal
    positions_per_shard: int
    latest_window_positions: int
    latest_refresh_s: float
    max_groups: int
    pending: dict[tuple[int, float, str], list[JournalEntry]]
    oldest_pending_ms: dict[tuple[int, float, str], int]
    _latest_at: dict[tuple[int, float, str], float]
    _dead_bytes: int
    _cut_blocked: str
    _cut_in_flight: CutPlan | None

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
        about 900 MB: the coordinator runs it in its file work process, not on this thread."""
        if not plan.latest:
            return None
        refreshed = self._latest_at.get(plan.key)
        if refreshed is not None and time.monotonic() - refreshed < self.latest_refresh_s:
            return None
        self._latest_at[plan.key] = time.monotonic()
        return self.window_job(*plan.key)

    def window_job(self, board_size: int, komi: float, rules: str) -> cut.WindowJob:
        """The rebuild of latest_games.npz from the newest shards of this kind (newest rows
        kept), streamed array by array (:func:`kgrpc.shards.write_window`): a window of
        250,000 19x19 rows is about 900 MB, which the coordinator must never hold in memory.
        The shards ListShards withholds (games of a quarantined token) are left out, so the
        window holds none of their rows (kgrpc.coordinator.window_quarantine)."""
        rows_needed = self.latest_window_positions
        withheld = quorum.excluded_shards(self.conn, self.run)
        picked: list[str] = []
        got = 0
        for r in self.conn.execute(
            "SELECT idx, file_name, positions FROM shards WHERE run = ? AND board_size = ? AND "
            "komi = ? AND rules = ? ORDER BY idx DESC",
            (self.run, board_size, komi, rules),
        ):
            if got >= rows_needed:
                break
            if r["idx"] in withheld:
                continue
            picked.append(r["file_name"])
            got += r["positions"]
        return cut.WindowJob(
            path=str(self.current_dir / cut.WINDOW_NAME),
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
