"""What a request's flow gives back to the workers still holding it when it ends early, or is
retried (``gateway.request_flow``): each call named by the stage it ended in
(``gateway.request_state.EXIT_CLEAN_UP``), each with a bound of its own, none failing the caller.
Clean-up that outlives the request runs as a task the flow keeps (``drain`` waits for them).
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from gateway.admission import AdmissionQueue
from gateway.request_stages import EXIT_CLEAN_UP, Stage
from gateway.request_state import Progress
from gateway.worker_calls import CLEANUP_TIMEOUT_S, quietly
from wire.v1 import worker_pb2

log = logging.getLogger(__name__)


class WorkerRelease:
    """The flow's clean-up calls (``RequestFlow`` sets ``admission`` and ``_cleanups``)."""

    admission: AdmissionQueue
    _cleanups: set[asyncio.Task[None]]

    async def _clean_up(self, request_id: str, p: Progress, ended_in: Stage) -> None:
        """After an early end: what ``EXIT_CLEAN_UP`` says the stage it ended in still holds."""
        plan = EXIT_CLEAN_UP[ended_in]
        writes_done = True
        if plan.abort_prefill:
            writes_done = await self._abort_prefill(request_id, p)
        if plan.release:  # a prefill worker that could not confirm its copy is over: quarantine, not reuse
            await self._release(request_id, p, writer_may_still_write=not writes_done)
        if plan.abort_decode:
            await self._abort_decode(request_id, p)

    async def _release(self, request_id: str, p: Progress, writer_may_still_write: bool) -> None:
        if p.decode is not None and p.lease_id:
            await quietly(p.decode.stub.Release(worker_pb2.ReleaseRequest(
                request_id=request_id, lease_id=p.lease_id, writer_may_still_write=writer_may_still_write),
                timeout=CLEANUP_TIMEOUT_S))
            self.admission.notify()

    async def _abort_decode(self, request_id: str, p: Progress) -> None:
        if p.decode is not None:
            await quietly(p.decode.stub.Abort(worker_pb2.WorkerAbortRequest(request_id=request_id),
                                               timeout=CLEANUP_TIMEOUT_S))
            self.admission.notify()

    async def _abort_prefill(self, request_id: str, p: Progress) -> bool:
        """Stops the request on its prefill worker; True once that worker confirms that no copy
        into the reservation runs or will start (it waits for one under way before answering)."""
        assert p.prefill is not None
        abort = worker_pb2.WorkerAbortRequest(request_id=request_id, lease_id=p.lease_id)
        try:
            reply = await p.prefill.stub.Abort(abort, timeout=CLEANUP_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            log.debug("prefill abort failed: %s", exc.code().name)
            return False
        return reply.writes_done

    def _spawn(self, coro) -> None:  # type: ignore[no-untyped-def]
        task = asyncio.get_running_loop().create_task(coro)
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    async def drain(self) -> None:
        await asyncio.gather(*self._cleanups, return_exceptions=True)
        await self.admission.close()
