"""The ``workers`` and ``worker_rejects`` tables: every SQL statement on them.

A worker row is made by Register (``w-`` + 16 hex digits, owned by the caller's token, or by
no token with auth off) or is an upload bucket (``token-<id>``, ``anonymous``) that counts
games without a worker id. A row is never made from an uploaded record: its token would be
unknown, and any token could claim it. Functions here run on the storage thread.

Credit goes to the account: a worker's games count for its token's label (set by the
operator, ``token create --label``), never for the free-text ``--username`` the worker sends,
which anyone could set to another volunteer's name (KataGo credits the account too). That
name is at most a display name, shown beside the label only when the coordinator's
``display_names`` setting allows it. With auth off there are no accounts, and the user name
is all there is to credit.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Iterator

from google.protobuf import json_format

from kgrpc.coordinator import db
from kgrpc.coordinator.auth import TokenInfo
from kgrpc.coordinator.errors import CoordinatorError, denied, not_found
from kgrpc.net import limits
from kgrpc.v1 import coordinator_pb2

log = logging.getLogger("kgrpc.coordinator")

# The worker ids Register issues.
WORKER_ID_RE = re.compile(r"w-[0-9a-f]{16}")


def _now_ms() -> int:
    return int(time.time() * 1000)


def upload_bucket(caller: TokenInfo | None) -> str:
    """The worker id that games without one (and refused claims) are counted under: one per
    token (``token-<id>``), ``anonymous`` with auth off. Register never issues such ids."""
    return f"token-{caller.id}" if caller else "anonymous"


def account(token_id: int | None, token_label: str | None, username: str) -> str:
    """The name a worker's games are credited to: its token's label (``token-<id>`` for a
    token without one, or one since deleted), or ``username`` for a worker without a token
    (auth off)."""
    if token_id is None:
        return username
    return token_label or f"token-{token_id}"


def display_name(r: sqlite3.Row, allowed: bool) -> str:
    """The user name a worker row was registered with, when display names are ``allowed``
    and it says something its account does not; else ``""``."""
    name = r["username"]
    if not allowed or name == account(r["token_id"], r["token_label"], name):
        return ""
    return name


def _insert(
    conn: sqlite3.Connection,
    worker_id: str,
    token_id: int | None,
    username: str,
    hostname: str,
    version: str,
    now: int,
) -> None:
    conn.execute(
        "INSERT INTO workers (worker_id, token_id, username, hostname, version, registered_ms, "
        "last_heartbeat_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (worker_id, token_id, username, hostname, version, now, now),
    )


def register(
    conn: sqlite3.Connection,
    previous_id: str,
    token_id: int | None,
    username: str,
    hostname: str,
    version: str,
) -> str:
    """The worker id for a Register call: ``previous_id`` again when it is this token's (or
    unknown to this index, as after restoring an older backup), else a new one."""
    now = _now_ms()
    if previous_id:
        row = conn.execute(
            "SELECT token_id FROM workers WHERE worker_id = ?", (previous_id,)
        ).fetchone()
        # Only a worker registered under this very token is handed back (with auth off:
        # one registered without a token); never another token's, nor an ownerless row.
        if row is not None and row["token_id"] == token_id:
            conn.execute(
                "UPDATE workers SET username = ?, hostname = ?, version = ?, "
                "last_heartbeat_ms = ? WHERE worker_id = ?",
                (username, hostname, version, now, previous_id),
            )
            return previous_id
        if row is None and WORKER_ID_RE.fullmatch(previous_id):
            # An id this index does not know at all (restored from an older backup):
            # nobody owns it; giving it back keeps the worker's spooled games valid.
            _insert(conn, previous_id, token_id, username, hostname, version, now)
            return previous_id
        log.warning(
            "Register: previous worker id %r is not this token's; issuing a new one", previous_id
        )
    worker_id = "w-" + uuid.uuid4().hex[:16]
    _insert(conn, worker_id, token_id, username, hostname, version, now)
    return worker_id


def record_heartbeat(conn: sqlite3.Connection, worker_id: str, stats_json: str) -> None:
    conn.execute(
        "UPDATE workers SET last_heartbeat_ms = ?, stats_json = ? WHERE worker_id = ?",
        (_now_ms(), stats_json, worker_id),
    )


def owners(conn: sqlite3.Connection, worker_ids: Iterable[str]) -> dict[str, int | None]:
    """Token id (None: registered without one) of each of ``worker_ids`` that is registered."""
    out: dict[str, int | None] = {}
    for wid in worker_ids:
        if "\x00" in wid:
            continue  # never registered (and PostgreSQL takes no NUL in a text value)
        row = conn.execute("SELECT token_id FROM workers WHERE worker_id = ?", (wid,)).fetchone()
        if row is not None:
            out[wid] = row["token_id"]
    return out


def check_owner(
    conn: sqlite3.Connection,
    worker_id: str,
    caller: TokenInfo | None,
    action: str = "act for",
    missing: Callable[[str], CoordinatorError] = not_found,
) -> None:
    """Raise unless ``worker_id`` is registered, under ``caller``'s token when auth is on
    (``missing``, NOT_FOUND by default, for an unknown worker: a stock worker registers
    again on it; PERMISSION_DENIED for another token's)."""
    found = owners(conn, (worker_id,))
    if worker_id not in found:
        raise missing(f"unknown worker {worker_id!r}: call Register first")
    if caller is not None and found[worker_id] != caller.id:
        raise denied(
            f"worker {worker_id!r} is not registered under this token: a token may "
            f"only {action} the workers it registered (Register returns their ids)"
        )


def is_owner(conn: sqlite3.Connection, worker_id: str, caller: TokenInfo | None) -> bool:
    """Whether :func:`check_owner` lets ``caller`` act for ``worker_id``."""
    try:
        check_owner(conn, worker_id, caller)
    except CoordinatorError:
        return False
    return True


def claim_bucket(conn: sqlite3.Connection, bucket: str, caller: TokenInfo | None) -> None:
    """Make ``bucket``'s row, owned by ``caller``'s token (so no other token can claim it);
    an older row of that name without a token (made by earlier versions) is given its owner."""
    conn.execute(
        "INSERT INTO workers (worker_id, token_id, username, registered_ms) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(worker_id) DO UPDATE SET token_id = excluded.token_id "
        "WHERE workers.token_id IS NULL",
        (bucket, caller.id if caller else None, caller.label if caller else "", _now_ms()),
    )


def count_game(conn: sqlite3.Connection, worker_id: str, accepted: bool, reason: str) -> None:
    """Count a stored or rejected game for ``worker_id``, if it is registered; a rejection
    also by ``reason``. Call inside the ingest transaction."""
    if accepted:
        conn.execute(
            "UPDATE workers SET games_accepted = games_accepted + 1 WHERE worker_id = ?",
            (worker_id,),
        )
        return
    cur = conn.execute(
        "UPDATE workers SET games_rejected = games_rejected + 1 WHERE worker_id = ?",
        (worker_id,),
    )
    if cur.rowcount:
        conn.execute(
            "INSERT INTO worker_rejects (worker_id, reason, count) VALUES (?, ?, 1) "
            "ON CONFLICT(worker_id, reason) DO UPDATE SET count = worker_rejects.count + 1",
            (worker_id, reason),
        )


# Rows written before the field limits existed may hold anything: what a listing shows.
_SHOWN = (
    f"worker_id, token_id, substr(username, 1, {limits.LABEL}) AS username, "
    f"substr(hostname, 1, {limits.LABEL}) AS hostname, "
    f"substr(version, 1, {limits.LABEL}) AS version, registered_ms, last_heartbeat_ms, "
    "CASE WHEN length(stats_json) > 4096 THEN '{}' ELSE stats_json END AS stats_json, "
    "games_accepted, games_rejected, "
    f"(SELECT substr(label, 1, {limits.LABEL}) FROM tokens WHERE tokens.id = workers.token_id) "
    "AS token_label"
)


def count(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM workers").fetchone()[0])


def rows(conn: sqlite3.Connection, offset: int = 0, limit: int = -1) -> Iterator[sqlite3.Row]:
    """Worker rows, most recent heartbeat first (then by id), ``limit`` of them (-1: all)
    after skipping ``offset``, each with its token's label (``token_label``, None without
    one: :func:`account`); free-text columns cut to :data:`kgrpc.net.limits.LABEL`."""
    return conn.execute(
        f"SELECT {_SHOWN} FROM workers ORDER BY last_heartbeat_ms DESC, worker_id LIMIT ? OFFSET ?",
        (db.limit_rows(limit), max(0, offset)),
    )


def statuses(
    conn: sqlite3.Connection, offset: int = 0, limit: int = 0, display_names: bool = False
) -> list[coordinator_pb2.WorkerStatus]:
    """A page of worker statuses (see :func:`rows`; ``limit`` 0 =
    :data:`kgrpc.net.limits.STATS_PAGE`, at most :data:`~kgrpc.net.limits.STATS_MAX_PAGE`),
    each credited to its :func:`account`, with its display name if ``display_names`` allows
    it, and its rejections by reason."""
    page = list(rows(conn, offset, limits.stats_page(limit)))
    rejects: dict[str, dict[str, int]] = {}
    ids = [r["worker_id"] for r in page]
    for i in range(0, len(ids), 500):
        part = ids[i : i + 500]
        for r in conn.execute(
            "SELECT worker_id, reason, count FROM worker_rejects "
            f"WHERE worker_id IN ({','.join('?' * len(part))})",
            part,
        ):
            rejects.setdefault(r["worker_id"], {})[r["reason"]] = r["count"]
    out: list[coordinator_pb2.WorkerStatus] = []
    for r in page:
        ws = coordinator_pb2.WorkerStatus(
            worker_id=r["worker_id"],
            username=account(r["token_id"], r["token_label"], r["username"]),
            display_name=display_name(r, display_names),
            hostname=r["hostname"],
            last_heartbeat_unix_ms=r["last_heartbeat_ms"],
            games_accepted=r["games_accepted"],
            games_rejected=r["games_rejected"],
        )
        ws.rejects_by_reason.update(rejects.get(r["worker_id"], {}))
        with contextlib.suppress(json_format.ParseError):
            json_format.Parse(r["stats_json"], ws.stats)
        out.append(ws)
    return out


def remove(
    conn: sqlite3.Connection, worker_ids: Iterable[str] = (), token_id: int | None = None
) -> list[str]:
    """Delete the rows (and rejection counts) of ``worker_ids`` and, with ``token_id``, of
    every worker registered under that token; the ids removed. Games stay stored. A worker
    still running comes back under the same id when it registers again, unless its token
    was revoked."""
    ids = set(worker_ids)
    if token_id is not None:
        ids.update(
            r["worker_id"]
            for r in conn.execute("SELECT worker_id FROM workers WHERE token_id = ?", (token_id,))
        )
    removed: list[str] = []
    with db.transaction(conn):
        for wid in sorted(ids):
            if conn.execute("DELETE FROM workers WHERE worker_id = ?", (wid,)).rowcount:
                removed.append(wid)
            conn.execute("DELETE FROM worker_rejects WHERE worker_id = ?", (wid,))
    return removed
