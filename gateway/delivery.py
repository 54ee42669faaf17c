"""What a front spends delivering a first token after the gateway has it, kept out of the TTFT budget.

The gateway's TTFT ends when the first token reaches it; its client's ends when the token has
been framed, written and read on the other side. The part in this process (the OpenAI front's
SSE framing and write of the opening chunks, gRPC's write of the first message, each behind the
event loop) belongs to the client's TTFT and to no prediction, and a request admitted at the last
moment its prediction allows has no slack for it.

So the front door measures, for every request, the time from the first message leaving the
request flow to the front coming back for the next one (the first token handed to the
transport), per front, and plans a request as if it had arrived that much earlier: a high
quantile (the miss budget's, as for a prefill call's overhead) of the recent deliveries on its
front. Its TTFT deadline moves earlier by that allowance, and its TTFT outcome, which steers the
closed loop's headrooms, counts it. A front with nothing measured yet allows nothing. (What
happens before the request reaches this process, or after its bytes leave it, stays outside.)
"""

from __future__ import annotations

import time
from collections.abc import Callable

from common.slo.calibration import WindowQuantile
from common.slo.promise import DEFAULT_TARGET
from common.slo.ttft_margins import overhead_quantile

FRONTS = ("grpc", "http")


class DeliveryAllowance:
    def __init__(self, target: float = DEFAULT_TARGET, clock: Callable[[], float] = time.perf_counter) -> None:
        self._by_front = {front: WindowQuantile(quantile=overhead_quantile(target), clock=clock) for front in FRONTS}

    def observe(self, front: str, seconds: float) -> None:
        """One request's first token took ``seconds`` from the request flow to its transport on ``front``."""
        self._by_front[front].observe(max(0.0, seconds))

    def allowance(self, front: str) -> float:
        """Seconds of a new request's TTFT budget its front's delivery is expected to take."""
        return self._by_front[front].value()
