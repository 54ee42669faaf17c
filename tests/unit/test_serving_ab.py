"""The A/B bench's summary, on runs made up by hand."""

from __future__ import annotations

import pytest

from bench.serving_ab import summarize


def _run(side: str, rate: float, goodput: float, attained: float, workload: str = "mixed") -> dict:
    return {"side": side, "round": 1, "workload": workload, "rate": rate, "goodput": goodput,
            "admitted_attainment": attained, "rejected": 0}


def test_medians_runs_at_target_and_the_change_over_the_base_per_point():
    runs = [_run("base", 16, 14.0, 1.0), _run("base", 16, 15.0, 0.995), _run("base", 16, 13.0, 0.98),
            _run("change", 16, 16.0, 0.99), _run("change", 16, 12.0, 0.97), _run("change", 16, 15.5, 1.0),
            _run("base", 48, 20.0, 0.99), _run("change", 48, 25.0, 0.999), _run("base", 24, 3.0, 1.0, "bursty")]
    summary, ratios = summarize(runs, target=0.99)
    by = {(s["workload"], s["rate"], s["side"]): s for s in summary}
    assert by[("mixed", 16, "base")]["median_goodput"] == 14.0 and by[("mixed", 16, "base")]["runs_at_target"] == 2
    assert by[("mixed", 16, "change")]["median_goodput"] == 15.5 and by[("mixed", 16, "change")]["runs_at_target"] == 2
    assert by[("mixed", 16, "change")]["runs"] == 3
    assert ratios == {"mixed@16": pytest.approx(15.5 / 14.0), "mixed@48": pytest.approx(25.0 / 20.0)}  # no change at bursty 24
