"""Gating: the matches that decide whether a candidate model is released.

A candidate (:meth:`kgrpc.coordinator.models.Models.commit`) has a gating match against the
current best. Match games are handed to workers in chunks (``match_chunk_games``), only to
workers registered under the asking token; a chunk not reported within
``match_task_timeout_s`` is handed out again. Every chunk handed out is a ``match_tasks``
row: results count only when reported for that task by the worker it was issued to
(authenticated by the token that registered it), at most the chunk's number of games, once
per game id. Which reported games a decision counts is :mod:`kgrpc.coordinator.quorum`'s.

Decision after ``gating_games`` games: release when the candidate beat its reference (more
wins than losses) and, besides, its Elo difference exceeds ``gating_elo_threshold``, or it
reached a new multiple of ``release_every_steps`` (a milestone lowers the bar to "beat it",
never below); with ``gating_sprt`` the SPRT can stop earlier. A released model's Elo is its
reference's Elo plus the measured difference.

Gating is monotone: a pending match always has the current best as its reference (each
release supersedes the others, :meth:`~kgrpc.coordinator.models.Models.supersede_stale`).
Reports for the match tasks of a superseded match answer FAILED_PRECONDITION with details
starting :data:`SUPERSEDED_REASON` (the worker drops the task), and record nothing.

All methods block; call them from the storage thread only.
"""

from __future__ import annotations

import math
import sqlite3
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from kgrpc import elo
from kgrpc.coordinator import db, quorum
from kgrpc.coordinator.errors import CoordinatorError, denied, invalid, not_found
from kgrpc.coordinator.models import Models, now_ms
from kgrpc.protocol import MATCH_SUPERSEDED
from kgrpc.v1 import common_pb2, coordinator_pb2

SUPERSEDED_REASON = MATCH_SUPERSEDED


def gating_decision(
    wins: int,
    losses: int,
    draws: int,
    *,
    games_target: int,
    candidate_steps: int,
    reference_steps: int,
    elo_threshold: float,
    release_every_steps: int,
    use_sprt: bool,
) -> str:
    """ "pending", "released" or "rejected" for a match's results so far. Never "released"
    for a candidate that did not beat its reference (wins > losses)."""
    games = wins + losses + draws
    beat = wins > losses
    milestone = (
        release_every_steps > 0
        and candidate_steps // release_every_steps > reference_steps // release_every_steps
    )
    if use_sprt and games > 0:
        verdict = elo.sprt(wins, losses, draws)
        if verdict == "accept" and beat:
            return "released"
        if verdict == "reject" and not milestone:
            return "rejected"
    if games < games_target:
        return "pending"
    if beat and (milestone or elo.elo_diff(wins, losses, draws) > elo_threshold):
        return "released"
    return "rejected"


@dataclass
class MatchTaskSpec:
    task_id: str
    candidate: str
    reference: str
    games: int


@dataclass
class ReportOutcome:
    recorded: int
    decision: str
    released: common_pb2.ModelInfo | None = None


