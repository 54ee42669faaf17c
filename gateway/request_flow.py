"""One request's path through the cluster, as the gateway drives it::

    reserve on a decode worker → Prefill (KV written into the reservation) → first token
    → Commit on the decode worker → token events from its stream → last message

or, with local prefill on, when no prefill worker is predicted to return the first token in time
and the decode worker is (``common.slo.local_prefill``): reserve → Prefill on the decode worker
itself (it computes the prompt into the reservation) → first token → token events.

Its decisions (where to reserve, wait, refuse, prefill): ``gateway.request_path``, which the
simulator runs too; its stages and what an early end leaves to clean up: ``gateway.request_state``
and ``gateway.worker_release``; retries before the first token: ``gateway.retries``; the wait for
a decode worker to admit it: ``gateway.decode_reservation``.

Whatever ends the flow early (client cancel or deadline, Abort, a worker lost) aborts the
request on every worker still holding it, so no KV block outlives its request: a reservation
whose reply comes after the end is released as soon as it arrives, and decode blocks a prefill
may have been writing into are reused once that prefill worker confirms its copy is over
(quarantined only when it cannot confirm). Every call to a worker carries a deadline: the
client's where it set one, else a bound of its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import grpc

from common.kv_transfer.pairing import TransportMismatch
from common.slo.admission_round import Demand
from common.slo.ttft_margins import left_for_worker_ms
from common.rpc.convert import sampling_to_proto
from common.process.metrics import Metrics
from gateway import retries
from gateway.admission import AdmissionQueue
from gateway.decode_reservation import DecodeReservations, refusal_error
from gateway.decode_streams import DecodeStreams
from gateway.errors import ABORTED, RequestError, unavailable
from gateway.final_message import final_message, first_logprobs, prompt_logprobs
from gateway.lease_keepalive import lease_kept_alive
from gateway.promise_loop import PromiseLoop
from gateway.registry import WorkerRecord, WorkerRegistry, transport_between
from gateway.path_rules import admitted_margin
from gateway.request_path import Fail, Refuse, RequestPath
from gateway.request_stages import Stage
from gateway.request_state import Progress
from gateway.streaming import Streaming
from gateway.worker_release import WorkerRelease
from gateway.router import Router
from gateway.stream_interval import StreamInterval
from gateway.text_stream import TextStream
from gateway.validation import ValidatedRequest
from gateway.worker_calls import PREFILL_TIMEOUT_S, call_timeout
from wire.slo import slo_to_proto
from wire.v1 import gateway_pb2, worker_pb2



class RequestFlow(Streaming, WorkerRelease):
    def __init__(self, registry: WorkerRegistry, router: Router, streams: DecodeStreams, tokenizer: object,
                 metrics: Metrics | None = None, admission: AdmissionQueue | None = None,
                 stream_interval: StreamInterval | None = None, migration_limit: int = 1) -> None:
        self.metrics = metrics
        self.migration_limit = migration_limit  # times a stream may resume on another decode worker
        self.stream_interval = stream_interval or StreamInterval(0.0)  # how long a token message may wait for more
        self.promises = PromiseLoop(metrics)
        self.admission = admission if admission is not None else AdmissionQueue()  # (an empty queue is falsy)
        self.registry = registry
        self.router = router  # also says whether the TTFT guard refuses requests
        self.streams = streams
        self.tokenizer = tokenizer
        self.active: dict[str, Progress] = {}
        self._cleanups: set[asyncio.Task[None]] = set()
        self.reservations = DecodeReservations(registry, router, streams.stream_id, self.admission, self._spawn)

    async def run(self, req: ValidatedRequest) -> AsyncIterator[gateway_pb2.GenerateResponse]:
        if req.request_id in self.active:
            raise RequestError(grpc.StatusCode.ALREADY_EXISTS, f"request_id {req.request_id!r} is already running")
        progress = self.active[req.request_id] = Progress(owner=req, started=req.received_at or time.perf_counter())
        progress.promise.arrived = planned_start(req, progress.started)
        progress.path = self._path_for(req, progress, progress.promise.arrived)
        try:
            async for message in self._stages(req, progress):
                if message.finish_reason:
                    progress.to(Stage.DONE)
                yield message
        except Exception:
            self._end(req.request_id, progress, Stage.FAILED)
            raise
        finally:
            self._end(req.request_id, progress, Stage.CANCELLED)

    def _path_for(self, req: ValidatedRequest, p: Progress, arrived: float) -> RequestPath[WorkerRecord]:
        """The decisions of ``req`` (a request, or a stream resumed as one), its TTFT counted from ``arrived``."""
        return RequestPath(self.router, self.registry, p.prompt_blocks(req.prompt_token_ids), req.ttft_ms / 1000,
                           req.tpot_ms / 1000, Demand(req.tpot_ms, len(req.prompt_token_ids), req.params.max_tokens),
                           arrived, time.perf_counter, req.deadline)

    def abandon(self, req: ValidatedRequest) -> None:
        """The RPC is over (cancelled, deadline, or done): clean up if the flow has not.

        Called from the RPC's done callback, because a handler's generator left suspended
        by a cancelled call may never run its ``finally``.
        """
        progress = self.active.get(req.request_id)
        if progress is not None and progress.owner is req:
            self._end(req.request_id, progress, Stage.CANCELLED)

    def _end(self, request_id: str, progress: Progress, outcome: Stage) -> None:
        ended_in = progress.end(outcome)
        if ended_in is None:
            return
        if self.active.get(request_id) is progress:
            del self.active[request_id]
        self.streams.unsubscribe(request_id)
        if progress.decode is not None:
            progress.decode.view.routed.pop(request_id, None)
        if ended_in is Stage.DONE:
            self.promises.served(progress.owner, progress)
        else:
            self._spawn(self._clean_up(request_id, progress, ended_in))

    async def abort(self, request_id: str, tenant: str | None = None) -> bool:
        """Aborts a running request (only one of ``tenant``'s when given); False if there is none."""
        progress = self.active.get(request_id)
        if progress is None or (tenant is not None and getattr(progress.owner, "tenant", None) != tenant):
            return False
        progress.abort_requested = True
        self.streams.post(request_id, ABORTED)
        if progress.stage is Stage.PREFILLING:
            await self._abort_prefill(request_id, progress)
        return True

    async def _stages(self, req: ValidatedRequest, p: Progress) -> AsyncIterator[gateway_pb2.GenerateResponse]:
        text = TextStream(self.tokenizer, req.stop)
        if (refused := p.path.on_arrival(time.perf_counter())) is not None:
            raise refusal_error(refused.refusal)
        reply = await retries.first_token(req, p, self, self.registry, self.metrics)
        inbox = p.inbox
        first = text.add([reply.first_token])
        p.completion_tokens, p.ttft_ms = 1, (time.perf_counter() - p.started) * 1000
        p.generated.append(reply.first_token)
        self.promises.first_token(req, p)
        reason = reply.finish_reason or ("stop" if first.stopped else "")
        if not reason and req.params.max_tokens == 1:
            reason = "length"
        if reason:
            await self._release(req.request_id, p, writer_may_still_write=False)
            yield final_message(req, p, [reply.first_token], first.text + text.finish().text, reason,
                                first_logprobs(reply), prompt_logprobs(req, reply))
            return
        local = p.prefill is p.decode  # it decodes there already: no Commit
        if local:
            p.to(Stage.COMMITTING)
            p.to(Stage.STREAMING)
        yield gateway_pb2.GenerateResponse(request_id=req.request_id, token_ids=[reply.first_token], text=first.text,
                                           logprobs=first_logprobs(reply), **prompt_logprobs(req, reply))
        if not local:
            await self._commit(req, p, reply.first_token)
        async for message in self._decode_events(req, p, inbox, text):
            yield message

    # -- one attempt at the first token (``retries.Attempt``) --

    async def reserve(self, req: ValidatedRequest, p: Progress) -> worker_pb2.ReserveResponse:
        decode, reservation = await self.reservations.reserve(req, p.path)
        p.reserved(decode, reservation.lease_id)
        p.promise.tpot_epsilon = admitted_margin(reservation.admitted_alone, decode.view.epsilons.margin(req.tpot_ms / 1000))
        p.decode_cached_tokens = reservation.cached_blocks * decode.descriptor.block_size
        if (refused := p.path.reserved(decode, time.perf_counter())) is not None:
            # the wait, or the reservation itself, used up the slack; nothing was written: the lease can be reused at once
            await self._release(req.request_id, p, writer_may_still_write=False)
            p.lease_given_back()
            raise refusal_error(refused.refusal)
        p.inbox = self.streams.subscribe(req.request_id, decode.worker_id)
        return reservation

    async def prefill(self, req: ValidatedRequest, p: Progress,
                      reservation: worker_pb2.ReserveResponse) -> worker_pb2.PrefillResponse:
        deadline = p.path.deadline
        assert p.decode is not None
        decode = p.decode
        prompt = p.path.prompt
        choice = p.path.prefill(decode, p.decode_cached_tokens, time.perf_counter(), lambda w: bool(_transport(w, decode)))
        if isinstance(choice, Fail):
            raise unavailable(choice.message)
        if isinstance(choice, Refuse):
            raise refusal_error(choice.refusal)
        worker, local = choice.worker, choice.local
        transport = "local" if local else _transport(worker, decode)
        p.prefilling(worker)
        destination = worker_pb2.KVDestination(
            decode_worker_id=decode.worker_id, address=decode.descriptor.address, transport=transport,
            block_ids=reservation.block_ids, lease_id=reservation.lease_id, host_id=decode.descriptor.host_id,
            incarnation=decode.descriptor.incarnation, cached_blocks=reservation.cached_blocks)
        # what this worker will compute: its guard predicts, queues and calibrates on that
        tokens, guard = prompt.uncached_tokens(worker.prefix), worker.guard
        left_ms = left_for_worker_ms(deadline, time.perf_counter(), guard.overhead.value(),
                                     guard.headrooms.margin(req.ttft_ms / 1000)) if req.ttft_ms else 0.0
        request = worker_pb2.PrefillRequest(request_id=req.request_id, prompt_token_ids=req.prompt_token_ids,
                                            sampling=sampling_to_proto(req.params), destination=destination,
                                            slo=_slo(req), ttft_left_ms=left_ms)
        ahead, raw_s = guard.queued_ahead(deadline), guard.predict_s(tokens, deadline, calibrated=False)
        predicted_s = guard.predict_s(tokens, deadline, ttft_s=req.ttft_ms / 1000)
        worker.inflight += 1
        guard.sent(req.request_id, deadline, tokens, req.ttft_ms / 1000)
        sent = time.perf_counter()
        p.promise.prefill_going(sent, predicted_s, guard.headrooms, req.ttft_ms / 1000)
        try:
            if worker is decode:  # it computes the prompt into its own lease: nothing to keep alive
                reply = await worker.stub.Prefill(request, timeout=call_timeout(req, PREFILL_TIMEOUT_S))
            else:
                async with lease_kept_alive(decode, req.request_id, reservation.lease_id, reservation.lease_ms):
                    reply = await worker.stub.Prefill(request, timeout=call_timeout(req, PREFILL_TIMEOUT_S))
            p.prefill_call_s = time.perf_counter() - sent
            p.prefilled(reply)
            if len(prompt) - reply.cached_tokens != tokens:  # its cache changed since its last digest
                raw_s = guard.raw_for(ahead, len(prompt) - reply.cached_tokens)
            # teach the TTFT guard what the prefill call (queue, forward, KV transfer, both RPC
            # hops, this event loop's own lag) really takes on this worker now
            worker_s = (reply.prefill_ms + reply.transfer_ms) / 1000
            guard.answered(req.request_id, p.prefill_call_s, raw_s, worker_s, reply.forward_ratio)
            if self.metrics is not None:
                self.metrics.prefill_call_overhead.labels("gateway").observe(max(0.0, p.prefill_call_s - worker_s))
            if raw_s and self.metrics is not None:
                self.metrics.calibration.labels("gateway", "prefill", worker.worker_id).set(guard.ratio())
        except grpc.aio.AioRpcError as exc:
            raise retries.prefill_error(exc, p) from None
        finally:
            worker.inflight -= 1
            guard.dropped(req.request_id)
        return reply

    async def forget(self, req: ValidatedRequest, p: Progress, writer_may_still_write: bool) -> None:
        """Gives up one attempt's reservation. When the writer's fate is unknown (a prefill worker
        lost mid-call), the blocks are quarantined rather than reused (if the decode worker is
        still there to hear it)."""
        self.streams.unsubscribe(req.request_id)
        await self._release(req.request_id, p, writer_may_still_write=writer_may_still_write)
        assert p.decode is not None
        p.decode.view.routed.pop(req.request_id, None)
        p.attempt_forgotten()


def _slo(req: ValidatedRequest) -> gateway_pb2.SLO:
    return slo_to_proto(req.ttft_ms, req.tpot_ms)


def _transport(prefill: WorkerRecord, decode: WorkerRecord) -> str:
    """The pair's transport; "" if they cannot move KV (checked at registration, so rare)."""
    try:
        return transport_between(prefill.descriptor, decode.descriptor)
    except TransportMismatch:
        return ""


def planned_start(req: ValidatedRequest, started: float) -> float:
    """When the TTFT of a request that arrived at ``started`` is planned to count from: its arrival,
    less what its front is expected to spend delivering the first token (``gateway.delivery``)."""
    return started - req.delivery_s
