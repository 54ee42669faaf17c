"""The order in which requests waiting for a decode worker are tried again (the TPOT guard's
admission queue), for the gateway's ``AdmissionQueue`` and the simulator alike.

A round gives turns least slack first (earliest last useful moment). VBS admission only gets
harder for a tighter TPOT SLO, so once a waiter is refused, every later waiter at least as tight
is skipped for the rest of the round; a waiter without a TPOT SLO (the easiest) being refused
ends the round. A round therefore costs a few reservation attempts, not one per waiter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

W = TypeVar("W")


def tightness(tpot_ms: float) -> float:
    """How hard a TPOT SLO is to admit: the SLO itself, inf without one (the easiest)."""
    return tpot_ms if tpot_ms > 0 else float("inf")


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
