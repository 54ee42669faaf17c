"""Refitting the decode cost model from the steps a worker really runs.

The start-up fit measured an idle machine at a few points; what the worker runs under load
may cost otherwise (another process on the GPU, batch sizes the profile never tried). Decode
steps are logged in bins of (batch size, mean length rounded to ``LEN_BIN`` tokens); every
``REFIT_PERIOD_S`` (once ``MIN_NEW_STEPS`` more were logged) the medians of the bins are fitted
again, and a sound fit over at least ``MIN_BATCHES`` batch sizes replaces the model (calibration
then corrects what it misses).
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

    def refit(self, now: float) -> DecodeModel | None:
        """A sound fit of the logged steps, or None when they do not support one."""
        self._last_refit, self._new_steps = now, 0
        batches, lengths, seconds = self.points()
        if len(batches) < MIN_BINS or len(set(batches)) < MIN_BATCHES:
            return None
        model = DecodeModel.fit(batches, lengths, seconds)
        return model if model.sound else None
