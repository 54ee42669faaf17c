"""The simulated gateway's Prefill calls (``RequestFlow.prefill`` over gRPC): sent to the chosen
prefill worker (its KV copied into the reservation, then the answer) or, with local prefill, to
the decode worker holding the reservation (its engine computes the prompt in its own steps, and
its first output answers the call); the answer reaches the gateway a hop and a drawn call
overhead later. A scripted loss (``SimWorker.lost_calls``) fails the call instead."""

from __future__ import annotations


from common.engine.core import AdmissionError
from common.engine.leases import LeaseError
from common.engine.request import RequestOutput, left_on_arrival
from common.model.sampling_params import SamplingParams
from common.slo.ttft_guard import TtftGuard
from common.slo.ttft_margins import left_for_worker_ms
from gateway.request_stages import Stage
from simulator.flight import Flight
from simulator.workers import SimWorker
from simulator.gateway_parts import SimGatewayParts


class SimPrefillCalls(SimGatewayParts):
    """The simulated gateway's the prefill calls (a part of ``SimGateway``)."""

    def _send_prefill(self, flight: Flight, worker: SimWorker, guard: TtftGuard) -> None:
        flight.prefill = worker
        flight.to(Stage.PREFILLING)
        flight.prefill_raw_s = guard.predict_s(flight.tokens, flight.deadline, calibrated=False)
        planned = guard.predict_s(flight.tokens, flight.deadline, ttft_s=flight.ttft_s)  # what admitted it
        flight.promise.prefill_going(self.sim.now, planned, guard.headrooms, flight.ttft_s)
        guard.sent(flight.request_id, flight.deadline, flight.tokens, flight.ttft_s)
        self.states[worker.worker_id].inflight += 1
        self.loop.served(self.sim.now)
        if self.host is not None:  # served from here on: its workers' own threads carry it
            assert flight.decode is not None  # reserved before its prefill (``_reserved``)
            for served in {worker.worker_id: worker, flight.decode.worker_id: flight.decode}:  # once each
                self.host.handed(served, self.sim.now)
        params = SamplingParams(max_tokens=flight.planned.output_len, ignore_eos=True)
        left_ms = left_for_worker_ms(flight.deadline, self.sim.now, guard.overhead.value(),
                                     guard.headrooms.margin(flight.ttft_s)) if flight.ttft_s else 0.0
        received = self.sim.now + self.config.hop_s  # a local prefill's call waits there for the worker's turn

        def prefill() -> None:
            worker.listeners[flight.request_id] = lambda out: self._prefilled(flight, out)
            try:
                worker.core.add_request(flight.request_id, [0] * flight.tokens, params, prefill_only=True,
                                        ttft_slo_ms=flight.ttft_s * 1000, ttft_left_ms=left_ms)
            except AdmissionError:  # late on its whole queue (``prefill_worker.servicer``): refused
                del worker.listeners[flight.request_id]
                self.sim.after(self.config.hop_s, self._prefill_refused, flight, worker, guard)

        def prefill_here() -> None:  # the decode worker computes it: its first output answers the call
            lease = flight.lease
            assert lease is not None
            worker.listeners[flight.request_id] = lambda out: self._prefilled_here(flight, out)
            try:
                worker.core.prefill_reserved(flight.request_id, lease.lease_id, [0] * flight.tokens, params,
                                             flight.ttft_s * 1000, flight.tpot_s * 1000,
                                             left_on_arrival(left_ms, received, self.sim.now))
            except (LeaseError, AdmissionError) as exc:  # the lease ran out; or its first token would be late
                del worker.listeners[flight.request_id]
                guard.dropped(flight.request_id)
                self.states[worker.worker_id].inflight -= 1
                ended = self._commit_refused if isinstance(exc, LeaseError) else self._local_refused
                self.sim.after(self.config.hop_s, ended, flight)

        if flight.request_id in worker.lost_calls:  # the call fails: the worker is lost during it
            self.sim.after(2 * self.config.hop_s, self._prefill_lost, flight, worker, guard)
            return
        self.sim.after(self.config.hop_s, worker.call, prefill_here if worker is flight.decode else prefill)

    def _prefill_refused(self, flight: Flight, worker: SimWorker, guard: TtftGuard) -> None:
        """The prefill worker's refusal reached the gateway: another is asked with the same lease
        (``retries.first_token``), or the request is refused."""
        if flight.ended:  # cancelled meanwhile: the call's end was counted then
            return
        guard.dropped(flight.request_id)
        self.states[worker.worker_id].inflight -= 1
        assert flight.path is not None
        flight.path.prefill_refused(worker.worker_id)
        flight.to(Stage.RESERVED)
        flight.prefill = None
        self._prefill(flight)

    def _prefilled(self, flight: Flight, out: RequestOutput) -> None:
        """On the prefill worker, between steps: the prompt's KV is ready; copy it, then answer."""
        worker = flight.prefill
        assert worker is not None
        copy_s = self.config.transfer_s + self.config.transfer_s_per_token * flight.tokens

        def copied() -> None:
            worker.call(lambda: worker.core.release_held(flight.request_id))
            if not flight.ended:
                self._answer_prefill(flight)

        self.sim.after(copy_s, copied)

    def _prefilled_here(self, flight: Flight, out: RequestOutput) -> None:
        """On the decode worker that computed the prompt, between steps: its first token answers
        the call; the outputs after it are its decode's."""
        decode = flight.decode
        assert decode is not None
        if flight.ended:
            return
        if not out.finished:
            decode.listeners[flight.request_id] = lambda later: self._decoded(flight, later)
        self._answer_prefill(flight)

    def _answer_prefill(self, flight: Flight) -> None:
        """The Prefill call's answer reaches the gateway a hop and a drawn call overhead later."""
        overhead = self._calls.choice(self.config.call_overhead_s) if self.config.call_overhead_s else 0.0
        if overhead and self._overhead_growth is not None:
            assert self.host is not None
            overhead *= self._overhead_growth.at(self.host.rate(self.sim.now))
        self.sim.after(self.config.hop_s + overhead, self._first_token, flight, overhead)
