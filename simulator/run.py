"""One simulated run: a planned workload through a simulated cluster, recorded as the load tester
records a real one (``client.bench.metrics.RequestRecord``), so the same figures come out."""

from __future__ import annotations

import time
from dataclasses import dataclass

from client.bench.metrics import RequestRecord
from client.bench.workload import PlannedRequest
from common.slo.cost_models import CostModels
from simulator.config import SimConfig
from simulator.events import Simulation
from simulator.flight import Flight
from simulator.gateway import SimGateway
from simulator.workers import SimDecodeWorker, SimPrefillWorker


@dataclass(frozen=True, slots=True)
class SimRun:
    records: list[RequestRecord]
    duration: float  # simulated seconds from the first send to the last answer
    wall_s: float  # seconds the simulation took
    margins: dict[str, float]  # each guard's margins at the end (ttft headroom / tpot epsilon, by worker and SLO class)


def simulate(plan: list[PlannedRequest], config: SimConfig, models: CostModels,
             truth: CostModels | None = None) -> SimRun:
    """``models``: the profile the workers load; ``truth``: what their forwards really take
    (default: the profile scaled by ``config.prefill_scale``/``decode_scale``)."""
    started = time.perf_counter()
    sim = Simulation()
    prefills = [SimPrefillWorker(sim, f"prefill-{i}", config, models, truth) for i in range(config.prefill)]
    decodes = [SimDecodeWorker(sim, f"decode-{i}", config, models, truth) for i in range(config.decode)]
    answered: list[Flight] = []

    def done(flight: Flight) -> None:
        answered.append(flight)
        if len(answered) == len(plan):
            gateway.stopped = True

    gateway = SimGateway(sim, config, prefills, decodes, done)
    flights = [Flight(item, _record(item)) for item in plan]
    for flight in flights:
        sim.at(flight.planned.send_at, gateway.send, flight)
    sim.run()
    if len(answered) != len(plan):
        raise RuntimeError(f"the simulation ended with {len(plan) - len(answered)} requests unanswered")
    last = max((r.token_times[-1] if r.token_times else r.start) for r in (f.record for f in flights))
    margins = {f"ttft_headroom/{wid}/{ms:g}ms": m for wid, g in gateway.guards.items() for ms, m in g.headrooms.items()}
    margins.update({f"tpot_epsilon/{wid}/{ms:g}ms": m for wid, v in gateway.views.items() for ms, m in v.epsilons.items()})
    return SimRun([f.record for f in flights], last, time.perf_counter() - started, margins)


def _record(item: PlannedRequest) -> RequestRecord:
    cls = item.slo_class
    return RequestRecord(item.index, len(item.prompt), item.send_at, cls.name if cls else "",
                         cls.ttft_ms if cls else None, cls.tpot_ms if cls else None)
