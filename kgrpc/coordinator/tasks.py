"""Tasks: what a worker plays next (GetTask), and the stored terms of every task handed out.

GetTask hands out a chunk of a pending gating match, or self-play with the best model, or
"wait" before the first model. Every task but "wait" is stored in the ``tasks`` table
(:mod:`kgrpc.coordinator.db`) with the terms its games must fit
(:class:`kgrpc.records.terms.TaskTerms`): the worker it was issued to, board size, rules, komi
(self-play: ``komi_range`` when set, else ``komi``; gating: ``komi``), the move cap and the
model(s). Ingest looks up the task each uploaded game names (:meth:`Tasks.terms`): a game
whose task is not stored is ``unknown_task``, one outside its task's terms ``task_mismatch``.

* **Worker**: the task is bound to the worker id of the request when the caller may act for
  it (registered, under the caller's token), else to the caller's upload bucket
  (``token-<id>``, ``anonymous``): the id its games are counted under on upload.
* **Move cap**: ``Task.max_moves`` is the game's cap itself,
  ``move_cap(N, max_moves, max_moves_per_point)``, stored as issued: a later change
  of the settings does not turn games spooled under the task into rejects.
* **Retention**: a task is known for ``task_retention_s`` after it was issued (default 7
  days), across coordinator restarts and model releases; older ones are pruned (at start-up,
  then at most once a minute as tasks are issued) and refused even before that.
* **Per-worker cap**: at most ``max_tasks_per_worker`` tasks are stored per worker (or
  bucket); issuing one more drops that worker's oldest.
* **Cache**: the terms of the newest :data:`CACHE_TASKS` tasks looked up or issued are kept
  in memory in front of the table (dropped tasks leave it too).

Everything here runs on the storage thread, the single owner of the connection.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable

from kgrpc.coordinator import db
from kgrpc.coordinator.config import Config
from kgrpc.coordinator.gating import Gating
from kgrpc.coordinator.models import Models
from kgrpc.go.rules import preset_to_proto
from kgrpc.records.terms import TaskTerms, move_cap
from kgrpc.v1 import coordinator_pb2

# Task terms kept in memory (about 300 bytes each).
CACHE_TASKS = 10_000
# Expired tasks are deleted at most this often (seconds) while tasks are issued.
PRUNE_EVERY_S = 60.0
# Task ids looked up in one query.
_QUERY_IDS = 500


class Tasks:
    """The ``tasks`` table and its cache; ``clock`` gives the time in seconds (tests)."""

    def __init__(
        self, conn: sqlite3.Connection, cfg: Config, clock: Callable[[], float] = time.time
    ) -> None:
        self.conn = conn
        self.cfg = cfg
        self.clock = clock
        self._cache: OrderedDict[str, tuple[TaskTerms, int]] = OrderedDict()
        self._pruned_at = 0.0
        self.prune()

    # ------------------------------------------------------------------ GetTask
    def issue(
        self,
        models: Models,
        gating: Gating,
        worker_id: str,
        may_play_matches: bool,
        token_id: int | None = None,
    ) -> coordinator_pb2.Task:
        """The next task for ``worker_id`` (the id its games count under), stored. A match
        chunk goes only to a worker the caller may report for (``may_play_matches``:
        registered under its token, ``token_id``, whose chunks of a match are spread over
        tokens: :meth:`Gating.next_match_task`); anyone else plays self-play, whose games
        are validated on upload anyway."""
        cfg = self.cfg
        best = models.best()
        if best is None:
            return coordinator_pb2.Task(task_id="wait", retry_after_s=cfg.retry_after_s)
        stage = models.stage()
        cap = move_cap(stage.board_size, cfg.max_moves, cfg.max_moves_per_point)
        task = coordinator_pb2.Task(
            rules=preset_to_proto(cfg.rules),
            komi=cfg.komi,
            board_size=stage.board_size,
            visits=stage.visits,
            max_moves=cap,  # a game that stops anywhere else is unfinished (or too_long)
        )
        komi = (cfg.komi, cfg.komi, 0.0)
        # Not waiting for the disk (db.transaction): the task's games are uploaded later, and
        # the durable commit that acknowledges them makes this one durable too (a WAL is
        # written in order). Only a crash of the machine within a second of this answer
        # loses the row, and then those games are refused as of an unknown task.
        with db.transaction(self.conn, durable=False):
            spec = gating.next_match_task(worker_id, token_id) if may_play_matches else None
            if spec is not None:
                task.task_id = spec.task_id
                task.match.CopyFrom(
                    coordinator_pb2.MatchTask(
                        candidate_model=spec.candidate,
                        reference_model=spec.reference,
                        games=spec.games,
                    )
                )
                kind, names = "match", (spec.candidate, spec.reference)
            else:
                task.task_id = "selfplay-" + uuid.uuid4().hex[:16]
                task.selfplay.CopyFrom(
                    coordinator_pb2.SelfPlayTask(model=best["name"], games=cfg.selfplay_task_games)
                )
                if cfg.komi_range:
                    low, high, step = cfg.komi_range
                    task.komi_range.CopyFrom(
                        coordinator_pb2.KomiRange(low=low, high=high, step=step)
                    )
                    komi = (low, high, step)
                kind, names = "selfplay", (best["name"],)
            terms = TaskTerms(
                task.task_id, stage.board_size, cfg.rules, *komi, cap, names, worker_id
            )
            self._store(terms, kind)
        return task

    # ------------------------------------------------------------------ the table
    def store(self, terms: TaskTerms, kind: str = "selfplay", issued_ms: int | None = None) -> None:
        """Store ``terms`` as a task issued at ``issued_ms`` (now by default): what
        :meth:`issue` does, for tools and tests that make games without GetTask."""
        with db.transaction(self.conn):
            self._store(terms, kind, issued_ms)

    def _store(self, terms: TaskTerms, kind: str, issued_ms: int | None = None) -> None:
        if len(terms.models) not in (1, 2) or kind not in ("selfplay", "match"):
            raise ValueError(f"bad task {terms}")
        now = int(self.clock() * 1000) if issued_ms is None else issued_ms
        self.conn.execute(
            "INSERT INTO tasks (task_id, worker_id, kind, board_size, rules, komi_low, "
            "komi_high, komi_step, max_moves, model, reference, issued_ms) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (task_id) DO UPDATE SET "
            "worker_id = excluded.worker_id, kind = excluded.kind, "
            "board_size = excluded.board_size, rules = excluded.rules, "
            "komi_low = excluded.komi_low, komi_high = excluded.komi_high, "
            "komi_step = excluded.komi_step, max_moves = excluded.max_moves, "
            "model = excluded.model, reference = excluded.reference, "
            "issued_ms = excluded.issued_ms",
            (
                terms.task_id,
                terms.worker_id,
                kind,
                terms.board_size,
                terms.rules,
                terms.komi_low,
                terms.komi_high,
                terms.komi_step,
                terms.max_moves,
                terms.models[0],
                terms.models[1] if len(terms.models) > 1 else "",
                now,
            ),
        )
        # The worker's oldest beyond the cap go (the one just stored is the newest).
        dropped = [
            r[0]
            for r in self.conn.execute(
                "SELECT task_id FROM tasks WHERE worker_id = ? "
                "ORDER BY issued_ms DESC, rowid DESC LIMIT ? OFFSET ?",
                (terms.worker_id, db.ALL_ROWS, self.cfg.max_tasks_per_worker),
            )
        ]
        self._delete(dropped)
        self._remember(terms, now)
        if self.clock() - self._pruned_at >= PRUNE_EVERY_S:
            self._prune()

    def _delete(self, task_ids: list[str]) -> None:
        for i in range(0, len(task_ids), _QUERY_IDS):
            part = task_ids[i : i + _QUERY_IDS]
            self.conn.execute(
                f"DELETE FROM tasks WHERE task_id IN ({','.join('?' * len(part))})", part
            )
        for tid in task_ids:
            self._cache.pop(tid, None)

    def _remember(self, terms: TaskTerms, issued_ms: int) -> None:
        self._cache[terms.task_id] = (terms, issued_ms)
        self._cache.move_to_end(terms.task_id)
        while len(self._cache) > CACHE_TASKS:
            self._cache.popitem(last=False)

    def _oldest_kept_ms(self) -> int:
        return int((self.clock() - self.cfg.task_retention_s) * 1000)

    def prune(self) -> int:
        """Delete the tasks past their retention; how many went."""
        with db.transaction(self.conn):
            return self._prune()

    def _prune(self) -> int:
        self._pruned_at = self.clock()
        oldest = self._oldest_kept_ms()
        gone = self.conn.execute("DELETE FROM tasks WHERE issued_ms < ?", (oldest,)).rowcount
        for tid in [t for t, (_, ms) in self._cache.items() if ms < oldest]:
            del self._cache[tid]
        return gone

    def terms(self, task_ids: Iterable[str]) -> dict[str, TaskTerms]:
        """The terms of each of ``task_ids`` that is stored and within its retention."""
        oldest = self._oldest_kept_ms()
        out: dict[str, TaskTerms] = {}
        missing: list[str] = []
        for tid in set(task_ids):
            hit = self._cache.get(tid)
            if hit is None:
                missing.append(tid)
            elif hit[1] >= oldest:
                out[tid] = hit[0]
                self._cache.move_to_end(tid)
        for i in range(0, len(missing), _QUERY_IDS):
            part = missing[i : i + _QUERY_IDS]
            for r in self.conn.execute(
                f"SELECT * FROM tasks WHERE task_id IN ({','.join('?' * len(part))})", part
            ):
                names = (r["model"], r["reference"]) if r["reference"] else (r["model"],)
                terms = TaskTerms(
                    r["task_id"],
                    r["board_size"],
                    r["rules"],
                    r["komi_low"],
                    r["komi_high"],
                    r["komi_step"],
                    r["max_moves"],
                    names,
                    r["worker_id"],
                )
                self._remember(terms, r["issued_ms"])
                if r["issued_ms"] >= oldest:
                    out[terms.task_id] = terms
        return out

    def count(self, worker_id: str | None = None) -> int:
        """Tasks stored (of ``worker_id``)."""
        if worker_id is None:
            return int(self.conn.execute("SELECT COUNT(*) FROM tasks").fetchone()[0])
        return int(
            self.conn.execute(
                "SELECT COUNT(*) FROM tasks WHERE worker_id = ?", (worker_id,)
            ).fetchone()[0]
        )
