"""The margin under which the TTFT guard keeps a promise already made: its boundary headroom.

A request queued on a prefill worker was admitted on a prediction of when its call ends. Least
slack first lets every later request with an earlier deadline go before it, so each such send
pushes it back, and the guard lets a newcomer do that only while every queued request it passes is
still predicted on time (``TtftGuard.pushes_queued_past``). Under load the queued requests of loose
classes are pushed right up to their deadlines, and one second of forwards slower than the
calibration's median then makes all of them miss together: at twice the knee on two cores, eight
1 s-TTFT requests took 1.00-1.17 s within one second, their calls predicted 0.47-0.79 s when sent.

So the margin such a check applies is steered, not fixed: ``BoundaryMargin`` follows every call
from its send to its answer with the time it is predicted to take, which grows by each later send
that goes before it, and feeds the ratio of what the call took to that prediction (in units of the
margin: above 1 is a call the margin would not have covered) to a ``MarginController``. Its misses
are then at most the miss budget's share of the calls it hears, whatever their class, so a queued request
pushed to its boundary under the margin misses about that rarely. The margin never goes below
``BOUNDARY_HEADROOM`` (the prediction itself): relaxing below it would let pushes make queued
requests late on the model's own word.

Only calls that came near their boundary teach it: those predicted, with the sends that went
before them, to take at least ``NEAR_BOUNDARY`` of their TTFT SLO. The margin is what a promise
pushed to its deadline is checked under, and a call far from its deadline says little of one at
it: how late a call ends does not grow with its length (a stall of the worker's core or the
gateway's loop is as long for a short call as for a long one), so short calls with plenty of
slack have the widest ratios. Taught by every call, the margin took their tail: at vLLM's knee of
the bursty workload on two cores it rose to 2.1-2.5 within seconds on 40 ms calls that took
70-170 ms (the 99th percentile of lateness was 70-136 ms, short calls or long, while the ratio's
was 4.5 for calls predicted under 50 ms and 1.24 for those over 300 ms); 1 s-TTFT requests queued
at 0.4 s then counted as pushed past their deadlines, and 300 ms-TTFT newcomers that would pass
them were refused (8 of 156 for that in one run, 16 in all, where first come, first served met all
but three). Yet a
margin of seconds, not a ratio, let the slow patches through: at twice the knee twelve 1 s-TTFT
calls predicted 0.67-0.87 s took 0.99-1.18 s within one second (forwards 35-50% slower for a
moment: a ratio, on the calls that were near their deadlines).

Plain code of numbers: the guard hands in the predictions it makes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from common.slo.promise import DEFAULT_TARGET, MarginController

BOUNDARY_HEADROOM = 1.0  # where the boundary margin starts, and the least it may be
NEAR_BOUNDARY = 0.5  # of its TTFT SLO, what a call's prediction must reach for the call to teach the margin


def boundary_controller(target: float = DEFAULT_TARGET, clock: Callable[[], float] = time.monotonic
                        ) -> MarginController:
    return MarginController(BOUNDARY_HEADROOM, target=target, low=BOUNDARY_HEADROOM, clock=clock)


@dataclass(slots=True, eq=False)
class BoundaryMargin:
    controller: MarginController = field(default_factory=boundary_controller)
    # request id -> seconds its call is predicted to take from its send, the sends that went before it included
    expected: dict[str, float] = field(default_factory=dict)
    slos: dict[str, float] = field(default_factory=dict)  # request id -> its TTFT SLO, seconds

    @property
    def margin(self) -> float:
        return self.controller.margin

    def sent(self, request_id: str, predicted_s: float, ttft_s: float, passed: Iterable[str], push_s: float) -> None:
        """A call of a request with TTFT SLO ``ttft_s`` (0: none, no boundary to follow), predicted
        to take ``predicted_s``, went out; it goes before the queued ``passed``, each of which now
        waits ``push_s`` longer."""
        for queued in passed:
            if queued in self.expected:
                self.expected[queued] += push_s
        if predicted_s > 0 and ttft_s > 0:
            self.expected[request_id], self.slos[request_id] = predicted_s, ttft_s

    def answered(self, request_id: str, observed_s: float) -> None:
        """The call took ``observed_s``: against its prediction, to the margin, when it came near its boundary."""
        expected, ttft_s = self.expected.pop(request_id, None), self.slos.pop(request_id, 0.0)
        if expected and expected >= NEAR_BOUNDARY * ttft_s:
            margin = self.controller.margin
            self.controller.observe(observed_s / (margin * expected), admitted_at=margin)

    def dropped(self, request_id: str) -> None:
        """The call ended without an answer: nothing to learn. Idempotent."""
        self.expected.pop(request_id, None)
        self.slos.pop(request_id, None)
