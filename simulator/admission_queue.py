"""The gateway's admission queue on the virtual clock: the same ``AdmissionPump`` (who waits, who
queues behind them, the rounds and their turns) and the same moments as ``gateway.admission``
gives them over asyncio, event for event:

- one loop of rounds runs while anyone waits: it waits for a notification (capacity may have come
  free) or ``tick_s`` since its last round, whichever is first, then runs a round; a notification
  during a round makes the next one begin as soon as it ends;
- a round gives turns one at a time: the waiter tries a reservation, and its outcome is reported
  before the next turn;
- each waiter waits for a turn until its last useful moment, read when it joins, after each turn
  and after each wait: past it, it leaves, refused (``gateway.decode_reservation``).

The simulator has no timers to cancel: a wait superseded before it ends finds a newer number and
does nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from client.bench.metrics import REJECTED
from common.engine.leases import Lease
from common.slo.admission_pump import AdmissionPump
from common.slo.admission_round import Demand
from common.slo.guard_reading import Readings
from gateway.path_rules import Refusal, all_refused
from simulator.events import Simulation
from simulator.flight import Flight, Waiter
from simulator.workers import SimDecodeWorker

Reserved = Callable[["Flight", "SimDecodeWorker | None", "Lease | None"], None]  # no worker: refused everywhere


@dataclass(eq=False)
class SimAdmissionQueue:
    sim: Simulation
    tick_s: float
    refuse: Callable[[Flight, str, str], None]  # (flight, code, reason): a waiter whose last useful moment passed
    reserve: Callable[[Flight, Reserved], None]  # one reservation attempt, its outcome to the callback
    reserved: Callable[[Flight, SimDecodeWorker, Lease], None]  # a waiter admitted on its turn
    pump: AdmissionPump[Waiter] = field(default_factory=lambda: AdmissionPump(lambda w: w.demand))
    _looping: bool = False  # the loop of rounds runs (the gateway's rounds task)
    _woken: bool = False  # notified since the last round began (the gateway's wake event)
    _in_round: bool = False
    _wait: int = 0  # the loop's current wait

    @property
    def waiters(self) -> list[Waiter]:
        return self.pump.waiters

    def holds_one_no_harder(self, demand: Demand) -> bool:
        return self.pump.holds_one_no_harder(demand)

    def wait(self, flight: Flight, last_useful: Callable[..., float], refusal: Refusal) -> None:
        """``refusal``: what it is told if its last useful moment passes before a turn admits it
        (then what its last turn's refusal said)."""
        waiter = Waiter(flight, last_useful, refusal)
        self.pump.join(waiter)
        if not self._looping:
            self._looping = True
            self.sim.after(0.0, self._await_wake)  # (the gateway's loop is a task: it starts next)
        self._wait_for_turn(waiter, last_useful())

    def leave(self, flight: Flight) -> None:
        """The flight's request ended while it waited (its client cancelled): it leaves the queue;
        a turn it held goes on to the next waiter at once, whatever its reservation's answer."""
        for waiter in [w for w in self.pump.waiters if w.flight is flight]:
            self.pump.leave(waiter)
            waiter.waiting += 1
            if waiter.trying:
                waiter.trying = False
                self.pump.report(waiter, None)
                self.sim.after(0.0, self._next_turn)

    def notify(self) -> None:
        """Decode capacity may have come free: a round now, or as soon as the one under way ends."""
        self._woken = True
        if self._looping and not self._in_round:
            self._wait += 1
            self.sim.after(0.0, self._round, self._wait)

    # -- the loop of rounds --

    def _await_wake(self) -> None:
        if not self.pump.waiters:
            self._looping = False
            return
        self._wait += 1
        self.sim.after(0.0 if self._woken else self.tick_s, self._round, self._wait)

    def _round(self, wait: int) -> None:
        if wait != self._wait:
            return
        self._woken, self._in_round = False, True
        readings: Readings = {}  # each prefill worker read once for the order of every waiter
        if self.pump.begin(lambda w: w.last_useful(readings)):
            self._next_turn()
        else:
            self._round_over()

    def _round_over(self) -> None:
        self.pump.owed()  # (one loop runs the rounds: a notification during this one asked for the next)
        self._in_round = False
        self._await_wake()

    def _next_turn(self) -> None:
        waiter = self.pump.turn()
        if waiter is None:
            self._round_over()
            return
        waiter.waiting += 1  # its wait for a turn is over
        waiter.trying = True

        def turn(flight: Flight, worker: SimDecodeWorker | None, lease: Lease | None) -> None:
            if flight.ended:  # it left mid-turn (``leave``): the round went on without it
                return
            waiter.trying = False
            if worker is not None and lease is not None:
                self.pump.leave(waiter)
                self.pump.report(waiter, True)
                self.reserved(flight, worker, lease)
            else:
                self.pump.report(waiter, False)
                waiter.refusal = all_refused(flight.refused_by)
                if waiter.refusal.code != REJECTED:  # below every worker's floor: no wait can help
                    self.pump.leave(waiter)
                    self.refuse(flight, waiter.refusal.code, waiter.refusal.reason)
                else:
                    self._wait_for_turn(waiter, waiter.last_useful())
            self._next_turn()

        self.reserve(waiter.flight, turn)

    # -- one waiter --

    def _wait_for_turn(self, waiter: Waiter, until: float) -> None:
        waiter.waiting += 1
        self.sim.at(until, self._waited, waiter, waiter.waiting)

    def _waited(self, waiter: Waiter, waiting: int) -> None:
        """No turn came by the waiter's last useful moment as read last: read again; past it, refused."""
        if waiting != waiter.waiting or waiter not in self.pump.waiters:
            return
        until = waiter.last_useful()
        if until <= self.sim.now:
            self.pump.leave(waiter)
            self.refuse(waiter.flight, waiter.refusal.code, waiter.refusal.reason)
            return
        self._wait_for_turn(waiter, until)
