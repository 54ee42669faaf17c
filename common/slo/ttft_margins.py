"""What a TTFT guard's predictions are scaled by, as the gateway (or the simulator) builds them:
the calibration of a worker's own time for a call against the model, the headrooms the closed
loop steers by TTFT SLO class, and the call overhead's tail (``common.slo.ttft_guard``).

The overhead's tail forgets a call after ``OVERHEAD_MAX_AGE_S`` even when fewer calls than its
window's minimum have come since: one slow call at a bad moment (another process on the cores)
raises the tail far above what calls take, and with every request then refused no later call
could push it out, so an idle worker would refuse, for good, what it serves in a fraction of its
SLO. (Admitting an idle worker's requests without the tail instead removed it from most arrivals of
a light load, whose tight classes then missed on it.)
"""

from __future__ import annotations

import time
from collections.abc import Callable

from common.slo.calibration import Calibration, WindowQuantile
from common.slo.class_margins import ClassMargins
from common.slo.promise import DEFAULT_TARGET, MarginController

TTFT_HEADROOM = 1.0  # where the closed loop starts the margin on predicted prefill calls: on the safe side
OVERHEAD_MAX_AGE_S = 30.0  # the longest a call's overhead counts in the tail, however few calls came since


def prefill_calibration(clock: Callable[[], float] = time.monotonic) -> Calibration:
    """The typical ratio of a worker's own time for a call to the model's prediction: the tail is
    the overhead's (one call, not a mean over many, decides a TTFT)."""
    return Calibration(quantile=0.5, clock=clock)


def ttft_headrooms(target: float = DEFAULT_TARGET, clock: Callable[[], float] = time.monotonic) -> ClassMargins:
    return ClassMargins(TTFT_HEADROOM, target=target, clock=clock)


def overhead_quantile(target: float = DEFAULT_TARGET) -> float:
    """The quantile of a call's overhead that predictions add: one minus the TTFT headroom's share
    of the miss budget (0.995 at a 0.99 target).

    Under load the guard admits right up to the deadline, so many admitted requests have no slack
    beyond the prediction (a request that waited for a decode place is sent at its last useful
    moment, with none at all): each of them misses when its call's overhead exceeds the quantile
    added, so that quantile is the miss rate they are promised (a lower one, such as p90, makes a
    burst's admissions at the boundary miss at its rate: docs/decisions.md, 'TTFT call overhead
    quantile')."""
    return 1 - MarginController(TTFT_HEADROOM, target=target).budget


def call_overhead(target: float = DEFAULT_TARGET, clock: Callable[[], float] = time.monotonic) -> WindowQuantile:
    return WindowQuantile(quantile=overhead_quantile(target), clock=clock, max_age_s=OVERHEAD_MAX_AGE_S)


def left_for_worker_ms(deadline: float, now: float, overhead_s: float, margin: float = 1.0) -> float:
    """What a prefill call's worker is told is left of its TTFT budget (``ttft_left_ms``), so that
    its check against its whole queue (``PromptTiming.queue_first_token_s``, its own time for the
    forwards) judges the first token as the gateway's guard does.

    The guard admits when ``(own time + overhead) × margin`` fits before ``deadline``: the worker is
    told ``(deadline - now) / margin - overhead``, ``overhead`` being the call overhead's tail
    (``call_overhead``: the hops and what the gateway adds around the worker's own time) and
    ``margin`` the closed loop's headroom for the request's class. A margin below one only ever
    loosens the guard's own predictions, never the worker's: the worker, which sees what every
    gateway sent it, keeps at least the time that is really left."""
    return max(0.001, ((deadline - now) / max(1.0, margin) - overhead_s) * 1000)
