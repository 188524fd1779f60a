"""A real PostgreSQL server for tests: ``initdb`` in a temporary directory, loopback only.

PostgreSQL refuses to run as root, so as root the server runs as the ``postgres`` user
(``runuser``) in a directory handed to it. Each test takes a database of its own
(:meth:`PostgresServer.new_database`), so tests never see each other's rows. The binaries
come from Debian's ``postgresql`` package (``make system-deps`` installs it); without them
the tests that need the server are skipped, except under CI (``CI`` set), where they fail.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

_counter = itertools.count()


def find_bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/N/bin`` holding ``initdb`` (or ``initdb`` on PATH)."""
    dirs = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    if dirs:
        return Path(dirs[-1]).parent
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="kgrpc-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.as_root = os.geteuid() == 0
        if self.as_root:
            shutil.chown(self.root, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8")
        with open(self.data / "postgresql.conf", "a") as f:
            f.write(
                f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                f"unix_socket_directories = '{self.root}'\nfsync = on\n"
                "max_connections = 200\nshared_buffers = 32MB\n"
            )
        self.start()

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bin_dir / tool), *args]
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh empty database; its URL."""
        import psycopg

        name = f"t{os.getpid()}_{next(_counter)}_{int(time.time() * 1000) % 100000}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def close(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
