"""The gateway and the simulator make one gateway's decisions: a scripted run through the
gateway's request flow (over fake stubs) and through the simulated gateway, over the same
simulated workers, asks the workers the same things in the same order and ends every request
the same way, under every policy."""

from __future__ import annotations

import pytest

from common.slo.policy import POLICIES
from tests.conformance.gateway_side import run_gateway
from tests.conformance.scenario import Faults, config, plan
from tests.conformance.simulator_side import run_simulator


# req-5's prefill fails on both prefill workers (a third try finds none left: UNAVAILABLE);
# req-9's on prefill-0, req-14's on prefill-1: each is tried again on the other
LOSSES = Faults(frozenset({(5, "prefill-0"), (5, "prefill-1"), (9, "prefill-0"), (14, "prefill-1")}))


@pytest.mark.parametrize("faults", [Faults(), LOSSES], ids=["undisturbed", "lost-workers"])
@pytest.mark.parametrize("policy", POLICIES)
def test_the_gateway_and_the_simulator_ask_the_workers_the_same_things(policy, faults, monkeypatch):
    requests, cluster = plan(), config(policy)
    simulated = run_simulator(requests, cluster, faults)
    real = run_gateway(requests, cluster, faults, monkeypatch)
    assert real.outcomes == simulated.outcomes
    for item in requests:
        rid = f"req-{item.index}"
        assert real.of(rid) == simulated.of(rid), rid
    assert real.calls == simulated.calls
