"""The public ``pdserve.v1.Gateway`` service: gRPC around the front door."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from gateway.errors import RequestError
from gateway.choices import interleaved
from gateway.front_door import Caller, FrontDoor
from gateway.registry import WorkerRegistry
from gateway.tenants import AuthError
from wire.v1 import gateway_pb2, gateway_pb2_grpc

log = logging.getLogger(__name__)


class GatewayServicer(gateway_pb2_grpc.GatewayServicer):
    def __init__(self, front: FrontDoor, registry: WorkerRegistry, model_name: str) -> None:
        self.front = front
        self.flow = front.flow
        self.registry = registry
        self.limits = front.limits
        self.tenants = front.tenants
        self.model_name = model_name

    async def Generate(self, request: gateway_pb2.GenerateRequest,
                       context: grpc.aio.ServicerContext) -> AsyncIterator[gateway_pb2.GenerateResponse]:
        caller = Caller(context.invocation_metadata() or (), context.time_remaining(),
                        on_done=lambda clean_up: context.add_done_callback(lambda _: clean_up()))
        several = request.sampling.HasField("n") and request.sampling.n != 1
        try:
            messages = interleaved(self.front, caller, request) if several else self.front.generate(request, caller)
            async for message in messages:
                yield message
        except RequestError as exc:  # the status set and the handler returned: no exception to unwind
            context.set_code(exc.code)
            context.set_details(exc.message)
        except Exception as exc:  # the gateway's own fault: INTERNAL says so, grpc's default UNKNOWN does not
            log.exception("request failed inside the gateway")
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error in the gateway: {type(exc).__name__}")

    async def Abort(self, request: gateway_pb2.AbortRequest,
                    context: grpc.aio.ServicerContext) -> gateway_pb2.AbortResponse:
        try:
            tenant = self.tenants.authenticate(context.invocation_metadata() or ())
        except AuthError as exc:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
        if not request.request_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "request_id is empty")
        # a tenant can abort only its own requests; others' look like unknown ids
        if not await self.flow.abort(request.request_id, tenant.name or None):
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no running request {request.request_id!r}")
        return gateway_pb2.AbortResponse()

    async def Info(self, request: gateway_pb2.InfoRequest,
                   context: grpc.aio.ServicerContext) -> gateway_pb2.InfoResponse:
        try:
            self.tenants.authenticate(context.invocation_metadata() or ())
        except AuthError as exc:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
        now = time.monotonic()
        workers = [
            gateway_pb2.WorkerStatus(
                worker_id=w.worker_id, role=w.role, address=w.descriptor.address, state=_state(w),
                free_blocks=w.load.free_blocks, total_blocks=w.descriptor.total_blocks, running=w.load.running,
                waiting=w.load.waiting, device=w.descriptor.device, heartbeat_age_ms=(now - w.last_seen) * 1000,
                cached_blocks=len(w.prefix.hashes) if w.prefix else 0,
                prefix_in_step=w.prefix is not None and w.prefix.in_step)
            for w in sorted(self.registry.workers.values(), key=lambda w: (w.role, w.worker_id))
        ]
        return gateway_pb2.InfoResponse(model=self.model_name, max_model_len=self.limits.max_model_len,
                                        vocab_size=self.limits.vocab_size,
                                        block_size=max((w.descriptor.block_size for w in self.registry.workers.values()),
                                                       default=0),
                                        workers=workers)


def _state(worker: Any) -> str:
    if worker.load.draining:
        return "draining"
    if worker.suspect:
        return "suspect"
    if worker.stalled:
        return "stalled"
    return "ready" if worker.ready else "connecting"
