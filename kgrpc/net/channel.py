"""Building client channels to kgrpc servers.

The token travels as call metadata ``authorization: Bearer <token>``. On a TLS
channel it is attached by gRPC call credentials; on a plaintext channel (loopback,
tests, trusted LANs) by one client interceptor per RPC kind — a single class
inheriting several aio interceptor bases only intercepts the first kind
(grpc/grpc#31442), which would send streaming calls without the token.

TLS: every client trusts the CA named by its ``--tls-ca`` setting (a PEM file);
:func:`client_credentials` builds the credentials of every TLS channel, whether a program
opens it through :func:`make_channel` or not.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
PEM_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"


def auth_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """Per-call metadata carrying ``token``."""
    return (("authorization", f"Bearer {token}"),)


def channel_options(
    *,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    keepalive_time_ms: int = 30_000,
    keepalive_timeout_ms: int = 10_000,
    extra: Sequence[tuple[str, Any]] = (),
) -> list[tuple[str, Any]]:
    """Channel arguments: message limits both ways and keepalive pings.

    The server must allow pings at least every ``keepalive_time_ms``
    (``grpc.http2.min_ping_interval_without_data_ms``) or it answers GOAWAY.
    """
    opts: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.keepalive_time_ms", keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    ]
    opts.extend(extra)
    return opts


def _with_token(details: grpc.aio.ClientCallDetails, token: str) -> grpc.aio.ClientCallDetails:
    metadata = grpc.aio.Metadata()
    if details.metadata:
        for key, value in details.metadata:
            if key != "authorization":
                metadata.add(key, value)
    metadata.add("authorization", f"Bearer {token}")
    return grpc.aio.ClientCallDetails(
        method=details.method,
        timeout=details.timeout,
        metadata=metadata,
        credentials=details.credentials,
        wait_for_ready=details.wait_for_ready,
    )


class _UnaryUnaryAuth(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, token: str) -> None:
        self._token = token

    async def intercept_unary_unary(self, continuation, client_call_details, request):  # type: ignore[no-untyped-def]
        return await continuation(_with_token(client_call_details, self._token), request)


class _UnaryStreamAuth(grpc.aio.UnaryStreamClientInterceptor):
    def __init__(self, token: str) -> None:
        self._token = token

    async def intercept_unary_stream(self, continuation, client_call_details, request):  # type: ignore[no-untyped-def]
        return await continuation(_with_token(client_call_details, self._token), request)


class _StreamUnaryAuth(grpc.aio.StreamUnaryClientInterceptor):
    def __init__(self, token: str) -> None:
        self._token = token

    async def intercept_stream_unary(self, continuation, client_call_details, request_iterator):  # type: ignore[no-untyped-def]
        return await continuation(_with_token(client_call_details, self._token), request_iterator)


class _StreamStreamAuth(grpc.aio.StreamStreamClientInterceptor):
    def __init__(self, token: str) -> None:
        self._token = token

    async def intercept_stream_stream(self, continuation, client_call_details, request_iterator):  # type: ignore[no-untyped-def]
        return await continuation(_with_token(client_call_details, self._token), request_iterator)


def _token_interceptors(token: str) -> list[grpc.aio.ClientInterceptor]:
    return [
        _UnaryUnaryAuth(token),
        _UnaryStreamAuth(token),
        _StreamUnaryAuth(token),
        _StreamStreamAuth(token),
    ]


def load_ca(tls_ca: str | bytes | os.PathLike[str]) -> bytes:
    """The PEM certificates of ``tls_ca`` (PEM bytes, or a path to a PEM file). ValueError,
    naming the file, when it cannot be read or holds no certificate: a wrong file would
    otherwise show only as failed handshakes."""
    if isinstance(tls_ca, bytes):
        data, where = tls_ca, "the TLS CA given"
    else:
        where = f"TLS CA file {os.fspath(tls_ca)}"
        try:
            data = Path(tls_ca).expanduser().read_bytes()
        except OSError as exc:
            raise ValueError(f"{where}: {exc.strerror or exc}") from None
    if PEM_CERTIFICATE not in data:
        raise ValueError(f"{where}: no PEM certificate in it (expected {PEM_CERTIFICATE.decode()})")
    return data


def client_credentials(
    tls_ca: str | bytes | os.PathLike[str] | None = None,
    *,
    tls: bool = False,
    token: str | None = None,
) -> grpc.ChannelCredentials | None:
    """The credentials of a TLS channel: trust ``tls_ca`` (PEM bytes or file; ``tls=True``
    without one: the system's roots) and, with ``token``, send it as call credentials.
    None (a plaintext channel) when neither ``tls_ca`` nor ``tls`` is given; ``""`` counts as
    not given (the default of every ``tls_ca`` setting). The one place that builds them."""
    if (tls_ca is None or tls_ca == "") and not tls:
        return None
    root = load_ca(tls_ca) if tls_ca is not None and tls_ca != "" else None
    creds = grpc.ssl_channel_credentials(root_certificates=root)
    if token:
        creds = grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(token))
    return creds


def split_addresses(address: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` as (host, port) pairs (IPv6 hosts in brackets);
    ValueError naming the part that is not HOST:PORT."""
    out = []
    for part in (p.strip() for p in address.split(",")):
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"coordinator address {part!r}: expected HOST:PORT")
        out.append((host.strip("[]"), int(port)))
    return out


