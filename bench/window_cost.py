"""What a windowed quantile costs the gateway per request as the request rate grows.

Each request adds a value to the gateway's windowed quantiles (a prefill call's calibration
ratio, the overhead beyond the model, the first token's delivery) and reads them when it is
admitted. ``WindowQuantile`` keeps its window in value order (``common.slo.ordered_window``); the
baseline, run in the same process on the same values, is the window sorted at each read after a
change, as it was computed before. A 2 s window at ``rate`` requests a second holds ``2 · rate``
values.

    python bench/window_cost.py [--rates 32,256,640,2000] [--requests 20000] [--out f.json]

Last line: JSON ``{"points": [{"rate", "window_values", "ordered_us", "sorted_us", "speedup",
"same_answers"}, ...]}``.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import device_name, emit, progress  # noqa: E402
from common.slo.calibration import WindowQuantile  # noqa: E402

WINDOW_S, QUANTILE, MIN_SAMPLES = 2.0, 0.995, 16  # the gateway's overhead quantile at a 0.99 target


class SortedAtRead:
    """The baseline: the window's values sorted at the first read after each change."""

    def __init__(self, clock) -> None:  # type: ignore[no-untyped-def]
        self._clock, self._samples, self._value = clock, deque(), None  # type: ignore[var-annotated]

    def observe(self, value: float) -> None:
        self._samples.append((self._clock(), value))
        self._value = None
        self._forget_old()

    def value(self) -> float:
        self._forget_old()
        if self._value is None:
            ordered = sorted(v for _, v in self._samples)
            self._value = ordered[min(len(ordered) - 1, math.ceil(QUANTILE * len(ordered)) - 1)] if ordered else 0.0
        return self._value

    def _forget_old(self) -> None:
        while len(self._samples) > MIN_SAMPLES and self._samples[0][0] < self._clock() - WINDOW_S:
            self._samples.popleft()
            self._value = None


def run(make, arrivals: list[tuple[float, float]]) -> tuple[float, list[float]]:  # type: ignore[no-untyped-def]
    """Microseconds an observe and a read take, and what each read answered."""
    now = [0.0]
    window = make(lambda: now[0])
    answers = []
    start = time.perf_counter()
    for when, value in arrivals:
        now[0] = when
        window.observe(value)
        answers.append(window.value())
    return (time.perf_counter() - start) / len(arrivals) * 1e6, answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="32,256,640,2000", help="requests a second, comma-separated")
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rng, points = random.Random(0), []
    for rate in (float(r) for r in args.rates.split(",")):
        when, arrivals = 0.0, []
        for _ in range(args.requests):
            when += rng.expovariate(rate)
            arrivals.append((when, rng.lognormvariate(-6.0, 0.8)))  # seconds: a few ms, heavy-tailed
        ordered_us, ordered = run(lambda clock: WindowQuantile(WINDOW_S, QUANTILE, MIN_SAMPLES, clock), arrivals)
        sorted_us, baseline = run(SortedAtRead, arrivals)
        point = {"rate": rate, "window_values": round(WINDOW_S * rate), "ordered_us": ordered_us,
                 "sorted_us": sorted_us, "speedup": sorted_us / ordered_us, "same_answers": ordered == baseline}
        progress(f"{rate:7.0f} req/s: {ordered_us:6.2f} us an observe and a read kept in order, "
                 f"{sorted_us:6.2f} sorted at each read ({point['speedup']:.1f}x), same answers: {point['same_answers']}")
        points.append(point)
    emit({"device": device_name(), "window_s": WINDOW_S, "quantile": QUANTILE, "points": points}, args.out)


if __name__ == "__main__":
    main()
