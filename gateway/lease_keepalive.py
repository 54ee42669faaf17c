"""Keeping a decode reservation alive while its prefill is still awaited.

A reservation lives ``lease_ms`` from when it was made unless renewed (``LeaseTable.renew``): a
prompt queued behind a long prefill queue (no TTFT SLO bounds its wait) would otherwise find its
lease expired when its KV is ready, and its commit refused. The gateway, which alone knows the
request is still wanted, renews it every third of ``lease_ms`` while the prefill call runs; if the
gateway dies the renewals stop and the lease lapses ``lease_ms`` after the last of them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from gateway.registry import WorkerRecord
from gateway.worker_calls import CONTROL_TIMEOUT_S, quietly
from wire.v1 import worker_pb2

LEAST_PERIOD_S = 0.05


@contextlib.asynccontextmanager
async def lease_kept_alive(decode: WorkerRecord, request_id: str, lease_id: str,
                           lease_ms: float) -> AsyncIterator[None]:
    """Renews the lease every third of its period for as long as the block runs."""
    period_s = max(LEAST_PERIOD_S, lease_ms / 3000)
    renew = worker_pb2.RenewRequest(request_id=request_id, lease_id=lease_id)

    async def keep() -> None:
        while True:
            await asyncio.sleep(period_s)
            await quietly(decode.stub.Renew(renew, timeout=CONTROL_TIMEOUT_S))

    task = asyncio.get_running_loop().create_task(keep())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
