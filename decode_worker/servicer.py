"""The DecodeWorker gRPC service: reserve → (prefill writes) → commit, then stream tokens; or
reserve → Prefill here (conditional disaggregation), then stream tokens."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import grpc

from common.engine.llm_engine import AdmissionError
from common.engine.async_engine import AsyncEngine
from common.engine.thread import EngineThread
from common.kv_transfer.base import NoLiveLease, NotOffered
from common.kv_transfer.select import DecodeReceivers
from common.engine.leases import LeaseError
from common.rpc.metadata import REFUSED_BY
from common.process.logs import request_id_var
from common.process.metrics import Metrics
from common.rpc.convert import prefill_logprobs, sampling_from_proto
from decode_worker.streams import StreamHub
from wire.slo import from_wire, slo_from_proto
from wire.v1 import worker_pb2, worker_pb2_grpc

log = logging.getLogger(__name__)


class DecodeServicer(worker_pb2_grpc.DecodeWorkerServicer):
    def __init__(self, thread: EngineThread, hub: StreamHub, receivers: DecodeReceivers,
                 metrics: Metrics | None = None) -> None:
        self.thread = thread
        self.engine = thread.engine
        self.async_engine = AsyncEngine(thread)  # the typed calls that run on the engine thread
        self.hub = hub
        self.receivers = receivers  # the KV transports this worker's pool offers
        self.draining = False
        self.metrics = metrics or Metrics("decode")

    def start_draining(self) -> None:
        self.draining = True

    async def Reserve(self, request: worker_pb2.ReserveRequest,
                      context: grpc.aio.ServicerContext) -> worker_pb2.ReserveResponse:
        request_id_var.set(request.request_id)
        if self.draining:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "decode worker is draining")
        if not self.hub.has_stream(request.stream_id):
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"no open stream {request.stream_id!r}")
        try:
            lease = await self.async_engine.reserve(request.request_id, request.prompt_tokens, request.max_tokens,
                                                    from_wire(request.tpot_ms, request.tpot_us),
                                                    request.tpot_margin or self.engine.epsilon_start,
                                                    list(request.prefix_hashes), request.lease_id,
                                                    request.handoff_us / 1e6)
        except AdmissionError as exc:
            if exc.never:  # no load would let it: the client must loosen its SLO, not wait
                self.metrics.rejected("tpot_never")
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc),
                                    trailing_metadata=((REFUSED_BY, "floor"),))
            self.metrics.rejected("tpot_unattainable")
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc),
                                trailing_metadata=((REFUSED_BY, "margin"),) if exc.margin_alone else ())
        except LeaseError as exc:  # a reservation of its already live here: the cluster's state, not the request's
            await context.abort(grpc.StatusCode.ABORTED, str(exc))
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if lease is None:
            self.metrics.rejected("kv_cache_full")
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "decode worker KV cache is full",
                                trailing_metadata=((REFUSED_BY, "kv"),))
        self.hub.bind(request.request_id, request.stream_id)
        return worker_pb2.ReserveResponse(block_ids=lease.block_ids, lease_id=lease.lease_id,
                                          lease_ms=self.engine.leases.lease_s * 1000, cached_blocks=lease.cached,
                                          admitted_alone=lease.alone)

    async def Commit(self, request: worker_pb2.CommitRequest,
                     context: grpc.aio.ServicerContext) -> worker_pb2.CommitResponse:
        try:
            params = sampling_from_proto(request.sampling)
            await self.async_engine.commit(request.request_id, request.lease_id, list(request.prompt_token_ids),
                                           request.first_token, params, slo_from_proto(request.slo)[1])
        except (ValueError, LeaseError) as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        return worker_pb2.CommitResponse()

    async def Prefill(self, request: worker_pb2.PrefillRequest,
                      context: grpc.aio.ServicerContext) -> worker_pb2.PrefillResponse:
        """The reservation's prompt computed in this worker's own steps (``EngineCore.prefill_reserved``);
        answers with its first token, after which it decodes here with no Commit."""
        request_id = request.request_id
        request_id_var.set(request_id)
        received = time.perf_counter()
        ttft_slo_ms, tpot_slo_ms = slo_from_proto(request.slo)
        first = self.hub.first_output(request_id)
        try:
            await self.async_engine.prefill_reserved(request_id, request.destination.lease_id,
                                                     list(request.prompt_token_ids),
                                                     sampling_from_proto(request.sampling), ttft_slo_ms, tpot_slo_ms,
                                                     request.ttft_left_ms)
        except AdmissionError as exc:  # its first token would be late here; the reservation is gone
            self.hub.forget_first(request_id)
            self.metrics.rejected("ttft_unattainable")
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
        except (ValueError, LeaseError) as exc:
            self.hub.forget_first(request_id)
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        except Exception as exc:  # a fault of this worker's: the engine freed the reservation; say it plainly
            log.exception("Prefill of a reserved request failed")
            self.hub.forget_first(request_id)
            await context.abort(grpc.StatusCode.INTERNAL, f"prefill failed: {exc!r}")
        try:
            out = await first
        except asyncio.CancelledError:  # the gateway gave up on it: nothing may decode unseen
            self.hub.forget_first(request_id)
            self.async_engine.abort_soon(request_id)
            raise
        if out.error:
            await context.abort(grpc.StatusCode.INTERNAL, f"prefill failed: {out.error}")
        if not out.new_token_ids:
            await context.abort(grpc.StatusCode.ABORTED, f"request ended before its first token ({out.finish_reason})")
        return worker_pb2.PrefillResponse(first_token=out.new_token_ids[0],
                                          prefill_ms=(time.perf_counter() - received) * 1000, transport="local",
                                          finish_reason=(out.finish_reason or "") if out.finished else "",
                                          cached_tokens=out.cached_tokens, **prefill_logprobs(out))

    async def Release(self, request: worker_pb2.ReleaseRequest,
                      context: grpc.aio.ServicerContext) -> worker_pb2.ReleaseResponse:
        await self.async_engine.release_reservation(request.request_id, request.lease_id,
                                                    request.writer_may_still_write)
        return worker_pb2.ReleaseResponse()

    async def Renew(self, request: worker_pb2.RenewRequest,
                    context: grpc.aio.ServicerContext) -> worker_pb2.RenewResponse:
        if not await self.async_engine.renew_reservation(request.request_id, request.lease_id):
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"no live lease {request.lease_id!r} for request {request.request_id!r}")
        return worker_pb2.RenewResponse()

    async def Abort(self, request: worker_pb2.WorkerAbortRequest,
                    context: grpc.aio.ServicerContext) -> worker_pb2.WorkerAbortResponse:
        # a request prefilled here has no other writer: its blocks are free to reuse at once
        local = self.hub.awaits_first(request.request_id)
        found = await self.async_engine.abort(request.request_id)
        return worker_pb2.WorkerAbortResponse(found=found, writes_done=local)

    async def Stream(self, request: worker_pb2.StreamRequest,
                     context: grpc.aio.ServicerContext) -> AsyncIterator[worker_pb2.StepEvents]:
        queue = self.hub.open(request.stream_id)
        log.info("stream %s opened", request.stream_id)
        try:
            yield worker_pb2.StepEvents()  # handshake: the gateway routes here only after this
            while (message := await queue.get()) is not None:
                yield message
        finally:
            for request_id in self.hub.close(request.stream_id, queue):
                # nobody can receive its tokens any more; a reservation not yet committed goes
                # too (quarantined: whether its prefill still writes is unknown here)
                self.async_engine.abort_soon(request_id)
            log.info("stream %s closed", request.stream_id)

    async def TransportInfo(self, request: worker_pb2.TransportInfoRequest,
                            context: grpc.aio.ServicerContext) -> worker_pb2.TransportInfoResponse:
        cache = self.engine.cache
        reply = worker_pb2.TransportInfoResponse(num_blocks=self.engine.pool.num_blocks,
                                                 block_bytes=cache.block_bytes, kv_dtype=str(cache.data.dtype))
        try:
            receiver = self.receivers.get(request.transport)
        except NotOffered as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        if receiver is not None:
            await receiver.describe(cache, request, reply)
        return reply

    async def WriteBlocks(self, request_iterator: AsyncIterator[worker_pb2.BlockChunk],
                          context: grpc.aio.ServicerContext) -> worker_pb2.WriteBlocksResponse:
        try:
            written = await self.receivers.stream.accept(self.engine.cache, request_iterator, self._reserved_blocks)
        except NoLiveLease as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return worker_pb2.WriteBlocksResponse(bytes=written)

    async def ReceiveBlocks(self, request: worker_pb2.ReceiveBlocksRequest,
                            context: grpc.aio.ServicerContext) -> worker_pb2.ReceiveBlocksResponse:
        try:
            received = await self.receivers.collective.accept(self.engine.cache, request, self._reserved_blocks)
        except NoLiveLease as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        return worker_pb2.ReceiveBlocksResponse(bytes=received)

    def _reserved_blocks(self, request_id: str, lease_id: str) -> set[int] | None:
        # Read from the event loop: the lease table changes only on the engine thread, and a
        # reserved lease's block list is fixed until it is committed or released.
        return self.engine.leases.reserved_blocks(request_id, lease_id)
