"""An error that ends a request with a gRPC status and a sentence a user can act on."""

from __future__ import annotations

import grpc


class RequestError(Exception):
    """``reason`` is a short machine-readable cause for metrics (``ttft_unattainable``, ...)."""

    def __init__(self, code: grpc.StatusCode, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or code.name.lower()


class WorkerLost(Exception):
    """A worker failed a request before anything reached the client: it can be retried elsewhere."""

    def __init__(self, role: str, worker_id: str, detail: str) -> None:
        super().__init__(f"{role} worker {worker_id} failed: {detail}")
        self.role = role
        self.worker_id = worker_id


class DecodeLost(RequestError):
    """The decode worker streaming a request is gone: UNAVAILABLE, unless the request resumes on
    another (``gateway.streaming``)."""

    def __init__(self, worker_id: str, reason: str) -> None:
        super().__init__(grpc.StatusCode.UNAVAILABLE, f"decode worker {worker_id} left: {reason}")
        self.worker_id = worker_id


class PrefillRefused(Exception):
    """A prefill worker refused the prompt: its first token would be late there. The request asks
    another with the same lease (``RequestPath.prefill_refused``)."""

    def __init__(self, worker_id: str, detail: str) -> None:
        super().__init__(f"prefill worker {worker_id} refused the prompt: {detail}")
        self.worker_id = worker_id


def invalid(message: str) -> RequestError:
    return RequestError(grpc.StatusCode.INVALID_ARGUMENT, message)


def field_error(param: str, message: str) -> RequestError:
    """INVALID_ARGUMENT naming the request field at fault (``param``: an OpenAI error body's)."""
    error = invalid(message)
    error.param = param  # type: ignore[attr-defined]
    return error


def unavailable(message: str) -> RequestError:
    return RequestError(grpc.StatusCode.UNAVAILABLE, message)


# An Abort ended the request. Also the item posted to its inbox to stop its stream (compared by identity).
ABORTED = RequestError(grpc.StatusCode.CANCELLED, "aborted")
