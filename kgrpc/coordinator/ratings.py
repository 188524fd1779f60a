"""Ladder results against fixed reference engines: the ``ratings`` table, ReportRating,
ListRatings and the ratings of GetStats. Runs on the storage thread.

A report (:class:`RatingReport`) gives a model's wins, losses and draws against one reference
engine (``random``, ``first``, ``gnugo-l1``, ...), how many of the games were distinct move
sequences (0: not counted), the model's visits per move and the games' board size, komi and
rules. The coordinator adds what it knows better than any reporter:

- the win rate, Elo and their 95% intervals, from W-L-D (:class:`kgrpc.rating.Rating`,
  the arithmetic of :mod:`kgrpc.elo` that gating uses too), computed when read;
- the model's training steps and rows, the self-play games it had accepted for the model's run
  when it took the model, and the wall-clock time from the run's first model to this one,
  stored with the rating when it is first reported (they never change for a model).

One row per (model, opponent, games, visits, board size, komi, rules): the same report twice
stores one rating and changes nothing; a report with the same settings and another result or
distinct-game count (a match played again) replaces them and the report time. "Latest" is by
report time.
"""

from __future__ import annotations

import math
import re
import sqlite3
import time
from dataclasses import dataclass

from kgrpc.coordinator.db import transaction
from kgrpc.coordinator.errors import invalid, not_found
from kgrpc.go.rules import PRESETS, Rules
from kgrpc.rating import Rating
from kgrpc.v1 import coordinator_pb2

OPPONENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=-]*$")
MAX_KOMI = 150.0
MAX_BOARD_SIZE = 19


def _now_ms() -> int:
    return int(time.time() * 1000)


def rules_text(rules: Rules) -> str:
    """How a rule set is stored: its preset name, else ``scoring/ko/suicide|nosuicide``."""
    return str(rules)


def rules_from_text(text: str) -> Rules:
    if text in PRESETS:
        return PRESETS[text]
    scoring, ko, suicide = text.split("/")
    return Rules(scoring, ko, suicide == "suicide")


@dataclass(frozen=True)
class RatingReport:
    """What a reporter says: W-L-D from ``model``'s side against ``opponent``."""

    model: str
    opponent: str
    wins: int
    losses: int
    draws: int
    visits: int
    board_size: int
    komi: float
    rules: Rules
    distinct_games: int = 0  # games that were distinct move sequences; 0: not counted

    @property
    def games(self) -> int:
        return self.wins + self.losses + self.draws

    def check(self) -> None:
        """INVALID_ARGUMENT naming the first thing wrong."""
        if not self.model:
            raise invalid("model is empty")
        if not OPPONENT_NAME.match(self.opponent):
            raise invalid(
                f"opponent {self.opponent!r}: expected letters, digits and ._+=- "
                "starting with a letter or digit"
            )
        if min(self.wins, self.losses, self.draws) < 0:
            raise invalid(
                f"negative game count: wins {self.wins}, losses {self.losses}, draws {self.draws}"
            )
        if self.games < 1:
            raise invalid("no games: wins + losses + draws must be >= 1")
        if not 0 <= self.distinct_games <= self.games:
            raise invalid(
                f"distinct_games {self.distinct_games} out of range 0..{self.games} "
                "(the games reported; 0: not counted)"
            )
        if self.visits < 1:
            raise invalid(f"visits must be >= 1, got {self.visits}")
        if not 2 <= self.board_size <= MAX_BOARD_SIZE:
            raise invalid(f"board_size {self.board_size} out of range 2..{MAX_BOARD_SIZE}")
        if not math.isfinite(self.komi) or abs(self.komi) > MAX_KOMI:
            raise invalid(f"komi {self.komi} is not a finite number within +-{MAX_KOMI:g}")


def to_proto(row: sqlite3.Row) -> coordinator_pb2.Rating:
    r = Rating.from_results(row["wins"], row["losses"], row["draws"])
    return coordinator_pb2.Rating(
        model=row["model"],
        opponent=row["opponent"],
        games=row["games"],
        wins=r.wins,
        losses=r.losses,
        draws=r.draws,
        win_rate=r.rate,
        win_low=r.rate_low,
        win_high=r.rate_high,
        elo=r.elo,
        elo_low=r.elo_low,
        elo_high=r.elo_high,
        training_steps=row["training_steps"],
        training_rows=row["training_rows"],
        selfplay_games=row["selfplay_games"],
        wall_seconds=row["wall_ms"] / 1000.0,
        visits=row["visits"],
        board_size=row["board_size"],
        komi=row["komi"],
        rules=rules_from_text(row["rules"]).to_proto(),
        model_created_unix_ms=row["model_created_ms"],
        reported_unix_ms=row["reported_ms"],
        distinct_games=row["distinct_games"],
    )


