"""Retrying a request on other workers while nothing has reached the client yet.

Until the first token exists, a failed worker costs the request nothing but time: the attempt
(a decode reservation and a prefill into it) is given back and made again elsewhere, up to
``MAX_ATTEMPTS`` times. The worker that failed leaves routing (``suspect``) until it
heartbeats again. Which worker failed is read from the error: a prefill worker that names a
decode worker in ``FAILED_PEER_KEY`` answered, its KV transfer to that decode worker failed.
"""

from __future__ import annotations

import logging
from typing import Protocol

import grpc

from common.process.metrics import Metrics
from common.rpc.metadata import FAILED_PEER_KEY, REFUSED_BY
from gateway.errors import ABORTED, PrefillRefused, RequestError, WorkerLost, unavailable
from gateway.registry import WorkerRegistry
from gateway.request_path import Fail
from gateway.request_state import Progress
from gateway.validation import ValidatedRequest
from wire.v1 import worker_pb2

log = logging.getLogger(__name__)


class Attempt(Protocol):
    """One try at a first token: the request flow's steps, as the retry loop drives them."""

    async def reserve(self, req: ValidatedRequest, p: Progress) -> worker_pb2.ReserveResponse:
        """A lease on a decode worker its path has not lost (RESERVING → RESERVED)."""
        ...

    async def prefill(self, req: ValidatedRequest, p: Progress,
                      reservation: worker_pb2.ReserveResponse) -> worker_pb2.PrefillResponse:
        """The prefill into it on a worker its path has not lost (RESERVED → PREFILLING → PREFILLED);
        a failure a retry may cure raises WorkerLost."""
        ...

    async def forget(self, req: ValidatedRequest, p: Progress, writer_may_still_write: bool) -> None:
        """Gives the attempt's lease back (→ RESERVING)."""
        ...


async def first_token(req: ValidatedRequest, p: Progress, attempt: Attempt, registry: WorkerRegistry,
                      metrics: Metrics | None) -> worker_pb2.PrefillResponse:
    """Reserve + prefill, retried on other workers when a worker fails before the first token
    exists (a dead or draining prefill worker, a decode worker lost during the prefill)."""
    while True:
        reservation = await attempt.reserve(req, p)
        assert p.decode is not None
        try:
            while True:
                try:
                    reply = await attempt.prefill(req, p, reservation)
                    break
                except PrefillRefused as refused:  # late on that worker's whole queue: another, same lease
                    p.path.prefill_refused(refused.worker_id)
                    p.prefill_refused()
            if registry.workers.get(p.decode.worker_id) is not p.decode:
                raise WorkerLost("decode", p.decode.worker_id, "it left during the prefill")
            return reply
        except WorkerLost as lost:
            if p.abort_requested:
                raise ABORTED from None
            then = p.path.lost(lost.role, registry.workers.get(lost.worker_id), str(lost))
            await attempt.forget(req, p, then.writer_may_still_write)
            if isinstance(then, Fail):
                raise unavailable(then.message) from None
            log.warning("%s; retrying on other workers (attempt %d)", lost, p.path.attempt)
            if metrics is not None:
                metrics.retries.labels("gateway", lost.role).inc()


def prefill_error(exc: grpc.aio.AioRpcError, p: Progress) -> Exception:
    """What a failed Prefill call means for the request: WorkerLost when another worker may
    succeed, else the error that ends it."""
    if p.abort_requested:
        return ABORTED
    assert p.prefill is not None
    code = exc.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        failed_peer = dict(exc.trailing_metadata() or ()).get(FAILED_PEER_KEY)
        if failed_peer:
            return WorkerLost("decode", str(failed_peer), exc.details() or "KV transfer failed")
        role = "decode" if p.prefill is p.decode else "prefill"  # a decode worker prefilling itself
        return WorkerLost(role, p.prefill.worker_id, exc.details() or "unreachable")
    if code == grpc.StatusCode.CANCELLED:
        return unavailable(f"prefill worker {p.prefill.worker_id} cancelled the request: {exc.details()}")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and p.prefill is p.decode:  # it refused to prefill it in time
        return RequestError(code, exc.details() or "TTFT SLO unattainable", "ttft_unattainable")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and dict(exc.trailing_metadata() or ()).get(REFUSED_BY) == "ttft":
        return PrefillRefused(p.prefill.worker_id, exc.details() or "its first token would be late")
    return RequestError(code, exc.details() or "prefill failed")
