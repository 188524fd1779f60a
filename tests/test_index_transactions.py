"""Transactions of the index, on each backend: a failed one leaves nothing, and one whose
loss in a machine crash costs nothing (``durable=False``) commits without waiting for the
disk, then the connection is back to durable commits (issue 26)."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from kgrpc.coordinator import db


def sync_setting(conn: Any) -> str:
    if isinstance(conn, sqlite3.Connection):
        return {0: "off", 1: "normal", 2: "full", 3: "extra"}[
            conn.execute("PRAGMA synchronous").fetchone()[0]
        ]
    return str(conn.execute("SHOW synchronous_commit").fetchone()[0])


def test_a_relaxed_transaction_commits_without_waiting_then_durable_again(
    tmp_path: Any, index_url: str
) -> None:
    conn = db.connect(tmp_path, index=index_url)
    try:
        durable = sync_setting(conn)
        assert durable in ("full", "on")
        with db.transaction(conn, durable=False):
            inside = sync_setting(conn)
            conn.execute("INSERT INTO counters (name, value) VALUES (?, ?)", ("relaxed", 1))
        assert inside in ("normal", "off")
        assert sync_setting(conn) == durable
        # Seen by another connection at once.
        other = db.connect(tmp_path, readonly=True, index=index_url)
        try:
            row = other.execute("SELECT value FROM counters WHERE name = ?", ("relaxed",))
            assert row.fetchone()[0] == 1
        finally:
            other.close()
    finally:
        conn.close()


def test_a_failed_transaction_leaves_nothing_and_the_setting_restored(
    tmp_path: Any, index_url: str
) -> None:
    conn = db.connect(tmp_path, index=index_url)
    try:
        durable = sync_setting(conn)
        with pytest.raises(sqlite3.IntegrityError), db.transaction(conn, durable=False):
            conn.execute("INSERT INTO counters (name, value) VALUES (?, ?)", ("twice", 1))
            conn.execute("INSERT INTO counters (name, value) VALUES (?, ?)", ("twice", 2))
        assert conn.execute("SELECT COUNT(*) FROM counters WHERE name = 'twice'").fetchone()[0] == 0
        assert sync_setting(conn) == durable and not conn.in_transaction
    finally:
        conn.close()
