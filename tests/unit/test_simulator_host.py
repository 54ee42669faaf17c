"""The simulated host: what the front end takes from the workers' cores, against hand computation."""

from __future__ import annotations

import math

import pytest

from client.bench.workload import PlannedRequest
from common.slo.cost_models import CostModels, DecodeModel, PrefillModel
from simulator.config import SimConfig
from simulator.host import MAX_SHARE, HostCpu, RateLaw
from simulator.run import simulate

FLAT = CostModels(PrefillModel(0, 0.010, 0.0), DecodeModel(0.0, 0.0, 0.0, 0.005))  # 10 ms forwards, 5 ms steps
WORKERS = {"prefill-0": "prefill", "decode-0": "decode"}


def test_a_rate_law_fits_a_power_of_the_rate_through_measured_loads_and_is_never_negative():
    fit = RateLaw.fit([(2.0, 0.20), (6.0, 0.30)])
    assert fit.at(2.0) == pytest.approx(0.20) and fit.at(6.0) == pytest.approx(0.30)
    assert fit.exponent == pytest.approx(math.log(1.5) / math.log(3))
    assert fit.at(48.0) == pytest.approx(0.20 * 24 ** fit.exponent)
    # three loads: least squares in log-log, through a point on the line exactly
    on_line = RateLaw.fit([(2.0, 0.1 * 2 ** 0.5), (6.0, 0.1 * 6 ** 0.5), (18.0, 0.1 * 18 ** 0.5)])
    assert (on_line.at_one, on_line.exponent) == (pytest.approx(0.1), pytest.approx(0.5))
    assert fit.at(0.0) == 0.0  # no load, none
    assert RateLaw.fit([(4.0, 0.3)]) == RateLaw(pytest.approx(0.3), 0.0)
    assert RateLaw.fit([(2.0, 0.3), (6.0, 0.2)]).exponent == 0.0  # less at more load: noise, flat
    assert RateLaw.fit([(2.0, 0.0), (6.0, 0.2)]) == RateLaw(pytest.approx(0.2), 0.0)  # no figure: no logarithm
    assert RateLaw.fit([(2.0, 0.0)]) == RateLaw(0.0, 0.0)
    with pytest.raises(ValueError):
        RateLaw.fit([])


def test_the_front_end_runs_on_idle_capacity_first_and_on_spare_cores_before_the_workers():
    host = HostCpu(2, WORKERS, RateLaw(0.4, 0.0))
    host.sent(0.0)
    # both idle: 0.2 core each, a forward takes 1 / 0.8 of its time
    assert host.share("prefill-0", 0.5) == pytest.approx(0.2)
    assert host.stretch("prefill-0", 0.5) == pytest.approx(1 / 0.8)
    # the decode worker busy the whole last second: all of it on the prefill worker's core
    host.busy("decode-0", 0.0, 1.0, 1.0)
    assert host.utilization("decode-0", 1.0) == pytest.approx(1.0)
    assert host.share("prefill-0", 1.0) == pytest.approx(0.4) and host.share("decode-0", 1.0) == 0.0
    # half busy: idle capacities 1 and 0.5 split it 2:1
    host.cut("decode-0", 0.5, 0.5)
    assert host.utilization("decode-0", 1.0) == pytest.approx(0.5)
    assert host.share("prefill-0", 1.0) == pytest.approx(0.4 * 2 / 3)
    # a third core is the gateway's own (plan_cores): the front end fits there, the workers keep theirs
    spare = HostCpu(3, WORKERS, RateLaw(0.9, 0.0))
    spare.sent(0.0)
    assert spare.share("prefill-0", 0.1) == 0.0
    # more than a core's worth on two busy workers: capped, CFS shares a busy core
    busy = HostCpu(2, WORKERS, RateLaw(5.0, 0.0))
    busy.sent(0.0)
    assert busy.share("decode-0", 0.1) == MAX_SHARE


def test_a_workers_own_threads_take_from_its_own_cores_and_leave_the_front_end_less_room_there():
    own = {"decode": RateLaw(0.2, 0.0)}
    alone = HostCpu(2, WORKERS, RateLaw(0.0, 0.0), own)
    alone.sent(0.0)
    alone.handed("decode-0", 0.0)
    assert alone.share("decode-0", 0.1) == pytest.approx(0.2) and alone.share("prefill-0", 0.1) == 0.0
    host = HostCpu(2, WORKERS, RateLaw(0.4, 0.0), own)
    host.sent(0.0)
    host.handed("decode-0", 0.0)
    # both idle: the decode worker's core has 0.8 left for the front end, the prefill worker's 1
    assert host.share("prefill-0", 0.1) == pytest.approx(0.4 * 1 / 1.8)
    assert host.share("decode-0", 0.1) == pytest.approx(0.2 + 0.4 * 0.8 / 1.8)
    # the requests handed to a worker drive its threads: a refused request, or one on another worker, does not
    two = HostCpu(3, {**WORKERS, "decode-1": "decode"}, RateLaw(0.0, 0.0), {"decode": RateLaw(0.1, 0.5)})
    for _ in range(8):
        two.sent(0.0)
    for _ in range(4):
        two.handed("decode-1", 0.0)
    assert two.share("decode-1", 0.1) == pytest.approx(0.1 * 4 ** 0.5)
    assert two.share("decode-0", 0.1) == 0.0
    assert two.share("decode-1", 1.5) == 0.0  # a second later: none handed in the window


