"""The server side shared by the coordinator and the inference daemon.

* :class:`GrpcServer` — a ``grpc.aio`` server with the common options (message sizes,
  keepalive), the standard health service, server reflection, and port binding, plaintext or
  TLS (:func:`tls_credentials`).
* :class:`BearerTokenInterceptor` — the one token check. A call needs metadata
  ``authorization: Bearer <token>`` (the scheme name in any case, RFC 7235). Only the
  standard health service (``/grpc.health.v1.Health/``) is open without a token: load
  balancers and probes call it; reflection is not open (it describes the whole API). A
  refusal is a handler of the same RPC kind as the real one, so unary and streaming calls
  fail cleanly with UNAUTHENTICATED (no token, unknown token) or PERMISSION_DENIED (a known
  token the daemon's ``permit`` refuses for this method).

What a token means is the daemon's business: the interceptor takes a ``lookup`` callable
(token text -> identity, or None for an unknown token) and an optional ``permit`` callable
(method, identity -> None to allow, or the PERMISSION_DENIED message).
"""

from __future__ import annotations

import hmac
import logging
import ssl
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

log = logging.getLogger("kgrpc.net.server")

# The only method prefix callable without a token.
OPEN_PREFIX = "/grpc.health.v1.Health/"
MISSING_TOKEN = "missing token: send metadata 'authorization: Bearer <token>'"
UNKNOWN_TOKEN = "unknown or revoked token"

TokenLookup = Callable[[str], Any]
MethodPermit = Callable[[str, Any], str | None]


