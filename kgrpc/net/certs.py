"""A private certificate authority and a server certificate signed by it, for running a whole
deployment over TLS on one machine or a private network (``kgrpc-cluster --tls``, tests).

The files are made with the ``openssl`` command-line tool (present on nearly every system;
no Python package needed): an EC P-256 CA valid ``days`` days, and one server key and
certificate whose subject alternative names are ``hosts`` (names and IP addresses). Clients
trust the CA (``--tls-ca ca.pem``); servers present ``server.pem``/``server.key``
(``--tls-cert``/``--tls-key``). The private keys are written readable by their owner only.

This is a convenience for private runs: a deployment reachable from the internet should use
certificates from the operator's own CA or a public one (docs/operations.md, "TLS").
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_HOSTS = ("localhost", "127.0.0.1", "::1")
CA_NAME = "kgrpc private CA"


class CertificateError(RuntimeError):
    """The certificates could not be made (no ``openssl``, or it failed: the message says)."""


@dataclass(frozen=True)
class TlsFiles:
    """PEM files: the CA certificate clients trust, and the server's certificate and key."""

    ca: Path
    cert: Path
    key: Path


def have_openssl() -> bool:
    return shutil.which("openssl") is not None


def subject_alt_names(hosts: Sequence[str]) -> str:
    """``DNS:name,IP:addr`` for openssl's ``subjectAltName`` from host names and addresses."""
    out = []
    for host in hosts:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            out.append(f"DNS:{host}")
        else:
            out.append(f"IP:{host}")
    return ",".join(out)


def _openssl(*args: str) -> None:
    try:
        subprocess.run(["openssl", *args], check=True, capture_output=True, text=True)
    except FileNotFoundError:
        raise CertificateError("making TLS certificates needs the openssl command") from None
    except subprocess.CalledProcessError as exc:
        last = (exc.stderr or "").strip().splitlines()
        raise CertificateError(f"openssl {args[0]} failed: {last[-1] if last else exc}") from None


def make_ca_and_server_cert(
    directory: str | os.PathLike[str], hosts: Sequence[str] = DEFAULT_HOSTS, *, days: int = 30
) -> TlsFiles:
    """Write ``ca.pem`` (and ``ca.key``), ``server.pem`` and ``server.key`` into ``directory``
    (created if needed; existing files of these names are replaced). The server certificate
    names ``hosts`` and is signed by the new CA."""
    if not hosts:
        raise ValueError("a server certificate needs at least one host name or address")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(ca=out / "ca.pem", cert=out / "server.pem", key=out / "server.key")
    ca_key = out / "ca.key"
    curve = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        csr, ext = Path(tmp) / "server.csr", Path(tmp) / "server.ext"
        ext.write_text(
            f"subjectAltName={subject_alt_names(hosts)}\n"
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth\n"
        )
        _openssl(
            "req",
            "-x509",
            *curve,
            "-keyout",
            str(ca_key),
            "-out",
            str(files.ca),
            "-days",
            str(days),
            "-subj",
            f"/CN={CA_NAME}",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        )
        _openssl(
            "req",
            "-new",
            *curve,
            "-keyout",
            str(files.key),
            "-out",
            str(csr),
            "-subj",
            f"/CN={hosts[0]}",
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            str(csr),
            "-CA",
            str(files.ca),
            "-CAkey",
            str(ca_key),
            "-set_serial",
            str(int.from_bytes(os.urandom(8), "big")),
            "-days",
            str(days),
            "-out",
            str(files.cert),
            "-extfile",
            str(ext),
        )
    for key in (ca_key, files.key):
        key.chmod(0o600)
    return files
