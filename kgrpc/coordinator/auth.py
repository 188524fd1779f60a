"""The coordinator's access tokens: creating, listing, revoking, looking up, and what each
role may call.

A token is ``kgt_`` + 43 url-safe random characters, shown once when created;
the database keeps only its sha256. Roles: ``worker`` (register, heartbeat, tasks,
uploads, match results, model downloads, stats, listing ratings) and ``trainer`` (all of that
plus publishing models, pulling shards and reporting ratings: worker tokens go to volunteers,
who must not write the run's strength curve; the operator's ladder uses a trainer token).

The check itself is :class:`kgrpc.net.server.BearerTokenInterceptor` with
:meth:`TokenChecker.lookup` and :func:`permit`: UNAUTHENTICATED for no token or an unknown
or revoked one, PERMISSION_DENIED for a worker token on a trainer-only method. Each call
looks the hash up in SQLite (a ~20 µs indexed read on a WAL reader), so a ``token revoke``
run by another process takes effect on the next call.
"""

from __future__ import annotations

import hashlib
import secrets
import sqlite3
import time
from dataclasses import dataclass

from kgrpc.coordinator import db, pg
from kgrpc.net.server import LookupUnavailable

ROLES = ("worker", "trainer")
SERVICE_PREFIX = "/kgrpc.v1.Coordinator/"
TRAINER_ONLY = frozenset({"PublishModel", "ListShards", "DownloadShard", "ReportRating"})


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token_text() -> str:
    return "kgt_" + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class TokenInfo:
    id: int
    role: str
    label: str
    created_ms: int
    revoked_ms: int | None


def create_token(conn: sqlite3.Connection, role: str, label: str = "") -> tuple[str, TokenInfo]:
    """Store a new token's hash; return (token text, info). The text is not kept."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    text = new_token_text()
    now = int(time.time() * 1000)
    cur = conn.execute(
        "INSERT INTO tokens (hash, role, label, created_ms) VALUES (?, ?, ?, ?) RETURNING id",
        (hash_token(text), role, label, now),
    )
    return text, TokenInfo(int(cur.fetchone()[0]), role, label, now, None)


def _info(r: sqlite3.Row) -> TokenInfo:
    return TokenInfo(r["id"], r["role"], r["label"], r["created_ms"], r["revoked_ms"])


def list_tokens(conn: sqlite3.Connection) -> list[TokenInfo]:
    rows = conn.execute(
        "SELECT id, role, label, created_ms, revoked_ms FROM tokens ORDER BY id"
    ).fetchall()
    return [_info(r) for r in rows]


def revoke_token(
    conn: sqlite3.Connection, *, token_id: int | None = None, token: str | None = None
) -> bool:
    """Revoke by id or by the token text; False if no such active token."""
    now = int(time.time() * 1000)
    if token is not None:
        cur = conn.execute(
            "UPDATE tokens SET revoked_ms = ? WHERE hash = ? AND revoked_ms IS NULL",
            (now, hash_token(token)),
        )
    elif token_id is not None:
        cur = conn.execute(
            "UPDATE tokens SET revoked_ms = ? WHERE id = ? AND revoked_ms IS NULL", (now, token_id)
        )
    else:
        raise ValueError("give token_id or token")
    return cur.rowcount > 0


class TokenChecker:
    """Looks tokens up in the database (read-only connection of its own)."""

    def __init__(self, data_dir: str, index: str = "") -> None:
        self._conn = db.connect(data_dir, readonly=True, index=index)

    def lookup(self, token: str) -> TokenInfo | None:
        try:
            row = self._conn.execute(
                "SELECT id, role, label, created_ms, revoked_ms FROM tokens WHERE hash = ?",
                (hash_token(token),),
            ).fetchone()
        except pg.IndexUnavailable as exc:
            raise LookupUnavailable(
                "the coordinator's index (PostgreSQL) is unreachable: retry later"
            ) from exc
        if row is None or row["revoked_ms"] is not None:
            return None
        return _info(row)

    def close(self) -> None:
        self._conn.close()


def permit(method: str, info: TokenInfo) -> str | None:
    """None when ``info``'s role may call ``method`` (``/package.Service/Name``), else why not."""
    name = method.removeprefix(SERVICE_PREFIX)
    if name in TRAINER_ONLY and info.role != "trainer":
        return f"{name} needs a trainer token; this is a {info.role} token"
    return None
