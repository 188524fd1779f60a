"""Read-only views of the index for people and monitors: overview, rates, contributors,
models with their gating, matches, Elo series. The dashboard's JSON (``/api/...``), the
``/metrics`` snapshot and the extra figures of GetStats all come from here.

Queries run on :class:`Reader`'s own thread and read-only connection (WAL: they never wait
for, nor block, the storage thread that writes). Figures that would need a scan of every
game are kept up to date incrementally (:class:`Activity`, from the games added since the
last look, by rowid) or found by a binary search on the rowid (rates), so a view costs about
the same with a million games as with ten.

Every value is a plain JSON value: numbers stay numbers, a non-finite number (an Elo
interval end of a lopsided match) becomes None.

The Elo graph's series come from :data:`ELO_SERIES` (functions of the read connection
returning :class:`EloSeries`): the gating series, and the rating ladder's (one series per
reference engine, from the ``ratings`` table); their points appear in the graph and in
``/api/elo`` unchanged.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import math
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kgrpc import elo as elo_maths
from kgrpc.coordinator import db, quorum, sgf_index, workers
from kgrpc.coordinator.ratings import Ratings
from kgrpc.net import limits
from kgrpc.precision import PRECISIONS, variant_file_name

T = TypeVar("T")
# Rates (games/s, positions/s) are over this many seconds (less while the server is younger).
RATE_WINDOW_S = 600
# A worker is online while its last heartbeat is at most this many heartbeat intervals old.
ONLINE_HEARTBEATS = 3
# Rows of the counters table that are not rejection reasons (``reject:<reason>``).
REJECT_PREFIX = "reject:"


def now_ms() -> int:
    return int(time.time() * 1000)


def finite(x: float | None) -> float | None:
    """``x``, or None when it is not a finite number (JSON has no infinity)."""
    return x if x is not None and math.isfinite(x) else None


def online_cutoff_ms(heartbeat_interval_s: float, now: int) -> int:
    """Workers with a heartbeat at or after this time are online."""
    return now - int(ONLINE_HEARTBEATS * heartbeat_interval_s * 1000)


# ---------------------------------------------------------------------- incremental figures
@dataclass
class Activity:
    """Accepted games per worker (count, positions, latest), updated from the games rows
    added since the last update. Lives on the reader's thread."""

    last_rowid: int = 0
    per_worker: dict[str, list[int]] = field(default_factory=dict)  # id -> [games, pos, ms]

    def update(self, conn: sqlite3.Connection) -> None:
        rows = conn.execute(
            "SELECT worker_id, COUNT(*), SUM(positions), MAX(accepted_ms), MAX(rowid) "
            "FROM games WHERE rowid > ? GROUP BY worker_id",
            (self.last_rowid,),
        ).fetchall()
        for wid, games, positions, last_ms, top in rows:
            w = self.per_worker.setdefault(wid, [0, 0, 0])
            w[0] += games
            w[1] += positions or 0
            w[2] = max(w[2], last_ms or 0)
            self.last_rowid = max(self.last_rowid, top)


def rates(conn: sqlite3.Connection, window_s: float, now: int) -> tuple[float, float]:
    """Accepted (games, positions) per second over the last ``window_s`` seconds. Games are
    added in time order, so the first row of the window is found by a binary search on the
    rowid (no scan of older games)."""
    if window_s <= 0:
        return 0.0, 0.0
    top = conn.execute("SELECT MAX(rowid) FROM games").fetchone()[0]
    if top is None:
        return 0.0, 0.0
    cutoff = now - int(window_s * 1000)
    lo, hi = 1, top + 1  # the first rowid whose game is in the window, or top + 1
    while lo < hi:
        mid = (lo + hi) // 2
        r = conn.execute(
            "SELECT accepted_ms FROM games WHERE rowid >= ? ORDER BY rowid LIMIT 1", (mid,)
        ).fetchone()
        if r is None or r[0] >= cutoff:
            hi = mid
        else:
            lo = mid + 1
    games, positions = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(positions), 0) FROM games WHERE rowid >= ? "
        "AND accepted_ms >= ?",
        (lo, cutoff),
    ).fetchone()
    return games / window_s, positions / window_s


