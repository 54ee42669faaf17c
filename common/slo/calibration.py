"""Online correction of a fitted model by what the work really takes now.

A model fitted at start-up on an idle machine under-predicts once other processes share the
cores (or the GPU is busier). ``Calibration`` keeps the ratio observed / predicted of the
recent past (a time window, ``window_s``) and scales predictions by its mean plus
``spread`` standard deviations, or by a ``quantile`` of it:

    scale(p) = p · clamp(mean(ratios) + spread · std(ratios))     (a mean over many: steps)
    scale(p) = p · clamp(quantile_q(ratios))                      (one event: a prefill call)

It corrects both ways: a model too slow is scaled down as surely as one too fast is scaled
up, within ``bounds`` (default 1/100 to 100: a model 50× off corrects with the first steps
observed, while one wild sample cannot turn a prediction into nothing or infinity).

The window is about as long as a request lives, because admission is a promise about the
request's whole life, not the next step: a short average admits in a quiet moment what the
next busy second cannot serve. A TPOT is a mean over many steps, so the mean ratio plus a
spread term (pessimistic in proportion to how much the ratio moves) predicts it; a TTFT is
one call, whose ratio is skewed by rare stalls, so a high quantile predicts it better. The
newest ``min_samples`` observations are kept even when older than the window, so a worker
that was idle for a while does not forget its machine.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from common.slo.ordered_window import OrderedWindow


class Calibration:
    def __init__(self, window_s: float = 2.0, spread: float = 0.5, bounds: tuple[float, float] = (0.01, 100.0),
                 min_samples: int = 16, quantile: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if window_s <= 0 or spread < 0 or not 0 < bounds[0] <= 1 <= bounds[1] or min_samples < 1:
            raise ValueError("window_s must be > 0, spread ≥ 0, bounds (low, high) with 0 < low ≤ 1 ≤ high, "
                             "min_samples ≥ 1")
        if quantile is not None and not 0 < quantile <= 1:
            raise ValueError(f"quantile must be in (0, 1], got {quantile}")
        self.window_s = window_s
        self.spread = spread
        self.quantile = quantile
        self.bounds = bounds
        self.min_samples = min_samples
        self._clock = clock
        self._samples = OrderedWindow()  # observed / predicted, with when
        self._sum = 0.0
        self._sum_sq = 0.0
        self._ratio: float | None = None  # what ``ratio`` returns until the samples change

    def observe(self, predicted_s: float, observed_s: float) -> None:
        if predicted_s <= 0 or observed_s < 0:
            return
        ratio = observed_s / predicted_s
        if not self._samples.add(self._clock(), ratio):
            return
        self._sum += ratio
        self._sum_sq += ratio * ratio
        self._ratio = None
        self._forget_old()

    @property
    def ratio(self) -> float:
        """The factor predictions are multiplied by now."""
        self._forget_old()
        if self._ratio is None:
            self._ratio = self._compute()
        return self._ratio

    def _compute(self) -> float:
        n = len(self._samples)
        if n == 0:
            return 1.0
        if self.quantile is not None:
            return self._clamp(self._samples.quantile(self.quantile))
        mean = self._sum / n
        std = math.sqrt(max(0.0, self._sum_sq / n - mean * mean))
        return self._clamp(mean + self.spread * std)

    def _clamp(self, ratio: float) -> float:
        return min(self.bounds[1], max(self.bounds[0], ratio))

    @property
    def num_samples(self) -> int:
        return len(self._samples)

    def scale(self, predicted_s: float) -> float:
        return predicted_s * self.ratio

    def _forget_old(self) -> None:
        horizon = self._clock() - self.window_s
        while len(self._samples) > self.min_samples and self._samples.oldest_time() < horizon:
            ratio = self._samples.drop_oldest()
            self._sum -= ratio
            self._sum_sq -= ratio * ratio
            self._ratio = None


class WindowQuantile:
    """A quantile of the values observed over the last ``window_s`` seconds (the newest
    ``min_samples`` kept whatever their age, up to ``max_age_s``); 0 before any."""

    def __init__(self, window_s: float = 2.0, quantile: float = 0.9, min_samples: int = 16,
                 clock: Callable[[], float] = time.monotonic, max_age_s: float = math.inf) -> None:
        if window_s <= 0 or not 0 < quantile <= 1 or min_samples < 1 or max_age_s < window_s:
            raise ValueError("window_s must be > 0, quantile in (0, 1], min_samples ≥ 1, max_age_s ≥ window_s")
        self.window_s, self.quantile, self.min_samples, self._clock = window_s, quantile, min_samples, clock
        self.max_age_s = max_age_s
        self._samples = OrderedWindow()

    def observe(self, value: float) -> None:
        self._samples.add(self._clock(), value)
        self._forget_old()

    def value(self) -> float:
        self._forget_old()
        return self._samples.quantile(self.quantile)

    def __len__(self) -> int:
        """The values it holds now."""
        self._forget_old()
        return len(self._samples)

    def _forget_old(self) -> None:
        now = self._clock()
        horizon, oldest_kept = now - self.window_s, now - self.max_age_s
        while self._samples and (self._samples.oldest_time() < oldest_kept or (
                len(self._samples) > self.min_samples and self._samples.oldest_time() < horizon)):
            self._samples.drop_oldest()
