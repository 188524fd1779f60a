"""The index's command-line surface: ``--index`` on every subcommand that opens it, and one
line with exit code 2 for an index that cannot be opened (issue 26)."""

from __future__ import annotations

import socket
import subprocess
import sys
from typing import Any

import pytest

from kgrpc.coordinator import cli


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_token_commands_work_on_a_postgresql_index(tmp_path: Any, pg_index: str, capsys) -> None:
    base = ["--data-dir", str(tmp_path), "--index", pg_index]
    assert cli.main(["token", "create", *base, "--role", "worker", "--label", "alice"]) == 0
    token = capsys.readouterr().out.strip()
    assert token
    assert cli.main(["token", "list", *base]) == 0
    listed = capsys.readouterr().out
    assert "alice" in listed and "active" in listed
    assert cli.main(["token", "revoke", *base, "--token", token]) == 0
    assert cli.main(["token", "list", *base]) == 0
    assert "revoked" in capsys.readouterr().out
    assert cli.main(["workers", "list", *base]) == 0
    # Nothing was written to the data dir's SQLite file: the index is PostgreSQL.
    assert not (tmp_path / "coordinator.sqlite3").exists()


@pytest.mark.parametrize(
    "index, said",
    [
        ("mysql://x@127.0.0.1/db", "postgresql:// URL"),
        # PORT: a free port, taken in the test (collection must be the same on every xdist
        # process, so no port is picked at import).
        ("postgresql://kgrpc@127.0.0.1:PORT/none", "PostgreSQL index"),
    ],
)
def test_an_index_that_cannot_be_opened_is_one_line_and_exit_2(
    tmp_path: Any, index: str, said: str
) -> None:
    index = index.replace("PORT", str(free_port()))
    for args in (
        ["token", "list", "--data-dir", str(tmp_path), "--index", index],
        ["serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path), "--index", index],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "kgrpc.coordinator", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        # The error is one line of the program's own (serve logs its start-up before it).
        lines = [x for x in proc.stderr.splitlines() if x.startswith("kgrpc-coordinator:")]
        assert proc.returncode == 2, proc.stderr
        assert len(lines) == 1 and said in lines[0], proc.stderr
        assert "Traceback" not in proc.stderr


def test_a_wrong_password_says_so(tmp_path: Any, pg_server: Any) -> None:
    import psycopg

    with psycopg.connect(pg_server.url(), autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS kgrpc_pw")
        conn.execute("CREATE ROLE kgrpc_pw LOGIN PASSWORD 'right'")
    # The test server trusts every local login (initdb -A trust), so a password is checked
    # only on a server that asks for one: here the URL names a database that does not exist.
    url = pg_server.url("no_such_db").replace("postgres@", "kgrpc_pw:wrong@")
    proc = subprocess.run(
        [sys.executable, "-m", "kgrpc.coordinator", "token", "list"]
        + ["--data-dir", str(tmp_path), "--index", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "no_such_db" in proc.stderr and "wrong" not in proc.stderr  # the password is hidden
