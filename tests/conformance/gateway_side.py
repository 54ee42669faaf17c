"""The scenario through the gateway's own request flow (``gateway.request_flow.RequestFlow``, its
registry, router, admission queue and token streams) on a virtual asyncio clock, against the
simulator's workers behind fake stubs that do what the workers' servicers do: each call reaches
its worker a hop after it is made, runs between the engine's steps, and answers a hop later."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import grpc
import pytest

from client.bench.workload import PlannedRequest
from common.engine.core import AdmissionError
from common.engine.request import RequestOutput
from common.model.sampling_params import SamplingParams
from common.rpc.convert import load_from_proto, load_to_proto, sampling_from_proto
from common.rpc.metadata import REFUSED_BY
from common.slo.load_report import LoadReport
from common.slo.tpot_guard import DecodeView, handoff_window, tpot_epsilons
from common.slo.ttft_guard import new_guard
from gateway.admission import AdmissionQueue
from gateway.decode_streams import DecodeStreams
from gateway.errors import RequestError
from gateway.registry import WorkerRecord, WorkerRegistry
from gateway.request_flow import RequestFlow
from gateway.router import router_for
from gateway.validation import ValidatedRequest
from simulator.config import SimConfig
from simulator.workers import SimDecodeWorker, SimPrefillWorker, SimWorker
from tests.conformance.scenario import MODELS, Faults, Trace, record_calls, request_id, send_foreign
from tests.virtual_clock import run
from wire.slo import from_wire
from wire.v1 import worker_pb2

T = TypeVar("T")


class LoopClock:
    """The simulator's ``Simulation`` interface over the running (virtual-clock) asyncio loop, so
    the simulator's workers step on the loop the gateway runs on."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    @property
    def now(self) -> float:
        return self.loop.time()

    def clock(self) -> float:
        return self.loop.time()

    def at(self, when: float, callback: Callable[..., Any], *args: Any) -> None:
        self.loop.call_at(max(when, self.now), callback, *args)

    def after(self, delay: float, callback: Callable[..., Any], *args: Any) -> None:
        self.at(self.now + delay, callback, *args)


def _rpc_error(code: grpc.StatusCode, details: str, refused_by: str = "") -> grpc.aio.AioRpcError:
    trailing = grpc.aio.Metadata((REFUSED_BY, refused_by)) if refused_by else grpc.aio.Metadata()
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, details)


class WorkerStub:
    """A worker's RPCs over one simulated worker: a hop there, the engine's turn, a hop back."""

    def __init__(self, worker: SimWorker, hop_s: float) -> None:
        self.worker = worker
        self.hop_s = hop_s

    async def on_worker(self, fn: Callable[[], T]) -> T:
        await asyncio.sleep(self.hop_s)
        done: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        def call() -> None:
            try:
                done.set_result(fn())
            except Exception as exc:  # the servicer's answer: an error, a hop back
                done.set_exception(exc)

        self.worker.call(call)
        try:
            return await done
        finally:
            await asyncio.sleep(self.hop_s)

    async def Renew(self, request: worker_pb2.RenewRequest, timeout: float) -> worker_pb2.RenewResponse:
        await self.on_worker(lambda: self.worker.core.renew_reservation(request.request_id, request.lease_id))
        return worker_pb2.RenewResponse()


class PrefillStub(WorkerStub):
    def __init__(self, worker: SimPrefillWorker, hop_s: float, lost: set[str]) -> None:
        super().__init__(worker, hop_s)
        self.lost = lost  # request ids whose Prefill fails as if this worker died during it

    async def Prefill(self, request: worker_pb2.PrefillRequest, timeout: float) -> worker_pb2.PrefillResponse:
        if request.request_id in self.lost:
            await asyncio.sleep(2 * self.hop_s)
            raise _rpc_error(grpc.StatusCode.UNAVAILABLE, "connection reset (the worker was lost)")
        loop = asyncio.get_running_loop()
        first: asyncio.Future[RequestOutput] = loop.create_future()
        await asyncio.sleep(self.hop_s)
        received = loop.time()
        core = self.worker.core

        def prefill() -> None:
            self.worker.listeners[request.request_id] = lambda out: first.done() or first.set_result(out)
            try:
                core.add_request(request.request_id, list(request.prompt_token_ids),
                                 sampling_from_proto(request.sampling), prefill_only=True,
                                 ttft_slo_ms=from_wire(request.slo.ttft_ms, request.slo.ttft_us),
                                 ttft_left_ms=request.ttft_left_ms)
            except AdmissionError as exc:  # its first token would be late on this worker's whole queue
                del self.worker.listeners[request.request_id]
                first.set_exception(exc)

        self.worker.call(prefill)
        try:
            out = await first
        except AdmissionError as exc:
            await asyncio.sleep(self.hop_s)
            raise _rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc), "ttft") from None
        prefill_ms = (loop.time() - received) * 1000
        self.worker.call(lambda: core.release_held(request.request_id))
        await asyncio.sleep(self.hop_s)
        return worker_pb2.PrefillResponse(first_token=out.new_token_ids[0], prefill_ms=prefill_ms,
                                          forward_ratio=core.load.forward_calibration_ratio)

    async def Abort(self, request: worker_pb2.WorkerAbortRequest, timeout: float) -> worker_pb2.WorkerAbortResponse:
        found = await self.on_worker(lambda: self.worker.core.abort(request.request_id))
        return worker_pb2.WorkerAbortResponse(found=found, writes_done=True)


