"""The ``sgf_games`` table, the index of the games kept as SGF: the rows the archive adds
once a file (or pack) is whole (:func:`index`), and the reads of ``ListGames``,
``DownloadGame`` and the dashboard (:func:`list_kept`, :func:`find`, :func:`counts_by_kind`).
Files are found through a row, never by joining a name a caller sent.

Split from :mod:`kgrpc.coordinator.archive`: the writer adds rows on the storage thread, the
readers (``CoordinatorApp``'s reader, :mod:`kgrpc.coordinator.views`, the web server) only
query the table and need nothing of the writer.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from kgrpc.coordinator import db
from kgrpc.coordinator.errors import invalid
from kgrpc.coordinator.kept_games import KINDS, KeptGame

MAX_LIST = 1000


def index(conn: sqlite3.Connection, games: Sequence[KeptGame]) -> int:
    """Add the rows of written files (a game kept before keeps its row); rows added."""
    with db.transaction(conn):
        before = conn.total_changes
        conn.executemany(
            "INSERT INTO sgf_games (game_id, kind, model, black, white, board_size, "
            "komi, moves, result, worker_id, finished_ms, stored_ms, path, pack, pack_offset, "
            "pack_length) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [
                (
                    g.game_id,
                    g.kind,
                    g.model,
                    g.black,
                    g.white,
                    g.board_size,
                    g.komi,
                    g.moves,
                    g.result,
                    g.worker_id,
                    g.finished_ms,
                    g.stored_ms,
                    g.path,
                    g.pack,
                    g.pack_offset,
                    g.pack_length,
                )
                for g in games
            ],
        )
        return conn.total_changes - before


def known(conn: sqlite3.Connection, game_ids: Sequence[str]) -> set[str]:
    ids = list(game_ids)
    found: set[str] = set()
    for i in range(0, len(ids), 500):
        part = ids[i : i + 500]
        q = f"SELECT game_id FROM sgf_games WHERE game_id IN ({','.join('?' * len(part))})"
        found.update(r[0] for r in conn.execute(q, part))
    return found


def _row(r: sqlite3.Row) -> KeptGame:
    return KeptGame(
        game_id=r["game_id"],
        kind=r["kind"],
        model=r["model"],
        black=r["black"],
        white=r["white"],
        board_size=r["board_size"],
        komi=r["komi"],
        moves=r["moves"],
        result=r["result"],
        worker_id=r["worker_id"],
        finished_ms=r["finished_ms"],
        stored_ms=r["stored_ms"],
        path=r["path"],
        seq=r["seq"],
        pack=r["pack"],
        pack_offset=r["pack_offset"],
        pack_length=r["pack_length"],
    )


def list_kept(
    conn: sqlite3.Connection, model: str = "", kind: str = "", limit: int = 50, before_seq: int = 0
) -> list[KeptGame]:
    """Kept games, newest first: of ``model`` and ``kind`` when given, before ``before_seq``
    when positive, at most ``limit`` (1..1000)."""
    if kind and kind not in KINDS:
        raise invalid(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if not 1 <= limit <= MAX_LIST:
        raise invalid(f"limit must be 1..{MAX_LIST}, got {limit}")
    if before_seq < 0:
        raise invalid(f"before_seq must be >= 0, got {before_seq}")
    where, args = [], []
    if model:
        where.append("model = ?")
        args.append(model)
    if kind:
        where.append("kind = ?")
        args.append(kind)
    if before_seq:
        where.append("seq < ?")
        args.append(before_seq)
    sql = "SELECT * FROM sgf_games"
    if where:
        sql += " WHERE " + " AND ".join(where)
    rows = conn.execute(sql + " ORDER BY seq DESC LIMIT ?", (*args, limit)).fetchall()
    return [_row(r) for r in rows]


def find(conn: sqlite3.Connection, game_id: str) -> KeptGame | None:
    r = conn.execute("SELECT * FROM sgf_games WHERE game_id = ?", (game_id,)).fetchone()
    return _row(r) if r is not None else None


def counts_by_kind(conn: sqlite3.Connection) -> dict[str, int]:
    out = dict.fromkeys(KINDS, 0)
    for r in conn.execute("SELECT kind, COUNT(*) FROM sgf_games GROUP BY kind"):
        out[r[0]] = r[1]
    return out
