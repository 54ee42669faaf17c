"""The per-request decisions the gateway's flow and the simulated gateway share (``gateway.request_path``)."""

from __future__ import annotations

import pytest

from client.bench.metrics import REJECTED
from common.slo.cost_models import CostModels, DecodeModel, PrefillModel
from gateway.path_rules import (KV_WAIT_S, AfterRefusals, admitted_margin, after_refusals, blocks_wait_until,
                                  never_refusal)
from simulator.config import SimConfig
from simulator.run import simulate
from tests.unit.test_simulator import _request


def test_a_request_refused_everywhere_waits_for_admission_under_the_ttft_guard_and_for_blocks_otherwise():
    assert after_refusals(True, 0.5, blocks_only=False) is AfterRefusals.WAIT_FOR_ADMISSION
    assert after_refusals(True, 0.5, blocks_only=True) is AfterRefusals.WAIT_FOR_ADMISSION
    assert after_refusals(True, 0.0, blocks_only=True) is AfterRefusals.WAIT_FOR_BLOCKS  # no TTFT SLO to wait on
    assert after_refusals(False, 0.5, blocks_only=True) is AfterRefusals.WAIT_FOR_BLOCKS
    assert after_refusals(False, 0.5, blocks_only=False) is AfterRefusals.REFUSE
    assert blocks_wait_until(100.0, float("inf"), None) == 100.0 + KV_WAIT_S
    assert blocks_wait_until(100.0, 101.0, 100.5) == 100.5 and blocks_wait_until(100.0, 101.0, None) == 101.0


def test_a_tpot_slo_below_every_workers_step_alone_is_refused_with_its_reason_and_the_fastest_step():
    refusal = never_refusal(0.010, [0.020, 0.015])
    assert refusal is not None and (refusal.code, refusal.reason) == ("FAILED_PRECONDITION", "slo_unattainable")
    assert "15.0 ms" in refusal.message
    assert never_refusal(0.016, [0.020, 0.015]) is None and never_refusal(0.0, [0.020]) is None
    assert never_refusal(0.010, [0.020, None]) is None  # one not measured yet may meet it
    assert admitted_margin(True, 1.7) == 1.0 and admitted_margin(False, 1.7) == 1.7


@pytest.mark.parametrize("policy", ["fcfs", "round_robin"])
def test_the_simulated_gateway_waits_for_kv_blocks_as_the_gateway_does_instead_of_refusing(policy):
    """Ten blocks of 16 tokens on the decode worker: A's 100-token prompt and its growth take them
    all; B, refused for blocks alone, waits (as ``DecodeReservations`` does) and is served once A
    ends, where the simulator once refused it at once."""
    flat = CostModels(PrefillModel(0, 0.010, 0.0), DecodeModel(0.0, 0.0, 0.0, 0.005))
    config = SimConfig(policy=policy, hop_s=0.0, transfer_s=0.0, transfer_s_per_token=0.0, num_kv_blocks=10,
                       max_model_len=160)
    a, b = simulate([_request(0, 0.0, 50), _request(1, 0.001, 20)], config, flat).records
    assert a.ok and b.ok, (a.error, b.error)
    assert b.error != REJECTED and b.start + b.ttft > a.start + a.ttft + 49 * 0.005 - 1e-9  # after A's decode
