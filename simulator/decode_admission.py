"""The simulated gateway's decode admission (``simulator.gateway``): a reservation tried on the
decode workers in the router's order, each worker's answer after a hop, and, refused everywhere,
what ``gateway.request_path.after_refusals`` says (the admission queue's rounds until the last
useful moment, or a wait for KV blocks), as ``gateway.decode_reservation`` does over gRPC.
"""

from __future__ import annotations

from collections.abc import Callable

from common.engine.core import AdmissionError
from common.engine.leases import Lease
from common.slo.guard_reading import Readings
from gateway import request_path
from gateway.request_path import AfterRefusals, admitted_margin, after_refusals, blocks_wait_until
from gateway.request_stages import Stage
from simulator.admission_queue import Reserved
from simulator.flight import Flight
from simulator.workers import SimDecodeWorker
from simulator.gateway_parts import SimGatewayParts


class SimDecodeAdmission(SimGatewayParts):
    """The simulated gateway's decode admission (a part of ``SimGateway``)."""

    def _reserve(self, flight: Flight, then: Reserved) -> None:
        candidates = self._decode_order(flight)
        if not candidates:  # every one lost on an earlier try, or out of routing
            self._fail(flight, "no decode worker is available")
            return
        self._try_decode(flight, candidates, 0, then)

    def _decode_order(self, flight: Flight) -> list[SimDecodeWorker]:
        return [s.worker for s in self.router.decode_candidates(self.pool, flight.tpot_s)  # type: ignore[misc]
                if s.worker_id not in flight.avoid["decode"]]

    def _try_decode(self, flight: Flight, candidates: list[SimDecodeWorker], at: int, then: Reserved) -> None:
        flight.blocks_only = flight.blocks_only if at else True  # every refusal so far for want of blocks
        if at == len(candidates):
            then(flight, None, None)
            return
        worker = candidates[at]
        self._hear_tokens(worker)
        state = self.states[worker.worker_id]
        epsilon = self.views[worker.worker_id].epsilons.margin(flight.tpot_s)

        def reserve() -> None:
            try:
                lease = worker.core.reserve(flight.request_id, flight.tokens, flight.planned.output_len,
                                            flight.tpot_s * 1000, epsilon,
                                            handoff_s=self.views[worker.worker_id].handoff_s(state.tpot_alone_s or 0.0))
            except AdmissionError as exc:
                lease, flight.blocks_only = None, False
                if exc.margin_alone:
                    self.views[worker.worker_id].epsilons.of(flight.tpot_s).refused()  # its ε alone refused it
            self.sim.after(self.config.hop_s, replied, lease)

        def replied(lease: Lease | None) -> None:
            if flight.ended:  # cancelled while it asked: a lease it brings is released on arrival
                if lease is not None:
                    self.sim.after(self.config.hop_s, worker.call,
                                   lambda: worker.core.release_reservation(flight.request_id, lease.lease_id, False))
                return
            if lease is None:
                self.views[worker.worker_id].routed.pop(flight.request_id, None)
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
        then = after_refusals(self.config.ttft_guard, flight.ttft_s, flight.blocks_only)
        if then is AfterRefusals.WAIT_FOR_ADMISSION:
            self._wait(flight)
        elif then is AfterRefusals.WAIT_FOR_BLOCKS:
            until = blocks_wait_until(self.sim.now, flight.deadline, None)
            self.admission.wait(flight, lambda readings=None: until)
        else:
            self._refuse(flight)

    def _reserved(self, flight: Flight, worker: SimDecodeWorker, lease: Lease) -> None:
        flight.decode, flight.lease = worker, lease
        flight.to(Stage.RESERVED)
        self.states[worker.worker_id].inflight += 1
        self.views[worker.worker_id].routed[flight.request_id] = flight.tpot_s
        if not self._ttft_ok(flight, worker):  # the wait, or the reservation itself, used up the slack
            self._give_back(flight, then=lambda: self._forgotten_and(flight, self._refuse, reason="ttft_unattainable"))
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

    # -- the admission queue (``simulator.admission_queue``) --

    def _wait(self, flight: Flight) -> None:
        def last_useful(readings: Readings | None = None) -> float:
            return request_path.last_useful(self.pool, flight.prompt, flight.deadline, self.sim.now, flight.ttft_s,
                                            readings)

        self.admission.wait(flight, last_useful)