# ---------------------------------------------------------------------- Elo series
@dataclass(frozen=True)
class EloPoint:
    t_ms: int  # when the rating was measured
    elo: float
    model: str


@dataclass(frozen=True)
class EloSeries:
    key: str  # stable id, e.g. "gating-released"
    label: str  # legend text
    points: list[EloPoint]
    line: bool = True  # drawn as a line (else points only)

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "line": self.line,
            "points": [
                {"t_ms": p.t_ms, "elo": finite(p.elo), "model": p.model} for p in self.points
            ],
        }


def gating_series(conn: sqlite3.Connection) -> list[EloSeries]:
    """Each released model at its release (the first model at 0 Elo, each later one at its
    reference's Elo plus its gating match's difference), and each rejected candidate at its
    match's decision."""
    released, rejected = [], []
    for r in conn.execute(
        "SELECT m.name, m.status, m.elo, m.released_ms, m.created_ms, "
        "(SELECT MAX(decided_ms) FROM matches WHERE candidate = m.name) AS decided_ms "
        "FROM models m WHERE m.status IN ('released', 'rejected')"
    ):
        if r["status"] == "released":
            released.append(EloPoint(r["released_ms"] or r["created_ms"], r["elo"], r["name"]))
        else:
            rejected.append(EloPoint(r["decided_ms"] or r["created_ms"], r["elo"], r["name"]))
    return [
        EloSeries(
            "gating-released", "released (gating Elo)", sorted(released, key=lambda p: p.t_ms)
        ),
        EloSeries(
            "gating-rejected",
            "rejected candidates",
            sorted(rejected, key=lambda p: p.t_ms),
            line=False,
        ),
    ]


def ladder_series(conn: sqlite3.Connection) -> list[EloSeries]:
    """The rating ladder (kgrpc-eval ladder, ReportRating): for each reference engine, the
    latest Elo of each model against it, at the model's creation (the ratings GetStats
    carries)."""
    by_opponent: dict[str, list[EloPoint]] = {}
    for r in Ratings(conn).latest(limits.RATINGS_PER_STATS):
        by_opponent.setdefault(r.opponent, []).append(
            EloPoint(r.model_created_unix_ms, r.elo, r.model)
        )
    return [
        EloSeries(
            f"ladder-{opponent}", f"ladder: Elo vs {opponent}", sorted(points, key=lambda p: p.t_ms)
        )
        for opponent, points in sorted(by_opponent.items())
    ]


# Providers of the Elo graph's series, in legend order.
ELO_SERIES: list[Callable[[sqlite3.Connection], list[EloSeries]]] = [gating_series, ladder_series]


def elo(conn: sqlite3.Connection) -> dict[str, Any]:
    return {"series": [s.to_json() for provider in ELO_SERIES for s in provider(conn)]}


# ---------------------------------------------------------------------- tables
def counters(conn: sqlite3.Connection) -> tuple[dict[str, int], dict[str, int]]:
    """(counters, rejections by reason) from the counters table."""
    plain: dict[str, int] = {}
    rejects: dict[str, int] = {}
    for name, value in conn.execute("SELECT name, value FROM counters"):
        if name.startswith(REJECT_PREFIX):
            rejects[name[len(REJECT_PREFIX) :]] = value
        else:
            plain[name] = value
    return plain, rejects


def best_model(conn: sqlite3.Connection, run: str) -> dict[str, Any] | None:
    r = conn.execute(
        "SELECT name, elo FROM models WHERE status = 'released' AND run = ? "
        "ORDER BY released_ms DESC, rowid DESC LIMIT 1",
        (run,),
    ).fetchone()
    return {"name": r["name"], "elo": r["elo"]} if r is not None else None


