"""The margin under which the TTFT guard keeps a promise already made: its boundary headroom.

A request queued on a prefill worker was admitted on a prediction of when its call ends. Least slack
first lets every later request with an earlier deadline go before it, so each such send pushes it
back, and the guard lets a newcomer do that only while every queued request it passes is still
predicted on time (``TtftGuard.pushes_queued_past``). Under load the queued requests of loose
classes are pushed right up to their deadlines, and one second of forwards slower than the
calibration's median then makes all of them miss together (docs/decisions.md, 'Boundary margin:
steered by every call').

So the margin such a check applies is steered, not fixed: ``BoundaryMargin`` follows every call
from its send to its answer with the time it is predicted to take, which grows by each later send
that goes before it, and feeds the ratio of what the call took to that prediction (in units of the
margin: above 1 is a call the margin would not have covered) to a ``MarginController``. Its misses
are then at most the miss budget's share of all calls, whatever their class, so a queued request
pushed to its boundary under the margin misses about that rarely. The margin never goes below
``BOUNDARY_HEADROOM`` (the prediction itself): relaxing below it would let pushes make queued
requests late on the model's own word.

Plain code of numbers: the guard hands in the predictions it makes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from common.slo.promise import DEFAULT_TARGET, MarginController

BOUNDARY_HEADROOM = 1.0  # where the boundary margin starts, and the least it may be


def boundary_controller(target: float = DEFAULT_TARGET, clock: Callable[[], float] = time.monotonic
                        ) -> MarginController:
    return MarginController(BOUNDARY_HEADROOM, target=target, low=BOUNDARY_HEADROOM, clock=clock)


@dataclass(slots=True, eq=False)
class BoundaryMargin:
    controller: MarginController = field(default_factory=boundary_controller)
    # request id -> seconds its call is predicted to take from its send, the sends that went before it included
    expected: dict[str, float] = field(default_factory=dict)

    @property
    def margin(self) -> float:
        return self.controller.margin

    def sent(self, request_id: str, predicted_s: float, passed: Iterable[str], push_s: float) -> None:
        """A call predicted to take ``predicted_s`` went out; it goes before the queued ``passed``,
        each of which now waits ``push_s`` longer."""
        for queued in passed:
            if queued in self.expected:
                self.expected[queued] += push_s
        if predicted_s > 0:
            self.expected[request_id] = predicted_s

    def answered(self, request_id: str, observed_s: float) -> None:
        """The call took ``observed_s``: against its prediction, to the margin."""
        expected = self.expected.pop(request_id, None)
        if expected:
            margin = self.controller.margin
            self.controller.observe(observed_s / (margin * expected), admitted_at=margin)

    def dropped(self, request_id: str) -> None:
        """The call ended without an answer: nothing to learn. Idempotent."""
        self.expected.pop(request_id, None)
