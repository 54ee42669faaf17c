"""The public ``pdserve.v1.Gateway`` service."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from common.process.logs import request_id_var
from common.process.metrics import Metrics
from gateway.accounting import RequestAccounting
from gateway.errors import RequestError
from gateway.registry import WorkerRegistry
from gateway.request_flow import RequestFlow
from gateway.tenants import AuthError, QuotaError, TenantTable
from gateway.validation import ModelLimits, prompt_text, validate
from wire.v1 import gateway_pb2, gateway_pb2_grpc


class GatewayServicer(gateway_pb2_grpc.GatewayServicer):
    def __init__(self, flow: RequestFlow, registry: WorkerRegistry, tokenizer: Any, limits: ModelLimits,
                 model_name: str, tenants: TenantTable | None = None, metrics: Metrics | None = None,
                 draining: Callable[[], bool] = lambda: False) -> None:
        self.flow = flow
        self.registry = registry
        self.tokenizer = tokenizer
        self.limits = limits
        self.model_name = model_name
        self.tenants = tenants or TenantTable.open()
        self.metrics = metrics or Metrics("gateway")
        self.draining = draining
        # Tokenizing a long prompt takes milliseconds to seconds: never on the event loop, which
        # also serves every other stream and the workers' heartbeats.
        self._tokenizing = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="tokenize")

    async def Generate(self, request: gateway_pb2.GenerateRequest,
                       context: grpc.aio.ServicerContext) -> AsyncIterator[gateway_pb2.GenerateResponse]:
        received_at = time.perf_counter()
        accounting = RequestAccounting(self.metrics)
        request_id_var.set(request.request_id)
        if self.draining():
            accounting.failed("UNAVAILABLE", "draining", "gateway is draining", before_work=True)
            await context.abort(grpc.StatusCode.UNAVAILABLE, "gateway is draining; retry on another replica")
        try:
            tenant = self.tenants.authenticate(context.invocation_metadata() or ())
        except AuthError as exc:
            accounting.failed("UNAUTHENTICATED", "unauthenticated", str(exc), before_work=True)
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
        if request.tenant and tenant.name and request.tenant != tenant.name:
            accounting.failed("PERMISSION_DENIED", "wrong_tenant", request.tenant, before_work=True)
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                f"tenant {request.tenant!r} does not match the API key's tenant")
        try:
            admission = tenant.admit()
        except QuotaError as exc:
            accounting.failed("RESOURCE_EXHAUSTED", "tenant_quota", str(exc), before_work=True)
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
        try:
            text = prompt_text(request, self.limits)
            ids = None if text is None else await asyncio.get_running_loop().run_in_executor(
                self._tokenizing, self.tokenizer.encode, text)
            validated = validate(request, ids, self.limits)
            remaining = context.time_remaining()  # the client's deadline, None without one
            validated = dataclasses.replace(validated, received_at=received_at, tenant=tenant.name or validated.tenant,
                                            deadline=received_at + remaining if remaining is not None else None)
            request_id_var.set(validated.request_id)
            context.add_done_callback(lambda _: (self.flow.abandon(validated), admission.release()))
            reason = ""
            async for message in self.flow.run(validated):
                accounting.on_message(message)
                reason = message.finish_reason or reason
                yield message
            accounting.finished(validated, reason or "stop")
        except RequestError as exc:
            accounting.failed(exc.code.name, exc.reason, exc.message, before_work=accounting.tokens == 0)
            await context.abort(exc.code, exc.message)
        finally:
            admission.release()

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
                waiting=w.load.waiting, device=w.descriptor.device, heartbeat_age_ms=(now - w.last_seen) * 1000)
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
