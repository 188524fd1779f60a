"""``kgrpc-worker --tls``: TLS to a coordinator with an ordinary certificate, trusting the
system's CA roots when no ``--tls-ca`` file is given (issue 28: TLS needed an explicit CA
file, so the default for a public coordinator was plaintext with the token in clear).

gRPC's default roots are its own bundle, or the file GRPC_DEFAULT_SSL_ROOTS_FILE_PATH names;
the test puts its private CA there, as a system would hold a public CA."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

import pytest

from kgrpc.coordinator.testing import start_coordinator
from tests.tls_helpers import self_signed_cert

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


async def _worker(address: str, token: str, work: Path, roots: Path | None) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KGRPC_", "GRPC_"))}
    env["KGRPC_WORKER_TOKEN"] = token
    if roots is not None:
        env["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(roots)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kgrpc.worker", "--coordinator", address, "--tls", "--quiet",
        "--work-dir", str(work), "--retry-base-s", "0.05", "--retry-cap-s", "0.2",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode or 0, out.decode()


@pytest.mark.slow
async def test_tls_with_the_system_roots_and_without_them(tmp_path: Path) -> None:
    key, cert = self_signed_cert(tmp_path)
    # The version floor answers Register at once: reaching it proves the handshake passed.
    coord = await start_coordinator(
        tmp_path, tls_cert=str(cert), tls_key=str(key), min_worker_version="99.0"
    )
    try:
        code, out = await _worker(coord.address, coord.worker_token, tmp_path / "a", cert)
        assert code == 2 and "install kgrpc 99.0 or newer" in out, out
        code, out = await _worker(coord.address, coord.worker_token, tmp_path / "b", None)
        assert code == 2 and "not signed by the CA" in out, out
    finally:
        await coord.stop()
