"""Fitted time models a worker uses to predict its own latency.

- Prefill: time of a step against its batched prompt tokens ``n`` — constant below a
  threshold (fixed costs dominate), linear above: ``t = c`` for ``n ≤ n0``, else
  ``t = c + k·(n − n0)``. ``n0`` is found by search over the measured sizes.
- Decode: step time against batch size ``B`` and mean sequence length ``L``:
  ``t = α·B·L + β·B + γ·L + δ`` (least squares with every coefficient ≥ 0: each term is a
  cost, and an unconstrained fit to noisy timings can go negative and predict ~0 for small
  batches, which would make admission and online calibration meaningless).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True, slots=True)
class PrefillModel:
    threshold: float
    base_s: float
    per_token_s: float
    r2: float = 0.0

    def predict(self, tokens: float) -> float:
        return self.base_s + self.per_token_s * max(0.0, tokens - self.threshold)

    def predict_forwards(self, tokens: int, budget: int) -> float:
        """Time to compute ``tokens`` queued prompt tokens at ``budget`` tokens per forward
        (0: all in one)."""
        if budget <= 0 or tokens <= budget:
            return self.predict(tokens)
        full, rest = divmod(tokens, budget)
        return full * self.predict(budget) + (self.predict(rest) if rest else 0.0)

    @classmethod
    def fit(cls, tokens: list[float], seconds: list[float]) -> PrefillModel:
        x, y = np.asarray(tokens, float), np.asarray(seconds, float)
        best: PrefillModel | None = None
        best_sse = float("inf")
        for n0 in np.unique(np.concatenate([[0.0], x])):
            model, sse = _fit_hinge(x, y, float(n0))
            if sse < best_sse:
                best, best_sse = model, sse
        assert best is not None
        return PrefillModel(best.threshold, best.base_s, best.per_token_s, _r2(y, best_sse))

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    def describe(self) -> str:
        return (f"{self.base_s * 1e3:.3f} ms + {self.per_token_s * 1e6:.2f} µs·max(0, n − {self.threshold:g}) "
                f"(R² {self.r2:.3f})")


def _fit_hinge(x: np.ndarray, y: np.ndarray, n0: float) -> tuple[PrefillModel, float]:
    design = np.stack([np.ones_like(x), np.maximum(0.0, x - n0)], axis=1)
    (base, slope), *_ = np.linalg.lstsq(design, y, rcond=None)
    slope = max(slope, 0.0)
    sse = float(((design @ np.array([base, slope]) - y) ** 2).sum())
    return PrefillModel(n0, float(base), float(slope)), sse


@dataclass(frozen=True, slots=True)
class DecodeModel:
    alpha: float  # per batch·length
    beta: float  # per request
    gamma: float  # per token of mean length
    delta: float  # fixed
    r2: float = 0.0

    def predict(self, batch: float, mean_len: float) -> float:
        return self.alpha * batch * mean_len + self.beta * batch + self.gamma * mean_len + self.delta

    @classmethod
    def fit(cls, batch: list[float], mean_len: list[float], seconds: list[float]) -> DecodeModel:
        b, length, y = (np.asarray(v, float) for v in (batch, mean_len, seconds))
        design = np.stack([b * length, b, length, np.ones_like(b)], axis=1)
        coef, sse = _non_negative_lstsq(design, y)
        return DecodeModel(*(float(c) for c in coef), r2=_r2(y, sse))

    def describe(self) -> str:
        return (f"{self.alpha * 1e6:.4f} µs·B·L + {self.beta * 1e3:.4f} ms·B + {self.gamma * 1e6:.4f} µs·L + "
                f"{self.delta * 1e3:.3f} ms (R² {self.r2:.3f})")

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def _non_negative_lstsq(design: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Least squares under ``coef ≥ 0`` by trying every subset of free coefficients (four
    columns: sixteen small solves); the feasible solution with the least error wins."""
    columns = design.shape[1]
    best, best_sse = np.zeros(columns), float((y**2).sum())
    for size in range(1, columns + 1):
        for subset in itertools.combinations(range(columns), size):
            sub, *_ = np.linalg.lstsq(design[:, subset], y, rcond=None)
            if (sub < 0).any():
                continue
            coef = np.zeros(columns)
            coef[list(subset)] = sub
            sse = float(((design @ coef - y) ** 2).sum())
            if sse < best_sse:
                best, best_sse = coef, sse
    return best, best_sse


def _r2(y: np.ndarray, sse: float) -> float:
    total = float(((y - y.mean()) ** 2).sum())
    return 1.0 - sse / total if total > 0 else 1.0


@dataclass(frozen=True, slots=True)
class CostModels:
    prefill: PrefillModel
    decode: DecodeModel

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"prefill": self.prefill.to_dict(), "decode": self.decode.to_dict()}, indent=2))

    @classmethod
    def load(cls, path: Path) -> CostModels:
        raw = json.loads(path.read_text())
        return cls(PrefillModel(**raw["prefill"]), DecodeModel(**raw["decode"]))
