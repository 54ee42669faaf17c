"""The order in which requests waiting for a decode worker are tried again (the TPOT guard's
admission queue), for the gateway's ``AdmissionQueue`` and the simulator alike.

A round gives turns least slack first (earliest last useful moment). VBS admission only gets
harder for a tighter TPOT SLO, so once a waiter is refused, every later waiter at least as tight
is skipped for the rest of the round; a waiter without a TPOT SLO (the easiest) being refused
ends the round. A round therefore costs a few reservation attempts, not one per waiter.

For the same reason a request that arrives while a waiter at least as easy to admit is waiting
joins the queue without trying first (``queues_behind``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

W = TypeVar("W")


def tightness(tpot_ms: float) -> float:
    """How hard a TPOT SLO is to admit: the SLO itself, inf without one (the easiest)."""
    return tpot_ms if tpot_ms > 0 else float("inf")


def queues_behind(tpot_ms: float, waiting_tpot_ms: Iterable[float]) -> bool:
    """Whether a newly arrived request joins the queue without trying for a place first: a waiter
    at least as easy to admit (its TPOT SLO as loose or looser) is waiting already.

    The decode workers that left that waiter waiting would refuse the newcomer too until capacity
    comes free, and capacity coming free starts a round, in which the newcomer takes its turn in
    least-slack order. Trying at once would cost a refused reservation (on a decode worker, event
    loop and engine thread time on the core its steps run on: under overload most of them are
    refused), and where capacity had come free it would take the place ahead of an older waiter.
    The comparison is by TPOT SLO alone: a waiter refused for want of KV blocks for its long
    prompt holds back a short newcomer until the next round (at most the queue's tick)."""
    tightest = tightness(tpot_ms)
    return any(tightness(t) >= tightest for t in waiting_tpot_ms)


class AdmissionRound(Generic[W]):
    def __init__(self, waiters: Iterable[W], deadline: Callable[[W], float], tpot_ms: Callable[[W], float]) -> None:
        self._order = sorted(waiters, key=deadline)
        self._tpot_ms = tpot_ms
        self._refused_up_to = 0.0  # waiters this tight or tighter would be refused too
        self._at = 0

    def next(self, still_waiting: Callable[[W], bool]) -> W | None:
        """The next waiter to give a turn to, or None when the round is over."""
        while self._at < len(self._order):
            waiter = self._order[self._at]
            self._at += 1
            if still_waiting(waiter) and tightness(self._tpot_ms(waiter)) > self._refused_up_to:
                return waiter
        return None

    def report(self, waiter: W, admitted: bool | None) -> None:
        """The turn's outcome (None: the waiter left without trying)."""
        if admitted is False:
            self._refused_up_to = max(self._refused_up_to, tightness(self._tpot_ms(waiter)))
            if self._refused_up_to == float("inf"):
                self._at = len(self._order)
