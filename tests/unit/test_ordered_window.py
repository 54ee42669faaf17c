"""The windows' quantiles kept in order, checked against sorting what each window holds."""

from __future__ import annotations

import math
import random

import pytest

from common.slo.calibration import Calibration, WindowQuantile
from common.slo.ordered_window import OrderedWindow


def _brute_quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)] if ordered else 0.0


def test_ordered_window_matches_a_sort_of_its_values_through_adds_and_drops_with_ties():
    rng = random.Random(7)
    window, held = OrderedWindow(), []
    for step in range(3000):
        if held and rng.random() < 0.45:
            assert window.drop_oldest() == held.pop(0)
        else:
            value = float(rng.randint(0, 40)) / 4  # many equal values
            window.add(float(step), value)
            held.append(value)
        assert len(window) == len(held)
        for q in (0.01, 0.5, 0.9, 0.995, 1.0):
            assert window.quantile(q) == _brute_quantile(held, q)


def test_ordered_window_ignores_nan_and_reads_zero_when_empty():
    window = OrderedWindow()
    assert window.quantile(0.9) == 0.0
    assert window.add(0.0, float("nan")) is False
    assert len(window) == 0
    assert window.add(1.0, 2.5) is True
    assert window.oldest_time() == 1.0 and window.quantile(0.5) == 2.5


@pytest.mark.parametrize("rate", [32.0, 640.0])
def test_window_quantile_is_the_quantile_of_the_last_window_or_the_newest_min_samples(rate: float):
    rng, now = random.Random(int(rate)), [0.0]
    quantile = WindowQuantile(window_s=2.0, quantile=0.99, min_samples=16, clock=lambda: now[0])
    seen: list[tuple[float, float]] = []
    for _ in range(4000):
        now[0] += rng.expovariate(rate)
        value = rng.lognormvariate(0, 1)
        quantile.observe(value)
        seen.append((now[0], value))
        recent = [v for t, v in seen if t >= now[0] - 2.0]
        expected = recent if len(recent) >= 16 else [v for _, v in seen[-16:]]
        assert quantile.value() == _brute_quantile(expected, 0.99)


def test_calibration_quantile_mode_reads_the_quantile_of_its_windowed_ratios():
    rng, now = random.Random(3), [0.0]
    calibration = Calibration(window_s=2.0, quantile=0.9, min_samples=4, clock=lambda: now[0])
    ratios: list[tuple[float, float]] = []
    for _ in range(1500):
        now[0] += rng.expovariate(200.0)
        predicted, observed = rng.uniform(0.01, 0.02), rng.uniform(0.005, 0.05)
        calibration.observe(predicted, observed)
        ratios.append((now[0], observed / predicted))
        recent = [r for t, r in ratios if t >= now[0] - 2.0]
        expected = recent if len(recent) >= 4 else [r for _, r in ratios[-4:]]
        assert calibration.ratio == pytest.approx(min(100.0, max(0.01, _brute_quantile(expected, 0.9))))
        assert calibration.num_samples == len(expected)
