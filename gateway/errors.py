"""An error that ends a request with a gRPC status and a sentence a user can act on."""

from __future__ import annotations

import grpc


class RequestError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> RequestError:
    return RequestError(grpc.StatusCode.INVALID_ARGUMENT, message)


def unavailable(message: str) -> RequestError:
    return RequestError(grpc.StatusCode.UNAVAILABLE, message)
