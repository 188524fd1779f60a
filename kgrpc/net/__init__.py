"""gRPC helpers shared by the daemons and their clients.

Client side (imported here):

* :func:`make_channel` — a ``grpc.aio`` channel with message-size limits, keepalive,
  optional TLS and a bearer token attached to every call (unary and streaming).
* :func:`auth_metadata` — the ``authorization: Bearer <token>`` metadata pair, for
  per-call use.
* :class:`Backoff` / :func:`retry` — growing, jittered waits between attempts.

Server side, :mod:`kgrpc.net.server` (import it explicitly): ``GrpcServer``, the scaffold of
both daemons (options, health, reflection, plaintext or TLS ports), and
``BearerTokenInterceptor``, the one token check.
"""

from kgrpc.net.channel import (
    DEFAULT_MAX_MESSAGE_BYTES,
    auth_metadata,
    channel_options,
    make_channel,
)
from kgrpc.net.retry import RETRYABLE_CODES, Backoff, retry

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "RETRYABLE_CODES",
    "Backoff",
    "auth_metadata",
    "channel_options",
    "make_channel",
    "retry",
]
