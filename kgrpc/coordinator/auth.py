"""Access tokens and the server interceptor that checks them.

A token is ``kgt_`` + 43 url-safe random characters, shown once when created;
the database keeps only its sha256. Roles: ``worker`` (register, heartbeat, tasks,
uploads, match results, model downloads, stats) and ``trainer`` (all of that plus
publishing models and pulling shards).

The interceptor reads ``authorization: Bearer <token>`` and refuses with
UNAUTHENTICATED (no token / unknown or revoked token) or PERMISSION_DENIED (a worker
token on a trainer-only method). The refusal is a handler of the same RPC kind as
the real one, so streaming calls fail cleanly too. Health and reflection are open.
Each call looks the hash up in SQLite (a ~20 µs indexed read on a WAL reader), so a
``token revoke`` run by another process takes effect on the next call.
"""

from __future__ import annotations

import hashlib
import secrets
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from kgrpc.coordinator import db

ROLES = ("worker", "trainer")
SERVICE_PREFIX = "/kgrpc.v1.Coordinator/"
TRAINER_ONLY = frozenset({"PublishModel", "ListShards", "DownloadShard"})
# Standard services a probe or grpcurl calls without a token.
OPEN_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


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
        "INSERT INTO tokens (hash, role, label, created_ms) VALUES (?, ?, ?, ?)",
        (hash_token(text), role, label, now),
    )
    return text, TokenInfo(int(cur.lastrowid or 0), role, label, now, None)


def list_tokens(conn: sqlite3.Connection) -> list[TokenInfo]:
    rows = conn.execute("SELECT id, role, label, created_ms, revoked_ms FROM tokens ORDER BY id").fetchall()
    return [TokenInfo(r["id"], r["role"], r["label"], r["created_ms"], r["revoked_ms"]) for r in rows]


def revoke_token(conn: sqlite3.Connection, *, token_id: int | None = None, token: str | None = None) -> bool:
    """Revoke by id or by the token text; False if no such active token."""
    now = int(time.time() * 1000)
    if token is not None:
        cur = conn.execute(
            "UPDATE tokens SET revoked_ms = ? WHERE hash = ? AND revoked_ms IS NULL", (now, hash_token(token))
        )
    elif token_id is not None:
        cur = conn.execute("UPDATE tokens SET revoked_ms = ? WHERE id = ? AND revoked_ms IS NULL", (now, token_id))
    else:
        raise ValueError("give token_id or token")
    return cur.rowcount > 0


def bearer_token(metadata: Any) -> str | None:
    """The token of ``authorization: Bearer <token>`` in call metadata, if any."""
    for key, value in metadata or ():
        if key == "authorization":
            if isinstance(value, bytes):
                value = value.decode(errors="replace")
            scheme, _, rest = value.partition(" ")
            if scheme.lower() == "bearer" and rest.strip():
                return rest.strip()
            return None
    return None


class TokenChecker:
    """Looks tokens up in the database (read-only connection of its own)."""

    def __init__(self, data_dir: str) -> None:
        self._conn = db.connect(data_dir, readonly=True)

    def lookup(self, token: str) -> TokenInfo | None:
        row = self._conn.execute(
            "SELECT id, role, label, created_ms, revoked_ms FROM tokens WHERE hash = ?", (hash_token(token),)
        ).fetchone()
        if row is None or row["revoked_ms"] is not None:
            return None
        return TokenInfo(row["id"], row["role"], row["label"], row["created_ms"], row["revoked_ms"])

    def close(self) -> None:
        self._conn.close()


def _deny_handler(kind: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    async def deny(request_or_iterator: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, message)

    async def deny_stream(request_or_iterator: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, message)
        yield  # pragma: no cover - makes this an async generator (streaming response)

    if kind.request_streaming and kind.response_streaming:
        return grpc.stream_stream_rpc_method_handler(deny_stream)
    if kind.request_streaming:
        return grpc.stream_unary_rpc_method_handler(deny)
    if kind.response_streaming:
        return grpc.unary_stream_rpc_method_handler(deny_stream)
    return grpc.unary_unary_rpc_method_handler(deny)


class AuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, lookup: Callable[[str], TokenInfo | None]) -> None:
        self._lookup = lookup

    async def intercept_service(self, continuation, handler_call_details):  # type: ignore[no-untyped-def]
        method: str = handler_call_details.method
        if method.startswith(OPEN_PREFIXES):
            return await continuation(handler_call_details)
        handler = await continuation(handler_call_details)
        if handler is None:
            return None  # unknown method: gRPC answers UNIMPLEMENTED
        token = bearer_token(handler_call_details.invocation_metadata)
        if token is None:
            return _deny_handler(
                handler, grpc.StatusCode.UNAUTHENTICATED, "missing token: send metadata 'authorization: Bearer <token>'"
            )
        info = self._lookup(token)
        if info is None:
            return _deny_handler(handler, grpc.StatusCode.UNAUTHENTICATED, "unknown or revoked token")
        name = method.removeprefix(SERVICE_PREFIX)
        if name in TRAINER_ONLY and info.role != "trainer":
            return _deny_handler(
                handler, grpc.StatusCode.PERMISSION_DENIED, f"{name} needs a trainer token; this is a {info.role} token"
            )
        return handler