class Gating:
    """The gating matches of ``models``' candidates: match tasks, reports, decisions."""

    def __init__(self, models: Models) -> None:
        self.models = models
        self.conn = models.conn
        self.cfg = models.cfg

    def match_count(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM matches").fetchone()[0])

    def tally(self, match_id: int, fresh: bool = False) -> quorum.Tally:
        """The games a decision on the match counts (:mod:`kgrpc.coordinator.quorum`): with
        the outliers found at its last report, or found again (``fresh``: deciding)."""
        return quorum.tally(
            self.conn,
            match_id,
            self.cfg.gating_min_tokens,
            self.cfg.gating_outlier_p,
            fresh=fresh,
        )

    def _counts(self, match_id: int) -> tuple[int, int, int]:
        c = self.tally(match_id).counted
        return c.wins, c.losses, c.draws

    def next_match_task(self, worker_id: str, token_id: int | None = None) -> MatchTaskSpec | None:
        """A chunk of the oldest pending match that still needs games, if any, for a worker
        of ``token_id``. With ``gating_min_tokens`` above 1 a token gets a second chunk of a
        match only once that many tokens were handed one, and while a match waits for
        games from more tokens, a token with none counted there gets a chunk beyond its
        games target."""
        # A chunk not fully reported within match_task_timeout_s goes back to the pool. What
        # is out is read from the index (match_tasks), not kept in memory, so replicas
        # sharing the index hand out each match's games once (the caller's transaction holds
        # the index's write lock).
        issued_since = now_ms() - int(self.cfg.match_task_timeout_s * 1000)
        quarantined = (
            token_id is not None
            and self.conn.execute(
                "SELECT 1 FROM token_quarantine WHERE token_id = ?", (token_id,)
            ).fetchone()
            is not None
        )
        if quarantined:
            return None  # its games would not count
        for m in self.conn.execute("SELECT * FROM matches WHERE decision = 'pending' ORDER BY id"):
            t = self.tally(m["id"])
            if token_id is not None and any(o.token_id == token_id for o in t.outliers):
                continue  # set aside on this match: its games would not count
            (out,) = self.conn.execute(
                "SELECT COALESCE(SUM(games - recorded), 0) FROM match_tasks "
                "WHERE match_id = ? AND recorded < games AND issued_ms >= ?",
                (m["id"], issued_since),
            ).fetchone()
            free = m["games_target"] - t.counted.games - out
            if self.cfg.gating_min_tokens > 1:
                issued = quorum.issued_tokens(self.conn, m["id"])
                if token_id in issued and len(issued) < self.cfg.gating_min_tokens:
                    continue  # other tokens first
                if free <= 0 and t.waiting and token_id not in issued:
                    free = self.cfg.match_chunk_games  # the quorum needs this token's games
            if free <= 0:
                continue
            games = min(self.cfg.match_chunk_games, free)
            games += games % 2
            task_id = f"match-{m['id']}-{uuid.uuid4().hex[:12]}"
            # Kept in the index: a report after a restart, on another replica or after the
            # chunk went stale is still checked against the worker it was issued to.
            self.conn.execute(
                "INSERT INTO match_tasks (task_id, match_id, worker_id, games, issued_ms) VALUES "
                "(?, ?, ?, ?, ?)",
                (task_id, m["id"], worker_id, games, now_ms()),
            )
            return MatchTaskSpec(task_id, m["candidate"], m["reference"], games)
        return None

    def check_report(
        self,
        req: coordinator_pb2.ReportMatchResultRequest,
        check_worker: Callable[[str], None] | None = None,
    ) -> tuple[sqlite3.Row, sqlite3.Row]:
        """The (match task, match) rows of a report that may be recorded: a match task issued
        to ``req.worker_id`` (``check_worker`` vouches that the caller may act for it), for
        the task's pairing, of a match not superseded; PERMISSION_DENIED, NOT_FOUND,
        INVALID_ARGUMENT or FAILED_PRECONDITION (:data:`SUPERSEDED_REASON`) else. Cheap: run
        before the records are replayed."""
        task = self.conn.execute(
            "SELECT * FROM match_tasks WHERE task_id = ?", (req.task_id,)
        ).fetchone()
        if task is None:
            raise denied(
                f"task {req.task_id!r} is not a match task this coordinator issued: results count "
                f"only for "
                "the match task (GetTask) issued to the reporting worker"
            )
        if task["worker_id"] != req.worker_id:
            raise denied(
                f"match task {req.task_id!r} was issued to worker {task['worker_id']!r}, not "
                f"{req.worker_id!r}"
            )
        if check_worker is not None:
            check_worker(req.worker_id)
        m = self.conn.execute("SELECT * FROM matches WHERE id = ?", (task["match_id"],)).fetchone()
        if m is None:
            raise not_found(f"the match of task {req.task_id!r} is gone")
        if (m["candidate"], m["reference"]) != (req.candidate_model, req.reference_model):
            raise invalid(
                f"task {req.task_id!r} is for {m['candidate']!r} vs "
                f"{m['reference']!r}, not {req.candidate_model!r} vs "
                f"{req.reference_model!r}"
            )
        if m["decision"] == "superseded":
            best = self.models.best()
            best_name = best["name"] if best is not None else "?"
            raise CoordinatorError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{SUPERSEDED_REASON}: the match {m['candidate']!r} vs {m['reference']!r} of task "
                f"{req.task_id!r} was superseded by the release of {best_name!r}; drop this task "
                "and its remaining games (nothing was recorded)",
                SUPERSEDED_REASON,
                {
                    "task_id": req.task_id,
                    "candidate": m["candidate"],
                    "reference": m["reference"],
                    "best": best_name,
                },
            )
        return task, m

    def report(
        self,
        req: coordinator_pb2.ReportMatchResultRequest,
        check_worker: Callable[[str], None] | None = None,
        token_id: int | None = None,
    ) -> ReportOutcome:
        """Record match games. They count only for a match task issued to ``req.worker_id``
        (``check_worker`` then vouches that the caller may act for that worker), at most as
        many new games as the task was issued for; idempotent per game id. Each new game is
        tied to ``token_id``, the reporting token (the quorum counts tokens)."""
        task, m = self.check_report(req, check_worker)
        for g in req.games:
            if not g.game_id:
                raise invalid("every match game needs a game_id")
            if g.candidate_color not in (common_pb2.COLOR_BLACK, common_pb2.COLOR_WHITE):
                raise invalid(f"game {g.game_id}: candidate_color must be black or white")
            if g.winner not in (
                common_pb2.COLOR_BLACK,
                common_pb2.COLOR_WHITE,
                common_pb2.COLOR_UNSPECIFIED,
            ):
                raise invalid(
                    f"game {g.game_id}: winner must be black, white or unspecified (a draw), got "
                    f"{g.winner}"
                )
            if not math.isfinite(g.score) or g.moves < 0:
                # SQLite stores NaN as NULL: the insert would fail with a NOT NULL error.
                raise invalid(
                    f"game {g.game_id}: score must be finite and moves >= 0, got score {g.score}, "
                    f"moves {g.moves}"
                )
        recorded = 0
        new_ids: list[str] = []
        with db.transaction(self.conn):
            for g in req.games:
                cur = self.conn.execute(
                    "INSERT INTO match_games (match_id, game_id, candidate_color, "
                    "winner, score, moves) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (m["id"], g.game_id, g.candidate_color, g.winner, g.score, g.moves),
                )
                recorded += cur.rowcount
                if cur.rowcount:
                    new_ids.append(g.game_id)
            quorum.record_reporter(
                self.conn, m["id"], new_ids, req.task_id, req.worker_id, token_id, now_ms()
            )
            if task["recorded"] + recorded > task["games"]:
                # Rolled back: one task cannot decide a match with more games than it was given.
                raise invalid(
                    f"match task {req.task_id!r} was issued for {task['games']} games; "
                    f"{task['recorded']} are "
                    f"recorded and this report adds {recorded} new ones"
                )
            if recorded:
                self.conn.execute(
                    "UPDATE match_tasks SET recorded = recorded + ? WHERE task_id = ?",
                    (recorded, req.task_id),
                )
        # Workers report game by game: the chunk's games not yet in stay out (counted as
        # issued, match_tasks.recorded < games) or a later GetTask would hand them out twice.
        if m["decision"] != "pending":
            return ReportOutcome(recorded, m["decision"])
        return self._decide(m, recorded)

    def _decide(self, m: sqlite3.Row, recorded: int) -> ReportOutcome:
        t = self.tally(m["id"], fresh=True)
        w, lo, d = t.counted.wins, t.counted.losses, t.counted.draws
        cand = self.models.get(m["candidate"])
        ref = self.models.get(m["reference"])
        assert cand is not None and ref is not None
        decision = self._decision(m, cand, ref, t)
        est = elo.elo_interval(w, lo, d) if w + lo + d else None
        with db.transaction(self.conn):
            (now_decided,) = self.conn.execute(
                "SELECT decision FROM matches WHERE id = ?", (m["id"],)
            ).fetchone()
            if now_decided != "pending":
                # Decided meanwhile by another replica sharing the index: once is enough.
                return ReportOutcome(recorded, now_decided)
            quorum.store_outliers(self.conn, m["id"], t.outliers)
            if est is not None:
                self.conn.execute(
                    "UPDATE matches SET elo_diff = ?, elo_low = ?, elo_high = ? WHERE id = ?",
                    (est.elo, est.low, est.high, m["id"]),
                )
            if decision == "pending":
                return ReportOutcome(recorded, decision)
            now = now_ms()
            self.conn.execute(
                "UPDATE matches SET decision = ?, decided_ms = ? WHERE id = ?",
                (decision, now, m["id"]),
            )
            new_elo = ref["elo"] + (est.elo if est is not None else 0.0)
            self.conn.execute(
                "UPDATE models SET status = ?, elo = ?, released_ms = ? WHERE name = ?",
                (decision, new_elo, now if decision == "released" else 0, cand["name"]),
            )
            if decision == "released":
                self.models.supersede_stale()
        released = self.models.info(cand["name"]) if decision == "released" else None
        return ReportOutcome(recorded, decision, released)

    def match_summaries(
        self, offset: int = 0, limit: int = -1
    ) -> list[coordinator_pb2.MatchSummary]:
        """Gating matches, newest first: ``limit`` of them (-1: all) after skipping
        ``offset``."""
        out = []
        for m in self.conn.execute(
            "SELECT * FROM matches ORDER BY id DESC LIMIT ? OFFSET ?",
            (db.limit_rows(limit), max(0, offset)),
        ).fetchall():
            t = self.tally(m["id"])
            c = t.counted
            est = (m["elo_diff"], m["elo_low"], m["elo_high"])
            if t.quarantined and c.games:  # the figures of the games still counted
                e = elo.elo_interval(c.wins, c.losses, c.draws)
                est = (e.elo, e.low, e.high)
            summary = coordinator_pb2.MatchSummary(
                candidate_model=m["candidate"],
                reference_model=m["reference"],
                wins=c.wins,
                losses=c.losses,
                draws=c.draws,
                elo_diff=est[0],
                elo_low=est[1],
                elo_high=est[2],
                decision=m["decision"],
                tokens=t.tokens,
                waiting=t.waiting if m["decision"] == "pending" else "",
                recount=self._recount(m, t) if t.quarantined else "",
            )
            for o in t.outliers:
                summary.set_aside.add(
                    token_id=o.token_id,
                    why="outlier",
                    wins=o.counts.wins,
                    losses=o.counts.losses,
                    draws=o.counts.draws,
                    others_wins=o.others_wins,
                    others_games=o.others_games,
                    p_value=o.p_value,
                )
            for token, q in sorted(t.quarantined.items()):
                summary.set_aside.add(
                    token_id=token, why="quarantine", wins=q.wins, losses=q.losses, draws=q.draws
                )
            out.append(summary)
        return out

    def _recount(self, m: sqlite3.Row, t: quorum.Tally) -> str:
        """For a decided match: the decision its counted games give now, when it is not the
        one taken ("" otherwise). A quarantine reports a decision it would tip; it does not
        undo it (the fleet may have played the released model for days)."""
        if m["decision"] not in ("released", "rejected"):
            return ""
        cand, ref = self.models.get(m["candidate"]), self.models.get(m["reference"])
        if cand is None or ref is None:
            return ""
        now = self._decision(m, cand, ref, t)
        return now if now != m["decision"] else ""

    def _decision(
        self, m: sqlite3.Row, cand: sqlite3.Row, ref: sqlite3.Row, t: quorum.Tally
    ) -> str:
        """The decision the counted games of match ``m`` give under this coordinator's
        settings; "pending" while too few tokens reported, however the games stand."""
        if t.waiting:
            return "pending"
        c = t.counted
        return gating_decision(
            c.wins,
            c.losses,
            c.draws,
            games_target=m["games_target"],
            candidate_steps=cand["training_steps"],
            reference_steps=ref["training_steps"],
            elo_threshold=self.cfg.gating_elo_threshold,
            release_every_steps=self.cfg.release_every_steps,
            use_sprt=self.cfg.gating_sprt,
        )
