"""Fitted time models a worker uses to predict its own latency.

- Prefill: time of a step against its batched prompt tokens ``n`` — constant below a
  threshold (fixed costs dominate), linear above, plus attention's part:
  ``t = c + k·max(0, n − n0) + q·A``. ``A`` is the step's attention work (``attention_work``),
  ``n²`` for one fresh prompt (what the profile measures) but the sum over its prompts for a
  step of several: eight prompts of 256 tokens attend to 8·256², not 2048², and a fit applied
  to the step's total as if it were one prompt would over-predict a batched forward. ``n0`` is
  found by search over the measured sizes; the largest measured size is kept
  (``max_tokens``): beyond it the model extrapolates, and says so.
- Decode: step time against batch size ``B`` and mean sequence length ``L``:
  ``t = α·B·L + β·max(0, B − B0) + γ·L + δ``. A GPU runs small batches in the time of one (the
  weights are read once per step whatever the batch) until its kernels saturate at ``B0``; a CPU
  pays per request from the first (``B0 = 0``). ``B0`` is found by search like ``n0``. Least
  squares with every coefficient ≥ 0: each term is a cost, and an unconstrained fit to noisy
  timings can go negative and predict ~0 for small batches, which would make admission and
  online calibration meaningless.

Both fits minimise the *relative* error of each point (least squares weighted by 1/t): a
3 ms step mispredicted by 2 ms matters as much to a tight TPOT as a 30 ms step by 20 ms.

A fit is trusted only as far as it reproduces the points it was fitted on (``sound``): every
point within ``FIT_TOLERANCE`` × and, unless every point is close, an R² of at least
``MIN_R2``. ``conservative`` turns an unsound fit into one that over-predicts every point, for
use until observed steps correct it.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

FIT_TOLERANCE = 1.5  # every measured point within this factor of the fit
MIN_R2 = 0.5  # ... and the fit explains at least this much of the variation,
CLOSE_FIT = 1.15  # unless every point is this close (flat timings, as on a GPU, leave R² meaningless)


def sound(r2: float, worst_ratio: float) -> bool:
    """Whether a fit with this R² and worst point ratio may be trusted for admission."""
    return worst_ratio <= FIT_TOLERANCE and (r2 >= MIN_R2 or worst_ratio <= CLOSE_FIT)


def _cover(predicted: list[float], measured: list[float]) -> float:
    """The least factor ≥ 1 that lifts every prediction to at least its measured point."""
    return max(1.0, float(np.max(np.asarray(measured) / np.maximum(np.asarray(predicted), 1e-12))))


def worst_point_ratio(predicted: np.ndarray, measured: np.ndarray) -> float:
    """max over points of max(predicted/measured, measured/predicted): 1.0 is a perfect fit."""
    p, m = np.maximum(predicted, 1e-12), np.maximum(measured, 1e-12)
    return float(np.max(np.maximum(p / m, m / p))) if len(m) else float("inf")


def attention_work(tokens: int, start: int = 0) -> int:
    """Attention's work for ``tokens`` prompt tokens computed after ``start`` already in the cache,
    in the unit of ``PrefillModel``'s quadratic term (a fresh prompt of ``n`` tokens: ``n²``):
    ``(start + tokens)² − start²``, twice the causal (query, key) pairs less the diagonal. A prompt
    run in chunks sums to its whole ``n²``: later chunks attend to the earlier ones."""
    return tokens * (2 * start + tokens)


@dataclass(frozen=True, slots=True)
class PrefillModel:
    threshold: float
    base_s: float
    per_token_s: float
    r2: float = 0.0
    worst_ratio: float = 0.0  # on the points it was fitted on; 0: unknown (written by hand)
    per_token2_s: float = 0.0  # q: attention's cost per squared token
    max_tokens: float = 0.0  # the largest step it was fitted on; 0: unknown (written by hand)

    def predict(self, tokens: float, attention: float | None = None) -> float:
        """A step of ``tokens`` prompt tokens whose attention work is ``attention`` (default: one
        fresh prompt's, ``tokens²``)."""
        work = tokens * tokens if attention is None else attention
        return self.base_s + self.per_token_s * max(0.0, tokens - self.threshold) + self.per_token2_s * work

    def _linear(self, tokens: float) -> float:
        """``predict`` without the attention term."""
        return self.base_s + self.per_token_s * max(0.0, tokens - self.threshold)

    def extrapolates(self, tokens: float) -> bool:
        """Whether a step of ``tokens`` lies beyond what the fit was measured on."""
        return 0 < self.max_tokens < tokens

    def predict_forwards(self, tokens: int, budget: int, attention: float | None = None) -> float:
        """Time to compute ``tokens`` queued prompt tokens at ``budget`` tokens per forward
        (0: all in one) whose attention work is ``attention`` in all (default: each forward's
        as one fresh prompt's). A queue's work does not depend on how it is cut: a prompt split
        over forwards attends to its earlier chunks from the later ones."""
        if attention is not None:  # (the guards ask this for every queued request: no model copy per call)
            if budget <= 0 or tokens <= budget:
                linear = self._linear(tokens)
            else:
                full, rest = divmod(tokens, budget)
                linear = full * self._linear(budget) + (self._linear(rest) if rest else 0.0)
            return linear + self.per_token2_s * attention
        if budget <= 0 or tokens <= budget:
            return self.predict(tokens)
        full, rest = divmod(tokens, budget)
        return full * self.predict(budget) + (self.predict(rest) if rest else 0.0)

    @classmethod
    def fit(cls, tokens: list[float], seconds: list[float]) -> PrefillModel:
        x, y = np.asarray(tokens, float), np.asarray(seconds, float)
        best: PrefillModel | None = None
        best_err = float("inf")
        for n0 in np.unique(np.concatenate([[0.0], x])):
            model, err = _fit_hinge(x, y, float(n0))
            if err < best_err:
                best, best_err = model, err
        assert best is not None
        predicted = np.array([best.predict(n) for n in x])
        return dataclasses.replace(best, r2=_r2(y, predicted), worst_ratio=worst_point_ratio(predicted, y),
                                   max_tokens=float(x.max()))

    @property
    def sound(self) -> bool:
        return sound(self.r2, self.worst_ratio)

    def scaled(self, factor: float) -> PrefillModel:
        return dataclasses.replace(self, base_s=self.base_s * factor, per_token_s=self.per_token_s * factor,
                                   per_token2_s=self.per_token2_s * factor)

    def conservative(self, tokens: list[float], seconds: list[float]) -> PrefillModel:
        """This fit scaled up until it predicts no measured point too fast."""
        return self.scaled(_cover([self.predict(n) for n in tokens], seconds))

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    def describe(self) -> str:
        return (f"{self.base_s * 1e3:.3f} ms + {self.per_token_s * 1e6:.2f} µs·max(0, n − {self.threshold:g}) + "
                f"{self.per_token2_s * 1e9:.3f} ns·n² up to {self.max_tokens:g} tokens "
                f"(R² {self.r2:.3f}, worst point {self.worst_ratio:.2f}×)")


def _fit_hinge(x: np.ndarray, y: np.ndarray, n0: float) -> tuple[PrefillModel, float]:
    """The hinge at ``n0`` with the least relative squared error (and that error)."""
    design = np.stack([np.ones_like(x), np.maximum(0.0, x - n0), x * x], axis=1)
    coef, err = _non_negative_lstsq(design, y)
    return PrefillModel(n0, float(coef[0]), float(coef[1]), per_token2_s=float(coef[2])), err


@dataclass(frozen=True, slots=True)
class DecodeModel:
    alpha: float  # per batch·length
    beta: float  # per request past the knee
    gamma: float  # per token of mean length
    delta: float  # fixed
    r2: float = 0.0
    worst_ratio: float = 0.0  # on the points it was fitted on; 0: unknown (written by hand)
    knee: float = 0.0  # B0: batch size up to which more requests cost nothing per request

    def predict(self, batch: float, mean_len: float) -> float:
        return (self.alpha * batch * mean_len + self.beta * max(0.0, batch - self.knee) + self.gamma * mean_len
                + self.delta)

    @classmethod
    def fit(cls, batch: list[float], mean_len: list[float], seconds: list[float]) -> DecodeModel:
        b, length, y = (np.asarray(v, float) for v in (batch, mean_len, seconds))
        best: tuple[np.ndarray, float] | None = None
        best_err = float("inf")
        for knee in np.unique(np.concatenate([[0.0], b[b < b.max()]])):  # a knee at the largest batch fits nothing
            design = np.stack([b * length, np.maximum(0.0, b - knee), length, np.ones_like(b)], axis=1)
            coef, err = _non_negative_lstsq(design, y)
            if err < best_err - 1e-12:
                best, best_err = (coef, float(knee)), err
        assert best is not None
        coef, knee = best
        model = DecodeModel(*(float(c) for c in coef), knee=knee)
        predicted = np.array([model.predict(x, n) for x, n in zip(b, length)])
        return dataclasses.replace(model, r2=_r2(y, predicted), worst_ratio=worst_point_ratio(predicted, y))

    @property
    def sound(self) -> bool:
        return sound(self.r2, self.worst_ratio)

    def scaled(self, factor: float) -> DecodeModel:
        return dataclasses.replace(self, alpha=self.alpha * factor, beta=self.beta * factor,
                                   gamma=self.gamma * factor, delta=self.delta * factor)

    def conservative(self, batch: list[float], mean_len: list[float], seconds: list[float]) -> DecodeModel:
        """This fit scaled up until it predicts no measured point too fast."""
        return self.scaled(_cover([self.predict(b, n) for b, n in zip(batch, mean_len)], seconds))

    def describe(self) -> str:
        past = f"max(0, B − {self.knee:g})" if self.knee else "B"
        return (f"{self.alpha * 1e6:.4f} µs·B·L + {self.beta * 1e3:.4f} ms·{past} + {self.gamma * 1e6:.4f} µs·L + "
                f"{self.delta * 1e3:.3f} ms (R² {self.r2:.3f}, worst point {self.worst_ratio:.2f}×)")

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def _non_negative_lstsq(design: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Least squares of the relative error, Σ((design·coef − y) / y)², under ``coef ≥ 0``, by
    trying every subset of free coefficients (four columns: sixteen small solves); the
    feasible solution with the least error wins. Returns it and its error."""
    columns = design.shape[1]
    weight = 1.0 / np.maximum(y, 1e-12)
    wd, wy = design * weight[:, None], y * weight
    best, best_err = np.zeros(columns), float((wy**2).sum())
    for size in range(1, columns + 1):
        for subset in itertools.combinations(range(columns), size):
            sub, *_ = np.linalg.lstsq(wd[:, subset], wy, rcond=None)
            if (sub < 0).any():
                continue
            coef = np.zeros(columns)
            coef[list(subset)] = sub
            err = float(((wd @ coef - wy) ** 2).sum())
            if err < best_err:
                best, best_err = coef, err
    return best, best_err


def _r2(y: np.ndarray, predicted: np.ndarray) -> float:
    total = float(((y - y.mean()) ** 2).sum())
    return 1.0 - float(((predicted - y) ** 2).sum()) / total if total > 0 else 1.0


@dataclass(frozen=True, slots=True)
class CostModels:
    prefill: PrefillModel
    decode: DecodeModel
    calibrate: bool = True  # false: the worker applies the decode model as written, never corrected

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"prefill": self.prefill.to_dict(), "decode": self.decode.to_dict(),
                                    "calibrate": self.calibrate}, indent=2))

    @property
    def sound(self) -> bool:
        return self.prefill.sound and self.decode.sound

    @classmethod
    def load(cls, path: Path) -> CostModels:
        """Reads ``save``'s JSON; ValueError naming the file when it is not such a file."""
        try:
            raw = json.loads(path.read_text())
            return cls(PrefillModel(**raw["prefill"]), DecodeModel(**raw["decode"]), bool(raw.get("calibrate", True)))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"cost model file {path}: {e}") from e
