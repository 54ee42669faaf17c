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

What a histogram drops is the order. A worker's steps do not slow at random, one at a time: a busy
host slows a stretch of them (docs/decisions.md, 'Step noise comes in stretches'). A request's TPOT
averages its steps, so it is those stretches, not single slow steps, that make it miss. So the
histogram also keeps the correlation of log-ratios ``LAGS`` apart over about the last
``MEMORY_STEPS`` (``correlation``; ``pdserve:cost_model_ratio_autocorrelation``), from which the
simulator draws its steps in stretches (``simulator.step_noise``).
"""

from __future__ import annotations

import bisect
import math
from collections import deque

# upper bounds of the buckets (+Inf implied): fine around 1, coarse in the tail
BOUNDS = (0.5, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 6.0, 10.0, 20.0, 50.0)
LAGS = (8, 32)  # observations apart, whose log-ratios' correlation is kept
MEMORY_STEPS = 2000  # the correlations' sums forget with this e-folding, in observations


class RatioHistogram:
    def __init__(self) -> None:
        self.counts = [0] * (len(BOUNDS) + 1)  # per bucket, not cumulative; the last: above every bound
        self.total = 0.0
        self._logs: deque[float] = deque(maxlen=max(LAGS))  # the latest log-ratios, newest last
        self._weight = 0.0  # exponentially forgotten sums: of weights, x, x², and x·x(lag) per lag
        self._sum = self._squares = 0.0
        self._products = dict.fromkeys(LAGS, 0.0)
        self._paired = dict.fromkeys(LAGS, 0.0)  # the weight of observations that had a partner ``lag`` back

    def observe(self, predicted_s: float, observed_s: float) -> None:
        if predicted_s <= 0 or observed_s < 0:
            return
        ratio = observed_s / predicted_s
        self.counts[bisect.bisect_left(BOUNDS, ratio)] += 1
        self.total += ratio
        if ratio > 0:
            self._remember(math.log(ratio))

    def _remember(self, x: float) -> None:
        keep = 1 - 1 / MEMORY_STEPS
        self._weight = self._weight * keep + 1
        self._sum = self._sum * keep + x
        self._squares = self._squares * keep + x * x
        for lag in LAGS:
            self._products[lag] *= keep
            self._paired[lag] *= keep
            if len(self._logs) >= lag:
                self._products[lag] += x * self._logs[-lag]
                self._paired[lag] += 1
        self._logs.append(x)

    def correlation(self, lag: int) -> float:
        """The correlation of log-ratios ``lag`` observations apart (one of ``LAGS``), over about
        the last ``MEMORY_STEPS``; 0 until there are pairs to tell."""
        if self._paired[lag] < 2 or self._weight < 2:
            return 0.0
        mean = self._sum / self._weight
        variance = self._squares / self._weight - mean * mean
        if variance <= 1e-12:
            return 0.0
        return max(-1.0, min(1.0, (self._products[lag] / self._paired[lag] - mean * mean) / variance))

    def cumulative(self) -> list[tuple[float, int]]:
        """``(le, count)`` pairs as a Prometheus histogram has them, ``+Inf`` last."""
        out, seen = [], 0
        for le, n in zip((*BOUNDS, math.inf), self.counts):
            seen += n
            out.append((le, seen))
        return out
