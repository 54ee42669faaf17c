"""The scenario through the simulated gateway (``simulator.gateway.SimGateway``) on the
simulator's own clock, over the same workers as the gateway's side."""

from __future__ import annotations

from client.bench.workload import PlannedRequest
from simulator.config import SimConfig
from simulator.events import Simulation
from simulator.flight import Flight
from simulator.gateway import SimGateway
from simulator.run import _record
from simulator.workers import SimDecodeWorker, SimPrefillWorker
from tests.conformance.scenario import MODELS, Faults, Trace, record_calls, request_id, send_foreign


def run_simulator(plan: list[PlannedRequest], config: SimConfig, faults: Faults) -> Trace:
    trace = Trace()
    sim = Simulation()
    prefills = [SimPrefillWorker(sim, f"prefill-{i}", config, MODELS) for i in range(config.prefill)]
    decodes = [SimDecodeWorker(sim, f"decode-{i}", config, MODELS) for i in range(config.decode)]
    for worker in (*prefills, *decodes):
        record_calls(worker, trace)
        worker.lost_calls = {request_id(i) for i, w in faults.lost_prefills if w == worker.worker_id}
    answered: list[Flight] = []

    def done(flight: Flight) -> None:
        answered.append(flight)
        record = flight.record
        trace.outcomes[flight.request_id] = (f"{record.error} {flight.refusal or record.error.lower()}" if record.error
                                             else "ok length")  # (its run ahead counts tokens, sends no event for each)
        if len(answered) == len(plan):
            gateway.stopped = True

    gateway = SimGateway(sim, config, prefills, decodes, done)
    send_foreign(faults, [*prefills, *decodes], sim.at)
    cancels = dict(faults.cancels)
    for item in plan:
        flight = Flight(item, _record(item))
        sim.at(item.send_at, gateway.send, flight)
        if item.index in cancels:
            sim.at(item.send_at + cancels[item.index], gateway.cancel, flight)
    sim.run()
    assert len(answered) == len(plan), "the simulation ended with requests unanswered"
    return trace
