"""Online correction of a fitted model: predictions × the running ratio of observed to predicted.

A model fitted at start-up on an idle machine under-predicts once other processes share the
cores (or the GPU is busier); the ratio, an exponential moving average of what each step
actually took over what the model said, keeps admission honest under the real load.
"""

from __future__ import annotations


class Calibration:
    def __init__(self, weight: float = 0.05, floor: float = 1.0) -> None:
        self.weight = weight
        self.floor = floor  # never trust the model to be pessimistic
        self.ratio = 1.0

    def observe(self, predicted_s: float, observed_s: float) -> None:
        if predicted_s > 0:
            self.ratio += self.weight * (observed_s / predicted_s - self.ratio)

    def scale(self, predicted_s: float) -> float:
        return predicted_s * max(self.floor, self.ratio)
