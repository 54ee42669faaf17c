"""``bench/sim_vs_real.py``'s own arithmetic: the in-cluster cost as a fixed cost per forward, a real
point set beside the compared simulation and each variant, and the simulated host fitted through
the measured loads."""

from __future__ import annotations

import dataclasses

import pytest

from bench.lib.sim_host import decode_step_law, host_config
from bench.lib.sim_variants import per_forward_cost, per_request_cost, per_step_cost, step_costs
from bench.lib.sim_vs_real_report import compare
from common.slo.cost_models import DecodeModel, PrefillModel
from simulator.config import SimConfig
from simulator.host import RateLaw

PROFILE = PrefillModel(0, 0.001, 0.00005)  # 1 ms + 50 us a token


def test_the_in_cluster_cost_is_paid_once_per_forward_however_many_prompts_it_holds():
    model = per_forward_cost(PROFILE, 1.5, 200)
    assert model.predict(200) == pytest.approx(1.5 * PROFILE.predict(200))  # the calibration forward's ratio
    extra = 0.5 * PROFILE.predict(200)
    # four prompts in one forward pay it once; in four forwards, four times
    assert model.predict_forwards(800, 0) == pytest.approx(PROFILE.predict_forwards(800, 0) + extra)
    assert model.predict_forwards(800, 200) == pytest.approx(4 * (PROFILE.predict(200) + extra))
    assert per_forward_cost(PROFILE, 1.5, 800).predict(200) > model.predict(200)  # measured on larger forwards
    # faster than the profile: nothing to add, the profile scaled
    assert per_forward_cost(PROFILE, 0.8, 200).predict(400) == pytest.approx(0.8 * PROFILE.predict(400))


def _point(policy: str, rate: float, goodput: float, attainment: float) -> dict:
    return {"policy": policy, "rate": rate, "goodput": goodput, "admitted_attainment": attainment, "rejected": 0,
            "refusals": {}, "margins": {}, "cores_used": {}, "stretch": {"prefill": 1.0, "decode": 1.0}}


def test_each_variant_is_set_beside_the_same_real_point_and_judged_on_both_figures():
    real = [_point("scorpio", 16.0, 16.0, 1.0), _point("fcfs", 16.0, 10.0, 0.5)]
    simulated = [_point("fcfs", 16.0, 11.4, 0.5), _point("scorpio", 16.0, 14.0, 1.0)]
    beside = {"a": [_point("scorpio", 16.0, 16.5, 0.86), _point("fcfs", 16.0, 8.6, 0.56)],
              "b": [_point("fcfs", 16.0, 12.0, 0.5), _point("scorpio", 16.0, 16.0, 0.84)]}
    scorpio, fcfs = compare(real, simulated, beside)
    assert (scorpio["sim_goodput"], fcfs["sim_goodput"]) == (14.0, 11.4)
    assert scorpio["goodput_within_15pct"] and scorpio["attainment_within_15pct"]
    assert fcfs["goodput_within_15pct"]  # 14% over
    assert scorpio["sim_a_within_15pct"] and not scorpio["sim_b_within_15pct"]  # attainment 16% under
    assert fcfs["sim_a_within_15pct"] and not fcfs["sim_b_within_15pct"]  # 12.0 is 20% over 10
    assert fcfs["sim_b_goodput"] == 12.0 and scorpio["sim_a_admitted_attainment"] == 0.86


def test_the_host_is_fitted_through_the_measured_loads_and_the_decode_step_through_its_two():
    def used(gateway: float, tester: float, decode_own: float) -> dict[str, float]:
        return {"gateway": gateway, "load_tester": tester, "prefill-0": 0.3, "prefill-0/engine": 0.3,
                "decode-0": 0.5 + decode_own, "decode-0/engine": 0.5}

    # the front end at 0.05 · r^0.6 cores exactly, the decode worker's own threads flat at 0.04
    loads = tuple((r, used(0.03 * r ** 0.6, 0.02 * r ** 0.6, 0.04)) for r in (2.0, 6.0, 18.0))
    config = host_config(SimConfig(hop_s=0.001), loads)
    assert config.front_end_cores == (pytest.approx(0.05), pytest.approx(0.6))
    assert config.decode_own_cores == (pytest.approx(0.04), pytest.approx(0.0, abs=1e-12))
    assert config.prefill_own_cores == (0.0, 0.0)  # none measured beside its engine
    assert config.hop_s == 0.001 and config.host_cores >= 1 and config.decode_step_ratio == (0.0, 0.0)
    ratio = RateLaw(*decode_step_law([(6.0, 1.1), (18.0, 1.1 * 3 ** 0.2)]))
    assert ratio.at(6.0) == pytest.approx(1.1) and ratio.exponent == pytest.approx(0.2)


