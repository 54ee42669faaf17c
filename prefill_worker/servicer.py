"""The PrefillWorker gRPC service: prefill a prompt, move its KV to the decode worker's
reserved blocks, answer with the first token.

Abort is what lets the gateway reuse a cancelled request's decode blocks at once: it revokes
the destination lease (no copy into it may start from then on), stops the prefill, waits for
a copy already under way, and only then answers ``writes_done``.
"""

from __future__ import annotations

import asyncio
import logging
import time

import grpc

from common.model.batch import blocks_for
from common.engine.async_engine import AsyncEngine
from common.engine.thread import EngineThread
from common.engine.tpot_admission import AdmissionError
from common.process.logs import request_id_var
from common.process.metrics import Metrics
from common.kv_transfer.base import KVSender, LeaseExpiredError, TransferStats, TransferTarget
from common.kv_transfer.select import make_sender
from prefill_worker.copy_times import CopyTimes
from common.engine.request import RequestOutput
from common.rpc.convert import prefill_logprobs, sampling_from_proto
from common.rpc.metadata import FAILED_PEER_KEY, REFUSED_BY
from common.rpc.server import channel
from common.model.sampling_params import SamplingParams
from wire.slo import slo_from_proto
from wire.v1 import worker_pb2, worker_pb2_grpc

log = logging.getLogger(__name__)
TRANSFER_WINDOW_S = 30.0  # a copy may start this long after its prefill, unless the caller's deadline is sooner
REVOKED_KEEP_S = 300.0  # how long an aborted lease id is remembered (longer than any lease lives)


