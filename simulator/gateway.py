"""The gateway on the virtual clock: each request's path through the cluster, decided by the
gateway's own policy code (``gateway.request_path``, ``gateway.router``).

    arrive ─▶ TTFT guard ─▶ Reserve on decode workers in the router's order (refused everywhere,
      or a waiter no harder to admit waiting: the admission queue's rounds until the last useful
      moment; ``simulator.decode_admission``) ─▶ TTFT guard again ─▶ Prefill on the router's
      first prefill worker ─▶ KV copy ─▶ first token (TTFT to the closed loop) ─▶ Commit
      ─▶ decode (a TPOT late on the way) ─▶ last token (TPOT to the closed loop); each told
      through the request's ``PromiseRecord``, as the gateway tells it

or, with local prefill, when no prefill worker is predicted in time and the decode worker holding
the reservation is: Prefill on that decode worker (its engine computes the prompt in its own
steps) ─▶ first token ─▶ decode, with no KV copy and no Commit.

Every message between processes takes ``hop_s``; prefill workers' loads reach the TTFT guards by
heartbeat, as in the cluster. With ``gateway_loop_s`` the gateway's event loop is one server in
front of it all (``simulator.event_loop``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from client.bench.metrics import REJECTED
from common.engine.leases import LeaseError
from common.engine.request import RequestOutput
from common.model.sampling_params import SamplingParams
from common.slo.load_report import LoadReport
from common.slo.tpot_guard import DecodeView, handoff_window, tpot_epsilons
from common.slo.ttft_guard import TtftGuard, new_guard
from gateway.request_path import Fail, Refuse, RequestPath, Wait
from gateway.router import router_for
from simulator.admission_queue import SimAdmissionQueue
from simulator.cancels import SimCancels
from simulator.config import SimConfig
from simulator.decode_admission import SimDecodeAdmission
from simulator.event_loop import EventLoop
from simulator.events import Simulation
from gateway.request_stages import Stage
from simulator.flight import Flight
from simulator.host import HostCpu, RateLaw
from simulator.early_ends import SimEarlyEnds
from simulator.prefill_calls import SimPrefillCalls
from simulator.worker_state import SimPool, SimWorkerState
from simulator.workers import SimDecodeWorker, SimPrefillWorker


@dataclass(eq=False)
class SimGateway(SimCancels, SimPrefillCalls, SimEarlyEnds, SimDecodeAdmission):
    sim: Simulation
    config: SimConfig
    prefills: list[SimPrefillWorker]
    decodes: list[SimDecodeWorker]
    done: Callable[[Flight], None]  # a flight's record is complete (finished or refused)
    host: HostCpu | None = None  # the cores the front end shares with the workers (None: not simulated)
    guards: dict[str, TtftGuard] = field(default_factory=dict)
    local_guards: dict[str, TtftGuard] = field(default_factory=dict)  # of the decode workers' own prefills
    views: dict[str, DecodeView] = field(default_factory=dict)
    decoding: dict[str, dict[str, Flight]] = field(default_factory=dict)  # by decode worker: those with a TPOT SLO
    # requests refused before any work, by the reason the gateway counts (``pdserve:request_rejections``)
    refusals: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        target = self.config.slo_target
        for w in self.prefills:
            self.guards[w.worker_id] = new_guard(w.core.cost_models.prefill if w.core.cost_models else None,
                                                 self.config.max_num_tokens, target, self.sim.clock)
        for w in self.decodes:
            self.views[w.worker_id] = DecodeView(tpot_epsilons(target, self.sim.clock),
                                                 handoffs=handoff_window(self.sim.clock))
            if self.config.prefills_locally and w.core.cost_models is not None:
                self.local_guards[w.worker_id] = new_guard(w.core.cost_models.prefill, self.config.max_num_tokens,
                                                           target, self.sim.clock, probe_first=False)
        self.decoding = {w.worker_id: {} for w in self.decodes}
        # the gateway's router over what this gateway knows of each worker, on the virtual clock;
        # ``round_robin``: fcfs admission with prefill workers taken in turn (decode least loaded)
        self.pool = SimPool([SimWorkerState(worker=w, load=LoadReport(), ttft=self.guards[w.worker_id])
                             for w in self.prefills],
                            [SimWorkerState(worker=w, load=LoadReport(), ttft=self.local_guards.get(w.worker_id),
                                            decode_view=self.views[w.worker_id]) for w in self.decodes])
        self.states = {s.worker_id: s for s in (*self.pool.prefill, *self.pool.decode)}
        for state in self.states.values():  # what each registers with
            state.heartbeat(self.config.engine_policy)
        self.router = router_for(self.config.ttft_guard,
                                 "round_robin" if self.config.policy == "round_robin" else "kv_aware",
                                 clock=lambda: self.sim.now)
        self._calls = random.Random(f"{self.config.seed}-calls")  # draws of ``config.call_overhead_s``
        growth = self.config.call_overhead_growth  # those draws × this law at the host's rate (with a host)
        self._overhead_growth = RateLaw(*growth) if growth[0] > 0 and self.host is not None else None
        self.admission = SimAdmissionQueue(self.sim, self.config.admission_tick_s, self._refuse, self._reserve,
                                           self._reserved)
        self.stopped = False  # every request has its answer: heartbeats stop, so the simulation ends
        self.loop = EventLoop(*self.config.gateway_loop_s)
        self.sim.after(self.config.heartbeat_s, self._heartbeats)

    # -- arrival and refusal --

    def send(self, flight: Flight) -> None:
        """The client sends the request now."""
        flight.record.start = self.sim.now
        if self.host is not None:
            self.host.sent(self.sim.now)
        self.sim.after(self.config.hop_s, self._reach, flight)

    def _reach(self, flight: Flight) -> None:
        """The call reaches the gateway's process; its handler runs when the event loop is free. The
        request is planned from here (its client's stamp, less the hop), not from its handler."""
        flight.promise.arrived = self.sim.now
        flight.path = RequestPath(self.router, self.pool, flight.prompt, flight.ttft_s, flight.tpot_s, flight.demand,
                                  self.sim.now, self.sim.clock)
        if self.loop.modelled:
            self.sim.at(self.loop.handler(self.sim.now), self._arrive, flight)
        else:
            self._arrive(flight)

    def _arrive(self, flight: Flight) -> None:
        assert flight.path is not None
        if flight.tokens + flight.planned.output_len > self.config.max_model_len:
            self._refuse(flight, "INVALID_ARGUMENT", "invalid_argument")
        elif (refused := flight.path.on_arrival(self.sim.now)) is not None:
            self._refuse(flight, refused.refusal.code, refused.refusal.reason)
        else:
            self._seek_decode(flight)

    def _seek_decode(self, flight: Flight) -> None:
        """A decode reservation where its path says (``RequestPath.seek``; each try's)."""
        assert flight.path is not None
        then = flight.path.seek(self.sim.now, self.admission.holds_one_no_harder(flight.demand))
        if isinstance(then, Refuse):
            self._refuse(flight, then.refusal.code, then.refusal.reason)
        elif isinstance(then, Fail):
            self._fail(flight, then.message)
        elif isinstance(then, Wait):
            self.admission.wait(flight, then.last_useful, then.refusal)
        else:
            self._try_decode(flight, [s.worker for s in then.candidates], 0, self._reserved_or_wait)  # type: ignore[misc]

    def _refuse(self, flight: Flight, code: str = REJECTED, reason: str = "decode_admission") -> None:
        flight.ended = True
        flight.record.error, flight.refusal = code, reason
        self.refusals[reason] = self.refusals.get(reason, 0) + 1
        self.sim.after(self.config.hop_s, self.done, flight)

    # -- prefill, first token, decode --

    def _prefill(self, flight: Flight) -> None:
        """Its prompt computed where its path says (a prefill worker, or its decode worker)."""
        assert flight.path is not None and flight.decode is not None  # reserved before its prefill
        then = flight.path.prefill(self.states[flight.decode.worker_id], 0, self.sim.now)
        if isinstance(then, (Fail, Refuse)):  # none left (lost, or refused it): it ends, its lease given back
            self._forget_decode(flight)
            self._give_back(flight)
            if isinstance(then, Fail):
                self._fail(flight, then.message)
            else:
                self._refuse(flight, then.refusal.code, then.refusal.reason)
            return
        self._send_prefill(flight, then.worker.worker, then.worker.guard)

    def _first_token(self, flight: Flight, overhead_s: float = 0.0) -> None:
        assert flight.prefill is not None and flight.decode is not None and flight.lease is not None
        if flight.ended:
            return
        flight.to(Stage.PREFILLED)
        now = self.sim.now
        local = flight.prefill is flight.decode
        guard = (self.local_guards if local else self.guards)[flight.prefill.worker_id]
        observed = now - flight.promise.prefill_sent
        guard.answered(flight.request_id, observed, flight.prefill_raw_s, observed - 2 * self.config.hop_s - overhead_s,
                       0.0 if local else flight.prefill.core.load.forward_calibration_ratio)
        self.states[flight.prefill.worker_id].inflight -= 1
        flight.promise.first_token(now, flight.ttft_s, guard.headrooms)
        flight.record.token_times.append(now + self.config.hop_s)
        flight.record.tokens_per_message.append(1)
        if flight.planned.output_len == 1:
            if local:
                self._forget_decode(flight)
                self.admission.notify()  # decode capacity may have come free
                self._finished(flight, now)
            else:  # the gateway answers once the lease is given back
                self._give_back(flight, then=lambda: self._forgotten_and(flight, lambda f: self._finished(f, self.sim.now)))
            return
        if local:  # it decodes there already
            flight.to(Stage.COMMITTING)
            flight.to(Stage.STREAMING)
            if flight.tpot_s:
                self.decoding[flight.decode.worker_id][flight.request_id] = flight
            if flight.last_heard:  # its last token came before the first's answer: held till now
                self._last_token(flight)
            return
        decode, lease = flight.decode, flight.lease
        params = SamplingParams(max_tokens=flight.planned.output_len, ignore_eos=True)

        if flight.tpot_s:
            self.decoding[decode.worker_id][flight.request_id] = flight

        def commit() -> None:
            decode.listeners[flight.request_id] = lambda out: self._decoded(flight, out)
            try:
                decode.core.commit(flight.request_id, lease.lease_id, [0] * flight.tokens, 0, params,
                                   flight.tpot_s * 1000)
            except LeaseError:  # the first token came after the reservation's lease ran out
                del decode.listeners[flight.request_id]
                self.sim.after(self.config.hop_s, self._commit_refused, flight)
                return
            self.sim.after(self.config.hop_s, flight.to, Stage.STREAMING)  # its answer reaches the gateway

        flight.to(Stage.COMMITTING)
        self.sim.after(self.config.hop_s, decode.call, commit)

    def _decoded(self, flight: Flight, out: RequestOutput) -> None:
        if flight.ended:
            return
        flight.promise.second_heard = flight.promise.second_heard or self.sim.now + self.config.hop_s  # heard then
        if out.finished:
            self.sim.after(self.config.hop_s, self._last_token, flight)

    def _last_token(self, flight: Flight) -> None:
        if flight.ended:
            return
        if flight.stage is not Stage.STREAMING:  # (local prefill) its first token's answer is still on the way:
            flight.last_heard = True  # the gateway holds the stream's events until it has read that
            return
        self._forget_decode(flight)
        self.admission.notify()  # decode capacity may have come free
        flight.record.token_times.append(self.sim.now + self.config.hop_s)
        flight.record.tokens_per_message.append(flight.planned.output_len - 1)
        self._finished(flight, self.sim.now)

    def _finished(self, flight: Flight, now: float) -> None:
        assert flight.decode is not None
        flight.to(Stage.DONE)
        flight.ended = True
        flight.promise.finished(flight.planned.output_len, now, flight.tpot_s, self.views[flight.decode.worker_id])
        self.sim.after(self.config.hop_s, self.done, flight)

    # -- heartbeats --

    def _heartbeats(self) -> None:
        if self.stopped:
            return
        for state in self.states.values():
            state.heartbeat(self.config.engine_policy)
        self.sim.after(self.config.heartbeat_s, self._heartbeats)
