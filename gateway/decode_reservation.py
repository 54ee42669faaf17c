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
from gateway.admission import AdmissionQueue
from gateway.path_rules import Refusal, all_refused
from gateway.request_path import Fail, Refuse, RequestPath, Wait
from gateway.prefix_view import PromptBlocks
from gateway.errors import RequestError, unavailable
from gateway.registry import WorkerRecord, WorkerRegistry
from gateway.router import Router
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

    async def reserve(self, req: ValidatedRequest, path: RequestPath[WorkerRecord]) -> Reservation:
        """A lease for ``req`` where its path says (``RequestPath.seek``), waiting in the admission
        queue when it says so."""
        then = path.seek(time.perf_counter(), self.admission.holds_one_no_harder(path.demand))
        if isinstance(then, Refuse):
            raise refusal_error(then.refusal)
        if isinstance(then, Fail):
            raise unavailable(then.message)
        if isinstance(then, Wait):
            return await self._wait_for_admission(req, path, refusal_error(then.refusal), then.last_useful)
        try:
            return await self._reserve_once(req, path.prompt, then.candidates)
        except RequestError as exc:
            if exc.code != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            after = path.refused_everywhere(time.perf_counter(), exc.reason == "kv_cache_full",
                                            Refusal(exc.code.name, exc.reason, exc.message))
            if isinstance(after, Refuse):
                raise
            return await self._wait_for_admission(req, path, exc, after.last_useful)

    async def _wait_for_admission(self, req: ValidatedRequest, path: RequestPath[WorkerRecord],
                                  refusal: RequestError, last_useful: Bound) -> Reservation:
        """Waits in the admission queue until a decode worker admits the request, or refuses it
        (``refusal``, or the last refusal seen) once ``last_useful()`` has passed."""
        async with self.admission.waiting(last_useful, path.demand) as waiter:
            until = last_useful()  # read again after each turn and each wait, and only then
            while True:
                if not await waiter.next_turn(until - time.perf_counter()):
                    until = last_useful()
                    if until <= time.perf_counter():
                        raise refusal
                    continue
                ask = path.reserve()
                if isinstance(ask, Fail):
                    waiter.report(None)
                    raise unavailable(ask.message)
                try:
                    reservation = await self._reserve_once(req, path.prompt, ask.candidates)
                except RequestError as exc:
                    waiter.report(False)
                    if exc.code != grpc.StatusCode.RESOURCE_EXHAUSTED:
                        raise
                    refusal = exc
                    until = last_useful()
                    continue
                waiter.report(True)
                return reservation

    async def _reserve_once(self, req: ValidatedRequest, prompt: PromptBlocks,
                            candidates: list[WorkerRecord]) -> Reservation:
        last: grpc.aio.AioRpcError | None = None
        refused_by: list[str] = []  # what each refusal said of itself (``REFUSED_BY``)
        never = ""  # what the first worker that can never meet its TPOT SLO said
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
                said = str(dict(exc.trailing_metadata() or ()).get(REFUSED_BY) or "")
                refused_by.append(said)
                if said == "floor":
                    never = never or exc.details() or ""
                    continue
                last = exc
                if req.tpot_ms and said == "margin":
                    worker.view.epsilons.of(req.tpot_ms / 1000).refused()  # its ε alone refused it
                continue
            return worker, reply
        if last is None or last.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:  # refused, each for its reason
            raise refusal_error(all_refused(refused_by, last.details() if last is not None else never))
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


def refusal_error(refusal: Refusal) -> RequestError:
    return RequestError(grpc.StatusCode[refusal.code], refusal.message, reason=refusal.reason)