def test_a_steps_in_cluster_cost_as_a_fixed_cost_per_step():
    decode = DecodeModel(alpha=2e-7, beta=1e-4, gamma=1e-7, delta=1e-3)
    model = per_step_cost(decode, 2.0, 300)
    assert model.predict(1, 300) == pytest.approx(2.0 * decode.predict(1, 300))  # the measured point
    extra = decode.predict(1, 300)
    for batch in (4, 16, 48):  # the batch's own growth is the profile's: only the fixed part is added
        assert model.predict(batch, 300) == pytest.approx(decode.predict(batch, 300) + extra)
        assert model.predict(batch, 300) < 2.0 * decode.predict(batch, 300)
    assert per_step_cost(decode, 0.8, 300).predict(16, 300) == pytest.approx(0.8 * decode.predict(16, 300))


def test_a_steps_in_cluster_cost_per_step_and_per_request_is_fitted_through_the_loads_engine_cpu():
    decode = DecodeModel(alpha=1e-7, beta=1e-4, gamma=0.0, delta=1e-3)
    # by hand: 0.4 ms a step and 0.07 ms a request beyond the model, at batches 1.5 and 10
    loads = [(b, decode.predict(b, 200) + 0.4e-3 + 0.07e-3 * b) for b in (1.5, 10.0)]
    per_step, per_request = step_costs(decode, loads, 200)
    assert (per_step, per_request) == (pytest.approx(0.4e-3), pytest.approx(0.07e-3))
    model = per_request_cost(decode, per_step, per_request, 200)
    kneed = dataclasses.replace(decode, knee=4.0)
    at_knee = per_request_cost(kneed, per_step, per_request, 200)
    for b in (1, 3, 4, 16, 40):  # a model with a knee: below it and past it, at the mean length
        assert model.predict(b, 200) == pytest.approx(decode.predict(b, 200) + 0.4e-3 + 0.07e-3 * b)
        assert at_knee.predict(b, 200) == pytest.approx(kneed.predict(b, 200) + 0.4e-3 + 0.07e-3 * b)
    # a cost falling with the batch is noise: a cost per step, their mean; a negative fixed part:
    # through the origin; no load: nothing
    falling = [(1.0, decode.predict(1, 200) + 0.6e-3), (8.0, decode.predict(8, 200) + 0.2e-3)]
    assert step_costs(decode, falling, 200) == (pytest.approx(0.4e-3), 0.0)
    steep = [(1.0, decode.predict(1, 200) + 0.05e-3), (5.0, decode.predict(5, 200) + 0.5e-3)]
    per_step, per_request = step_costs(decode, steep, 200)
    assert per_step == 0.0 and per_request == pytest.approx((0.05e-3 + 5 * 0.5e-3) / 26)
    assert step_costs(decode, [], 200) == (0.0, 0.0)


def test_a_point_run_several_times_is_compared_at_its_mean_and_carries_its_spread():
    import bench.sim_vs_real as svr  # imports the cluster launcher: kept out of the module's import time

    runs = [{**_point("fcfs", 64.0, 2.0, 0.1), "refusals": {"ttft_unattainable": 3}},
            {**_point("fcfs", 64.0, 1.0, 0.04), "refusals": {}},
            {**_point("fcfs", 64.0, 3.0, 0.13), "refusals": {"ttft_unattainable": 6, "decode_admission": 3}}]
    point = svr.repeated(runs)
    assert point["goodput"] == pytest.approx(2.0) and point["admitted_attainment"] == pytest.approx(0.09)
    assert point["goodput_spread"] == pytest.approx((3.0 - 1.0) / 2.0)
    assert point["admitted_attainment_spread"] == pytest.approx((0.13 - 0.04) / 0.09)
    assert point["refusals"] == {"ttft_unattainable": 3.0, "decode_admission": 1.0}  # per run, absent ones as 0
    assert point["goodput_runs"] == [2.0, 1.0, 3.0]
    compared = compare([point], [_point("fcfs", 64.0, 2.2, 0.1)], {})[0]
    assert compared["real_goodput"] == pytest.approx(2.0) and compared["goodput_within_15pct"]
    assert compared["real_goodput_spread"] == pytest.approx(1.0)
    assert "real_goodput_spread" not in compare([runs[0]], [_point("fcfs", 64.0, 2.2, 0.1)], {})[0]


def test_the_call_overheads_growth_is_fitted_through_one_at_the_calibration_load_and_the_heavier_ones_mean():
    import math

    from bench.lib.sim_host import overhead_growth

    law = overhead_growth((6.0, (0.0005, 0.0015)), (18.0, (0.001, 0.002, 0.003)))  # means 1 ms and 2 ms
    assert law.at(6.0) == pytest.approx(1.0) and law.at(18.0) == pytest.approx(2.0)
    assert law.exponent == pytest.approx(math.log(2) / math.log(3))
    assert overhead_growth((6.0, (0.001,)), (18.0, (0.0005,))).at(64.0) == pytest.approx(1.0)  # lighter at load: flat
    assert overhead_growth((6.0, ()), (18.0, (0.002,))).at(64.0) == 1.0  # nothing measured: as drawn
