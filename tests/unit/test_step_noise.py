"""Step factors drawn in stretches: the distribution asked for, the correlation asked for, and
the memory fitted back from a worker's measured correlations."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from common.slo.ratio_histogram import LAGS, RatioHistogram
from simulator.config import SimConfig
from simulator.step_noise import memory_from_correlations, step_factors


def _correlation(xs: list[float], lag: int) -> float:
    return statistics.correlation(xs[:-lag], xs[lag:])


def test_log_normal_factors_with_a_memory_correlate_as_w_rho_to_the_lag_and_keep_their_mean():
    draw = step_factors((), 0.4, (0.5, 0.95), random.Random(3))
    xs = [draw() for _ in range(60_000)]
    logs = [math.log(x) for x in xs]
    for lag in (1, 8, 32):
        assert _correlation(logs, lag) == pytest.approx(0.5 * 0.95**lag, abs=0.04)
    assert statistics.fmean(xs) == pytest.approx(1.0, abs=0.03)
    assert statistics.pstdev(xs) == pytest.approx(0.4, abs=0.04)


def test_measured_factors_keep_their_distribution_and_slow_in_stretches():
    rng = random.Random(5)
    factors = tuple(rng.lognormvariate(0, 0.6) for _ in range(2000))
    independent = step_factors(factors, 0.0, (0.0, 0.0), random.Random(7))
    stretched = step_factors(factors, 0.0, (0.6, 0.97), random.Random(7))
    a = [independent() for _ in range(50_000)]
    b = [stretched() for _ in range(50_000)]
    qs = [statistics.quantiles(x, n=10) for x in (factors, a, b)]
    for q_factors, q_a, q_b in zip(*qs):
        assert q_a == pytest.approx(q_factors, rel=0.05) and q_b == pytest.approx(q_factors, rel=0.05)
    # a request's TPOT is a mean over its steps: in stretches, means over 50 steps spread far more
    spread = [statistics.pstdev([statistics.fmean(x[i:i + 50]) for i in range(0, len(x), 50)]) for x in (a, b)]
    assert spread[1] > 3 * spread[0], spread


def test_no_noise_is_exactly_one_and_a_memory_out_of_range_is_refused():
    assert {step_factors((), 0.0, (0.5, 0.9), random.Random(1))() for _ in range(10)} == {1.0}
    with pytest.raises(ValueError):
        step_factors((), 0.3, (1.5, 0.9), random.Random(1))
    with pytest.raises(ValueError, match="decode_step_memory"):
        SimConfig(decode_step_memory=(0.5, 1.0))


def test_the_memory_is_fitted_through_two_measured_correlations():
    near_lag, far_lag = LAGS
    w, rho = memory_from_correlations(0.326, 0.114)  # a decode worker at twice the knee on two CPU cores
    assert w * rho**near_lag == pytest.approx(0.326) and w * rho**far_lag == pytest.approx(0.114)
    assert memory_from_correlations(-0.01, 0.2) == (0.0, 0.0)  # nothing persists
    w, rho = memory_from_correlations(0.2, -0.05)  # only near: all of it a fast memory
    assert w == 1.0 and rho**near_lag == pytest.approx(0.2)
    w, rho = memory_from_correlations(0.3, 0.35)  # as strong far as near: the most persistent
    assert rho == pytest.approx(0.999) and w == pytest.approx(0.3 / 0.999**near_lag)


def test_a_worker_histogram_measures_the_correlation_its_ratios_have():
    rng, slow, ratios = random.Random(11), 0.0, RatioHistogram()
    logs = []
    for _ in range(30_000):
        slow = 0.97 * slow + math.sqrt(1 - 0.97**2) * rng.gauss(0, 1)
        x = 0.3 * (math.sqrt(0.6) * slow + math.sqrt(0.4) * rng.gauss(0, 1))
        logs.append(x)
        ratios.observe(0.01, 0.01 * math.exp(x))
    for lag in LAGS:  # over about the last MEMORY_STEPS: as the last few thousand's own correlation
        assert ratios.correlation(lag) == pytest.approx(_correlation(logs[-4000:], lag), abs=0.08)
    assert RatioHistogram().correlation(LAGS[0]) == 0.0  # nothing yet
