"""Recognising a client and a server that disagree about TLS, from the error of a failed call.

gRPC reports these as UNAVAILABLE, the same status as a server that is down, so a client
would retry them for ever with nothing but "Socket closed" in its log. The text of the error
tells them apart (grpcio 1.8x, checked against real servers by tests/test_tls.py):

==========================================  ==================================================
client -> server                            what the error says
==========================================  ==================================================
plaintext -> TLS                            ``failed to connect ...: Socket closed``
TLS -> plaintext                            ``Tls handshake failed ... WRONG_VERSION_NUMBER``
TLS, certificate of another CA              ``... CERTIFICATE_VERIFY_FAILED ...``
TLS, certificate for another name           ``... Hostname Verification Check failed``
==========================================  ==================================================

The first one is a guess (anything that accepts the connection and closes it at once looks
the same, e.g. a proxy with no backend), so the hint is a question. :func:`tls_mismatch`
gives the hint; :func:`kgrpc.net.describe` puts it in front of every error it describes, so
the one log line of an outage (:class:`kgrpc.net.Outage`) says what to do.
"""

from __future__ import annotations

import grpc

PLAINTEXT_TO_TLS = (
    "closed the connection during the handshake: is it serving TLS? pass --tls-ca CA.pem"
)
TLS_TO_PLAINTEXT = (
    "the TLS handshake failed: it does not seem to serve TLS "
    "(drop --tls-ca, or give the server --tls-cert/--tls-key)"
)
UNTRUSTED = (
    "its TLS certificate is not signed by the CA given with --tls-ca (CERTIFICATE_VERIFY_FAILED)"
)
WRONG_NAME = (
    "its TLS certificate does not name the host dialled: dial a name or address "
    "the certificate lists"
)
OTHER_TLS = "the TLS handshake failed"


def status_and_details(exc: BaseException) -> tuple[grpc.StatusCode | None, str]:
    """The status and details of a failed call, or of an error relaying one (an
    ``EvaluationError``'s ``code`` name and ``message``)."""
    if isinstance(exc, grpc.aio.AioRpcError):
        return exc.code(), exc.details() or ""
    name = getattr(exc, "code", None)
    if isinstance(name, str):
        return grpc.StatusCode.__members__.get(name), str(getattr(exc, "message", exc))
    return None, ""


def tls_mismatch(exc: BaseException) -> str | None:
    """What to do when ``exc`` shows that client and server disagree about TLS; None when it
    does not (a server down, a refused call, any other error)."""
    code, text = status_and_details(exc)
    if code != grpc.StatusCode.UNAVAILABLE:
        return None
    lower = text.lower()
    if "wrong_version_number" in lower:
        return TLS_TO_PLAINTEXT
    if "certificate_verify_failed" in lower:
        return UNTRUSTED
    if "hostname verification" in lower:
        return WRONG_NAME
    if "handshake failed" in lower:
        return OTHER_TLS
    if "failed to connect" in lower and lower.rstrip().endswith("socket closed"):
        return PLAINTEXT_TO_TLS
    return None


def last_error(text: str) -> str:
    """The end of a gRPC connection error (``...; last error: UNAVAILABLE: ipv4:...: Socket
    closed`` -> ``Socket closed``): what the hint is about, without the address repeated."""
    tail = text.rsplit("last error: ", 1)[-1]
    parts = tail.split(": ")
    # "CODE: ipv4:host:port: message..." -> message (addresses contain ':' but not ': ').
    if len(parts) >= 3 and parts[0].isupper() and ":" in parts[1]:
        return ": ".join(parts[2:])
    return tail
