"""Read-only views of the index for people and monitors: overview, rates, contributors. The
dashboard's ``/api/overview`` and ``/api/contributors``, the ``/metrics`` snapshot and the
extra figures of GetStats come from here; the models, gating matches and Elo series are
in :mod:`kgrpc.coordinator.model_views`.

Queries run on :class:`kgrpc.coordinator.reader.Reader`'s own thread and read-only
connection (WAL: they never wait for, nor block, the storage thread that writes). Figures
that would need a scan of every game are kept up to date incrementally (:class:`Activity`,
from the games added since the last look, by rowid) or found by a binary search on the rowid
(rates), so a view costs about the same with a million games as with ten.

Every value is a plain JSON value.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any

from kgrpc.coordinator import model_views, sgf_index, workers
from kgrpc.coordinator.models import elo_measured
from kgrpc.net import limits

# Rates (games/s, positions/s) are over this many seconds (less while the server is younger).
RATE_WINDOW_S = 600
# A worker is online while its last heartbeat is at most this many heartbeat intervals old.
ONLINE_HEARTBEATS = 3
# Rows of the counters table that are not rejection reasons (``reject:<reason>``).
REJECT_PREFIX = "reject:"


def now_ms() -> int:
    return int(time.time() * 1000)


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
        "SELECT name, elo, run FROM models WHERE status = 'released' AND run = ? "
        "ORDER BY released_ms DESC, rowid DESC LIMIT 1",
        (run,),
    ).fetchone()
    if r is None:
        return None
    known = r["name"] in elo_measured(conn, [r])
    return {"name": r["name"], "elo": r["elo"], "elo_measured": known}


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
    for m in model_views.match_rows(conn):
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
