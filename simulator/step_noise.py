"""What a simulated worker's step or forward takes around its cost model: a factor drawn per step.

Independent draws miss what makes a TPOT miss. A request's TPOT is the mean of its steps, and a mean
of 50 independent factors hardly moves; a real worker's steps slow in stretches (a busy host,
another process on the core: ``common.slo.ratio_histogram``; docs/decisions.md, 'Step noise comes in
stretches'). So draws can have a memory: a latent normal ``z = √w · a + √(1 − w) · e``, with ``a``
persisting from step to step (``a ← ρ a + √(1 − ρ²) η``) and ``e`` fresh, is turned into a factor
through its rank (a Gaussian copula; for the log-normal, directly): the factors keep exactly the
distribution measured or asked for, and factors ``k`` steps apart correlate about ``w · ρ^k``.
``memory_from_correlations`` fits ``(w, ρ)`` to a worker's measured correlations
(``pdserve:cost_model_ratio_autocorrelation``, lags 8 and 32).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

from common.slo.ratio_histogram import LAGS

Draw = Callable[[], float]
MOST_PERSISTENT = 0.999  # ρ's ceiling: a memory of about a thousand steps
SQRT2 = math.sqrt(2)


def step_factors(factors: Sequence[float], cv: float, memory: tuple[float, float], rng: random.Random) -> Draw:
    """Factors drawn from ``factors`` (empty: log-normal of mean 1 and coefficient of variation
    ``cv``; 0: always 1), independently, or with ``memory`` ``(w, ρ)`` in stretches."""
    if factors:
        ordered = sorted(factors)
        n = len(ordered)
        # the factor at the latent's rank: Φ(z) through the empirical quantile
        of_latent: Callable[[float], float] = lambda z: ordered[min(n - 1, int(0.5 * (1 + math.erf(z / SQRT2)) * n))]
        independent: Draw = lambda: rng.choice(factors)  # as given: one seed draws what it drew before
    elif cv > 0:
        sigma = math.sqrt(math.log1p(cv * cv))
        of_latent = lambda z: math.exp(-sigma * sigma / 2 + sigma * z)  # the log-normal's own normal
        independent = lambda: rng.lognormvariate(-sigma * sigma / 2, sigma)
    else:
        return lambda: 1.0
    weight, persistence = memory
    if weight <= 0:
        return independent
    latent = Persistent(weight, persistence, rng)
    return lambda: of_latent(latent.next())


def check_memory(memory: tuple[float, float], what: str = "a step memory") -> None:
    """ValueError unless ``memory`` is ``(w, ρ)`` with 0 ≤ w ≤ 1 and 0 ≤ ρ < 1."""
    weight, persistence = memory
    if not (0 <= weight <= 1 and 0 <= persistence < 1):
        raise ValueError(f"{what} is (w, rho) with 0 <= w <= 1 and 0 <= rho < 1, got {memory}")


class Persistent:
    """The latent standard normal above; ``next`` moves it one step."""

    def __init__(self, weight: float, persistence: float, rng: random.Random) -> None:
        check_memory((weight, persistence))
        self.weight, self.persistence, self._rng = weight, persistence, rng
        self._slow = rng.gauss(0.0, 1.0)

    def next(self) -> float:
        rho = self.persistence
        self._slow = rho * self._slow + math.sqrt(1 - rho * rho) * self._rng.gauss(0.0, 1.0)
        return math.sqrt(self.weight) * self._slow + math.sqrt(1 - self.weight) * self._rng.gauss(0.0, 1.0)


def memory_from_correlations(near: float, far: float) -> tuple[float, float]:
    """``(w, ρ)`` whose correlations ``w · ρ^k`` pass through ``near`` at the first of ``LAGS`` and
    ``far`` at the second; ``(0, 0)`` (independent) when the near one is not positive. A far one
    at or below 0 leaves the whole memory to a ρ that reaches ``near`` alone (``w`` = 1); one at or
    above the near one, the most persistent ρ."""
    short, long = LAGS
    if near <= 0:
        return 0.0, 0.0
    if far <= 0:
        return 1.0, near ** (1 / short)
    rho = min(MOST_PERSISTENT, (far / near) ** (1 / (long - short)))
    return min(1.0, near / rho**short), rho
