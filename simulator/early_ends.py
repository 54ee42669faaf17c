"""How the simulated gateway ends a request early, as the gateway does: a commit its decode worker
refuses, a local prefill refused, and a worker lost before the first token. A lost worker is
handled as ``gateway.retries`` handles it over gRPC: the try's lease is given back (its blocks quarantined when a prefill worker
may still be writing into them), the lost worker leaves routing until its next heartbeat, and the
request tries again on the others, up to ``path_rules.MAX_ATTEMPTS`` tries; then it fails with
UNAVAILABLE. (Losses are scripted: ``SimWorker.lost_calls``.)"""

from __future__ import annotations


from common.slo.ttft_guard import TtftGuard
from gateway.request_path import Fail
from simulator.flight import Flight
from simulator.workers import SimWorker
from simulator.gateway_parts import SimGatewayParts


class SimEarlyEnds(SimGatewayParts):
    """The simulated gateway's the early ends (a part of ``SimGateway``)."""

    def _commit_refused(self, flight: Flight) -> None:
        """As the gateway ends a request whose decode worker refuses its commit: UNAVAILABLE after
        its first token (``RequestFlow._commit``)."""
        self._forget_decode(flight)
        self.admission.notify()  # decode capacity may have come free
        self._fail(flight, "the decode worker refused the commit")

    def _local_refused(self, flight: Flight) -> None:
        """As the gateway ends a request its decode worker refused to prefill in time
        (RESOURCE_EXHAUSTED, ``retries.prefill_error``): that worker freed the reservation."""
        self._forget_decode(flight)
        self.admission.notify()
        self._refuse(flight, reason="ttft_unattainable")

    def _prefill_lost(self, flight: Flight, worker: SimWorker, guard: TtftGuard) -> None:
        """The Prefill call to ``worker`` failed as a lost worker's does (``retries.prefill_error``)."""
        if flight.ended:  # cancelled meanwhile: the call's end was counted then
            return
        guard.dropped(flight.request_id)
        self.states[worker.worker_id].inflight -= 1
        role = "decode" if worker is flight.decode else "prefill"  # a decode worker prefilling itself
        assert flight.path is not None
        then = flight.path.lost(role, self.states[worker.worker_id], f"{role} worker {worker.worker_id} was lost")

        def forgotten() -> None:  # the Release answered (``RequestFlow.forget``)
            self._forget_decode(flight)
            flight.attempt_forgotten()
            if isinstance(then, Fail):
                self._fail(flight, then.message)
            else:
                self._seek_decode(flight)

        self._give_back(flight, then.writer_may_still_write, forgotten)

    def _fail(self, flight: Flight, why: str) -> None:
        """Ends the request with UNAVAILABLE: the cluster's fault, not the client's (``why`` is
        what its client would read)."""
        flight.ended = True
        self.admission.leave(flight)  # a waiter it was: a turn it held goes on
        flight.record.error, flight.refusal = "UNAVAILABLE", "unavailable"
        self.sim.after(self.config.hop_s, self.done, flight)
