"""An error that carries the gRPC status code the servicer answers with."""

from __future__ import annotations

import grpc


class CoordinatorError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> CoordinatorError:
    return CoordinatorError(grpc.StatusCode.INVALID_ARGUMENT, message)


def not_found(message: str) -> CoordinatorError:
    return CoordinatorError(grpc.StatusCode.NOT_FOUND, message)


def denied(message: str) -> CoordinatorError:
    return CoordinatorError(grpc.StatusCode.PERMISSION_DENIED, message)
