"""What an engine's decode steps really take, against its decode cost model: the calibration
every TPOT prediction is scaled by, the prediction error the heartbeat reports, every step's
ratio for the metrics, the log of steps the model is refitted from when one is due, and the two
readings the TPOT guard's margin is bounded by (``common.slo.epsilon_bound``): how far steps
outrun their calibrated predictions, and what one request alone takes a step now."""

from __future__ import annotations

import dataclasses
import statistics
from collections import deque
from collections.abc import Callable

from common.slo.calibration import Calibration
from common.slo.epsilon_bound import StepEvidence
from common.slo.cost_models import CostModels, DecodeModel
from common.slo.ratio_histogram import RatioHistogram
from common.slo.refit import StepLog

PREDICTION_ERRORS_KEPT = 32  # steps the reported prediction error is the median of


class StepCosts:
    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.calibration = Calibration(clock=clock)  # decode step periods as observed vs the fitted model
        self.ratios = RatioHistogram()  # every decode step's period / the model's prediction, since start
        self.log = StepLog()  # decode steps really run: the decode model is refitted from them
        self.refits = 0  # decode models replaced by a refit since start
        self._errors: deque[float] = deque(maxlen=PREDICTION_ERRORS_KEPT)  # calibrated prediction / observed
        self._profile: DecodeModel | None = None  # the decode model before any refit: refits' prior
        self.evidence = StepEvidence(clock)  # what bounds the TPOT guard's margin

    @property
    def prediction_error(self) -> float:
        """Median over recent steps of the calibrated prediction (made before the step) / the step."""
        return statistics.median(self._errors) if self._errors else 1.0

    def observe(self, models: CostModels, batch_size: int, mean_len: float, seconds: float,
                max_batch: int) -> CostModels:
        """One decode step of ``batch_size`` requests at ``mean_len`` took ``seconds``: teaches the
        calibration, logs the step, and returns the models with the decode model refitted when a
        refit is due and the steps support a sound one (else ``models``)."""
        predicted = models.decode.predict(batch_size, mean_len)
        if seconds > 0:
            calibrated = self.calibration.scale(predicted)  # before it learns
            self._errors.append(calibrated / seconds)
            self.evidence.observe(batch_size, calibrated, seconds)
            self.log.observe(batch_size, mean_len, seconds)
        self.ratios.observe(predicted, seconds)
        self.calibration.observe(predicted, seconds)
        if not self.log.refit_due(self.clock()):
            return models
        if self._profile is None:
            self._profile = models.decode
        model = self.log.refit(self.clock(), self._profile, max_batch)
        if model is None:
            return models
        self.calibration = Calibration(clock=self.clock)  # its ratios were against the old model
        self.refits += 1
        return dataclasses.replace(models, decode=model)