class DecodeStub(WorkerStub):
    def __init__(self, worker: SimDecodeWorker, hop_s: float, clock: LoopClock) -> None:
        super().__init__(worker, hop_s)
        self.clock = clock
        self.stream: asyncio.Queue[worker_pb2.StepEvents] = asyncio.Queue()

    async def Reserve(self, request: worker_pb2.ReserveRequest, timeout: float) -> worker_pb2.ReserveResponse:
        core = self.worker.core
        try:
            lease = await self.on_worker(lambda: core.reserve(
                request.request_id, request.prompt_tokens, request.max_tokens, from_wire(request.tpot_ms, request.tpot_us),
                request.tpot_margin or core.epsilon_start, list(request.prefix_hashes), request.lease_id,
                request.handoff_us / 1e6))
        except AdmissionError as exc:
            if exc.never:
                raise _rpc_error(grpc.StatusCode.FAILED_PRECONDITION, str(exc), "floor") from None
            raise _rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc), "margin" if exc.margin_alone else "") from None
        if lease is None:
            raise _rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "decode worker KV cache is full", "kv")
        return worker_pb2.ReserveResponse(block_ids=lease.block_ids, lease_id=lease.lease_id,
                                          lease_ms=core.leases.lease_s * 1000, cached_blocks=lease.cached,
                                          admitted_alone=lease.alone)

    async def Commit(self, request: worker_pb2.CommitRequest, timeout: float) -> worker_pb2.CommitResponse:
        def commit() -> None:
            self.worker.listeners[request.request_id] = self._emit
            self.worker.core.commit(request.request_id, request.lease_id, list(request.prompt_token_ids),
                                    request.first_token, sampling_from_proto(request.sampling),
                                    from_wire(request.slo.tpot_ms, request.slo.tpot_us))

        await self.on_worker(commit)
        return worker_pb2.CommitResponse()

    async def Release(self, request: worker_pb2.ReleaseRequest, timeout: float) -> worker_pb2.ReleaseResponse:
        await self.on_worker(lambda: self.worker.core.release_reservation(request.request_id, request.lease_id,
                                                                          request.writer_may_still_write))
        return worker_pb2.ReleaseResponse()

    async def Abort(self, request: worker_pb2.WorkerAbortRequest, timeout: float) -> worker_pb2.WorkerAbortResponse:
        found = await self.on_worker(lambda: self.worker.core.abort(request.request_id))
        return worker_pb2.WorkerAbortResponse(found=found)

    def Stream(self, request: worker_pb2.StreamRequest) -> AsyncIterator[worker_pb2.StepEvents]:
        async def events() -> AsyncIterator[worker_pb2.StepEvents]:
            yield worker_pb2.StepEvents()  # the handshake
            while True:
                yield await self.stream.get()

        return events()

    def _emit(self, out: RequestOutput) -> None:
        """One step's output for a request, on the token stream: at the gateway a hop later."""
        event = worker_pb2.TokenEvent(request_id=out.request_id, token_ids=list(out.new_token_ids),
                                      finish_reason=(out.finish_reason or "") if out.finished else "")
        self.clock.after(self.hop_s, self.stream.put_nowait, worker_pb2.StepEvents(events=[event]))


class Letters:
    """A tokenizer whose every token is one letter: text is not what the comparison reads."""

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return "a" * len(token_ids)


