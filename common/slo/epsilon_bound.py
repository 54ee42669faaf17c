"""What bounds the TPOT guard's margin ε on one decode worker: the evidence of its own steps.

ε multiplies a projected TPOT (the calibrated step model over a request's decode) to cover how
far real TPOTs come out above the projection. The closed loop raises it on misses. Unbounded, a
burst of misses at overload leaves a factor the worker never shows again, and since a raised ε
refuses the very requests whose outcomes could lower it, the guard can end up refusing
everything with an idle worker. So ε is bounded by what this worker's steps show::

    ceiling = max(TPOT_MARGIN, Q_0.95 over the last EVIDENCE_WINDOW_S of  step period / calibrated prediction)

ε may rise past the margin it starts at as far as the worker's steps have recently outrun
their calibrated predictions (made before each step), or, for a while, as far as a request that
missed shows it needed (the gateway's own evidence: ``common.slo.class_margins.ClassMargins.limit``).
As those steps age out of the window the ceiling comes back down, and ε with it: on steps the
worker runs, whether or not a request finishes. (Requests admitted alone run steps whatever ε is: see ``alone_s``.)

The same evidence says where ε starts, and returns to on time after the loop raised it
(``ClassMargins.bound``'s rest)::

    start = min(TPOT_MARGIN, max(1, Q_0.95 ...))

A worker whose steps come as predicted needs little margin for a TPOT, a mean over many steps;
one whose steps are noisy starts where the loop always did. Before the window holds
``EVIDENCE_MIN_STEPS`` steps, ``TPOT_MARGIN`` is both.

``alone_s``: the least TPOT this worker gives, one request alone: the median period of its recent
batch-1 steps, or the step measured at warm-up when that is less. A TPOT SLO below it can never
be met here, whatever the load.

``alone_now_s``: what one request alone takes a step now: the 0.9 quantile of the batch-1 steps'
periods while the latest of them is at most ``ALONE_FRESH_S`` old, else ``alone_s``. An idle worker admits a
request whose TPOT SLO covers it, under no margin (``common.slo.tpot_guard.admits_request``). Not
the least: a machine that ran faster at warm-up than it does under load (other processes on its
cores, a host that slows) would admit, alone, requests its steps then miss. Not forever either:
once its batch-1 steps are older than that, nothing refused on them is news, and the least decides
again, so a slow moment cannot shut a worker out.

Plain code of time and state, on the clock it is given.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from common.slo.calibration import WindowQuantile
from common.slo.promise import HIGH

EVIDENCE_WINDOW_S = 30.0  # how long a slow stretch of steps keeps ε's ceiling up
EVIDENCE_QUANTILE = 0.95  # of a step's period over its calibrated prediction
EVIDENCE_MIN_STEPS = 64  # the newest steps kept whatever their age: an idle worker remembers its machine
ALONE_MIN_STEPS = 8  # batch-1 steps before their median is trusted over the warm-up's step
ALONE_FRESH_S = 10.0  # how long the latest batch-1 steps say what one request alone takes now
# ... and what they say: a high quantile, not the median, since a TPOT admitted alone is a mean over a
# second or two of steps on a host whose speed moves by more than that mean's own spread
ALONE_NOW_QUANTILE = 0.9
MOST = HIGH  # the largest ceiling


class StepEvidence:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._excess = WindowQuantile(EVIDENCE_WINDOW_S, EVIDENCE_QUANTILE, EVIDENCE_MIN_STEPS, clock)
        self._alone = WindowQuantile(EVIDENCE_WINDOW_S, 0.5, ALONE_MIN_STEPS, clock)
        self._alone_tail = WindowQuantile(EVIDENCE_WINDOW_S, ALONE_NOW_QUANTILE, ALONE_MIN_STEPS, clock)
        self._alone_steps = 0
        self._alone_at = -float("inf")  # the clock at the latest batch-1 step
        self._steps = 0
        self._clock = clock

    def observe(self, batch_size: int, calibrated_s: float, seconds: float) -> None:
        """A decode step of ``batch_size`` took ``seconds``; ``calibrated_s``: what the calibrated
        model predicted for it before it ran."""
        if seconds <= 0 or calibrated_s <= 0:
            return
        self._excess.observe(seconds / calibrated_s)
        self._steps += 1
        if batch_size == 1:
            self._alone.observe(seconds)
            self._alone_tail.observe(seconds)
            self._alone_steps += 1
            self._alone_at = self._clock()

    def ceiling(self, start: float) -> float:
        """The most ε may be: ``start`` (the margin the loop begins at), or more where the steps showed more."""
        return min(MOST, max(start, self._excess.value()))

    def start(self, start: float) -> float:
        """Where ε starts and rests: ``start``, or less where enough steps showed less."""
        if self._steps < EVIDENCE_MIN_STEPS:
            return start
        return min(start, max(1.0, self._excess.value()))

    def alone_s(self, measured_s: float | None) -> float | None:
        """One request's step here: the least of ``measured_s`` (at warm-up; None: not measured) and
        the median of recent batch-1 steps (once there are enough of them)."""
        if self._alone_steps < ALONE_MIN_STEPS:
            return measured_s
        recent = self._alone.value()
        return recent if measured_s is None else min(measured_s, recent)

    def alone_now_s(self, measured_s: float | None) -> float | None:
        """One request's step here now: the ``ALONE_NOW_QUANTILE`` of the batch-1 steps while the
        latest is fresh (``ALONE_FRESH_S``) and there are enough of them, else ``alone_s``."""
        if self._alone_steps >= ALONE_MIN_STEPS and self._clock() - self._alone_at <= ALONE_FRESH_S:
            return self._alone_tail.value()
        return self.alone_s(measured_s)
