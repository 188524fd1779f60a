"""Read-only views of the run's models for people: every model with its latest gating match
and downloads, the gating matches with the tokens they count and set aside, the quarantined
tokens, and the Elo graph's series. The dashboard's ``/api/models``, ``/api/matches``,
``/api/quarantined`` and ``/api/elo`` come from here; :mod:`kgrpc.coordinator.views` takes
the gating counts of ``/metrics`` from :func:`match_rows`.

Every value is a plain JSON value: numbers stay numbers, a non-finite number (an Elo
interval end of a lopsided match) becomes None.

The Elo graph's series come from :data:`ELO_SERIES` (functions of the read connection
returning :class:`EloPart`: some :class:`EloSeries` and the notes on what they leave out):
the gating series, and the rating ladder's (one series per reference engine, from the
``ratings`` table); their points appear in the graph and in ``/api/elo`` unchanged.

Queries run on :class:`kgrpc.coordinator.reader.Reader`'s thread and read-only connection.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kgrpc import elo as elo_maths
from kgrpc.coordinator import quorum
from kgrpc.coordinator.models import DECIDED, elo_measured
from kgrpc.coordinator.ratings import Ratings
from kgrpc.net import limits
from kgrpc.precision import PRECISIONS, variant_file_name


def finite(x: float | None) -> float | None:
    """``x``, or None when it is not a finite number (JSON has no infinity)."""
    return x if x is not None and math.isfinite(x) else None


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


def match_rows(conn: sqlite3.Connection, min_tokens: int = 1) -> list[dict[str, Any]]:
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
    return match_rows(conn, min_tokens)


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
    for m in reversed(match_rows(conn)):  # oldest first: the latest match wins
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
    rows = conn.execute("SELECT * FROM models ORDER BY created_ms DESC, rowid DESC").fetchall()
    measured = elo_measured(conn, rows)
    for r in rows:
        out.append(
            {
                "name": r["name"],
                "status": r["status"],
                "elo": finite(r["elo"]),
                "elo_measured": r["name"] in measured,
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


@dataclass(frozen=True)
class EloPart:
    """One provider's part of the Elo graph: its series, and its notes (what the chart does
    not show of them and why; the dashboard prints them above it)."""

    series: list[EloSeries]
    notes: list[str] = field(default_factory=list)


def gating_series(conn: sqlite3.Connection) -> EloPart:
    """Each released model whose Elo a gating match measured, at its release (the first model,
    the anchor at 0 Elo, with them; each later one at its reference's Elo plus its match's
    difference), and each rejected candidate at its match's decision. A model released
    without a match (gating off, or released at once) carries its predecessor's Elo, not a
    measurement: it is left out, and a note counts such releases. One read of the models
    gives both."""
    released, rejected = [], []
    anchor: EloPoint | None = None
    unmeasured = 0  # released models no decided match rated, the anchor included
    for r in conn.execute(
        "SELECT m.name, m.status, m.elo, m.released_ms, m.created_ms, "
        "(SELECT MAX(decided_ms) FROM matches WHERE candidate = m.name AND decision IN (?, ?)) "
        "AS decided_ms FROM models m WHERE m.status IN ('released', 'rejected') "
        "ORDER BY m.created_ms, m.rowid",
        DECIDED,
    ):
        if r["status"] == "released":
            point = EloPoint(r["released_ms"] or r["created_ms"], r["elo"], r["name"])
            unmeasured += not r["decided_ms"]  # NULL: no decided match
            if anchor is None:
                anchor = point
            elif r["decided_ms"]:
                released.append(point)
        else:
            rejected.append(EloPoint(r["decided_ms"] or r["created_ms"], r["elo"], r["name"]))
    if anchor is not None and (released or rejected):  # the anchor alone measures nothing
        released.append(anchor)
    series = [
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
    ungated = max(0, unmeasured - 1)  # the first model is the anchor, not a measurement
    if not ungated:
        return EloPart(series)
    note = (
        f"{ungated} release{'s' if ungated != 1 else ''} without a gating match (gating "
        "off or skipped): gating Elo not measured for "
        f"{'them' if ungated != 1 else 'it'}; a rating ladder (kgrpc-eval ladder) rates "
        "releases against fixed references"
    )
    return EloPart(series, [note])


def ladder_series(conn: sqlite3.Connection) -> EloPart:
    """The rating ladder (kgrpc-eval ladder, ReportRating): for each reference engine, the
    latest Elo of each model against it, at the model's creation (the ratings GetStats
    carries)."""
    by_opponent: dict[str, list[EloPoint]] = {}
    for r in Ratings(conn).latest(limits.RATINGS_PER_STATS):
        by_opponent.setdefault(r.opponent, []).append(
            EloPoint(r.model_created_unix_ms, r.elo, r.model)
        )
    return EloPart(
        [
            EloSeries(
                f"ladder-{opponent}",
                f"ladder: Elo vs {opponent}",
                sorted(points, key=lambda p: p.t_ms),
            )
            for opponent, points in sorted(by_opponent.items())
        ]
    )


# Providers of the Elo graph's series, in legend order.
ELO_SERIES: list[Callable[[sqlite3.Connection], EloPart]] = [gating_series, ladder_series]


def elo(conn: sqlite3.Connection) -> dict[str, Any]:
    """The series, and ``notes``: what the chart does not show and why (the dashboard prints
    them above it)."""
    parts = [provider(conn) for provider in ELO_SERIES]
    return {
        "series": [s.to_json() for part in parts for s in part.series],
        "notes": [note for part in parts for note in part.notes],
    }