def _record(worker: SimWorker, stub: WorkerStub, config: SimConfig, clock: LoopClock) -> WorkerRecord:
    """The registry's record of a worker as ``WorkerRegistry.register`` makes it, on the loop's clock."""
    role = worker.role
    descriptor = worker_pb2.WorkerDescriptor(worker_id=worker.worker_id, role=role, address=f"{worker.worker_id}:0",
                                             block_size=config.block_size, host_id="host", device_kind="cpu",
                                             model_digest="m", kv_dtype="float32", block_bytes=1)
    record = WorkerRecord(descriptor=descriptor, load=LoadReport(), last_seen=clock.now, heard_at=clock.now,
                          channel=None, stub=stub, ready=True, progress_at=clock.now)  # type: ignore[arg-type]
    if role == "decode":
        record.decode_view = DecodeView(tpot_epsilons(config.slo_target, clock.clock), handoffs=handoff_window(clock.clock))
    else:
        record.ttft = new_guard(MODELS.prefill, config.max_num_tokens, config.slo_target, clock.clock)
    record.heard(load_from_proto(load_to_proto(worker.load(), config.engine_policy)))
    return record


async def _run(plan: list[PlannedRequest], config: SimConfig, faults: Faults) -> Trace:
    trace = Trace()
    loop = asyncio.get_running_loop()
    clock = LoopClock(loop)
    registry = WorkerRegistry(timeout_s=3600.0, slo_target=config.slo_target)
    admission = AdmissionQueue(tick_s=config.admission_tick_s)
    streams = DecodeStreams("stream", registry, on_finished=admission.notify)
    flow = RequestFlow(registry, router_for(config.ttft_guard, clock=clock.clock), streams, Letters(),
                       admission=admission)
    workers: list[SimWorker] = [SimPrefillWorker(clock, f"prefill-{i}", config, MODELS)  # type: ignore[arg-type]
                                for i in range(config.prefill)]
    workers += [SimDecodeWorker(clock, f"decode-{i}", config, MODELS) for i in range(config.decode)]  # type: ignore[arg-type]
    for worker in workers:
        record_calls(worker, trace)
        if isinstance(worker, SimPrefillWorker):
            lost = {request_id(i) for i, w in faults.lost_prefills if w == worker.worker_id}
            stub: WorkerStub = PrefillStub(worker, config.hop_s, lost)
        else:
            stub = DecodeStub(worker, config.hop_s, clock)  # type: ignore[arg-type]
        record = _record(worker, stub, config, clock)
        registry.workers[worker.worker_id] = record
        for joined in registry.on_join:
            joined(record)

    async def heartbeats() -> None:
        while True:
            await asyncio.sleep(config.heartbeat_s)
            for worker in workers:
                registry.heartbeat(worker.worker_id, load_to_proto(worker.load(), config.engine_policy))

    async def send(item: PlannedRequest) -> None:
        await asyncio.sleep(item.send_at + config.hop_s - loop.time())
        slo = item.slo_class
        req = ValidatedRequest(request_id(item.index), list(item.prompt),
                               SamplingParams(max_tokens=item.output_len, ignore_eos=True), (),
                               slo.ttft_ms if slo else 0.0, slo.tpot_ms if slo else 0.0, "", received_at=loop.time())

        async def call() -> None:
            try:
                async for message in flow.run(req):
                    finish = message.finish_reason
                trace.outcomes[req.request_id] = f"ok {finish}"
            except RequestError as exc:
                trace.outcomes[req.request_id] = f"{exc.code.name} {exc.reason}"
            except asyncio.CancelledError:  # its client cancelled; the RPC's end reaches the flow
                trace.outcomes[req.request_id] = "CANCELLED cancelled"

        task = loop.create_task(call())
        if item.index in cancels:  # the client cancels; the gateway hears it a hop later
            loop.call_at(item.send_at + cancels[item.index] + config.hop_s, task.cancel)
        await asyncio.gather(task, return_exceptions=True)

    send_foreign(faults, workers, clock.at)
    cancels = dict(faults.cancels)
    beating = loop.create_task(heartbeats())
    await asyncio.gather(*(send(item) for item in plan))
    beating.cancel()
    await streams.close()
    await flow.drain()
    return trace


def run_gateway(plan: list[PlannedRequest], config: SimConfig, faults: Faults, monkeypatch: pytest.MonkeyPatch) -> Trace:
    """The gateway's code reads ``time.perf_counter`` and ``time.monotonic``: both read the virtual clock."""
    with monkeypatch.context() as patch:
        holder: dict[str, asyncio.AbstractEventLoop] = {}

        async def main() -> Trace:
            holder["loop"] = asyncio.get_running_loop()
            patch.setattr(time, "perf_counter", lambda: holder["loop"].time())
            patch.setattr(time, "monotonic", lambda: holder["loop"].time())
            return await _run(plan, config, faults)

        return run(main())
