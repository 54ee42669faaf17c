"""The A/B bench's summary, on runs made up by hand."""

from __future__ import annotations

import pytest

from tools.serving_ab import rates_by_workload, summarize


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


def test_rates_apply_to_every_workload_unless_one_is_named():
    workloads = ["mixed", "bursty"]
    assert rates_by_workload([], workloads) == {"mixed": "16,48", "bursty": "16,48"}
    assert rates_by_workload(["12,24"], workloads) == {"mixed": "12,24", "bursty": "12,24"}
    assert rates_by_workload(["12,24", "bursty=24,48"], workloads) == {"mixed": "12,24", "bursty": "24,48"}
    assert rates_by_workload(["bursty=24,48", "8"], workloads) == {"mixed": "8", "bursty": "8"}  # the later wins


@pytest.mark.parametrize("spec", ["chat=8,16", "mixed=", "mixed=8,x", "0,16", "mixed=-4"])
def test_rates_that_name_no_workload_run_or_no_positive_rate_are_refused(spec):
    with pytest.raises(ValueError, match="--rates"):
        rates_by_workload([spec], ["mixed"])
