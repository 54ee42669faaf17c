"""A client that cancels, on the virtual clock, as the gateway ends a request whose RPC went away
(``RequestFlow._end`` with CANCELLED): at once it stops counting the request on its decode worker
and stops listening for it; a prefill call under way is dropped from its worker's TTFT guard; a
waiter leaves the admission queue; then the clean-up its stage calls for runs, call after call
(``gateway.request_stages.EXIT_CLEAN_UP``: abort the prefill, give the lease back, abort the
decode). Scripted: ``Flight.planned``'s request is cancelled when the caller says."""

from __future__ import annotations


from common.slo.ttft_guard import TtftGuard
from gateway.request_stages import EXIT_CLEAN_UP, Stage
from simulator.flight import Flight
from simulator.gateway_parts import SimGatewayParts

CANCELLED = "CANCELLED"


class SimCancels(SimGatewayParts):
    """The simulated gateway's cancels (a part of ``SimGateway``)."""

    def cancel(self, flight: Flight) -> None:
        """The client cancels the call now: the gateway hears it a hop later."""
        self.sim.after(self.config.hop_s, self._cancelled, flight)

    def _cancelled(self, flight: Flight) -> None:
        if flight.ended:  # answered (or refused) before the cancel came
            return
        stage, flight.ended = flight.stage, True
        self.admission.leave(flight)
        if stage is Stage.PREFILLING:  # the call's own end (``RequestFlow.prefill``'s ``finally``)
            assert flight.prefill is not None
            self.states[flight.prefill.worker_id].inflight -= 1
            self._guard_of(flight).dropped(flight.request_id)
        if flight.decode is not None:
            self._forget_decode(flight)
        for state in self.states.values():  # a reservation it was asking for counts no more
            if state.decode_view is not None:
                state.decode_view.routed.pop(flight.request_id, None)
        flight.record.error, flight.refusal = CANCELLED, "cancelled"
        self.done(flight)
        self._clean_up(flight, stage)

    def _guard_of(self, flight: Flight) -> TtftGuard:
        assert flight.prefill is not None
        return self.states[flight.prefill.worker_id].guard

    def _clean_up(self, flight: Flight, stage: Stage) -> None:
        plan = EXIT_CLEAN_UP[stage]
        rid, hop = flight.request_id, self.config.hop_s

        def abort_decode() -> None:
            decode = flight.decode
            if plan.abort_decode and decode is not None:
                self.sim.after(hop, decode.call, lambda: (decode.core.abort(rid),
                                                          self.sim.after(hop, self.admission.notify)))

        def release(writer_may_still_write: bool) -> None:
            if plan.release and flight.decode is not None and flight.lease is not None:
                self._give_back(flight, writer_may_still_write, abort_decode)
            else:
                abort_decode()

        prefill = flight.prefill
        if plan.abort_prefill and prefill is not None:  # its worker confirms no copy runs: blocks reused
            self.sim.after(hop, prefill.call, lambda: (prefill.core.abort(rid), self.sim.after(hop, release, False)))
        else:
            release(False)
