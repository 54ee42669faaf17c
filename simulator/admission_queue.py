"""The gateway's admission queue on the virtual clock (``gateway.admission`` in the cluster):
requests no decode worker admits wait for capacity while their TTFT deadline allows a prefill.

Rounds run on a notification (capacity may have come free) and at every tick, in the order of the
cluster's own ``AdmissionRound``; a waiter is refused once its last useful moment has passed. A
request arriving while a waiter no harder to admit is waiting joins without trying first
(``queues_behind``, asked by the simulated gateway)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from common.engine.leases import Lease
from common.slo.admission_round import AdmissionRound, Demand, queues_behind
from common.slo.guard_reading import Readings
from simulator.events import Simulation
from simulator.flight import Flight, Waiter
from simulator.workers import SimDecodeWorker

Reserved = Callable[["Flight", "SimDecodeWorker | None", "Lease | None"], None]  # no worker: refused everywhere


@dataclass(eq=False)
class SimAdmissionQueue:
    sim: Simulation
    tick_s: float
    refuse: Callable[[Flight], None]  # a waiter whose last useful moment passed
    reserve: Callable[[Flight, Reserved], None]  # one reservation attempt, its outcome to the callback
    reserved: Callable[[Flight, SimDecodeWorker, Lease], None]  # a waiter admitted on its turn
    waiters: list[Waiter] = field(default_factory=list)
    _rounds_running: bool = False
    _round_again: bool = False
    _ticking: bool = False

    def holds_one_no_harder(self, demand: Demand) -> bool:
        """A waiter no harder to admit than a request of ``demand`` is waiting."""
        return queues_behind(demand, (w.demand for w in self.waiters))

    def wait(self, flight: Flight, last_useful: Callable[..., float]) -> None:
        self.waiters.append(Waiter(flight, last_useful))
        if not self._ticking:
            self._ticking = True
            self.sim.after(self.tick_s, self._tick)

    def notify(self) -> None:
        """Decode capacity may have come free: a round soon."""
        if self.waiters:
            self.sim.after(0.0, self._round)

    def _tick(self) -> None:
        now = self.sim.now
        # each waiter's last useful moment, read once for the tick's refusals and the round's order
        # (nothing runs between them: the same state, the same answers, at a third of the cost),
        # on one reading of each prefill worker
        readings: Readings = {}
        last = {id(w): w.last_useful(readings) for w in self.waiters if not w.trying}
        for waiter in [w for w in self.waiters if not w.trying and last[id(w)] <= now]:
            self.waiters.remove(waiter)
            self.refuse(waiter.flight)
        self._round(last)
        self._ticking = bool(self.waiters)
        if self._ticking:
            self.sim.after(self.tick_s, self._tick)

    def _round(self, last_useful: dict[int, float] | None = None) -> None:
        """``last_useful``: the waiters' last useful moments, by ``id``, where the caller just read them."""
        if self._rounds_running:
            self._round_again = True
            return
        if not self.waiters:
            return
        self._rounds_running = True
        known = last_useful or {}
        readings: Readings = {}
        turns = AdmissionRound(list(self.waiters),
                               lambda w: known[id(w)] if id(w) in known else w.last_useful(readings),
                               lambda w: w.demand)
        self._next_turn(turns)

    def _next_turn(self, turns: AdmissionRound[Waiter]) -> None:
        waiter = turns.next(lambda w: w in self.waiters)
        if waiter is None:
            self._rounds_running = False
            if self._round_again:
                self._round_again = False
                self._round()
            return
        if waiter.last_useful() <= self.sim.now:
            self.waiters.remove(waiter)
            self.refuse(waiter.flight)
            turns.report(waiter, None)
            self._next_turn(turns)
            return

        def turn(flight: Flight, worker: SimDecodeWorker | None, lease: Lease | None) -> None:
            waiter.trying = False
            turns.report(waiter, worker is not None)
            if worker is not None and lease is not None:
                self.waiters.remove(waiter)
                self.reserved(flight, worker, lease)
            self._next_turn(turns)

        waiter.trying = True
        self.reserve(waiter.flight, turn)