def test_a_measured_step_ratio_is_its_roles_stretch_in_place_of_the_cores_share():
    host = HostCpu(2, WORKERS, RateLaw(0.9, 0.0), step_ratio={"decode": RateLaw(0.5, 0.5)})
    host.sent(0.0)
    assert host.stretch("decode-0", 0.1) == 1.0  # none handed: never faster than alone
    for _ in range(16):
        host.handed("decode-0", 0.0)
    assert host.stretch("decode-0", 0.1) == pytest.approx(0.5 * 16 ** 0.5)
    # the prefill worker's stays the front end's share of its core (the decode worker idle, both take half)
    assert host.stretch("prefill-0", 0.1) == pytest.approx(1 / (1 - 0.45))
    with pytest.raises(ValueError, match="rate laws"):
        SimConfig(decode_step_ratio=(1.0, -0.1))


def test_a_decode_worker_that_computes_part_of_its_steps_leaves_the_rest_of_its_core_to_the_front_end():
    host = HostCpu(2, WORKERS, RateLaw(0.4, 0.0), cpu_share={"decode": 0.5})
    host.sent(0.0)
    host.busy("decode-0", 0.0, 1.0, 1.0)
    # stepping the whole last second, computing half of it: idle capacities 1 (prefill) and 0.5 split it 2:1
    assert host.share("prefill-0", 1.0) == pytest.approx(0.4 * 2 / 3)
    assert host.share("decode-0", 1.0) == pytest.approx(0.4 * 1 / 3)
    # the prefill worker's busy time counts whole (no share told for its role)
    host.busy("prefill-0", 0.0, 1.0, 1.0)
    assert host.share("decode-0", 1.0) == pytest.approx(0.4)
    assert host.busy_s() == {"prefill": pytest.approx(1.0), "decode": pytest.approx(1.0)}
    with pytest.raises(ValueError, match="decode_cpu_share"):
        SimConfig(decode_cpu_share=0.0)


def _one_request(config: SimConfig):  # type: ignore[no-untyped-def]
    plan = [PlannedRequest(0, [0] * 100, 3, None, 0.0)]
    return simulate(plan, SimConfig(hop_s=0.0, transfer_s=0.0, transfer_s_per_token=0.0, policy="fcfs",
                                    **config), FLAT)  # type: ignore[arg-type]


def test_a_forward_on_a_shared_core_takes_longer_by_the_front_ends_share_and_a_spare_core_changes_nothing():
    alone = _one_request({})
    # 0.5 core of front end, both workers idle when the prompt's forward starts: 0.25 of the prefill
    # worker's core, so the 10 ms forward takes 10 / 0.75 ms
    shared = _one_request({"host_cores": 2, "front_end_cores": (0.5, 0.0)})
    assert alone.records[0].ttft == pytest.approx(0.010)
    assert shared.records[0].ttft == pytest.approx(0.010 / 0.75)
    assert shared.stretch["prefill"] == pytest.approx(1 / 0.75)
    assert 1.0 < shared.stretch["decode"] <= 1 / (1 - MAX_SHARE)
    assert shared.records[0].tpot > alone.records[0].tpot
    spare = _one_request({"host_cores": 3, "front_end_cores": (0.5, 0.0)})
    assert spare.records[0].token_times == pytest.approx(alone.records[0].token_times)
    assert alone.stretch == {"prefill": 1.0, "decode": 1.0} and alone.busy == {}
    # the share of the run each role computed: one 10/0.75 ms forward, then two stretched steps
    assert shared.busy["prefill"] == pytest.approx(0.010 / 0.75 / shared.duration)
    assert 0 < shared.busy["decode"] < 1
    with pytest.raises(ValueError, match="host cores"):
        SimConfig(host_cores=-1)


def test_the_host_flags_reach_the_simulated_cluster_and_refuse_nonsense():
    import argparse

    from simulator.cli import add_simulate_args, sim_config

    parser = argparse.ArgumentParser()
    add_simulate_args(parser)
    config = sim_config(parser.parse_args(["--host-cores", "2", "--front-end-cores", "0.1,0.12",
                                           "--decode-own-cores", "0.05,0.02", "--decode-cpu-share", "0.7",
                                           "--decode-step-ratio", "0.8,0.17"]))
    assert config.decode_cpu_share == 0.7 and config.decode_step_ratio == (0.8, 0.17)
    assert (config.host_cores, config.front_end_cores) == (2, (0.1, 0.12))
    assert (config.decode_own_cores, config.prefill_own_cores) == ((0.05, 0.02), (0.0, 0.0))
    assert sim_config(parser.parse_args([])).host_cores == 0
    for bad in ("0.1", "0.1,x", "0.1,-1", "-0.1,1"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--front-end-cores", bad])
        with pytest.raises(SystemExit):
            parser.parse_args(["--decode-step-ratio", bad])