def _ladder_order(row: sqlite3.Row) -> tuple[int, str, str, int, int]:
    return (row["model_created_ms"], row["model"], row["opponent"], row["reported_ms"], row["id"])


class Ratings:
    """The ``ratings`` table on the storage thread's connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self._games_by_model: dict[str, int] = {}  # they never change: counted once

    def _selfplay_games(self, model: str, run: str, created_ms: int) -> int:
        if model not in self._games_by_model:
            (n,) = self.conn.execute(
                "SELECT COUNT(*) FROM games WHERE run = ? AND accepted_ms <= ?", (run, created_ms)
            ).fetchone()
            self._games_by_model[model] = int(n)
        return self._games_by_model[model]

    def report(self, r: RatingReport, token_id: int | None) -> coordinator_pb2.Rating:
        """Store ``r`` (INVALID_ARGUMENT / NOT_FOUND when it cannot be); the stored rating."""
        r.check()
        model = self.conn.execute(
            "SELECT name, training_steps, training_rows, created_ms, run FROM models "
            "WHERE name = ?",
            (r.model,),
        ).fetchone()
        if model is None:
            raise not_found(f"no model {r.model!r}")
        (first_ms,) = self.conn.execute(
            "SELECT MIN(created_ms) FROM models WHERE run = ?", (model["run"],)
        ).fetchone()
        games = self._selfplay_games(r.model, model["run"], model["created_ms"])
        key = (r.model, r.opponent, r.games, r.visits, r.board_size, r.komi, rules_text(r.rules))
        where = (
            "model = ? AND opponent = ? AND games = ? AND visits = ? AND board_size = ? "
            "AND komi = ? AND rules = ?"
        )
        with transaction(self.conn):
            row = self.conn.execute(f"SELECT * FROM ratings WHERE {where}", key).fetchone()
            if row is None:
                cur = self.conn.execute(
                    "INSERT INTO ratings (model, opponent, games, visits, board_size, komi, "
                    "rules, wins, losses, draws, training_steps, training_rows, selfplay_games, "
                    "model_created_ms, wall_ms, token_id, reported_ms, distinct_games) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                    (
                        *key,
                        r.wins,
                        r.losses,
                        r.draws,
                        model["training_steps"],
                        model["training_rows"],
                        games,
                        model["created_ms"],
                        model["created_ms"] - first_ms,
                        token_id,
                        _now_ms(),
                        r.distinct_games,
                    ),
                )
                row_id = cur.fetchone()[0]
            else:
                row_id = row["id"]
                result = (r.wins, r.losses, r.draws, r.distinct_games)
                if tuple(row[k] for k in ("wins", "losses", "draws", "distinct_games")) != result:
                    self.conn.execute(
                        "UPDATE ratings SET wins = ?, losses = ?, draws = ?, distinct_games = ?, "
                        "token_id = ?, reported_ms = ? WHERE id = ?",
                        (*result, token_id, _now_ms(), row_id),
                    )
        stored = self.conn.execute("SELECT * FROM ratings WHERE id = ?", (row_id,)).fetchone()
        return to_proto(stored)

    def list(
        self, model: str = "", opponent: str = "", latest_only: bool = False, limit: int = 10_000
    ) -> tuple[list[coordinator_pb2.Rating], bool]:
        """Ratings (of ``model`` / against ``opponent`` when given; only the latest of each
        pair with ``latest_only``): the ``limit`` most recently reported, in ladder order
        (models by creation, then opponent, then report time), and whether more were left
        out."""
        if limit < 1:
            raise invalid(f"limit must be >= 1, got {limit}")
        rows = self.conn.execute(
            "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY model, opponent "
            "ORDER BY reported_ms DESC, id DESC) AS newness FROM ratings "
            "WHERE (? = '' OR model = ?) AND (? = '' OR opponent = ?)) AS ranked "
            "WHERE (? = 0 OR newness = 1) ORDER BY reported_ms DESC, id DESC LIMIT ?",
            (model, model, opponent, opponent, int(latest_only), limit + 1),
        ).fetchall()
        truncated = len(rows) > limit
        return [to_proto(r) for r in sorted(rows[:limit], key=_ladder_order)], truncated

    def latest(self, limit: int) -> list[coordinator_pb2.Rating]:
        """The latest rating of each (model, opponent) pair, at most ``limit`` (the most
        recently reported), in ladder order."""
        return self.list(latest_only=True, limit=limit)[0]
