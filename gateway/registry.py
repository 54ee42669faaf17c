"""Workers known to the gateway: registered, heartbeating, dropped when silent, out of routing
while stalled (work to do and no step finished for too long).

A worker is taken in only if it can move KV with every worker of the other role already here
(``common.kv_transfer.pairing``): a transport set by flag that cannot work between a pair is
refused at registration, not found out request by request."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import grpc

from common.rpc.convert import load_from_proto, prefill_model_from_proto
from common.rpc.server import channel
from common.kv_transfer.pairing import TRANSPORTS, KvLayout, PoolLocation, TransportMismatch, layout_mismatch, pair_transport
from common.slo.promise import DEFAULT_TARGET
from common.slo.tpot_guard import DecodeView, tpot_epsilons
from common.slo.ttft_guard import new_guard
from gateway.prefix_view import PrefixView
from gateway.worker_state import WorkerState
from gateway.loop_lag import LoopLag
from wire.v1 import worker_pb2, worker_pb2_grpc

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False, kw_only=True)
class WorkerRecord(WorkerState):
    """A registered worker: its plain state (``WorkerState``: load, guards, what is in flight,
    prefix view) and its connection and liveness. Prefill guard deadlines are on this gateway's
    perf_counter clock; a decode worker has a TTFT guard only with local prefill on."""

    descriptor: worker_pb2.WorkerDescriptor
    last_seen: float
    heard_at: float  # LoopLag.clock() at last_seen: silence is measured on it
    channel: grpc.aio.Channel
    stub: worker_pb2_grpc.PrefillWorkerStub | worker_pb2_grpc.DecodeWorkerStub
    ready: bool = False  # decode: its token stream is open; prefill: at once
    stalled: bool = False  # has work and finished no step for the stall timeout: out of routing
    progress_at: float = 0.0  # LoopLag.clock() when its step count last moved (or it had no work)

    @property
    def worker_id(self) -> str:
        return self.descriptor.worker_id

    @property
    def role(self) -> str:
        return self.descriptor.role

    @property
    def routable(self) -> bool:
        return self.ready and not self.load.draining and not self.suspect and not self.stalled



class WorkerRegistry:
    def __init__(self, timeout_s: float, loop_lag: LoopLag | None = None, stall_timeout_s: float = 30.0,
                 slo_target: float = DEFAULT_TARGET, local_prefill: bool = False) -> None:
        self.timeout_s = timeout_s
        self.slo_target = slo_target  # the attainment the guards' margins are steered to
        self.local_prefill = local_prefill  # decode workers get a TTFT guard of the prompts they compute
        self.stall_timeout_s = stall_timeout_s
        self.loop_lag = loop_lag or LoopLag()
        self.workers: dict[str, WorkerRecord] = {}
        self.on_join: list = []  # callbacks(record) when a worker (re)joins
        self.on_leave: list = []  # callbacks(record, reason) when it leaves

    def register(self, descriptor: worker_pb2.WorkerDescriptor, load: worker_pb2.WorkerLoad) -> WorkerRecord:
        old = self.workers.get(descriptor.worker_id)
        if old is not None and _same_process(old.descriptor, descriptor):
            # the same process registering again (its heartbeats went unanswered for a while):
            # its streams and in-flight requests are intact, so keep them
            old.descriptor = descriptor
            if old.ttft is not None:  # what it awaits stays; the model is the one just sent
                old.ttft.model = prefill_model_from_proto(descriptor.cost_model)
                old.ttft.forward_tokens = descriptor.max_num_tokens
            self.heartbeat(descriptor.worker_id, load)
            return old
        if old is not None:
            self.drop(old.worker_id, "registered again")
        self.check_transports(descriptor)
        ch = channel(descriptor.address)
        stub_cls = worker_pb2_grpc.DecodeWorkerStub if descriptor.role == "decode" else worker_pb2_grpc.PrefillWorkerStub
        now = time.monotonic()
        heard_at = self.loop_lag.clock(now)
        record = WorkerRecord(descriptor=descriptor, load=load_from_proto(load), last_seen=now, heard_at=heard_at,
                              channel=ch, stub=stub_cls(ch), ready=descriptor.role == "prefill", progress_at=heard_at)
        if descriptor.role == "decode":
            record.decode_view = DecodeView(tpot_epsilons(self.slo_target))
        if descriptor.role == "prefill" or (self.local_prefill and descriptor.cost_model.present):
            record.ttft = new_guard(prefill_model_from_proto(descriptor.cost_model), descriptor.max_num_tokens,
                                    self.slo_target, probe_first=descriptor.role == "prefill")
        record.heard(record.load)
        if descriptor.prefix_salt:
            record.prefix = PrefixView(descriptor.block_size, descriptor.prefix_salt)
            if load.HasField("prefix"):
                record.prefix.apply(load.prefix)
        self.workers[descriptor.worker_id] = record
        log.info("%s worker %s joined at %s", descriptor.role, descriptor.worker_id, descriptor.address)
        for callback in self.on_join:
            callback(record)
        return record

    def heartbeat(self, worker_id: str, load: worker_pb2.WorkerLoad) -> bool:
        record = self.workers.get(worker_id)
        if record is None:
            return False
        record.last_seen = time.monotonic()
        record.heard_at = self.loop_lag.clock(record.last_seen)
        if load.steps != record.load.steps or not (load.running or load.waiting):
            record.progress_at = record.heard_at
        record.heard(load_from_proto(load))
        if record.prefix is not None and load.HasField("prefix"):
            record.prefix.apply(load.prefix)
        return True

    def prefix_out_of_step(self, worker_id: str) -> bool:
        """Whether the copy of a worker's prefix digest missed a digest (it is asked for a snapshot)."""
        record = self.workers.get(worker_id)
        return record is not None and record.prefix is not None and not record.prefix.in_step

    def check_transports(self, descriptor: worker_pb2.WorkerDescriptor) -> None:
        """Raises TransportMismatch if the worker cannot move KV with a worker already here."""
        other = "decode" if descriptor.role == "prefill" else "prefill"
        for record in self.workers.values():
            if record.role == other and record.worker_id != descriptor.worker_id:
                pair = (descriptor, record.descriptor) if other == "decode" else (record.descriptor, descriptor)
                transport_between(*pair)

    def drop(self, worker_id: str, reason: str) -> None:
        record = self.workers.pop(worker_id, None)
        if record is None:
            return
        log.warning("%s worker %s left: %s", record.role, worker_id, reason)
        for callback in self.on_leave:
            callback(record, reason)

    def expire(self) -> None:
        """Silence and stalls are measured on the loop's responsive clock: time this gateway was
        too busy to read heartbeats is not the workers' silence."""
        now = self.loop_lag.clock()
        for record in list(self.workers.values()):
            silence = now - record.heard_at
            if silence > self.timeout_s:
                self.drop(record.worker_id, f"silent for {silence:.1f}s")
                continue
            stuck = now - record.progress_at
            stalled = bool(record.load.running or record.load.waiting) and stuck > self.stall_timeout_s
            if stalled != record.stalled:
                log.warning("%s worker %s %s", record.role, record.worker_id,
                            f"stalled: work waiting and no step finished for {stuck:.1f}s; out of routing"
                            if stalled else "steps again; back in routing")
                record.stalled = stalled

    def local_prefills(self, decode: WorkerRecord | None = None) -> list[WorkerRecord]:
        """The decode workers that may compute a prompt themselves: ``decode`` alone when given
        (it holds the request's reservation), else every routable one; none with local prefill off."""
        workers = [decode] if decode is not None else self.routable("decode")
        return [w for w in workers if w.ttft is not None]

    def routable(self, role: str) -> list[WorkerRecord]:
        return [w for w in self.workers.values() if w.role == role and w.routable]


