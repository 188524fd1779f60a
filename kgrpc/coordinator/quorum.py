"""Which gating games a decision counts: by token, without outliers and quarantined tokens.

Every match game recorded is tied to the worker token that reported it (the
``match_game_tokens`` row written with it; a game recorded before that table existed, or
without auth, counts under "no token", ``None``). A match's games are then counted as:

* **quarantined tokens** (``token_quarantine``, ``kgrpc-coordinator token quarantine``): the
  games such a token reported since the quarantine's ``since_ms`` leave every count, decided
  matches included (a decision they tipped is reported by :func:`recount`, never undone);
* **outliers** (:func:`find_outliers`): a token whose candidate win rate on this pairing
  differs from the other tokens' beyond chance (two-sided Fisher exact test,
  :mod:`kgrpc.fisher`, of its wins and other games against the others', at level
  ``gating_outlier_p`` divided by the number of tokens tested, Bonferroni, so an honest
  decision sets any token aside with probability at most ``gating_outlier_p``). The most
  extreme token goes first and the test is run again on the rest, while at least
  :data:`MIN_TOKENS_TO_TEST` tokens remain: with two tokens that disagree there is no way to
  tell which one is wrong. The tokens set aside are stored in ``match_outliers`` (rewritten
  each time the match is counted) for stats, /metrics and the dashboard;
* **the quorum**: a decision needs counted games from at least ``gating_min_tokens``
  distinct tokens; until then the match waits (:attr:`Tally.waiting` says why).

SQL here runs unchanged on SQLite and PostgreSQL. Runs on the storage thread (writes) or a
reader's connection (:data:`COUNTED_GAMES`, for views).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field

from kgrpc.fisher import fisher_exact
from kgrpc.v1 import common_pb2

# Fewest tokens with games on a pairing for the outlier test to be run at all.
MIN_TOKENS_TO_TEST = 3
# A match game is quarantined when its token is, and it was reported at or after the
# quarantine's start (``g``: match_games, ``t``: its match_game_tokens row).
QUARANTINED = (
    "EXISTS (SELECT 1 FROM token_quarantine q WHERE q.token_id = t.token_id "
    "AND COALESCE(t.reported_ms, 0) >= q.since_ms)"
)
# The games of a match counted by views (the dashboard): neither quarantined nor of a token
# set aside as an outlier on that match. Columns of match_games plus token_id.
COUNTED_GAMES = (
    "SELECT g.match_id, g.game_id, g.candidate_color, g.winner, t.token_id "
    "FROM match_games g LEFT JOIN match_game_tokens t "
    "ON t.match_id = g.match_id AND t.game_id = g.game_id "
    f"WHERE NOT {QUARANTINED} AND NOT EXISTS (SELECT 1 FROM match_outliers o "
    "WHERE o.match_id = g.match_id AND o.token_id = t.token_id)"
)


@dataclass
class Counts:
    """Candidate wins, losses and draws."""

    wins: int = 0
    losses: int = 0
    draws: int = 0

    @property
    def games(self) -> int:
        return self.wins + self.losses + self.draws

    def add(self, candidate_color: int, winner: int) -> None:
        if winner == common_pb2.COLOR_UNSPECIFIED:
            self.draws += 1
        elif winner == candidate_color:
            self.wins += 1
        else:
            self.losses += 1


@dataclass(frozen=True)
class Outlier:
    """A token set aside on one match: its counts, the others', the test's p-value."""

    token_id: int
    counts: Counts
    others_wins: int
    others_games: int
    p_value: float


@dataclass
class Tally:
    """What a match's decision counts."""

    counted: Counts
    tokens: int  # distinct tokens whose games are counted
    outliers: list[Outlier] = field(default_factory=list)
    # Games left out for a quarantine, by token.
    quarantined: dict[int, Counts] = field(default_factory=dict)
    waiting: str = ""  # why a decision cannot be taken yet, beyond the game count