def _set_aside(conn: sqlite3.Connection) -> dict[int, list[dict[str, Any]]]:
    """By match: the tokens whose games are left out of its counts (outliers, with their
    test, and quarantined tokens, with their games), :mod:`kgrpc.coordinator.quorum`."""
    out: dict[int, list[dict[str, Any]]] = {}
    for r in conn.execute("SELECT * FROM match_outliers ORDER BY match_id, p_value, token_id"):
        out.setdefault(r["match_id"], []).append(
            {
                "token_id": r["token_id"],
                "why": "outlier",
                "wins": r["wins"],
                "losses": r["losses"],
                "draws": r["draws"],
                "others_wins": r["others_wins"],
                "others_games": r["others_games"],
                "p_value": r["p_value"],
            }
        )
    for r in conn.execute(
        "SELECT g.match_id, t.token_id, COUNT(*) AS games FROM match_games g "
        "JOIN match_game_tokens t ON t.match_id = g.match_id AND t.game_id = g.game_id "
        f"WHERE {quorum.QUARANTINED} GROUP BY g.match_id, t.token_id ORDER BY t.token_id"
    ):
        out.setdefault(r["match_id"], []).append(
            {"token_id": r["token_id"], "why": "quarantine", "games": r["games"]}
        )
    return out


def _match_rows(conn: sqlite3.Connection, min_tokens: int = 1) -> list[dict[str, Any]]:
    """Every gating match with its counted games from the candidate's side (win: the winner
    is the candidate's colour; draw: no winner), newest first; ``min_tokens``: the
    coordinator's gating_min_tokens, for why a pending match waits."""
    out = []
    aside = _set_aside(conn)
    for r in conn.execute(
        "SELECT m.*, "
        "COALESCE(SUM(CASE WHEN g.winner != 0 AND g.winner = g.candidate_color THEN 1 ELSE 0 "
        "END), 0) AS wins, "
        "COALESCE(SUM(CASE WHEN g.winner != 0 AND g.winner != g.candidate_color THEN 1 ELSE 0 "
        "END), 0) AS losses, "
        "COALESCE(SUM(CASE WHEN g.winner = 0 THEN 1 ELSE 0 END), 0) AS draws, "
        "COUNT(DISTINCT CASE WHEN g.game_id IS NOT NULL THEN COALESCE(g.token_id, -1) END) "
        f"AS tokens FROM matches m LEFT JOIN ({quorum.COUNTED_GAMES}) g ON g.match_id = m.id "
        "GROUP BY m.id ORDER BY m.id DESC"
    ):
        played = r["wins"] + r["losses"] + r["draws"]
        est = (r["elo_diff"], r["elo_low"], r["elo_high"])
        if played and any(a["why"] == "quarantine" for a in aside.get(r["id"], [])):
            e = elo_maths.elo_interval(r["wins"], r["losses"], r["draws"])  # the games counted
            est = (e.elo, e.low, e.high)
        waiting = ""
        if r["decision"] == "pending" and r["tokens"] < min_tokens:
            waiting = f"games from {r['tokens']} of the {min_tokens} distinct tokens needed"
        out.append(
            {
                "id": r["id"],
                "candidate": r["candidate"],
                "reference": r["reference"],
                "games_target": r["games_target"],
                "games": played,
                "wins": r["wins"],
                "losses": r["losses"],
                "draws": r["draws"],
                "decision": r["decision"],
                "elo_diff": finite(est[0]) if played else None,
                "elo_low": finite(est[1]) if played else None,
                "elo_high": finite(est[2]) if played else None,
                "created_ms": r["created_ms"],
                "decided_ms": r["decided_ms"],
                "tokens": r["tokens"],
                "waiting": waiting,
                "set_aside": aside.get(r["id"], []),
            }
        )
    return out


def matches(conn: sqlite3.Connection, min_tokens: int = 1) -> list[dict[str, Any]]:
    return _match_rows(conn, min_tokens)


