"""One margin per SLO class for a guard, each a ``common.slo.promise.MarginController``.

Each guard keeps one margin per SLO class (``ClassMargins``: requests whose SLO rounds to the same
two significant digits), not one for all: a margin is steered only by the outcomes of the
requests whose admission it bounds. With one margin a worker's loose classes, met with room,
relax it at almost every outcome while the tight classes, admitted right at their boundary, miss
as it drifts down between their misses, and a load step then makes the tight requests admitted
under it miss together (docs/decisions.md, 'Promise loop: one margin per SLO class').

A class margin hears only its own outcomes, so a margin high enough to refuse its class outright
would hear nothing more and never come down (a few early misses can do that to a tight class). So
refusals that the margin alone caused (the request would have been admitted under
``margin / (1 + step)``) count (``MarginController.refused``): once as many of them have come
without an outcome between them as a miss costs in comfortable outcomes, ``(1 − budget) / budget``,
the margin steps down to that probe, and a class shut out is tried again. Only a class shut out
entirely: relaxing on every such refusal, as if each were an outcome met with room, lowers the
margins of classes refused at the boundary under overload until their admissions miss in bursts
(docs/decisions.md, 'Promise loop: probing a class shut out').

Plain code of time and state: callers pass ``now``.
"""

from __future__ import annotations

import functools
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from common.slo.promise import DEFAULT_TARGET, HIGH, MarginController


@functools.lru_cache(maxsize=4096)  # a few SLOs recur; asked for every request at every decision
def slo_class_ms(slo_s: float) -> float:
    """The class of an SLO (seconds) whose margin it shares: milliseconds to two significant digits
    (143 and 141 ms share one, 100 and 300 ms do not); 0 for none. Bounded: at most 90 classes a
    decade, however many distinct SLOs clients send."""
    if slo_s <= 0:
        return 0.0
    ms = slo_s * 1000
    return float(f"{ms:.2g}")


@dataclass(slots=True)
class ClassMargins:
    """One ``MarginController`` per SLO class (``slo_class_ms``), each starting at ``start``;
    requests without an SLO share the class 0 (its margin is never steered: no outcome teaches it).

    A miss of any class is also news of a bad moment for the whole worker: the requests in flight
    then miss together, whatever their class (docs/decisions.md, 'Promise loop: a miss raises every
    class for a moment'). So for ``moment_s`` after a miss (or a TPOT already late) every class's
    margin is multiplied by that miss's raise factor (the largest of those in the moment, never
    compounded), and then returns to what each class's own outcomes set.

    ``bound`` caps every class's margin, surge included, at what the worker has shown
    (``common.slo.epsilon_bound``): a raise past it is not kept, so when the ceiling comes down
    the margins are already there. The outcomes are evidence too: a miss admitted under margin m
    at latency/SLO r shows that m·r would have kept it, and for ``shown_s`` after it the ceiling
    is at least that (``limit``; never past ``HIGH``). A worker whose steps come as predicted can
    still give TPOTs its projection does not (a handoff, a stall, a host that slows between the
    admission and the decode); bounded by its steps alone, a margin at its ceiling would keep
    admitting what then misses. The evidence ages out, so it cannot hold a class shut either. And with a ``half_life_s`` each class's margin relaxes on time
    toward a rest the worker's evidence sets (``bound``'s ``rest``), where a new class starts."""

    start: float
    target: float = DEFAULT_TARGET
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    moment_s: float = 2.0  # as long as the guards' calibration window: what they call a moment
    by_class: dict[float, MarginController] = field(default_factory=dict)
    ceiling: float = math.inf  # the most any class's margin may be, by the worker's steps (``bound``)
    shown_s: float = 30.0  # how long a miss's evidence lifts the ceiling (``limit``)
    rest: float | None = None  # where a class starts and returns to on time (``bound``; None: ``start``)
    half_life_s: float = math.inf  # of that return (inf: none)
    _surge: float = 1.0
    _surge_until: float = -math.inf
    _shown: deque[tuple[float, float]] = field(default_factory=deque)  # (when, the margin a miss needed)
    _applied: float = math.inf  # the limit the class margins were last capped at

    def __post_init__(self) -> None:
        MarginController(self.start, target=self.target)  # the same checks, once

    def of(self, slo_s: float) -> MarginController:
        """The margin of the class of ``slo_s`` (seconds), made at ``start`` when first asked."""
        key = slo_class_ms(slo_s)
        margin = self.by_class.get(key)
        if margin is None:
            margin = self.by_class[key] = MarginController(self._first(), target=self.target, on_miss=self._missed,
                                                           clock=self.clock, half_life_s=self.half_life_s)
            self._cap(margin)
        return margin

    def _first(self) -> float:
        """Where a class not seen yet starts."""
        return self.start if self.rest is None else min(self.rest, self.limit())

    def margin(self, slo_s: float) -> float:
        """The margin a request with this SLO is admitted with now (where a new class starts for an
        unseen one), with the surge of a miss in the last moment, at most the ceiling."""
        margin = self.by_class.get(slo_class_ms(slo_s))
        limit = self.limit()
        if limit < self._applied:  # evidence aged out: the margins come down with it
            self._recap()
        return min(limit, (self._first() if margin is None else margin.settle()) * self.surge())

    def limit(self) -> float:
        """The most a class's margin may be now: the worker's ceiling, or what a recent miss showed it needed."""
        horizon = self.clock() - self.shown_s
        while self._shown and self._shown[0][0] < horizon:
            self._shown.popleft()
        if self.ceiling == math.inf:
            return math.inf
        return min(HIGH, max([self.ceiling, *(needed for _, needed in self._shown)]))

    def _recap(self) -> None:
        self._applied = self.limit()
        for margin in self.by_class.values():
            self._cap(margin)

    def bound(self, ceiling: float, rest: float | None = None) -> None:
        """Caps every class's margin at ``ceiling`` from now on (``inf``: no cap); ``rest``: what
        each relaxes to on time and a new class starts at (None: ``start``, no return on time)."""
        if ceiling == self.ceiling and rest == self.rest:
            return
        self.ceiling, self.rest = ceiling, rest
        self._recap()

    def _cap(self, margin: MarginController) -> None:
        margin.high = max(margin.low, min(HIGH, self._applied))
        margin.margin = min(margin.margin, margin.high)
        margin.rest = None if self.rest is None else max(margin.low, min(self.rest, margin.high))

    def surge(self) -> float:
        """The factor every class's margin carries now: the raise of the latest moment's misses, or 1."""
        return self._surge if self.clock() < self._surge_until else 1.0

    def _missed(self, factor: float, needed: float) -> None:
        now = self.clock()
        if self.ceiling < math.inf and needed > self.ceiling:
            self._shown.append((now, needed))
            self._recap()
        self._surge = max(self._surge, factor) if now < self._surge_until else factor
        self._surge_until = now + self.moment_s

    def items(self) -> list[tuple[float, float]]:
        """(class in ms, margin) of every class seen with an SLO, tightest first."""
        return sorted((ms, m.settle()) for ms, m in self.by_class.items() if ms)