def per_token(
    conn: sqlite3.Connection, match_id: int
) -> tuple[dict[int | None, Counts], dict[int, Counts]]:
    """The match's games by token, quarantined ones left out; and those, by token."""
    out: dict[int | None, Counts] = {}
    quarantined: dict[int, Counts] = {}
    for r in conn.execute(
        f"SELECT t.token_id, g.candidate_color, g.winner, {QUARANTINED} AS held "
        "FROM match_games g LEFT JOIN match_game_tokens t "
        "ON t.match_id = g.match_id AND t.game_id = g.game_id WHERE g.match_id = ?",
        (match_id,),
    ):
        if r["held"]:
            quarantined.setdefault(r["token_id"], Counts()).add(r["candidate_color"], r["winner"])
            continue
        out.setdefault(r["token_id"], Counts()).add(r["candidate_color"], r["winner"])
    return out, quarantined


def find_outliers(by_token: dict[int | None, Counts], level: float) -> list[Outlier]:
    """Tokens whose win rate differs from the rest's beyond chance at ``level`` (0: none),
    most extreme first (see the module's docstring). Games under no token are compared
    against but never set aside."""
    if level <= 0:
        return []
    left = {k: c for k, c in by_token.items() if c.games}
    found: list[Outlier] = []
    while len(left) >= MIN_TOKENS_TO_TEST:
        wins = sum(c.wins for c in left.values())
        games = sum(c.games for c in left.values())
        tests = []
        for token, c in left.items():
            if token is None:
                continue
            ow, og = wins - c.wins, games - c.games
            p = fisher_exact(c.wins, c.games - c.wins, ow, og - ow)
            tests.append((p, token, c, ow, og))
        if not tests:
            break
        p, token, c, ow, og = min(tests, key=lambda t: (t[0], t[1]))
        if p >= level / len(left):
            break
        found.append(Outlier(token, c, ow, og, p))
        del left[token]
    return found


def tally(
    conn: sqlite3.Connection,
    match_id: int,
    min_tokens: int = 1,
    outlier_level: float = 0.0,
    *,
    fresh: bool = True,
) -> Tally:
    """The counted games of a match, with its outliers found afresh (not stored), or with
    ``fresh`` false those stored when it was last decided on (cheap: GetTask, stats)."""
    by_token, quarantined = per_token(conn, match_id)
    outliers = find_outliers(by_token, outlier_level) if fresh else stored_outliers(conn, match_id)
    aside = {o.token_id for o in outliers}
    counted = Counts()
    tokens = 0
    for token, c in by_token.items():
        if token in aside or not c.games:
            continue
        tokens += 1
        counted.wins += c.wins
        counted.losses += c.losses
        counted.draws += c.draws
    waiting = ""
    if tokens < min_tokens:
        waiting = (
            f"games from {tokens} of the {min_tokens} distinct worker tokens a decision "
            "needs (gating_min_tokens)"
        )
    return Tally(counted, tokens, outliers, quarantined, waiting)


def store_outliers(conn: sqlite3.Connection, match_id: int, outliers: Iterable[Outlier]) -> None:
    """Within the caller's transaction: the match's outliers are now ``outliers``."""
    conn.execute("DELETE FROM match_outliers WHERE match_id = ?", (match_id,))
    for o in outliers:
        conn.execute(
            "INSERT INTO match_outliers (match_id, token_id, wins, losses, draws, others_wins, "
            "others_games, p_value) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                match_id,
                o.token_id,
                o.counts.wins,
                o.counts.losses,
                o.counts.draws,
                o.others_wins,
                o.others_games,
                o.p_value,
            ),
        )


def stored_outliers(conn: sqlite3.Connection, match_id: int) -> list[Outlier]:
    return [
        Outlier(
            r["token_id"],
            Counts(r["wins"], r["losses"], r["draws"]),
            r["others_wins"],
            r["others_games"],
            r["p_value"],
        )
        for r in conn.execute(
            "SELECT * FROM match_outliers WHERE match_id = ? ORDER BY p_value, token_id",
            (match_id,),
        )
    ]


