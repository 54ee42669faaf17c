"""``tools/sim_vs_recorded.py``: the calibration recovers the scales a recorded point was run at, the
bisection finds a rising function's root, and records it cannot read are refused with the reason."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tools.sim_vs_recorded import RecordedWorkload, _bisect, calibrate, compared, sim_point
from common.slo.cost_models import CostModels

PROFILE = Path(__file__).resolve().parents[2] / "simulator" / "profiles" / "h200-1b-bfloat16.json"
REQUESTS = ["--random-input-len", "192", "--random-output-len", "48", "--random-range-ratio", "0.5"]
CLASSES = "t100-p15:100:15,t1000-p50:1000:50"


def _workload(points: list[dict], loop: dict | None = None) -> dict:
    record = {"requests": REQUESTS, "slo_classes": CLASSES, "points": points}
    if loop is not None:
        record["gateway_loop_ms"] = loop
    return record


def test_bisection_finds_the_crossing_of_a_rising_function():
    assert _bisect(lambda s: s * s - 10) == pytest.approx(math.sqrt(10), abs=7 / 2 ** 7)
    assert _bisect(lambda s: s - 0.5) == 1.0  # above zero at the start: a worker no faster than its profile
    assert _bisect(lambda s: -1.0) == pytest.approx(8.0, abs=7 / 2 ** 7)  # never reaches it: the ceiling


def test_calibration_recovers_the_scales_a_point_was_simulated_at():
    """The 'recorded' point is the simulator's own at known scales; calibrating on it must find them
    again (TPOT first with the prefill at the profile, so the decode scale is found exactly; then TTFT)."""
    models = CostModels.load(PROFILE)
    template = {"policy": "fcfs", "rate": 100.0, "num_prompts": 300, "adherence": 1.0}
    workload = RecordedWorkload.from_record("w", _workload([template], {"served": 1.0, "refused": 0.5}))
    truth = (1.8, 2.5)
    recorded = {**template, **sim_point(workload, template, models, truth)}
    assert recorded["adherence"] >= 0.9  # a calibration point must be below the knee
    found = calibrate(RecordedWorkload.from_record("w", _workload([recorded], {"served": 1.0, "refused": 0.5})), models)
    assert found[1] == pytest.approx(truth[1], rel=0.05)
    assert found[0] == pytest.approx(truth[0], rel=0.1)


def test_the_calibration_point_is_the_lowest_fcfs_rate_and_is_not_compared():
    points = [{"policy": "fcfs", "rate": r, "adherence": a} for r, a in ((200.0, 0.5), (100.0, 0.99))]
    points.append({"policy": "scorpio", "rate": 50.0, "adherence": 1.0})
    workload = RecordedWorkload.from_record("w", _workload(points, {"served": 3.0, "refused": 0.7}))
    assert workload.calibration_point()["rate"] == 100.0
    assert [p["rate"] for p in workload.compared_points()] == [200.0, 50.0]
    assert workload.gateway_loop_s == (0.003, 0.0007)


def test_records_it_cannot_use_are_refused_with_what_to_do():
    above_the_knee = [{"policy": "fcfs", "rate": 200.0, "adherence": 0.5}]
    with pytest.raises(SystemExit, match="lower first grid rate"):
        RecordedWorkload.from_record("w", _workload(above_the_knee, {"served": 1.0, "refused": 0.5})).calibration_point()
    with pytest.raises(SystemExit, match="--gateway-loop-ms"):
        RecordedWorkload.from_record("w", _workload(above_the_knee))
    given = RecordedWorkload.from_record("w", _workload(above_the_knee), (4.0, 1.0))
    assert given.gateway_loop_s == (0.004, 0.001)


def test_a_compared_point_is_judged_within_15_percent_on_each_figure():
    def point(goodput: float, attainment: float) -> dict:
        return {"policy": "scorpio", "rate": 64.0, "goodput": goodput, "admitted_attainment": attainment,
                "rejected": 3, "p99_ttft_ms": 50.0, "p99_tpot_ms": 5.0, "gateway_loop_busy": 0.25}

    real = {**point(100.0, 1.0), "gateway_loop_cpu_s": 4.0, "duration_s": 10.0}
    p = compared(real, point(116.0, 0.9), point(100.0, 0.8))
    assert (p["real_gateway_loop_busy"], p["sim_gateway_loop_busy"]) == (0.4, 0.25)
    assert not p["goodput_within_15pct"] and p["attainment_within_15pct"]
    assert not p["sim_profile_within_15pct"]  # its attainment is 20% off
    assert (p["real_goodput"], p["sim_goodput"], p["sim_profile_goodput"]) == (100.0, 116.0, 100.0)
