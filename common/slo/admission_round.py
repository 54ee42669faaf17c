"""The order in which requests waiting for a decode worker are tried again (the TPOT guard's
admission queue), for the gateway's ``AdmissionQueue`` and the simulator alike.

A round gives turns least slack first (earliest last useful moment). Admission only gets harder
for a tighter TPOT SLO, a longer prompt or a larger output budget (VBS projects the decode over
the budget, the KV blocks cover prompt and budget), so once a waiter is refused, every later
waiter at least as hard on all three (``Demand.no_harder_than``) is skipped for the rest of the
round. A round therefore costs a few reservation attempts, not one per waiter.

For the same reason a request that arrives while a waiter no harder to admit is waiting joins the
queue without trying first (``queues_behind``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

W = TypeVar("W")


def tightness(tpot_ms: float) -> float:
    """How hard a TPOT SLO is to admit: the SLO itself, inf without one (the easiest)."""
    return tpot_ms if tpot_ms > 0 else float("inf")


@dataclass(frozen=True, slots=True)
class Demand:
    """What a request asks of decode admission: its TPOT SLO (0: none), its prompt and its output budget."""

    tpot_ms: float
    prompt_tokens: int = 0
    max_tokens: int = 0

    def no_harder_than(self, other: Demand) -> bool:
        """Whether admitting this is at most as hard as admitting ``other``: an SLO as loose or
        looser, a prompt and an output budget no larger."""
        return (tightness(self.tpot_ms) >= tightness(other.tpot_ms) and self.prompt_tokens <= other.prompt_tokens
                and self.max_tokens <= other.max_tokens)


def queues_behind(newcomer: Demand, waiting: Iterable[Demand]) -> bool:
    """Whether a newly arrived request joins the queue without trying for a place first: a waiter
    no harder to admit is waiting already.

    The decode workers that left that waiter waiting would refuse the newcomer too until capacity
    comes free, and capacity coming free starts a round, in which the newcomer takes its turn in
    least-slack order. Trying at once would cost a refused reservation (on a decode worker, event
    loop and engine thread time on the core its steps run on: under overload most of them are
    refused), and where capacity had come free it would take the place ahead of an older waiter.
    Sizes count as well as SLOs: compared by TPOT SLO alone, a waiter refused for want of KV
    blocks for its long prompt holds every shorter newcomer of its class back (docs/decisions.md,
    'Decode admission: sizes count in queueing behind')."""
    return any(w.no_harder_than(newcomer) for w in waiting)


class AdmissionRound(Generic[W]):
    def __init__(self, waiters: Iterable[W], deadline: Callable[[W], float], demand: Callable[[W], Demand]) -> None:
        self._order = sorted(waiters, key=deadline)
        self._demand = demand
        self._refused: list[Demand] = []  # waiters at least as hard as one of these would be refused too
        self._at = 0

    def next(self, still_waiting: Callable[[W], bool]) -> W | None:
        """The next waiter to give a turn to, or None when the round is over."""
        while self._at < len(self._order):
            waiter = self._order[self._at]
            self._at += 1
            if still_waiting(waiter) and not any(r.no_harder_than(self._demand(waiter)) for r in self._refused):
                return waiter
        return None

    def report(self, waiter: W, admitted: bool | None) -> None:
        """The turn's outcome (None: the waiter left without trying)."""
        if admitted is False:
            self._refused.append(self._demand(waiter))
