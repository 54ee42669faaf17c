"""pdserve's refusals as OpenAI error bodies: ``{"error": {"message", "type", "param", "code"}}``
with the HTTP status a client of the OpenAI API expects for each gRPC status."""

from __future__ import annotations

import grpc

from gateway.errors import RequestError

# gRPC status -> (HTTP status, OpenAI error type)
_STATUS: dict[grpc.StatusCode, tuple[int, str]] = {
    grpc.StatusCode.INVALID_ARGUMENT: (400, "invalid_request_error"),
    grpc.StatusCode.OUT_OF_RANGE: (400, "invalid_request_error"),
    grpc.StatusCode.FAILED_PRECONDITION: (400, "invalid_request_error"),  # e.g. an SLO this cluster never meets
    grpc.StatusCode.ALREADY_EXISTS: (409, "conflict_error"),
    grpc.StatusCode.UNAUTHENTICATED: (401, "authentication_error"),
    grpc.StatusCode.PERMISSION_DENIED: (403, "permission_error"),
    grpc.StatusCode.NOT_FOUND: (404, "not_found_error"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (429, "rate_limit_error"),
    grpc.StatusCode.CANCELLED: (499, "cancelled"),
    grpc.StatusCode.UNAVAILABLE: (503, "service_unavailable"),
    grpc.StatusCode.DEADLINE_EXCEEDED: (504, "timeout"),
}


RETRY_AFTER_S = 1  # what a refusal for load tells a client to wait before it tries again


def http_status(error: RequestError) -> int:
    return _STATUS.get(error.code, (500, ""))[0]


def error_headers(error: RequestError) -> dict[str, str]:
    """A refusal for load or quota (429) says when to try again; one that can never succeed as
    sent (400) does not invite a retry."""
    return {"retry-after": str(RETRY_AFTER_S)} if http_status(error) in (429, 503) else {}


def error_body(error: RequestError) -> dict[str, object]:
    kind = _STATUS.get(error.code, (500, "internal_error"))[1]
    return {"error": {"message": error.message, "type": kind, "param": getattr(error, "param", None),
                      "code": error.reason}}


def not_found(message: str) -> RequestError:
    return RequestError(grpc.StatusCode.NOT_FOUND, message, "model_not_found")


def plain_error_body(status: int, message: str) -> dict[str, object]:
    """An OpenAI error body for a refusal made by the HTTP layer itself (a body that is not JSON or
    not UTF-8, an unknown route or method), so every error a client reads has one shape."""
    kind = {401: "authentication_error", 404: "not_found_error", 429: "rate_limit_error"}.get(
        status, "invalid_request_error" if status < 500 else "internal_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}