class PrefillServicer(worker_pb2_grpc.PrefillWorkerServicer):
    def __init__(self, thread: EngineThread, worker_id: str, metrics: Metrics | None = None) -> None:
        self.thread = thread
        self.engine = AsyncEngine(thread)
        self.worker_id = worker_id
        self.metrics = metrics or Metrics("prefill")
        self.draining = False
        self._senders: dict[str, KVSender] = {}
        self._stubs: dict[str, worker_pb2_grpc.DecodeWorkerStub] = {}
        self._incarnations: dict[str, str] = {}  # decode worker id -> the incarnation cached state is for
        self._revoked: dict[str, float] = {}  # destination lease ids of aborted requests -> when
        self._writes: dict[str, asyncio.Task[TransferStats]] = {}  # request id -> its copy under way
        self._prefilling: set[str] = set()  # request ids whose Prefill call is under way
        self.copies = CopyTimes()

    def start_draining(self) -> None:
        self.draining = True

    async def close(self) -> None:
        for sender in self._senders.values():
            await sender.close()

    async def Prefill(self, request: worker_pb2.PrefillRequest,
                      context: grpc.aio.ServicerContext) -> worker_pb2.PrefillResponse:
        request_id_var.set(request.request_id)
        if self.draining:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "prefill worker is draining")
        try:
            params = sampling_from_proto(request.sampling)
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if request.destination.lease_id in self._revoked:  # its Abort overtook it
            await context.abort(grpc.StatusCode.CANCELLED, f"request {request.request_id} was aborted")
        started = time.perf_counter()
        prompt = list(request.prompt_token_ids)
        self._prefilling.add(request.request_id)
        try:
            to_copy = self._blocks_to_copy(len(prompt), request.destination)
            out = await self._prefill(request.request_id, prompt, params, slo_from_proto(request.slo)[0],
                                      self.copies.left_for_compute_ms(request.ttft_left_ms, to_copy), context)
            prefill_ms = (time.perf_counter() - started) * 1000
            stats = TransferStats("none", 0, 0.0)
            if out.finish_reason == "prefilled":
                stats = await self._transfer(out, len(prompt), request.destination, context)
                self.metrics.transferred(stats.transport, stats.bytes, stats.seconds)
                if stats.bytes:
                    self.copies.copied(to_copy, stats.seconds)
        finally:
            # Not awaited: the engine thread takes calls between steps, and waiting here for the
            # forward under way (up to a whole token budget of other prompts) would hold back this
            # request's first token by that long. The inbox is FIFO, so a later call sees it done.
            self.engine.release_held_soon(request.request_id)
            self._prefilling.discard(request.request_id)
        self.metrics.prompt_tokens.labels("prefill").inc(len(prompt))
        return worker_pb2.PrefillResponse(
            first_token=out.new_token_ids[0], prefill_ms=prefill_ms, transfer_ms=stats.seconds * 1000,
            transfer_bytes=stats.bytes, transport=stats.transport, cached_tokens=out.cached_tokens,
            forward_ratio=self.thread.engine.load.forward_calibration_ratio, **prefill_logprobs(out),
            finish_reason="" if out.finish_reason == "prefilled" else out.finish_reason or "")

    async def _prefill(self, request_id: str, prompt: list[int], params: SamplingParams, ttft_slo_ms: float,
                       ttft_left_ms: float, context: grpc.aio.ServicerContext) -> RequestOutput:
        try:
            outputs = [o async for o in self.engine.generate(request_id, prompt, params, prefill_only=True,
                                                             ttft_slo_ms=ttft_slo_ms, ttft_left_ms=ttft_left_ms)]
        except AdmissionError as exc:  # its first token would be late here: the gateway asks another
            self.metrics.rejected("ttft_unattainable")
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc), trailing_metadata=((REFUSED_BY, "ttft"),))
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        last = outputs[-1]
        if last.finish_reason == "abort":
            await context.abort(grpc.StatusCode.CANCELLED, f"request {request_id} was aborted")
        return last

    def _blocks_to_copy(self, prompt_len: int, dest: worker_pb2.KVDestination) -> int:
        """The blocks of a prompt's KV the copy to ``dest`` writes: those its decode worker lacks."""
        n_blocks = blocks_for(prompt_len, self.thread.engine.config.block_size)
        return max(0, n_blocks - dest.cached_blocks)

    async def _transfer(self, out: RequestOutput, prompt_len: int, dest: worker_pb2.KVDestination,
                        context: grpc.aio.ServicerContext) -> TransferStats:
        n_blocks = blocks_for(prompt_len, self.thread.engine.config.block_size)
        if len(dest.block_ids) < n_blocks:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"destination has {len(dest.block_ids)} blocks, prompt needs {n_blocks}")
        if not dest.transport:  # the gateway decides each pair's transport (common.kv_transfer.pairing)
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "the destination names no KV transport: "
                                "run a gateway of the same pdserve version as its workers")
        self._notice_restart(dest)
        remaining = context.time_remaining()
        window = TRANSFER_WINDOW_S if remaining is None else min(TRANSFER_WINDOW_S, remaining)
        lease_id = dest.lease_id
        held = min(dest.cached_blocks, n_blocks)  # the decode worker has these blocks' KV already
        if held == n_blocks:
            return TransferStats(dest.transport, 0, 0.0)
        target = TransferTarget(dest.decode_worker_id, dest.address, out.request_id, lease_id,
                                list(dest.block_ids[held:n_blocks]), time.monotonic() + window,
                                revoked=lambda: lease_id in self._revoked)
        # The copy runs as a task of its own: a cancelled call (the client went away) must not
        # leave it running unseen, so Abort can find it and wait for it.
        write = asyncio.ensure_future(self._sender(dest.transport).send(
            self.thread.engine.cache, list(out.kv_block_ids[held:n_blocks]), target, self._stub(dest.address)))
        self._writes[out.request_id] = write
        write.add_done_callback(lambda _: self._writes.pop(out.request_id, None) if self._writes.get(
            out.request_id) is write else None)
        try:
            return await asyncio.shield(write)
        except LeaseExpiredError as exc:
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, str(exc))
        except (grpc.aio.AioRpcError, OSError, RuntimeError) as exc:
            # The decode side failed, not this worker: say which peer, so the gateway can retry
            # the request with another decode worker.
            details = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"KV transfer to {dest.decode_worker_id} failed: {details}",
                                trailing_metadata=((FAILED_PEER_KEY, dest.decode_worker_id),))

    def _notice_restart(self, dest: worker_pb2.KVDestination) -> None:
        """A decode worker that restarted under the same id has a new pool (a new shm file, a new
        IPC handle, a new collective group): drop everything cached for the old one, or writes
        would land in a mapping nobody reads any more."""
        known = self._incarnations.get(dest.decode_worker_id)
        if known == dest.incarnation:
            return
        if known is not None:
            log.info("decode worker %s restarted; dropping its cached transport state", dest.decode_worker_id)
            for sender in self._senders.values():
                sender.forget(dest.decode_worker_id)
            self._stubs.pop(dest.address, None)
        self._incarnations[dest.decode_worker_id] = dest.incarnation

    def _sender(self, name: str) -> KVSender:
        if name not in self._senders:
            self._senders[name] = make_sender(name, self.worker_id)
        return self._senders[name]

    def _stub(self, address: str) -> worker_pb2_grpc.DecodeWorkerStub:
        if address not in self._stubs:
            self._stubs[address] = worker_pb2_grpc.DecodeWorkerStub(channel(address))
        return self._stubs[address]

    async def Abort(self, request: worker_pb2.WorkerAbortRequest,
                    context: grpc.aio.ServicerContext) -> worker_pb2.WorkerAbortResponse:
        if not request.lease_id:  # nothing to revoke: the answer is only whether it was here
            found = await self.engine.abort(request.request_id)
            return worker_pb2.WorkerAbortResponse(found=found, writes_done=False)
        self._revoke(request.lease_id)
        write = self._writes.get(request.request_id)  # read right after revoking: see check_may_start
        found = request.request_id in self._prefilling or write is not None
        # Not awaited: the engine thread takes the abort after the forward under way (a whole token
        # budget, seconds on a small CPU), and that forward writes only this worker's own cache; the
        # decode worker's blocks are written by a copy alone, which the revocation stops from starting.
        self.engine.abort_soon(request.request_id)
        if write is not None:
            await asyncio.wait([write])  # bounded: the copy's own deadline and its RPC's timeout
        return worker_pb2.WorkerAbortResponse(found=found, writes_done=True)

    def _revoke(self, lease_id: str) -> None:
        now = time.monotonic()
        if len(self._revoked) > 10_000:
            self._revoked = {k: t for k, t in self._revoked.items() if now - t < REVOKED_KEEP_S}
        self._revoked[lease_id] = now
