"""How a worker's work falls around its cost model's prediction, as a histogram.

The calibration keeps a summary of the recent ratios (observed / predicted), which is what
admission needs; what it averages away is the tail: a step or a forward stalled 5× by another
process on the core is rare, but every request waiting on it sees its latency jump, and those are
the requests that miss. A ``RatioHistogram`` keeps every ratio since start, in fixed buckets, for
the metrics (``pdserve:cost_model_observed_ratio``: decode steps' periods, prefill forwards) and
for the simulator, whose steps and forwards can be drawn from it (``SimConfig.decode_step_factors``
and ``prefill_forward_factors``, ``simulator.config.factors_from_histogram``). Plain counts,
written by the engine's thread and read whole by a scrape (a read may lag a step; it never tears
a count).
"""

from __future__ import annotations

import bisect
import math

# upper bounds of the buckets (+Inf implied): fine around 1, coarse in the tail
BOUNDS = (0.5, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 6.0, 10.0, 20.0, 50.0)


class RatioHistogram:
    def __init__(self) -> None:
        self.counts = [0] * (len(BOUNDS) + 1)  # per bucket, not cumulative; the last: above every bound
        self.total = 0.0

    def observe(self, predicted_s: float, observed_s: float) -> None:
        if predicted_s <= 0 or observed_s < 0:
            return
        ratio = observed_s / predicted_s
        self.counts[bisect.bisect_left(BOUNDS, ratio)] += 1
        self.total += ratio

    def cumulative(self) -> list[tuple[float, int]]:
        """``(le, count)`` pairs as a Prometheus histogram has them, ``+Inf`` last."""
        out, seen = [], 0
        for le, n in zip((*BOUNDS, math.inf), self.counts):
            seen += n
            out.append((le, seen))
        return out
