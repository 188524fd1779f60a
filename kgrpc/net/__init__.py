"""gRPC helpers shared by the daemons and their clients.

Client side (imported here):

* :func:`make_channel` — a ``grpc.aio`` channel with message-size limits, keepalive,
  optional TLS and a bearer token attached to every call (unary and streaming).
* :func:`client_credentials` — the credentials of a TLS channel (the CA of ``--tls-ca``, the
  token as call credentials): the one place they are built; :func:`load_ca` reads the CA.
* :func:`tls_mismatch` — what to do when client and server disagree about TLS
  (:mod:`kgrpc.net.handshake`); :func:`describe` includes it.
* :func:`auth_metadata` — the ``authorization: Bearer <token>`` metadata pair, for
  per-call use.
* :func:`retry` / :class:`RetryPolicy` — retrying calls with growing, jittered waits
  (:class:`Backoff`), fatal and transient status codes, one log line per :class:`Outage`.

Server side, :mod:`kgrpc.net.server` (import it explicitly): ``GrpcServer``, the scaffold of
both daemons (options, health, reflection, plaintext or TLS ports), and
``BearerTokenInterceptor``, the one token check.
"""

from kgrpc.net.channel import (
    DEFAULT_MAX_MESSAGE_BYTES,
    auth_metadata,
    channel_options,
    client_credentials,
    load_ca,
    make_channel,
)
from kgrpc.net.handshake import tls_mismatch
from kgrpc.net.retry import (
    FATAL_CODES,
    RETRYABLE_CODES,
    Backoff,
    FatalError,
    Outage,
    RetryPolicy,
    describe,
    is_fatal,
    is_not_found,
    is_rpc_error,
    is_tls_mismatch,
    is_transient,
    retry,
    status_code,
)

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "FATAL_CODES",
    "RETRYABLE_CODES",
    "Backoff",
    "FatalError",
    "Outage",
    "RetryPolicy",
    "auth_metadata",
    "channel_options",
    "client_credentials",
    "describe",
    "is_fatal",
    "is_not_found",
    "is_rpc_error",
    "is_tls_mismatch",
    "is_transient",
    "load_ca",
    "make_channel",
    "retry",
    "status_code",
    "tls_mismatch",
]
