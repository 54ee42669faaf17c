"""A prefill point that paid a one-off is measured again (``common.worker.profile.remeasure_outliers``)."""

from __future__ import annotations

from common.worker.profile import remeasure_outliers


def test_points_slower_than_larger_ones_are_measured_again_and_the_rest_left_alone():
    tokens = [16, 32, 64, 128, 256]
    seconds = [1.385, 1.337, 0.0054, 0.0052, 0.0060]  # the H100's first profile: two compile stalls
    asked: list[int] = []

    def measure_one(n: int) -> float:
        asked.append(n)
        return 0.0050

    remeasure_outliers(tokens, seconds, measure_one)
    assert sorted(set(asked)) == [16, 32]  # 64 and 128 are within 1.5x of the next: not asked
    assert seconds == [0.0050, 0.0050, 0.0054, 0.0052, 0.0060]


def test_a_point_measured_again_keeps_its_first_run_when_that_was_better():
    seconds = [0.9, 0.1]
    remeasure_outliers([16, 64], seconds, lambda n: 2.0)  # still slow: a real cost, or a worse hiccup
    assert seconds == [0.9, 0.1]
