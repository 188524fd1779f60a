"""An error that carries the gRPC status code the servicer answers with.

grpc is imported only when an error is made: the replay pool's processes import this module
(through the SGF archive) and would otherwise each load grpc (about 14 MB) for nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc


class CoordinatorError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _status(name: str) -> grpc.StatusCode:
    import grpc

    return getattr(grpc.StatusCode, name)


def invalid(message: str) -> CoordinatorError:
    return CoordinatorError(_status("INVALID_ARGUMENT"), message)


def not_found(message: str) -> CoordinatorError:
    return CoordinatorError(_status("NOT_FOUND"), message)


def denied(message: str) -> CoordinatorError:
    return CoordinatorError(_status("PERMISSION_DENIED"), message)


def precondition(message: str) -> CoordinatorError:
    return CoordinatorError(_status("FAILED_PRECONDITION"), message)
