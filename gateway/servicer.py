"""The public ``pdserve.v1.Gateway`` service."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from gateway.errors import RequestError
from gateway.registry import WorkerRegistry
from gateway.request_flow import RequestFlow
from gateway.validation import ModelLimits, validate
from pdserve.v1 import gateway_pb2, gateway_pb2_grpc


class GatewayServicer(gateway_pb2_grpc.GatewayServicer):
    def __init__(self, flow: RequestFlow, registry: WorkerRegistry, tokenizer: Any, limits: ModelLimits,
                 model_name: str) -> None:
        self.flow = flow
        self.registry = registry
        self.tokenizer = tokenizer
        self.limits = limits
        self.model_name = model_name

    async def Generate(self, request: gateway_pb2.GenerateRequest,
                       context: grpc.aio.ServicerContext) -> AsyncIterator[gateway_pb2.GenerateResponse]:
        try:
            validated = validate(request, self.tokenizer, self.limits)
            context.add_done_callback(lambda _: self.flow.abandon(validated))
            async for message in self.flow.run(validated):
                yield message
        except RequestError as exc:
            await context.abort(exc.code, exc.message)

    async def Abort(self, request: gateway_pb2.AbortRequest,
                    context: grpc.aio.ServicerContext) -> gateway_pb2.AbortResponse:
        if not request.request_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "request_id is empty")
        if not await self.flow.abort(request.request_id):
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no running request {request.request_id!r}")
        return gateway_pb2.AbortResponse()

    async def Info(self, request: gateway_pb2.InfoRequest,
                   context: grpc.aio.ServicerContext) -> gateway_pb2.InfoResponse:
        now = time.monotonic()
        workers = [
            gateway_pb2.WorkerStatus(
                worker_id=w.worker_id, role=w.role, address=w.descriptor.address,
                state="draining" if w.load.draining else "ready" if w.ready else "connecting",
                free_blocks=w.load.free_blocks, total_blocks=w.descriptor.total_blocks, running=w.load.running,
                waiting=w.load.waiting, device=w.descriptor.device, heartbeat_age_ms=(now - w.last_seen) * 1000)
            for w in sorted(self.registry.workers.values(), key=lambda w: (w.role, w.worker_id))
        ]
        return gateway_pb2.InfoResponse(model=self.model_name, max_model_len=self.limits.max_model_len,
                                        vocab_size=self.limits.vocab_size,
                                        block_size=max((w.descriptor.block_size for w in self.registry.workers.values()),
                                                       default=0),
                                        workers=workers)
