"""The simulated gateway's decode admission (``simulator.gateway``): a reservation tried on the
decode workers its path names (``RequestPath.reserve``), each worker's answer after a hop, and,
refused everywhere, what ``RequestPath.refused_everywhere`` says (the admission queue's rounds
until the last useful moment, or a wait for KV blocks), as ``gateway.decode_reservation`` does
over gRPC.
"""

from __future__ import annotations

from collections.abc import Callable

from common.engine.core import AdmissionError
from common.engine.leases import Lease
from client.bench.metrics import REJECTED
from gateway.path_rules import admitted_margin, all_refused
from gateway.request_path import Fail, Wait
from gateway.request_stages import Stage
from simulator.admission_queue import Reserved
from simulator.flight import Flight
from simulator.workers import SimDecodeWorker
from simulator.gateway_parts import SimGatewayParts


class SimDecodeAdmission(SimGatewayParts):
    """The simulated gateway's decode admission (a part of ``SimGateway``)."""

    def _reserve(self, flight: Flight, then: Reserved) -> None:
        """Asks the decode workers its path names now (``RequestPath.reserve``), then ``then``."""
        assert flight.path is not None
        ask = flight.path.reserve()
        if isinstance(ask, Fail):  # every one lost on an earlier try, or out of routing
            self._fail(flight, ask.message)
            return
        self._try_decode(flight, [s.worker for s in ask.candidates], 0, then)  # type: ignore[misc]

    def _try_decode(self, flight: Flight, candidates: list[SimDecodeWorker], at: int, then: Reserved) -> None:
        if not at:
            flight.refused_by = []
        if at == len(candidates):
            then(flight, None, None)
            return
        worker = candidates[at]
        self._hear_tokens(worker)
        state = self.states[worker.worker_id]
        epsilon = self.views[worker.worker_id].epsilons.margin(flight.tpot_s)

        def reserve() -> None:
            said = ""  # as the decode worker's servicer says why it refused (``REFUSED_BY``)
            try:
                lease = worker.core.reserve(flight.request_id, flight.tokens, flight.planned.output_len,
                                            flight.tpot_s * 1000, epsilon,
                                            handoff_s=self.views[worker.worker_id].handoff_s(state.tpot_alone_s or 0.0))
                said = "kv" if lease is None else ""
            except AdmissionError as exc:
                lease, said = None, "floor" if exc.never else "margin" if exc.margin_alone else ""
            self.sim.after(self.config.hop_s, replied, lease, said)

        def replied(lease: Lease | None, said: str) -> None:
            if flight.ended:  # cancelled while it asked: a lease it brings is released on arrival
                if lease is not None:
                    self.sim.after(self.config.hop_s, worker.call,
                                   lambda: worker.core.release_reservation(flight.request_id, lease.lease_id, False))
                return
            if lease is None:
                self.views[worker.worker_id].routed.pop(flight.request_id, None)
                flight.refused_by.append(said)
                if flight.tpot_s and said == "margin":
                    self.views[worker.worker_id].epsilons.of(flight.tpot_s).refused()  # its ε alone refused it
                self._try_decode(flight, candidates, at + 1, then)
            else:
                flight.promise.tpot_epsilon = admitted_margin(lease.alone, epsilon)
                then(flight, worker, lease)

        # counted where it is asked, as the gateway counts it: a burst that arrives together spreads
        self.views[worker.worker_id].routed[flight.request_id] = flight.tpot_s
        self.sim.after(self.config.hop_s, worker.call, reserve)

    def _hear_tokens(self, worker: SimDecodeWorker) -> None:
        """The closed loop's look at the requests decoding on ``worker`` (``PromiseRecord.heard``), brought
        up to now before ε is read: the gateway hears every token as it comes, and ε matters only
        when it admits. (Tokens a hop in flight count as heard.)"""
        decoding = self.decoding[worker.worker_id]
        if not decoding:
            return
        view = self.views[worker.worker_id]
        now = self.sim.now
        for rid, decoded in worker.decoded_by_now().items():
            flight = decoding.get(rid)
            if flight is not None:
                flight.promise.heard(decoded + 1, now, flight.tpot_s, view)

    def _reserved_or_wait(self, flight: Flight, worker: SimDecodeWorker | None, lease: Lease | None) -> None:
        if worker is not None and lease is not None:
            self._reserved(flight, worker, lease)
            return
        assert flight.path is not None
        refusal = all_refused(flight.refused_by)
        if refusal.code != REJECTED:  # below every worker's floor: never met, however long it waited
            self._refuse(flight, refusal.code, refusal.reason)
            return
        after = flight.path.refused_everywhere(self.sim.now, refusal.reason == "kv_cache_full", refusal)
        if isinstance(after, Wait):
            self.admission.wait(flight, after.last_useful, after.refusal)
        else:
            self._refuse(flight, refusal.code, refusal.reason)

    def _reserved(self, flight: Flight, worker: SimDecodeWorker, lease: Lease) -> None:
        flight.decode, flight.lease = worker, lease
        flight.to(Stage.RESERVED)
        self.states[worker.worker_id].inflight += 1
        self.views[worker.worker_id].routed[flight.request_id] = flight.tpot_s
        assert flight.path is not None
        if (refused := flight.path.reserved(self.states[worker.worker_id], self.sim.now)) is not None:
            # the wait, or the reservation itself, used up the slack
            self._give_back(flight, then=lambda: self._forgotten_and(flight, self._refuse, refused.refusal.code,
                                                                     refused.refusal.reason))
            return
        self._prefill(flight)

    def _give_back(self, flight: Flight, writer_may_still_write: bool = False,
                   then: Callable[[], None] | None = None) -> None:
        """Releases the flight's lease (``WorkerRelease._release``): once the decode worker
        answers, decode capacity may have come free (the admission queue hears it), then ``then``."""
        worker, lease = flight.decode, flight.lease
        assert worker is not None and lease is not None

        def answered() -> None:
            self.admission.notify()
            if then is not None:
                then()

        def release() -> None:
            worker.core.release_reservation(flight.request_id, lease.lease_id, writer_may_still_write)
            self.sim.after(self.config.hop_s, answered)

        self.sim.after(self.config.hop_s, worker.call, release)

    def _forgotten_and(self, flight: Flight, then: Callable[..., None], *args: object, **kwargs: object) -> None:
        """The request's decode worker forgets it (the gateway's end of the request), then ``then``."""
        self._forget_decode(flight)
        then(flight, *args, **kwargs)

    def _forget_decode(self, flight: Flight) -> None:
        assert flight.decode is not None
        self.states[flight.decode.worker_id].inflight -= 1
        self.views[flight.decode.worker_id].routed.pop(flight.request_id, None)
        self.decoding[flight.decode.worker_id].pop(flight.request_id, None)
