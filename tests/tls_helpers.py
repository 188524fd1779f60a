"""A self-signed certificate for TLS tests (needs the openssl CLI; tests skip without it)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """(key, cert) PEM files in ``directory``, valid for localhost and 127.0.0.1 for a day."""
    key, cert = directory / "key.pem", directory / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return key, cert
