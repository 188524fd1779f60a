"""``kgrpc-coordinator token quarantine --id N [--since TIME]`` and ``token unquarantine
--id N``: set a token's games aside afterwards, and bring them back.

A quarantine (the ``token_quarantine`` row, :mod:`kgrpc.coordinator.quorum`) leaves out the
games the token reported since TIME: its match games leave every gating count, decided
matches included (``stats`` then shows a decision they tipped as the match's ``recount``; the
decision itself is not undone: the fleet may have played the release for days), and the
shards holding its training games leave every listing trainers read (ListShards, store mode,
a trainer reading DATA_DIR in place: :func:`kgrpc.coordinator.quorum.excluded_shards`) and
the rolling window latest_games.npz (:mod:`kgrpc.coordinator.window_quarantine`). Nothing is
deleted; ``unquarantine`` counts and lists them all again. A running coordinator sees the
change on its next count (it reads the table on every decision, listing and stats call) and
rebuilds the window at its flush loop's next tick.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sqlite3
import sys
import time
from collections.abc import Callable

from kgrpc.cli_help import env_flag
from kgrpc.coordinator import db, quorum


def parse_since(text: str) -> int:
    """TIME as milliseconds since the epoch: seconds since the epoch (``1767225600``) or an
    ISO 8601 date or time (``2026-12-01``, ``2026-12-01T18:00``; UTC unless it says)."""
    try:
        return int(float(text) * 1000)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither seconds since the epoch nor an ISO 8601 time"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def add_parsers(tsub: argparse._SubParsersAction, storage_flags: Callable[..., None]) -> None:
    q = tsub.add_parser(
        "quarantine",
        help="leave a token's games since TIME out of gating decisions and training shards "
        "(nothing is deleted; undo with `token unquarantine`)",
    )
    storage_flags(q)
    env_flag(q, "--id", type=int, required=True, no_env="names the token", help="the token's id")
    env_flag(
        q,
        "--since",
        type=parse_since,
        default=0,
        no_env="names the period",
        help="games reported from this time on: seconds since the epoch or ISO 8601 (UTC); "
        "default: all its games",
    )
    u = tsub.add_parser("unquarantine", help="count a quarantined token's games again")
    storage_flags(u)
    env_flag(u, "--id", type=int, required=True, no_env="names the token", help="the token's id")


def when(ms: int) -> str:
    if not ms:
        return "the start"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def run(args: argparse.Namespace, conn: sqlite3.Connection) -> int:
    if args.token_command == "unquarantine":
        with db.transaction(conn):
            lifted = quorum.lift(conn, args.id)
        if not lifted:
            print(f"token {args.id} is not quarantined", file=sys.stderr)
            return 1
        print(f"token {args.id}: quarantine lifted; its games count again")
        return 0
    with db.transaction(conn):
        if not quorum.quarantine(conn, args.id, args.since, int(time.time() * 1000)):
            print(f"no token {args.id} (see `token list`)", file=sys.stderr)
            return 1
    print(f"token {args.id}: games reported since {when(args.since)} are left out")
    for r in conn.execute(
        "SELECT m.id, m.candidate, m.reference, m.decision, COUNT(*) AS games "
        "FROM match_game_tokens t JOIN matches m ON m.id = t.match_id "
        "WHERE t.token_id = ? AND t.reported_ms >= ? GROUP BY m.id, m.candidate, m.reference, "
        "m.decision ORDER BY m.id",
        (args.id, args.since),
    ):
        note = ""
        if r["decision"] in ("released", "rejected"):
            note = " (decided: `stats` shows a recount if it tips; the decision stays)"
        print(
            f"  match {r['candidate']} vs {r['reference']} [{r['decision']}]: "
            f"{r['games']} games left out{note}"
        )
    mine = [q for q in quorum.quarantined(conn) if q["token_id"] == args.id]
    training = mine[0]["training_games"] if mine else 0
    runs = [r[0] for r in conn.execute("SELECT DISTINCT run FROM shards ORDER BY run")]
    shards = sum(len(quorum.excluded_shards(conn, run)) for run in runs)
    print(
        f"  {training} training games; {shards} shards holding games of quarantined tokens "
        "are left out of the trainers' listings, and of latest_games.npz from the running "
        "coordinator's next flush tick (at most a minute)"
    )
    return 0