def bearer_token(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    """The token of the first ``authorization`` metadata entry if it is ``Bearer <token>``
    (scheme name in any case), else None."""
    for key, value in metadata or ():
        if key == "authorization":
            if isinstance(value, bytes):
                value = value.decode(errors="replace")
            scheme, _, rest = value.partition(" ")
            if scheme.lower() == "bearer" and rest.strip():
                return rest.strip()
            return None
    return None


def static_token_lookup(tokens: Iterable[str]) -> TokenLookup:
    """A lookup that knows a fixed set of tokens (identity: the token text itself); the
    comparison takes the same time wherever two tokens first differ."""
    known = [t.encode() for t in tokens if t]

    def lookup(token: str) -> str | None:
        given = token.encode()
        found = False
        for t in known:
            found |= hmac.compare_digest(given, t)
        return token if found else None

    return lookup


def deny_handler(
    like: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str
) -> grpc.RpcMethodHandler:
    """A handler of the same RPC kind as ``like`` that aborts every call with ``code``."""

    async def deny(request_or_iterator: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, message)

    async def deny_stream(request_or_iterator: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, message)
        yield  # pragma: no cover - makes this an async generator (streaming response)

    if like.request_streaming and like.response_streaming:
        return grpc.stream_stream_rpc_method_handler(deny_stream)
    if like.request_streaming:
        return grpc.stream_unary_rpc_method_handler(deny)
    if like.response_streaming:
        return grpc.unary_stream_rpc_method_handler(deny_stream)
    return grpc.unary_unary_rpc_method_handler(deny)


class LookupUnavailable(Exception):
    """Raised by a token lookup that cannot answer now (its store is down): the call is
    answered UNAVAILABLE with this message, and the client retries."""


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuses calls without a token ``lookup`` knows, or that ``permit`` refuses."""

    def __init__(self, lookup: TokenLookup, permit: MethodPermit | None = None) -> None:
        self._lookup = lookup
        self._permit = permit

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(details)
        method: str = details.method  # type: ignore[attr-defined]
        if handler is None or method.startswith(OPEN_PREFIX):
            return handler  # an unknown method: gRPC answers UNIMPLEMENTED
        token = bearer_token(details.invocation_metadata)  # type: ignore[attr-defined]
        if token is None:
            return deny_handler(handler, grpc.StatusCode.UNAUTHENTICATED, MISSING_TOKEN)
        try:
            identity = self._lookup(token)
        except LookupUnavailable as exc:
            return deny_handler(handler, grpc.StatusCode.UNAVAILABLE, str(exc))
        if identity is None:
            return deny_handler(handler, grpc.StatusCode.UNAUTHENTICATED, UNKNOWN_TOKEN)
        if self._permit is not None:
            refusal = self._permit(method, identity)
            if refusal is not None:
                return deny_handler(handler, grpc.StatusCode.PERMISSION_DENIED, refusal)
        return handler


MAX_PENDING_CALLS = 50_000
# How long gRPC core lets a call wait for the application to take it before it cancels the
# call (grpc.server_max_unrequested_time_in_server; gRPC's default is 30 s). A grpc.aio server
# takes calls one at a time from its event loop, so an event loop busy with a burst (10,000
# volunteers registering after a restart) leaves calls queued in core; past the default they
# end CANCELLED, which no client reads as "busy, retry", although their own deadline was
# longer. The longest deadline our clients give is a model download's, 600 s
# (kgrpc.worker.models), so the client's deadline decides (DEADLINE_EXCEEDED, retried).
# docs/performance.md, issue 26; tests/test_net_server.py shows both behaviours.
MAX_UNREQUESTED_S = 600
UNREQUESTED_OPTION = "grpc.server_max_unrequested_time_in_server"


def server_options(
    max_message_bytes: int, *, max_unrequested_s: int = MAX_UNREQUESTED_S
) -> list[tuple[str, Any]]:
    """Message limits both ways, keepalive pings allowed every 5 s even without calls
    (clients ping every 30 s by default, :func:`kgrpc.net.channel_options`), no
    SO_REUSEPORT: a second daemon on a port in use fails to start instead of silently
    sharing the port's connections with the first; and queued calls left to wait for the
    application up to ``max_unrequested_s`` (:data:`MAX_UNREQUESTED_S`)."""
    return [
        ("grpc.so_reuseport", 0),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.http2.min_ping_interval_without_data_ms", 5000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        # Calls waiting for the application beyond these are CANCELLED by gRPC (defaults
        # 1,000 and 3,000), which clients do not read as "busy, retry": 10,000 volunteers
        # registering after a coordinator restart would lose a third of their calls
        # (kgrpc-bench fleet). Queued calls cost a few KB each; let them wait their turn.
        ("grpc.server.max_pending_requests", MAX_PENDING_CALLS),
        ("grpc.server.max_pending_requests_hard_limit", 2 * MAX_PENDING_CALLS),
        # And gRPC cancels a call that waited longer than this for the application.
        (UNREQUESTED_OPTION, max_unrequested_s),
    ]


def tls_credentials(cert_file: str, key_file: str) -> grpc.ServerCredentials | None:
    """Server credentials from a PEM certificate chain and its private key; None (plaintext)
    when both are empty. ValueError, with one line saying what is wrong, when only one is
    given, a file cannot be read, or the key does not belong to the certificate (checked
    here: gRPC would only fail to bind the port, without saying why)."""
    if not cert_file and not key_file:
        return None
    if not cert_file or not key_file:
        raise ValueError("a TLS certificate and its key go together")
    try:
        key, cert = Path(key_file).read_bytes(), Path(cert_file).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read the TLS certificate or key: {exc}") from None
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert_file, key_file)
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc):
            raise ValueError(
                f"TLS: the key {key_file} does not belong to the certificate {cert_file}"
            ) from None
        raise ValueError(
            f"TLS: {cert_file} and {key_file} are not a PEM certificate chain and its key ({exc})"
        ) from None
    return grpc.ssl_server_credentials([(key, cert)])


class GrpcServer:
    """A ``grpc.aio`` server with health and reflection for ``services`` and, when
    ``interceptor`` is given, the token check. Add the daemon's servicers to :attr:`server`,
    then :meth:`start`. The health status of ``""`` and of each service turns SERVING on
    start and NOT_SERVING on :meth:`stop`."""

    def __init__(
        self,
        services: Sequence[str],
        *,
        max_message_bytes: int,
        interceptor: BearerTokenInterceptor | None = None,
    ) -> None:
        self.services = tuple(services)
        self.server = grpc.aio.server(
            interceptors=[interceptor] if interceptor is not None else [],
            options=server_options(max_message_bytes),
        )
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (*self.services, health.SERVICE_NAME, reflection.SERVICE_NAME), self.server
        )
        self.port = 0

    async def start(self, listen: str, credentials: grpc.ServerCredentials | None = None) -> int:
        """Bind ``listen`` (HOST:PORT; port 0 = any free one), TLS with ``credentials``,
        start, and return the bound port. OSError when the address cannot be bound."""
        try:
            if credentials is not None:
                self.port = self.server.add_secure_port(listen, credentials)
            else:
                self.port = self.server.add_insecure_port(listen)
        except RuntimeError:  # gRPC's "Failed to bind to address"
            self.port = 0
        if self.port == 0:
            raise OSError(f"could not listen on {listen}: the address is in use or not this host's")
        await self.server.start()
        serving = health_pb2.HealthCheckResponse.SERVING
        await self.health.set("", serving)
        for name in self.services:
            await self.health.set(name, serving)
        return self.port

    async def stop(self, grace_s: float) -> None:
        """Health turns NOT_SERVING, new calls get UNAVAILABLE, in-flight ones get
        ``grace_s`` seconds."""
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace_s)
