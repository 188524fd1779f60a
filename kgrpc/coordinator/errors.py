"""An error that carries the gRPC status code the servicer answers with, and, for the errors
a client acts on, their machine-readable reason and metadata (an ``ErrorInfo`` in the status
details trailer: :func:`kgrpc.protocol.status_trailer`).

grpc is imported only when an error is made: the replay pool's processes import this module
(through the SGF archive) and would otherwise each load grpc (about 14 MB) for nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc


class CoordinatorError(Exception):
    """``reason`` (a :mod:`kgrpc.protocol` details prefix such as ``match_superseded``, empty
    for errors no client acts on) and ``metadata`` travel as the answer's ErrorInfo."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        reason: str = "",
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason
        self.metadata = dict(metadata or {})

    def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
        """What the servicer's abort sends as trailers: the status details when there is a
        reason, else nothing."""
        if not self.reason:
            return ()
        from kgrpc.protocol import reason, status_trailer

        return status_trailer(self.code, self.message, reason(self.reason), self.metadata)


def _status(name: str) -> grpc.StatusCode:
    import grpc

    return getattr(grpc.StatusCode, name)


def invalid(message: str) -> CoordinatorError:
    return CoordinatorError(_status("INVALID_ARGUMENT"), message)


def not_found(
    message: str, reason: str = "", metadata: Mapping[str, str] | None = None
) -> CoordinatorError:
    return CoordinatorError(_status("NOT_FOUND"), message, reason, metadata)


def denied(message: str) -> CoordinatorError:
    return CoordinatorError(_status("PERMISSION_DENIED"), message)


def precondition(
    message: str, reason: str = "", metadata: Mapping[str, str] | None = None
) -> CoordinatorError:
    return CoordinatorError(_status("FAILED_PRECONDITION"), message, reason, metadata)


def unavailable(message: str) -> CoordinatorError:
    """A failure the client retries later (the coordinator is stopping, a part is down)."""
    return CoordinatorError(_status("UNAVAILABLE"), message)
