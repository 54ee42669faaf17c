"""One scripted run, for the gateway's adapter (``gateway.request_flow`` over fake stubs) and the
simulator's (``simulator.gateway``) alike: the same workers (the simulator's, an ``EngineCore``
each, whose forwards take what one cost model says), the same requests at the same moments, the
same scripted faults; each side records what its workers were asked (``Trace.calls``) and how
each request ended (``Trace.outcomes``), so the two can be compared call by call.

Arrival times are spread so no two moments tie: the asyncio loop and the simulator's event queue
break ties by different rules, and the comparison is of decisions, not of tie-breaking.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from client.bench.workload import PlannedRequest, SloClass
from common.engine.tpot_admission import AdmissionError
from common.model.sampling_params import SamplingParams
from common.slo.cost_models import CostModels, DecodeModel, PrefillModel
from simulator.config import SimConfig
from simulator.workers import SimWorker

# prefill: 4 ms a forward plus 20 µs a token; decode: 6 ms a step plus 0.2 ms a request past 2
MODELS = CostModels(PrefillModel(0, 0.004, 2e-5), DecodeModel(0.0, 0.0002, 0.0, 0.006, knee=2))
TIGHT = SloClass("tight", ttft_ms=40.0, tpot_ms=9.0)
LOOSE = SloClass("loose", ttft_ms=400.0, tpot_ms=60.0)
MEDIUM = SloClass("medium", ttft_ms=120.0, tpot_ms=60.0)
HOP_S = 0.0005
HEARTBEAT_S = 0.05
RECORDED = ("reserve", "add_request", "prefill_reserved", "commit", "release_reservation", "abort")


@dataclass(frozen=True, slots=True)
class Faults:
    """Calls that fail as a worker lost mid-call fails them (UNAVAILABLE, having done nothing):
    (request index, worker id) of each ``Prefill`` that does; and clients that cancel: (request
    index, seconds after it was sent)."""

    lost_prefills: frozenset[tuple[int, str]] = frozenset()
    cancels: frozenset[tuple[int, float]] = frozenset()
    # prompts another gateway sends a prefill worker, unseen by this one until a heartbeat tells
    # it: (seconds from the start, worker id, prompt tokens, TTFT SLO ms)
    foreign: frozenset[tuple[float, str, int, float]] = frozenset()


@dataclass
class Trace:
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # (worker, engine call, request)
    outcomes: dict[str, str] = field(default_factory=dict)  # request -> "ok <finish reason>" or "<code> <reason>"

    def of(self, request_id: str) -> list[tuple[str, str]]:
        """The calls its workers saw for one request, in order."""
        return [(worker, call) for worker, call, rid in self.calls if rid == request_id]


def plan(n: int = 24, seed: int = 3, classes: tuple[SloClass | None, ...] = (TIGHT, LOOSE, LOOSE, None)
         ) -> list[PlannedRequest]:
    """A burst of mixed requests: prompts of 64-1500 tokens, 2-12 output tokens, SLO classes drawn
    from ``classes`` (the two classes and requests with none), sent in 60 ms at moments that never tie."""
    rng = random.Random(seed)
    at = 0.0013
    requests = []
    for i in range(n):
        at += rng.uniform(0.0007, 0.0043)
        slo = rng.choice(classes)
        requests.append(PlannedRequest(i, [0] * rng.randint(64, 1500), rng.randint(2, 12), slo, round(at, 7)))
    return requests


def config(policy: str) -> SimConfig:
    """The cluster both sides run: 2 prefill and 2 decode workers, exact forwards, no local prefill
    (it is tested on its own, ``test_local_prefill``), no KV copy time."""
    return SimConfig(prefill=2, decode=2, policy=policy, hop_s=HOP_S, transfer_s=0.0, transfer_s_per_token=0.0,
                     heartbeat_s=HEARTBEAT_S, local_prefill=False, num_kv_blocks=512, max_batch_size=8)


def record_calls(worker: SimWorker, trace: Trace) -> None:
    """Every engine call named in ``RECORDED`` that ``worker`` runs is appended to ``trace.calls``."""
    core = worker.core
    for name in RECORDED:
        original: Callable[..., Any] = getattr(core, name)

        def recorded(request_id: str, *args: Any, _call: Callable[..., Any] = original, _name: str = name,
                     **kwargs: Any) -> Any:
            trace.calls.append((worker.worker_id, _name, request_id))
            return _call(request_id, *args, **kwargs)

        setattr(core, name, recorded)


def send_foreign(faults: Faults, workers: list[SimWorker], at: Callable[..., None]) -> None:
    """Schedules ``faults.foreign`` on the workers (``at(when, callback)``: the side's clock): each
    prompt added to its prefill worker's engine as another gateway's Prefill would, its KV let go
    once computed."""
    by_id = {w.worker_id: w for w in workers}
    for k, (when, worker_id, tokens, ttft_ms) in enumerate(sorted(faults.foreign)):
        worker, rid = by_id[worker_id], f"foreign-{k}"

        def send(worker: SimWorker = worker, rid: str = rid, tokens: int = tokens, ttft_ms: float = ttft_ms) -> None:
            def add() -> None:
                worker.listeners[rid] = lambda out: worker.call(lambda: worker.core.release_held(rid))
                try:
                    worker.core.add_request(rid, [0] * tokens, SamplingParams(max_tokens=1, ignore_eos=True),
                                            prefill_only=True, ttft_slo_ms=ttft_ms, ttft_left_ms=ttft_ms)
                except AdmissionError:  # refused to the other gateway: nothing queued
                    del worker.listeners[rid]

            worker.call(add)

        at(when, send)


def request_id(index: int) -> str:
    return f"req-{index}"