def grpc_target(address: str) -> tuple[str, list[tuple[str, Any]]]:
    """The gRPC target and channel options for ``address``. One ``host:port`` is used as
    it is (gRPC's DNS resolver). A comma-separated list of replicas becomes one channel
    over all of them with gRPC's own round_robin balancing: the names are resolved here,
    once, to an ``ipv4:``/``ipv6:`` address list, each call goes to the next replica that
    is up, and a replica that goes down is left out until it is back. The first name is
    the channel's authority (the name a TLS certificate is checked against)."""
    if "," not in address:
        return address, []
    pairs = split_addresses(address)
    v4: list[str] = []
    v6: list[str] = []
    for host, port in pairs:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise ValueError(f"coordinator address {host}:{port}: {exc.strerror}") from None
        four = [i[4][0] for i in infos if i[0] == socket.AF_INET]
        six = [i[4][0] for i in infos if i[0] == socket.AF_INET6]
        if four:
            v4.append(f"{four[0]}:{port}")
        if six:
            v6.append(f"[{six[0]}]:{port}")
    if len(v4) == len(pairs):
        target = "ipv4:" + ",".join(v4)
    elif len(v6) == len(pairs):
        target = "ipv6:" + ",".join(v6)
    else:
        raise ValueError(f"coordinator addresses {address!r}: give all IPv4 or all IPv6 hosts")
    first_host, first_port = pairs[0]
    authority = (
        f"[{first_host}]:{first_port}" if ":" in first_host else f"{first_host}:{first_port}"
    )
    return target, [("grpc.lb_policy_name", "round_robin"), ("grpc.default_authority", authority)]


def make_channel(
    address: str,
    *,
    token: str | None = None,
    tls_ca: str | bytes | os.PathLike[str] | None = None,
    tls: bool = False,
    server_name: str | None = None,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    keepalive_time_ms: int = 30_000,
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.aio.Channel:
    """An aio channel to ``address`` (``host:port``, or a comma-separated list of
    replicas balanced by gRPC: :func:`grpc_target`).

    ``tls_ca``: PEM bytes or a path to the CA (or self-signed server) certificate;
    giving it (or ``tls=True`` for the system roots) makes the channel TLS
    (:func:`client_credentials`; ``""`` or None: plaintext). ValueError when the file
    cannot be read or holds no certificate.
    ``server_name`` overrides the name checked against the certificate.
    ``token``: sent as ``authorization: Bearer <token>`` on every call.
    Must be called inside the event loop that will use the channel.
    """
    target, balancing = grpc_target(address)
    opts = channel_options(
        max_message_bytes=max_message_bytes,
        keepalive_time_ms=keepalive_time_ms,
        extra=[*balancing, *options],
    )
    if server_name:
        opts.append(("grpc.ssl_target_name_override", server_name))
    creds = client_credentials(tls_ca, tls=tls, token=token)
    if creds is not None:
        return grpc.aio.secure_channel(target, creds, options=opts)
    interceptors = _token_interceptors(token) if token else None
    return grpc.aio.insecure_channel(target, options=opts, interceptors=interceptors)
