"""The gateway and the simulator make one gateway's decisions: a scripted run through the
gateway's request flow (over fake stubs) and through the simulated gateway, over the same
simulated workers, asks the workers the same things in the same order and ends every request
the same way, under every policy."""

from __future__ import annotations

import pytest

from common.slo.policy import POLICIES
from tests.conformance.gateway_side import run_gateway
from tests.conformance.scenario import MEDIUM, Faults, config, plan
from tests.conformance.simulator_side import run_simulator


# req-5's prefill fails on both prefill workers (a third try finds none left: UNAVAILABLE);
# req-9's on prefill-0, req-14's on prefill-1: each is tried again on the other
LOSSES = Faults(frozenset({(5, "prefill-0"), (5, "prefill-1"), (9, "prefill-0"), (14, "prefill-1")}))
# clients that cancel: while their requests decode (0, 4), while their prompts are computed, soon after sending
CANCELS = Faults(cancels=frozenset({(0, 0.050), (3, 0.012), (4, 0.100), (11, 0.040), (17, 0.002), (20, 0.030)}))


# another gateway's prompts reach both prefill workers before this one's (unseen by it until a
# heartbeat): the workers refuse what would be late on their whole queues (requests of one class)
FOREIGN = Faults(foreign=frozenset({(0.0005, "prefill-0", 2500, 115.0), (0.0006, "prefill-1", 2500, 115.0),
                                    (0.0007, "prefill-0", 2500, 115.0), (0.0008, "prefill-1", 2500, 115.0)}))


@pytest.mark.parametrize("faults", [Faults(), LOSSES, CANCELS, FOREIGN],
                         ids=["undisturbed", "lost-workers", "cancels", "another-gateway"])
@pytest.mark.parametrize("policy", POLICIES)
def test_the_gateway_and_the_simulator_ask_the_workers_the_same_things(policy, faults, monkeypatch):
    requests, cluster = (plan(classes=(MEDIUM,)) if faults is FOREIGN else plan()), config(policy)
    simulated = run_simulator(requests, cluster, faults)
    real = run_gateway(requests, cluster, faults, monkeypatch)
    assert real.outcomes == simulated.outcomes
    for item in requests:
        rid = f"req-{item.index}"
        assert real.of(rid) == simulated.of(rid), rid
    assert real.calls == simulated.calls


@pytest.mark.parametrize("policy", POLICIES)
def test_the_script_takes_every_path_it_is_meant_to(policy):
    """The comparison above means something only where the run goes through waits, refusals,
    retries and every stage's clean-up: this checks that it does."""
    requests, cluster = plan(), config(policy)
    undisturbed = run_simulator(requests, cluster, Faults())
    asked = [sum(call == "reserve" for _, call in undisturbed.of(f"req-{r.index}")) for r in requests]
    assert max(asked) >= 2  # some decode worker refused a request (it asked another, or waited for a turn)
    if policy != "fcfs":
        assert any(o.startswith("RESOURCE_EXHAUSTED") for o in undisturbed.outcomes.values())
    lost = run_simulator(requests, cluster, LOSSES)
    assert lost.outcomes["req-5"] == "UNAVAILABLE unavailable"
    assert sum(call == "release_reservation" for _, call in lost.of("req-5")) == 3  # three tries, each given back
    cancelled = run_simulator(requests, cluster, CANCELS)
    ends = {call for rid in (f"req-{i}" for i, _ in CANCELS.cancels) for _, call in cancelled.of(rid)}
    assert {"abort", "release_reservation"} <= ends
    assert any(calls[-1] == ("decode-0", "abort") or calls[-1] == ("decode-1", "abort")
               for calls in (cancelled.of(f"req-{i}") for i, _ in CANCELS.cancels))  # one ended while decoding
    if policy in ("scorpio", "ttft_guard"):  # another gateway's prompts: a prefill worker refused, another was asked
        crowded = run_simulator(plan(classes=(MEDIUM,)), cluster, FOREIGN)
        assert any(sum(call == "add_request" for _, call in crowded.of(f"req-{r.index}")) >= 2 for r in requests)
