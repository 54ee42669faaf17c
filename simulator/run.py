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
from simulator.host import HostCpu, RateLaw
from simulator.workers import SimDecodeWorker, SimPrefillWorker


@dataclass(frozen=True, slots=True)
class SimRun:
    records: list[RequestRecord]
    duration: float  # simulated seconds from the first send to the last answer
    wall_s: float  # seconds the simulation took
    margins: dict[str, float]  # each guard's margins at the end (ttft headroom / boundary / tpot epsilon, by worker and SLO class)
    stretch: dict[str, float]  # by role: the workers' forwards over what they take alone (1: the host is not simulated)
    refusals: dict[str, int]  # requests refused before any work, by reason (as ``pdserve:request_rejections``)
    busy: dict[str, float]  # by role: the share of the run its workers computed (a mean over them; empty without a host)
    gateway_loop_busy: float = 0.0  # the share of the run the gateway's event loop worked (``gateway_loop_s``)


def simulate(plan: list[PlannedRequest], config: SimConfig, models: CostModels,
             truth: CostModels | None = None) -> SimRun:
    """``models``: the profile the workers load; ``truth``: what their forwards really take
    (default: the profile scaled by ``config.prefill_scale``/``decode_scale``)."""
    started = time.perf_counter()
    sim = Simulation()
    host = None
    if config.host_cores:
        roles = {f"{role}-{i}": role for role, n in (("prefill", config.prefill), ("decode", config.decode))
                 for i in range(n)}
        measured = {"decode": RateLaw(*config.decode_step_ratio)} if config.decode_step_ratio[0] > 0 else {}
        host = HostCpu(config.host_cores, roles, RateLaw(*config.front_end_cores),
                       {"prefill": RateLaw(*config.prefill_own_cores), "decode": RateLaw(*config.decode_own_cores)},
                       {"decode": config.decode_cpu_share}, measured)
    prefills = [SimPrefillWorker(sim, f"prefill-{i}", config, models, truth, host) for i in range(config.prefill)]
    decodes = [SimDecodeWorker(sim, f"decode-{i}", config, models, truth, host) for i in range(config.decode)]
    answered: list[Flight] = []

    def done(flight: Flight) -> None:
        answered.append(flight)
        if len(answered) == len(plan):
            gateway.stopped = True

    gateway = SimGateway(sim, config, prefills, decodes, done, host)
    flights = [Flight(item, _record(item)) for item in plan]
    for flight in flights:
        sim.at(flight.planned.send_at, gateway.send, flight)
    sim.run()
    if len(answered) != len(plan):
        raise RuntimeError(f"the simulation ended with {len(plan) - len(answered)} requests unanswered")
    last = max((r.token_times[-1] if r.token_times else r.start) for r in (f.record for f in flights))
    margins = {f"ttft_headroom/{wid}/{ms:g}ms": m for wid, g in gateway.guards.items() for ms, m in g.headrooms.items()}
    margins.update({f"tpot_epsilon/{wid}/{ms:g}ms": m for wid, v in gateway.views.items() for ms, m in v.epsilons.items()})
    # the boundary margin as the gateway's metric names it: one for all classes, "slo" 0
    margins.update({f"ttft_boundary/{wid}/0ms": g.boundary.margin for wid, g in gateway.guards.items()})
    stretch = host.mean_stretch() if host is not None else {"prefill": 1.0, "decode": 1.0}
    first = min((f.planned.send_at for f in flights), default=0.0)
    span = max(last - first, 1e-9)
    workers = {"prefill": config.prefill, "decode": config.decode}
    busy = {role: s / span / workers[role] for role, s in host.busy_s().items()} if host is not None else {}
    return SimRun([f.record for f in flights], last, time.perf_counter() - started, margins, stretch,
                  dict(gateway.refusals), busy, gateway.loop.busy(first, span))


def _record(item: PlannedRequest) -> RequestRecord:
    cls = item.slo_class
    return RequestRecord(item.index, len(item.prompt), item.send_at, cls.name if cls else "",
                         cls.ttft_ms if cls else None, cls.tpot_ms if cls else None)
