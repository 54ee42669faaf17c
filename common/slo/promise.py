"""The closed loop on the promise: admitted requests meet their SLOs.

The guards admit on predictions; a prediction can be wrong in ways no fit shows (another
process on the GPU, prompts longer than the profile, step times flat in batch size). So every
admitted request's outcome is fed back, and each guard's margin on its prediction is steered to
hold a target attainment:

    a miss                          → margin × (1 + step)                 tighten fast
                                      (from the margin that admitted it, when known)
    a met SLO with room to spare    → margin × (1 + step)^(−budget/(1−budget))   relax slowly
      (where the margin was at stake: predicted near the SLO)
    a met SLO without room          → margin unchanged

A request is good only when it meets both SLOs, and each SLO has its own guard and margin, so
each margin may spend only its ``share`` of the misses the target allows (half: the TTFT
headroom's misses and ε's add up). At the balance point a margin's misses are at most
``budget = share × (1 − target)`` of its outcomes: each miss raises the margin by as much as
``(1 − budget) / budget`` comfortable outcomes lower it (a quantile tracker). The margins start
at the guards' old constants (TTFT headroom 1.0, the VBS ε 1.3).

Misses come in bursts: one bad moment (a stall, a burst of long prompts) makes every request in
flight miss together. They were all admitted under one margin, and they are one piece of evidence
that it was too small, not many: compounding (1 + step)^k on a burst of k would take
k · target / (1 − target) outcomes to undo, and shut the tightest classes out long after the
moment passed. So a miss whose admitting margin ``m`` is known raises the margin to at least
``m × clamp(latency / SLO, 1 + step, most)``: what would have kept that request, from the margin
that admitted it, and never compounding on the misses of the same admissions. A later miss of a
request admitted under the raised margin raises it again. In steady state the admitting margin
is the current one and each miss raises it by at least (1 + step), so the balance above holds
or errs on the side of the promise.

Yet the target counts misses, not raises: a burst of k misses answered by one raise would let the
tracker settle where its misses are k times its budget (docs/decisions.md, 'Promise loop: a burst's
misses are owed'). So what a miss did not add to the margin is owed (``MarginController.owed``):
each miss is worth one (1 + step) of raise, a burst's misses beyond what its one raise covered are
a debt in log-margin, and comfortable outcomes pay the debt before they relax the margin. The
margin does not jump (the class is not shut out), it stays up until as many comfortable outcomes
have come as the burst's misses cost; the balance above then holds for misses in bursts too. A debt
lasts as long as the attainment window (``ATTAINMENT_WINDOW_S``) remembers the misses that ran it
up.

A request still decoding can show the miss before it ends: once ``EARLY_TOKENS`` tokens have
come after its first, a TPOT so far above its SLO raises ε at once (``MarginController.warn``,
the same raise as a miss, counted as no outcome; ``decoding_late``), so a slow stretch stops
admissions a whole decode sooner than the finished requests would. Its final outcome is still fed
back: a request warned about and then missed is not told again (``warned``: no second raise, no
debt, no second surge), and one that recovered relaxes the margin like any other outcome.

A margin only decides the admission of a request predicted near its SLO; one predicted far inside
it is admitted under any margin, so its meeting the SLO with room says nothing about the margin.
An outcome whose admission prediction is known (``predicted``: under the margin that admitted it,
as a share of the SLO) relaxes the margin only if that prediction was at least ``ROOM`` of the
SLO. Relaxing on every comfortable outcome lets a light load set the margin a heavy one is
admitted under: requests predicted far inside their SLO meet it and relax the margin, and once a
heavier load predicts them right up to it, those sent under that margin miss together
(docs/decisions.md, 'Promise loop: only outcomes near the boundary relax').

A TTFT is known at the first token and fed back then (``outcome``), not when the request ends:
a burst of long prompts that overran the prefill worker shows a whole decode sooner.

Each guard keeps one margin per SLO class (``common.slo.class_margins``).

``Attainment`` is the measured side: the share of admitted requests that met their SLO over a
sliding time window, kept per SLO class and per worker for metrics and reports.

Plain code of time and state: callers pass ``now``.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

DEFAULT_TARGET = 0.99
ATTAINMENT_WINDOW_S = 60.0  # the sliding window of the measured attainment, and how long a miss's debt lasts
ROOM = 0.8  # an outcome at most this fraction of its SLO met it with room to spare
STEP = 0.2  # a margin's relative increase per miss (``MarginController.step``'s default)
HIGH = 8.0  # the largest margin any guard may apply
EARLY_TOKENS = 16  # decoded tokens after which a running request's TPOT so far is evidence of a miss


@dataclass(slots=True)
class MarginController:
    margin: float
    target: float = DEFAULT_TARGET
    share: float = 0.5  # of the misses ``1 − target`` allows, the part this margin may spend
    step: float = STEP  # relative increase per miss
    low: float = 0.5
    high: float = HIGH
    most: float = 1.5  # the largest factor one miss raises its admitting margin by
    misses: int = 0
    outcomes: int = 0
    shut_out: int = 0  # refusals by this margin alone since its last outcome (``refused``)
    # told of each miss: the raise's factor, and the margin that would have kept the request
    on_miss: Callable[[float, float], None] | None = field(default=None, repr=False, compare=False)
    window_s: float = ATTAINMENT_WINDOW_S  # how long a miss's debt lasts
    clock: Callable[[], float] = field(default=time.monotonic, repr=False, compare=False)
    rest: float | None = None  # what the margin relaxes to on time (``settle``; None: it does not)
    half_life_s: float = math.inf  # ... halving its log-distance from ``rest`` every this many seconds
    _debts: deque[list[float]] = field(default_factory=deque, repr=False, compare=False)  # [when, log-margin owed]
    _settled_at: float | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not 0 < self.target < 1:
            raise ValueError(f"target attainment must be in (0, 1), got {self.target}")
        if not 0 < self.share <= 1:
            raise ValueError(f"share of the miss budget must be in (0, 1], got {self.share}")
        if not self.low <= self.margin <= self.high:
            raise ValueError(f"margin {self.margin} outside [{self.low}, {self.high}]")
        if self.most < 1 + self.step:
            raise ValueError(f"most ({self.most}) must be at least 1 + step ({1 + self.step})")

    def observe(self, ratio: float, admitted_at: float | None = None, warned: bool = False,
                predicted: float | None = None) -> None:
        """One admitted request's outcome: observed latency / its SLO (above 1: missed);
        ``admitted_at``: the margin its admission applied (None: not known, the current one);
        ``warned``: its miss was already told while it ran (``warn``), and is not raised again;
        ``predicted``: its latency as predicted under that margin / its SLO (None: not known,
        taken as at the boundary): a comfortable outcome predicted far inside its SLO does not relax."""
        self.settle()
        self.outcomes += 1
        self.shut_out = 0
        if ratio > 1.0:
            self.misses += 1
            if not warned:
                self.warn(ratio, admitted_at)
        elif ratio <= ROOM and (predicted is None or predicted >= ROOM):
            relax = self._pay(math.log1p(self.step) * self.budget / (1 - self.budget))
            self.margin = max(self.low, self.margin * math.exp(-relax))

    def settle(self) -> float:
        """The margin now, relaxed toward ``rest`` for the time since it last was (a margin above
        its rest comes back down on time, without outcomes: nothing it refuses can shut it out)."""
        now = self.clock()
        if self.rest is not None and self._settled_at is not None and self.margin > self.rest:
            keep = 0.5 ** ((now - self._settled_at) / self.half_life_s)
            self.margin = max(self.rest, self.rest * (self.margin / self.rest) ** keep)
        self._settled_at = now
        return self.margin

    @property
    def budget(self) -> float:
        """The share of its outcomes this margin may spend on misses: its ``share`` of ``1 − target``."""
        return self.share * (1 - self.target)

    @property
    def owed(self) -> float:
        """The log-margin this margin's recent misses are still owed (0: none): comfortable outcomes
        pay it before they relax the margin."""
        self._forget()
        return sum(debt for _, debt in self._debts)

    def _pay(self, relax: float) -> float:
        """Pays ``relax`` (log-margin) toward the oldest debts; returns what is left to relax by."""
        self._forget()
        while relax > 0 and self._debts:
            oldest = self._debts[0]
            paid = min(relax, oldest[1])
            oldest[1] -= paid
            relax -= paid
            if oldest[1] <= 0:
                self._debts.popleft()
        return relax

    def _forget(self) -> None:
        now = self.clock()
        while self._debts and self._debts[0][0] < now - self.window_s:
            self._debts.popleft()

    def refused(self) -> None:
        """A request refused by this margin alone (``margin / (1 + step)`` would have admitted it).
        After as many of them without an outcome as a miss costs in comfortable outcomes, the
        margin steps down to its probe."""
        self.settle()
        self.shut_out += 1
        if self.shut_out >= math.ceil((1 - self.budget) / self.budget):
            self.shut_out = 0
            self.margin = max(self.low, self.probe())

    def probe(self) -> float:
        """The margin whose answer tells whether a refusal was this margin's alone."""
        return self.margin / (1 + self.step)

    def warn(self, ratio: float, admitted_at: float | None = None) -> None:
        """A miss under way (``ratio`` > 1 so far): the raise of a miss, without an outcome."""
        self.settle()
        least = 1 + self.step
        factor = min(max(ratio, least), self.most)
        if self.on_miss is not None:  # first: the miss is evidence that may lift the ceiling (``ClassMargins``)
            self.on_miss(factor, (self.margin if admitted_at is None else admitted_at) * ratio)
        raised = self.margin * least if admitted_at is None else admitted_at * factor
        before = self.margin
        self.margin = min(self.high, max(self.margin, raised))
        shortfall = math.log(least) - math.log(self.margin / before)  # of this miss's one step of raise
        if shortfall > 1e-12:
            self._debts.append([self.clock(), shortfall])


