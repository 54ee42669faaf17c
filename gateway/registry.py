"""Workers known to the gateway: registered, heartbeating, dropped when silent."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import grpc

from common.rpc.server import channel
from common.slo.calibration import Calibration
from pdserve.v1 import worker_pb2, worker_pb2_grpc

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class WorkerRecord:
    descriptor: worker_pb2.WorkerDescriptor
    load: worker_pb2.WorkerLoad
    last_seen: float
    channel: grpc.aio.Channel
    stub: worker_pb2_grpc.PrefillWorkerStub | worker_pb2_grpc.DecodeWorkerStub
    ready: bool = False  # decode: its token stream is open; prefill: at once
    inflight: int = 0  # requests this gateway has routed here and not yet seen finish
    inflight_tokens: int = 0  # prefill: prompt tokens this gateway sent and awaits answers for
    # prefill: what this gateway sent and awaits, in sending order: request id -> (TTFT deadline
    # on this gateway's perf_counter clock, inf without one; prompt tokens)
    queued: dict[str, tuple[float, int]] = field(default_factory=dict)
    suspect: bool = False  # a call to it just failed: out of routing until it heartbeats again
    # observed / predicted prefill calls: one call, not a mean over many, decides a TTFT
    ttft_calibration: Calibration = field(default_factory=lambda: Calibration(quantile=0.9))
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def worker_id(self) -> str:
        return self.descriptor.worker_id

    @property
    def role(self) -> str:
        return self.descriptor.role

    @property
    def routable(self) -> bool:
        return self.ready and not self.load.draining and not self.suspect


class WorkerRegistry:
    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.workers: dict[str, WorkerRecord] = {}
        self.on_join: list = []  # callbacks(record) when a worker (re)joins
        self.on_leave: list = []  # callbacks(record, reason) when it leaves

    def register(self, descriptor: worker_pb2.WorkerDescriptor, load: worker_pb2.WorkerLoad) -> WorkerRecord:
        old = self.workers.get(descriptor.worker_id)
        if old is not None:
            self.drop(old.worker_id, "registered again")
        ch = channel(descriptor.address)
        stub_cls = worker_pb2_grpc.DecodeWorkerStub if descriptor.role == "decode" else worker_pb2_grpc.PrefillWorkerStub
        record = WorkerRecord(descriptor, load, time.monotonic(), ch, stub_cls(ch), ready=descriptor.role == "prefill")
        self.workers[descriptor.worker_id] = record
        log.info("%s worker %s joined at %s", descriptor.role, descriptor.worker_id, descriptor.address)
        for callback in self.on_join:
            callback(record)
        return record

    def heartbeat(self, worker_id: str, load: worker_pb2.WorkerLoad) -> bool:
        record = self.workers.get(worker_id)
        if record is None:
            return False
        record.load = load
        record.last_seen = time.monotonic()
        record.suspect = False
        return True

    def drop(self, worker_id: str, reason: str) -> None:
        record = self.workers.pop(worker_id, None)
        if record is None:
            return
        log.warning("%s worker %s left: %s", record.role, worker_id, reason)
        for callback in self.on_leave:
            callback(record, reason)

    def expire(self) -> None:
        now = time.monotonic()
        for record in list(self.workers.values()):
            if now - record.last_seen > self.timeout_s:
                self.drop(record.worker_id, f"silent for {now - record.last_seen:.1f}s")

    def routable(self, role: str) -> list[WorkerRecord]:
        return [w for w in self.workers.values() if w.role == role and w.routable]


class RegistryServicer(worker_pb2_grpc.RegistryServicer):
    def __init__(self, registry: WorkerRegistry, heartbeat_ms: int) -> None:
        self.registry = registry
        self.heartbeat_ms = heartbeat_ms

    async def Register(self, request: worker_pb2.RegisterRequest,
                       context: grpc.aio.ServicerContext) -> worker_pb2.RegisterResponse:
        if request.worker.role not in ("prefill", "decode"):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown role {request.worker.role!r}")
        self.registry.register(request.worker, request.load)
        return worker_pb2.RegisterResponse(heartbeat_ms=self.heartbeat_ms)

    async def Heartbeat(self, request: worker_pb2.HeartbeatRequest,
                        context: grpc.aio.ServicerContext) -> worker_pb2.HeartbeatResponse:
        return worker_pb2.HeartbeatResponse(known=self.registry.heartbeat(request.worker_id, request.load))
