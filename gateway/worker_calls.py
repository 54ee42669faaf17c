"""How the gateway calls workers: every call with a deadline, clean-up calls best-effort."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable

import grpc

from gateway.validation import ValidatedRequest

log = logging.getLogger(__name__)
CONTROL_TIMEOUT_S = 10.0  # Reserve, Commit: a worker's bookkeeping, never long
CLEANUP_TIMEOUT_S = 5.0  # Release, Abort after the request ended (an Abort may wait for a copy)
PREFILL_TIMEOUT_S = 600.0  # queue + forward + KV transfer, for a client that set no deadline


def call_timeout(req: ValidatedRequest, bound_s: float) -> float:
    """A call's deadline: ``bound_s``, or less when the client stops waiting sooner."""
    if req.deadline is None:
        return bound_s
    return max(0.001, min(bound_s, req.deadline - time.perf_counter()))


async def quietly(call: Awaitable[object]) -> None:
    """A best-effort call: its failure is logged, not raised (the request is over anyway)."""
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        log.debug("best-effort call failed: %s", exc.code().name)