def transport_between(prefill: worker_pb2.WorkerDescriptor, decode: worker_pb2.WorkerDescriptor) -> str:
    """The KV transport of a worker pair (raises TransportMismatch when none can work: their KV
    layouts differ, or the transport asked for cannot move it)."""
    unlike = layout_mismatch(_layout(prefill), _layout(decode))
    if unlike:
        raise TransportMismatch(unlike)
    receives = tuple(decode.kv_receives) or TRANSPORTS  # a decode worker that does not say: all
    return pair_transport(prefill.kv_transport or "auto", _location(prefill), _location(decode), receives)


def _layout(d: worker_pb2.WorkerDescriptor) -> KvLayout:
    return KvLayout(d.worker_id, d.model_digest, d.kv_dtype, d.block_size, d.block_bytes)


def _location(d: worker_pb2.WorkerDescriptor) -> PoolLocation:
    kind = d.device_kind or ("cuda" if d.device.startswith("cuda") else "cpu")
    return PoolLocation(d.worker_id, d.host_id, kind, d.gpu_uuid)


def _same_process(old: worker_pb2.WorkerDescriptor, new: worker_pb2.WorkerDescriptor) -> bool:
    return bool(old.incarnation) and old.incarnation == new.incarnation and old.address == new.address


class RegistryServicer(worker_pb2_grpc.RegistryServicer):
    def __init__(self, registry: WorkerRegistry, heartbeat_ms: int) -> None:
        self.registry = registry
        self.heartbeat_ms = heartbeat_ms

    async def Register(self, request: worker_pb2.RegisterRequest,
                       context: grpc.aio.ServicerContext) -> worker_pb2.RegisterResponse:
        if request.worker.role not in ("prefill", "decode"):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown role {request.worker.role!r}")
        try:
            self.registry.register(request.worker, request.load)
        except TransportMismatch as exc:
            log.error("refused %s worker %s: %s", request.worker.role, request.worker.worker_id, exc)
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        return worker_pb2.RegisterResponse(heartbeat_ms=self.heartbeat_ms)

    async def Heartbeat(self, request: worker_pb2.HeartbeatRequest,
                        context: grpc.aio.ServicerContext) -> worker_pb2.HeartbeatResponse:
        known = self.registry.heartbeat(request.worker_id, request.load)
        return worker_pb2.HeartbeatResponse(known=known, prefix_resync=self.registry.prefix_out_of_step(request.worker_id))