def record_reporter(
    conn: sqlite3.Connection,
    match_id: int,
    game_ids: Iterable[str],
    task_id: str,
    worker_id: str,
    token_id: int | None,
    now_ms: int,
) -> None:
    """Within the caller's transaction: tie newly recorded games to the token reporting them."""
    for gid in game_ids:
        conn.execute(
            "INSERT INTO match_game_tokens (match_id, game_id, task_id, worker_id, token_id, "
            "reported_ms) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (match_id, game_id) DO NOTHING",
            (match_id, gid, task_id, worker_id, token_id, now_ms),
        )


def issued_tokens(conn: sqlite3.Connection, match_id: int) -> set[int | None]:
    """The tokens (of the workers) that were handed chunks of the match."""
    return {
        r[0]
        for r in conn.execute(
            "SELECT DISTINCT w.token_id FROM match_tasks t JOIN workers w "
            "ON w.worker_id = t.worker_id WHERE t.match_id = ?",
            (match_id,),
        )
    }


# ---------------------------------------------------------------------- quarantine
# The uploaded (training) games of a token: those of its registered workers and those
# counted under its upload bucket (workers.upload_bucket), with ``q`` its quarantine row.
TOKEN_GAMES = (
    "(g.worker_id IN (SELECT w.worker_id FROM workers w WHERE w.token_id = q.token_id) "
    "OR g.worker_id = 'token-' || CAST(q.token_id AS TEXT))"
)
QUARANTINE_LIST = (
    "SELECT q.token_id, q.since_ms, q.created_ms, tk.label, "
    "(SELECT COUNT(*) FROM match_game_tokens t WHERE t.token_id = q.token_id "
    "AND t.reported_ms >= q.since_ms) AS match_games, "
    f"(SELECT COUNT(*) FROM games g WHERE {TOKEN_GAMES} AND g.accepted_ms >= q.since_ms) "
    "AS training_games "
    "FROM token_quarantine q LEFT JOIN tokens tk ON tk.id = q.token_id ORDER BY q.token_id"
)


@dataclass(frozen=True)
class Tipped:
    """A decided match whose counted games now give another decision."""

    match_id: int
    candidate: str
    reference: str
    decision: str
    recount: str


def quarantine(conn: sqlite3.Connection, token_id: int, since_ms: int, now_ms: int) -> bool:
    """Within the caller's transaction: quarantine the token's games reported since
    ``since_ms`` (a second quarantine of the token moves its start). False for no such
    token."""
    if conn.execute("SELECT 1 FROM tokens WHERE id = ?", (token_id,)).fetchone() is None:
        return False
    conn.execute(
        "INSERT INTO token_quarantine (token_id, since_ms, created_ms) VALUES (?, ?, ?) "
        "ON CONFLICT (token_id) DO UPDATE SET since_ms = excluded.since_ms, "
        "created_ms = excluded.created_ms",
        (token_id, since_ms, now_ms),
    )
    return True


def lift(conn: sqlite3.Connection, token_id: int) -> bool:
    """Within the caller's transaction: end the token's quarantine (its games count again).
    False when it was not quarantined."""
    return conn.execute("DELETE FROM token_quarantine WHERE token_id = ?", (token_id,)).rowcount > 0


def quarantined(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    """The quarantined tokens (QUARANTINE_LIST's rows)."""
    return conn.execute(QUARANTINE_LIST).fetchall()


def quarantined_since(conn: sqlite3.Connection) -> dict[int, int]:
    return {r[0]: r[1] for r in conn.execute("SELECT token_id, since_ms FROM token_quarantine")}


def excluded_shards(conn: sqlite3.Connection, run: str) -> set[int]:
    """Indexes of ``run``'s shards holding a game of a quarantined token (uploaded since its
    quarantine's start): ListShards leaves them out, so a trainer pulling shards takes none
    of those rows. Whole shards: a shard mixes many tokens' games, and rewriting one without
    some rows would change a file trainers may already have (its name and sha256 are
    fixed); nothing is deleted, and lifting the quarantine lists them again."""
    return {
        r[0]
        for r in conn.execute(
            "SELECT DISTINCT g.shard_index FROM games g JOIN token_quarantine q "
            f"ON {TOKEN_GAMES} AND g.accepted_ms >= q.since_ms "
            "WHERE g.run = ? AND g.shard_index IS NOT NULL",
            (run,),
        )
    }