@dataclass(slots=True)
class Attainment:
    """Admitted requests meeting their SLO over the last ``window_s`` seconds."""

    window_s: float = 60.0
    _outcomes: deque[tuple[float, bool]] = field(default_factory=deque)
    _met: int = 0

    def observe(self, now: float, met: bool) -> None:
        self._outcomes.append((now, met))
        self._met += met
        self._forget(now)

    def value(self, now: float) -> float | None:
        """The share met, or None with no outcome in the window."""
        self._forget(now)
        return self._met / len(self._outcomes) if self._outcomes else None

    def _forget(self, now: float) -> None:
        while self._outcomes and self._outcomes[0][0] < now - self.window_s:
            _, met = self._outcomes.popleft()
            self._met -= met


def outcome(latency_s: float, slo_s: float, margin: MarginController | None,
            admitted_at: float | None = None, warned: bool = False, predicted_s: float | None = None) -> bool:
    """One admitted request's TTFT or TPOT to the margin of the guard that admitted it (the prefill
    worker's TTFT headroom, the decode worker's ε; None: not there), with the value that margin
    had when it admitted the request (None: not known); ``warned``: a miss already told while the
    request ran (``decoding_late``); ``predicted_s``: the latency its admission predicted under
    that margin (None: not known). A TTFT is fed back at the first token, a TPOT at the last:
    each as soon as it is known. An SLO of 0 is none and teaches nothing. Returns whether the SLO
    was met."""
    if slo_s <= 0:
        return True
    if margin is not None:
        margin.observe(latency_s / slo_s, admitted_at, warned, None if predicted_s is None else predicted_s / slo_s)
    return latency_s <= slo_s


def decoding_late(decoded: int, since_first_s: float, tpot_slo_s: float, epsilon: MarginController | None,
                  epsilon_at: float | None = None) -> bool:
    """A request still decoding: ``decoded`` tokens came ``since_first_s`` seconds after its first.
    When there are enough of them to tell (``EARLY_TOKENS``) and their TPOT already misses the
    SLO, ε is raised now (``MarginController.warn``). Returns whether it was: the caller warns once
    a request."""
    if not tpot_slo_s or decoded < EARLY_TOKENS:
        return False
    ratio = since_first_s / decoded / tpot_slo_s
    if ratio <= 1.0:
        return False
    if epsilon is not None:
        epsilon.warn(ratio, epsilon_at)
    return True
