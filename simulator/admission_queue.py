"""The gateway's admission queue on the virtual clock (``gateway.admission`` in the cluster): the
same ``AdmissionPump`` (who waits, who queues behind them, the rounds and their turns), driven by
simulated time: rounds run on a notification (capacity may have come free) and at every tick, and
a waiter is refused once its last useful moment has passed (the gateway's waiter decides that
itself, on its own timer; here the tick and the turn do, at the same moments)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from common.engine.leases import Lease
from common.slo.admission_pump import AdmissionPump
from common.slo.admission_round import Demand
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
    pump: AdmissionPump[Waiter] = field(default_factory=lambda: AdmissionPump(lambda w: w.demand))
    _ticking: bool = False

    @property
    def waiters(self) -> list[Waiter]:
        return self.pump.waiters

    def holds_one_no_harder(self, demand: Demand) -> bool:
        return self.pump.holds_one_no_harder(demand)

    def wait(self, flight: Flight, last_useful: Callable[..., float]) -> None:
        self.pump.join(Waiter(flight, last_useful))
        if not self._ticking:
            self._ticking = True
            self.sim.after(self.tick_s, self._tick)

    def notify(self) -> None:
        """Decode capacity may have come free: a round soon."""
        if self.pump.waiters:
            self.sim.after(0.0, self._round)

    def _tick(self) -> None:
        now = self.sim.now
        # each waiter's last useful moment, read once for the tick's refusals and the round's order
        # (nothing runs between them: the same state, the same answers, at a third of the cost),
        # on one reading of each prefill worker
        readings: Readings = {}
        last = {id(w): w.last_useful(readings) for w in self.waiters if not w.trying}
        for waiter in [w for w in self.waiters if not w.trying and last[id(w)] <= now]:
            self.pump.leave(waiter)
            self.refuse(waiter.flight)
        self._round(last)
        self._ticking = bool(self.waiters)
        if self._ticking:
            self.sim.after(self.tick_s, self._tick)

    def _round(self, last_useful: dict[int, float] | None = None) -> None:
        """``last_useful``: the waiters' last useful moments, by ``id``, where the caller just read them."""
        known = last_useful or {}
        readings: Readings = {}
        if self.pump.begin(lambda w: known[id(w)] if id(w) in known else w.last_useful(readings)):
            self._next_turn()

    def _next_turn(self) -> None:
        waiter = self.pump.turn()
        if waiter is None:
            if self.pump.owed():
                self._round()
            return
        if waiter.last_useful() <= self.sim.now:
            self.pump.leave(waiter)
            self.refuse(waiter.flight)
            self.pump.report(waiter, None)
            self._next_turn()
            return

        def turn(flight: Flight, worker: SimDecodeWorker | None, lease: Lease | None) -> None:
            waiter.trying = False
            self.pump.report(waiter, worker is not None)
            if worker is not None and lease is not None:
                self.pump.leave(waiter)
                self.reserved(flight, worker, lease)
            self._next_turn()

        waiter.trying = True
        self.reserve(waiter.flight, turn)
