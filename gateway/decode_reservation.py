"""Reserving KV blocks for a request on a decode worker that admits it.

Candidates are tried in the router's order. Under the TTFT guard a request every worker turns
away waits in the admission queue while its TTFT deadline still allows it (its prefill is
predicted again each time: the prefill queue moves); one that arrives while a waiter at least as
easy to admit is waiting joins the queue without trying.

No reservation waits for its lease to run out: the gateway names each lease before it asks, so a
reply that arrives after the request ended is released on arrival, and a call that ended with no
reply (its deadline, a broken connection: the worker may have reserved all the same) is followed
by a release of the lease it named.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import grpc

from common.rpc.metadata import REFUSED_BY
from common.slo.admission_round import Demand
from common.slo.guard_reading import Readings
from gateway.admission import AdmissionQueue
from gateway.request_path import AfterRefusals, after_refusals, blocks_wait_until, never_refusal
from gateway.prefix_view import PromptBlocks
from gateway.errors import RequestError, unavailable
from gateway.registry import WorkerRecord, WorkerRegistry
from gateway.router import Router
from gateway.ttft_guard import last_useful_moment
from gateway.validation import ValidatedRequest
from gateway.worker_calls import CLEANUP_TIMEOUT_S, CONTROL_TIMEOUT_S, call_timeout, quietly
from wire.slo import to_wire
from wire.v1 import worker_pb2

Reservation = tuple[WorkerRecord, worker_pb2.ReserveResponse]
Bound = Callable[..., float]  # (readings of the round, or none) -> the last useful moment, perf_counter
# A Reserve that ended so may still have reserved on the worker: its lease is released by name
OUTCOME_UNKNOWN = frozenset({grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED,
                             grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL})
Spawn = Callable[[Coroutine[Any, Any, None]], None]


class DecodeReservations:
    def __init__(self, registry: WorkerRegistry, router: Router, stream_id: str, admission: AdmissionQueue,
                 spawn: Spawn) -> None:
        self.registry = registry
        self.router = router
        self.stream_id = stream_id  # the gateway's token stream the decode worker sends to
        self.admission = admission
        self.spawn = spawn  # runs clean-up calls that outlive the request

    async def reserve(self, req: ValidatedRequest, prompt: PromptBlocks, ttft_deadline: float,
                      avoid: set[str]) -> Reservation:
        """``prompt``: the request's prompt, hashed for the workers' prefix caches;
        ``ttft_deadline``: perf_counter time, inf without a TTFT SLO; ``avoid``: worker ids."""
        self._refuse_if_never(req)
        may_wait = self.router.ttft_guard and req.ttft_ms  # in the admission queue
        if may_wait and self.admission.holds_one_no_harder(_demand(req)):
            return await self._wait_for_admission(req, prompt, avoid, RequestError(
                grpc.StatusCode.RESOURCE_EXHAUSTED, "no decode worker admits the request: it waited behind requests "
                "as easy to admit until its prefill could no longer finish in time", reason="decode_admission"),
                self._ttft_bound(req, prompt, ttft_deadline))
        try:
            return await self._reserve_once(req, prompt, avoid)
        except RequestError as exc:
            if exc.code != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            then = after_refusals(self.router.ttft_guard, req.ttft_ms / 1000, exc.reason == "kv_cache_full")
            if then is AfterRefusals.WAIT_FOR_ADMISSION:
                return await self._wait_for_admission(req, prompt, avoid, exc,
                                                      self._ttft_bound(req, prompt, ttft_deadline))
            if then is AfterRefusals.WAIT_FOR_BLOCKS:
                until = blocks_wait_until(time.perf_counter(), ttft_deadline, req.deadline)
                return await self._wait_for_admission(req, prompt, avoid, exc, lambda readings=None: until)
            raise

    def _ttft_bound(self, req: ValidatedRequest, prompt: PromptBlocks, deadline: float) -> Bound:
        def last_useful(readings: Readings | None = None) -> float:  # admitted later, the prefill cannot finish in time
            return last_useful_moment(self.registry, prompt, deadline, req.ttft_ms / 1000, readings)

        return last_useful

    def _refuse_if_never(self, req: ValidatedRequest) -> None:
        """A TPOT SLO below every decode worker's step for one request alone (as their heartbeats
        report it) is refused at once: no wait, load or margin could meet it."""
        refusal = never_refusal(req.tpot_ms / 1000, [w.load.tpot_alone_ms / 1000 or None
                                                     for w in self.registry.routable("decode")])
        if refusal is not None:
            raise RequestError(grpc.StatusCode[refusal.code], refusal.message, reason=refusal.reason)

    async def _wait_for_admission(self, req: ValidatedRequest, prompt: PromptBlocks, avoid: set[str],
                                  refusal: RequestError, last_useful: Bound) -> Reservation:
        """Waits in the admission queue until a decode worker admits the request, or refuses it
        (``refusal``, or the last refusal seen) once ``last_useful()`` has passed."""
        async with self.admission.waiting(last_useful, _demand(req)) as waiter:
            until = last_useful()  # read again after each turn and each wait, and only then
            while True:
                if not await waiter.next_turn(until - time.perf_counter()):
                    until = last_useful()
                    if until <= time.perf_counter():
                        raise refusal
                    continue
                try:
                    reservation = await self._reserve_once(req, prompt, avoid)
                except RequestError as exc:
                    waiter.report(False)
                    if exc.code != grpc.StatusCode.RESOURCE_EXHAUSTED:
                        raise
                    refusal = exc
                    until = last_useful()
                    continue
                waiter.report(True)
                return reservation

    async def _reserve_once(self, req: ValidatedRequest, prompt: PromptBlocks, avoid: set[str]) -> Reservation:
        candidates = [w for w in self.router.decode_candidates(self.registry, req.tpot_ms / 1000, prompt)
                      if w.worker_id not in avoid]
        if not candidates:
            raise unavailable("no decode worker is available")
        last: grpc.aio.AioRpcError | None = None
        never: list[str] = []  # what the workers that can never meet its TPOT SLO said
        full = 0  # workers that refused it for want of KV blocks alone
        tpot_ms, tpot_us = to_wire(req.tpot_ms)
        for worker in candidates:
            lease_id = uuid.uuid4().hex[:16]
            reserve = worker_pb2.ReserveRequest(request_id=req.request_id, prompt_tokens=len(req.prompt_token_ids),
                                                max_tokens=req.params.max_tokens, stream_id=self.stream_id,
                                                tpot_ms=tpot_ms, tpot_us=tpot_us,
                                                tpot_margin=worker.view.epsilons.margin(req.tpot_ms / 1000),
                                                prefix_hashes=prompt.cached_hashes(worker.prefix), lease_id=lease_id,
                                                handoff_us=round(worker.view.handoff_s(worker.load.tpot_alone_ms / 1000) * 1e6))
            # shielded: if the request ends while the reply is on its way, the reservation it
            # brings is released on arrival instead of waiting for its lease to run out
            call = asyncio.ensure_future(worker.stub.Reserve(reserve, timeout=call_timeout(req, CONTROL_TIMEOUT_S)))
            # counted where it is asked, not where it was answered: a burst that arrives together
            # spreads over the workers instead of all taking the one that looked best before it
            worker.view.routed[req.request_id] = req.tpot_ms / 1000
            try:
                reply = await asyncio.shield(call)
            except asyncio.CancelledError:
                worker.view.routed.pop(req.request_id, None)
                call.add_done_callback(lambda done, w=worker, lid=lease_id: self._release_late(req.request_id, w, lid,
                                                                                               done))
                raise
            except grpc.aio.AioRpcError as exc:  # full, draining, gone: the next candidate may take it
                worker.view.routed.pop(req.request_id, None)
                if _may_have_reserved(exc):
                    self._release(req.request_id, worker, lease_id)
                if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED and _client_gone(req):
                    raise RequestError(grpc.StatusCode.DEADLINE_EXCEEDED, "the client's deadline passed while a "
                                       "decode worker was being asked for blocks", reason="deadline_exceeded") from None
                refused_by = dict(exc.trailing_metadata() or ()).get(REFUSED_BY)
                if refused_by == "floor":
                    never.append(exc.details() or "")
                    continue
                last = exc
                full += refused_by == "kv"
                if req.tpot_ms and refused_by == "margin":
                    worker.view.epsilons.of(req.tpot_ms / 1000).refused()  # its ε alone refused it
                continue
            return worker, reply
        if last is None:  # every candidate is too slow for it, idle or not
            raise RequestError(grpc.StatusCode.FAILED_PRECONDITION,
                               f"the TPOT SLO can never be met on this cluster, however idle: {never[0]}; "
                               f"ask for a looser tpot_ms", reason="slo_unattainable")
        if last.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
            raise RequestError(grpc.StatusCode.RESOURCE_EXHAUSTED, f"no decode worker admits the request: "
                               f"{last.details()}", reason="kv_cache_full" if full == len(candidates) else
                               "decode_admission")
        if last.code() == grpc.StatusCode.INVALID_ARGUMENT:  # the request exceeds what the worker can hold
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, f"decode worker refused the request: {last.details()}")
        # anything else is the cluster's (a worker draining, gone, or out of step), never the client's
        raise RequestError(grpc.StatusCode.UNAVAILABLE, f"decode reservation failed: {last.details()}",
                           reason="decode_unavailable")

    def _release_late(self, request_id: str, worker: WorkerRecord, lease_id: str, call: asyncio.Future[Any]) -> None:
        if _may_have_reserved(None if call.cancelled() else call.exception()):
            self._release(request_id, worker, lease_id)

    def _release(self, request_id: str, worker: WorkerRecord, lease_id: str) -> None:
        """Frees the lease ``lease_id`` if the worker made it; no prefill was sent to it."""
        release = worker_pb2.ReleaseRequest(request_id=request_id, lease_id=lease_id, writer_may_still_write=False)
        self.spawn(quietly(worker.stub.Release(release, timeout=CLEANUP_TIMEOUT_S)))


def _may_have_reserved(exc: BaseException | None) -> bool:
    """Whether a Reserve call that ended with ``exc`` (None: a reply, or no outcome) may have left a
    lease on the worker: anything but the worker's own refusal may have."""
    return not isinstance(exc, grpc.aio.AioRpcError) or exc.code() in OUTCOME_UNKNOWN


def _client_gone(req: ValidatedRequest) -> bool:
    return req.deadline is not None and time.perf_counter() >= req.deadline - 0.01


def _demand(req: ValidatedRequest) -> Demand:
    return Demand(req.tpot_ms, len(req.prompt_token_ids), req.params.max_tokens)
