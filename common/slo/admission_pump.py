"""The admission queue's state, for the gateway's queue (``gateway.admission``, over asyncio) and
the simulated gateway's (on the virtual clock) alike: who waits, whether a newcomer queues behind
them, and the rounds that give waiters their turns.

A round is ``AdmissionRound``'s order over the waiters at its start; each turn's outcome is
reported before the next turn is given (a refusal lets the round skip every waiter at least as
hard to admit). A round asked for while one is under way is owed and begins when that one ends:
capacity that came free mid-round is not missed, and two rounds never interleave their turns.

Plain state: the adapters own the clock, the waking and the reservation calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from common.slo.admission_round import AdmissionRound, Demand, queues_behind

W = TypeVar("W")


class AdmissionPump(Generic[W]):
    def __init__(self, demand: Callable[[W], Demand]) -> None:
        self.demand = demand
        self.waiters: list[W] = []
        self._round: AdmissionRound[W] | None = None
        self._owed = False

    def __len__(self) -> int:
        return len(self.waiters)

    def holds_one_no_harder(self, demand: Demand) -> bool:
        """A waiter no harder to admit than a request of ``demand`` is waiting: the request queues
        behind it without trying first (``common.slo.admission_round.queues_behind``)."""
        return queues_behind(demand, (self.demand(w) for w in self.waiters))

    def join(self, waiter: W) -> None:
        self.waiters.append(waiter)

    def leave(self, waiter: W) -> None:
        """The waiter is admitted, refused or gone (idempotent): a round under way skips it."""
        if waiter in self.waiters:
            self.waiters.remove(waiter)

    def begin(self, deadline: Callable[[W], float]) -> bool:
        """Starts a round over the waiters now, least slack first by ``deadline`` (their last useful
        moments); False when nobody waits, or when a round is under way (then one more is owed)."""
        if self._round is not None:
            self._owed = True
            return False
        if not self.waiters:
            return False
        self._round = AdmissionRound(list(self.waiters), deadline, self.demand)
        return True

    def turn(self) -> W | None:
        """The round's next waiter to try (still waiting, not skipped); None: the round is over."""
        if self._round is None:
            return None
        waiter = self._round.next(lambda w: w in self.waiters)
        if waiter is None:
            self._round = None
        return waiter

    def report(self, waiter: W, admitted: bool | None) -> None:
        """The outcome of ``waiter``'s turn (None: it left without trying)."""
        if self._round is not None:
            self._round.report(waiter, admitted)

    def owed(self) -> bool:
        """Whether a round was asked for while the last one ran (and forgets it: the caller begins it)."""
        owed, self._owed = self._owed, False
        return owed and bool(self.waiters)
