"""Refitting the decode cost model from the steps a worker really runs.

The start-up fit measured an idle machine at a few points; what the worker runs under load
may cost otherwise (another process on the GPU, batch sizes the profile never tried). Decode
steps are logged in bins of (batch size, mean length rounded to ``LEN_BIN`` tokens); every
``REFIT_PERIOD_S`` (once ``MIN_NEW_STEPS`` more were logged) the medians of the bins are fitted
again, and a sound fit over at least ``MIN_BATCHES`` batch sizes replaces the model (calibration
then corrects what it misses).

The steps a worker ran say nothing of batches larger than it has run. Fitted alone, a quiet spell's
batches of one to three extrapolate a slope from noise (docs/decisions.md, 'Decode refit: the
profile beyond the observed batches'), and the TPOT guard then refuses the very load that would have
shown it wrong. So past the largest batch observed the refit takes the ``prior`` (the start-up
profile, measured at every batch size) at the scale the steps showed at that batch: the observed
steps decide the model where they exist, the profile's shape beyond.
"""

from __future__ import annotations

import statistics
from collections import deque

from common.slo.cost_models import DecodeModel

LEN_BIN = 128
PER_BIN = 9  # the newest steps of each bin: its median resists one-off stalls
MAX_BINS = 96
MIN_BINS = 6
MIN_BATCHES = 3
REFIT_PERIOD_S = 10.0
MIN_NEW_STEPS = 64  # a refit waits for this many steps logged since the last one


class StepLog:
    def __init__(self) -> None:
        self._bins: dict[tuple[int, int], deque[tuple[float, float]]] = {}  # oldest bin first
        self._last_refit: float | None = None
        self._new_steps = 0

    def observe(self, batch: int, mean_len: float, seconds: float) -> None:
        key = (batch, int(mean_len // LEN_BIN))
        steps = self._bins.get(key)
        if steps is None:
            if len(self._bins) >= MAX_BINS:
                del self._bins[next(iter(self._bins))]  # the bin opened longest ago
            steps = self._bins[key] = deque(maxlen=PER_BIN)
        steps.append((mean_len, seconds))
        self._new_steps += 1

    def points(self) -> tuple[list[float], list[float], list[float]]:
        """(batch sizes, mean lengths, seconds): each bin's medians."""
        batches, lengths, seconds = [], [], []
        for (batch, _), steps in self._bins.items():
            batches.append(float(batch))
            lengths.append(statistics.median(n for n, _ in steps))
            seconds.append(statistics.median(t for _, t in steps))
        return batches, lengths, seconds

    def refit_due(self, now: float) -> bool:
        if self._last_refit is None:
            self._last_refit = now
        return now - self._last_refit >= REFIT_PERIOD_S and self._new_steps >= MIN_NEW_STEPS

    def refit(self, now: float, prior: DecodeModel | None = None, max_batch: int = 0) -> DecodeModel | None:
        """A sound fit of the logged steps, or None when they do not support one; with a
        ``prior``, steps of batches past the largest observed, up to ``max_batch``, follow it."""
        self._last_refit, self._new_steps = now, 0
        batches, lengths, seconds = self.points()
        if len(batches) < MIN_BINS or len(set(batches)) < MIN_BATCHES:
            return None
        if prior is not None:
            more = beyond_observed(prior, batches, lengths, seconds, max_batch)
            batches, lengths, seconds = batches + more[0], lengths + more[1], seconds + more[2]
        model = DecodeModel.fit(batches, lengths, seconds)
        return model if model.sound else None


def beyond_observed(prior: DecodeModel, batches: list[float], lengths: list[float], seconds: list[float],
                    max_batch: int) -> tuple[list[float], list[float], list[float]]:
    """Points for batch sizes past the largest observed (doubling, and ``max_batch``), at the
    lengths observed there: ``prior``'s step times, scaled by the median ratio of the observed
    steps of that largest batch to ``prior``'s."""
    top = max(batches)
    at_top = [(n, t) for b, n, t in zip(batches, lengths, seconds) if b == top]
    scale = statistics.median(t / prior.predict(top, n) for n, t in at_top)
    sizes, b = [], 2 * top
    while b < max_batch:
        sizes.append(b)
        b *= 2
    sizes += [float(max_batch)] if max_batch > top else []
    points = [(b, n, prior.predict(b, n) * scale) for b in sizes for n, _ in at_top]
    return [p[0] for p in points], [p[1] for p in points], [p[2] for p in points]