def quarantined_tokens(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Tokens under quarantine, with the games of theirs left out."""
    return [
        {
            "token_id": r["token_id"],
            "label": r["label"] or "",
            "since_ms": r["since_ms"],
            "match_games": r["match_games"],
            "training_games": r["training_games"],
        }
        for r in conn.execute(quorum.QUARANTINE_LIST)
    ]


def models(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every model, newest first, with its latest gating match (None for a model released
    without one) and the path of its download."""
    gating: dict[str, dict[str, Any]] = {}
    for m in reversed(_match_rows(conn)):  # oldest first: the latest match wins
        gating[m["candidate"]] = m
    files: dict[str, list[dict[str, Any]]] = {}
    for f in conn.execute("SELECT * FROM model_files ORDER BY model, precision"):
        files.setdefault(f["model"], []).append(
            {
                "precision": f["precision"],
                "size_bytes": f["size_bytes"],
                "sha256": f["sha256"],
                "download": f"/models/{variant_file_name(f['model'], f['precision'])}",
            }
        )
    out = []
    for r in conn.execute("SELECT * FROM models ORDER BY created_ms DESC, rowid DESC"):
        out.append(
            {
                "name": r["name"],
                "status": r["status"],
                "elo": finite(r["elo"]),
                "size_bytes": r["size_bytes"],
                "sha256": r["sha256"],
                "blocks": r["blocks"],
                "channels": r["channels"],
                "training_steps": r["training_steps"],
                "training_rows": r["training_rows"],
                "created_ms": r["created_ms"],
                "released_ms": r["released_ms"],
                "run": r["run"],
                "gating": gating.get(r["name"]),
                "download": f"/models/{r['name']}.onnx",
                # Every precision the release has (fp32 first), each with its download.
                "files": sorted(
                    files.get(r["name"], []), key=lambda f: PRECISIONS.index(f["precision"])
                ),
            }
        )
    return out


def contributors(
    conn: sqlite3.Connection, activity: Activity, display_names: bool = False
) -> list[dict[str, Any]]:
    """Accepted games by account (a token's label: :func:`kgrpc.coordinator.workers.account`),
    most first: games, positions, workers, last seen (latest heartbeat or accepted game), share
    of all accepted games, and its workers' display names when ``display_names`` allows them."""
    activity.update(conn)
    users: dict[str, dict[str, Any]] = {}
    for r in conn.execute(
        "SELECT worker_id, token_id, username, last_heartbeat_ms, "
        "(SELECT label FROM tokens WHERE tokens.id = workers.token_id) AS token_label "
        "FROM workers"
    ):
        games, positions, last_ms = activity.per_worker.get(r["worker_id"], (0, 0, 0))
        name = workers.account(r["token_id"], r["token_label"], r["username"])
        u = users.setdefault(
            name,
            {
                "username": name,
                "display_names": set(),
                "games": 0,
                "positions": 0,
                "workers": 0,
                "last_seen_ms": 0,
            },
        )
        shown = workers.display_name(r, display_names)
        if shown:
            u["display_names"].add(shown[: limits.LABEL])
        u["games"] += games
        u["positions"] += positions
        u["workers"] += 1 if r["worker_id"].startswith("w-") else 0
        u["last_seen_ms"] = max(u["last_seen_ms"], r["last_heartbeat_ms"], last_ms)
    total = sum(u["games"] for u in users.values())
    out = [u for u in users.values() if u["games"] or u["workers"]]
    for u in out:
        u["share"] = u["games"] / total if total else 0.0
        u["display_names"] = sorted(u["display_names"])
    out.sort(key=lambda u: (-u["games"], u["username"]))
    return out


@dataclass(frozen=True)
class Settings:
    """What the views need of the configuration."""

    run: str
    heartbeat_interval_s: float
    started: float  # the server's start, time.time()
    gating_min_tokens: int = 1
    display_names: bool = False  # show workers' --username beside their account


def rate_window_s(s: Settings) -> float:
    """The rates' window: :data:`RATE_WINDOW_S`, or the uptime while it is shorter."""
    return min(RATE_WINDOW_S, max(1.0, time.time() - s.started))


def workers_online(conn: sqlite3.Connection, s: Settings, now: int) -> int:
    return conn.execute(
        "SELECT COUNT(*) FROM workers WHERE last_heartbeat_ms >= ?",
        (online_cutoff_ms(s.heartbeat_interval_s, now),),
    ).fetchone()[0]


def model_counts(conn: sqlite3.Connection) -> dict[str, int]:
    out = dict.fromkeys(("candidate", "released", "rejected"), 0)
    for status, n in conn.execute("SELECT status, COUNT(*) FROM models GROUP BY status"):
        out[status] = n
    return out


def overview(conn: sqlite3.Connection, s: Settings) -> dict[str, Any]:
    now = now_ms()
    plain, rejects = counters(conn)
    window = rate_window_s(s)
    games_per_s, positions_per_s = rates(conn, window, now)
    registered = conn.execute("SELECT COUNT(*) FROM workers WHERE worker_id LIKE 'w-%'").fetchone()[
        0
    ]
    return {
        "run": s.run,
        "uptime_s": int(time.time() - s.started),
        "now_ms": now,
        "games": {
            k: plain.get(f"games_{k}", 0) for k in ("received", "accepted", "rejected", "duplicate")
        },
        "positions": {k: plain.get(f"positions_{k}", 0) for k in ("received", "accepted")},
        "shards_written": plain.get("shards_written", 0),
        "games_per_s": games_per_s,
        "positions_per_s": positions_per_s,
        "rate_window_s": int(window),
        "workers_online": workers_online(conn, s, now),
        "workers_registered": registered,
        "current_model": best_model(conn, s.run),
        "models": model_counts(conn),
        "rejections": dict(sorted(rejects.items(), key=lambda kv: (-kv[1], kv[0]))),
        "sgf_games": sgf_index.counts_by_kind(conn),
    }


def metrics_snapshot(conn: sqlite3.Connection, s: Settings) -> dict[str, Any]:
    """What ``/metrics`` reads from the index at a scrape."""
    now = now_ms()
    plain, rejects = counters(conn)
    gating = {"win": 0, "loss": 0, "draw": 0}
    decisions = dict.fromkeys(("pending", "released", "rejected"), 0)
    for m in _match_rows(conn):
        gating["win"] += m["wins"]
        gating["loss"] += m["losses"]
        gating["draw"] += m["draws"]
        decisions[m["decision"]] = decisions.get(m["decision"], 0) + 1
    return {
        "counters": plain,
        "rejects": rejects,
        "gating_games": gating,
        "matches": decisions,
        "models": model_counts(conn),
        "best": best_model(conn, s.run),
        "workers_online": workers_online(conn, s, now),
        "sgf_games": sgf_index.counts_by_kind(conn),
        "outliers": [
            dict(r)
            for r in conn.execute(
                "SELECT m.candidate, m.reference, o.token_id, o.p_value, "
                "o.wins + o.losses + o.draws AS games FROM match_outliers o "
                "JOIN matches m ON m.id = o.match_id ORDER BY o.match_id, o.token_id"
            )
        ],
        "quarantined_tokens": conn.execute("SELECT COUNT(*) FROM token_quarantine").fetchone()[0],
    }


def stats_extra(conn: sqlite3.Connection, s: Settings, activity: Activity) -> dict[str, Any]:
    """The figures GetStats adds to the stored counters: rates, workers online,
    contributors."""
    now = now_ms()
    window = rate_window_s(s)
    games_per_s, positions_per_s = rates(conn, window, now)
    return {
        "games_per_s": games_per_s,
        "positions_per_s": positions_per_s,
        "rate_window_s": int(window),
        "workers_online": workers_online(conn, s, now),
        "contributors": contributors(conn, activity, s.display_names),
    }


def fill_stats(s: Any, extra: dict[str, Any]) -> None:
    """Put :func:`stats_extra`'s figures into a ``kgrpc.v1.Stats``."""
    s.games_per_s = extra["games_per_s"]
    s.positions_per_s = extra["positions_per_s"]
    s.rate_window_s = extra["rate_window_s"]
    s.workers_online = extra["workers_online"]
    for u in extra["contributors"]:
        s.contributors.add(
            username=u["username"],
            games=u["games"],
            positions=u["positions"],
            last_seen_unix_ms=u["last_seen_ms"],
            share=u["share"],
            workers=u["workers"],
            display_names=u["display_names"],
        )


# ---------------------------------------------------------------------- the reader
class Reader:
    """A read-only connection to the index on a thread of its own."""

    def __init__(self, data_dir: str | Path, index: str = "") -> None:
        self.data_dir = Path(data_dir)
        self.index = index
        self.activity = Activity()
        self._conn: sqlite3.Connection | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kgrpc-views")

    def _call(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        if self._conn is None:
            self._conn = db.connect(self.data_dir, readonly=True, index=self.index)
        return fn(self._conn, *args)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(connection, *args)`` on the reader's thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(self._call, fn, args))

    async def close(self) -> None:
        def shut() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await asyncio.get_running_loop().run_in_executor(self._pool, shut)
        self._pool.shutdown(wait=True)
