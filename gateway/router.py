"""Choosing a prefill and a decode worker for a request.

``Router`` is the seam where policies plug in, and the one switch of the TTFT guard:
``LeastLoadedRouter`` routes by load alone (fcfs, tpot_guard); ``SloAwareRouter`` orders
prefill workers by predicted time to first token and decode workers by VBS headroom, and the
request flow refuses, or holds in the admission queue, what it predicts too late (scorpio,
ttft_guard). The orders themselves are ``common.slo.routing``'s, which the simulator runs too.

Both are KV-aware: a prefill worker's cost for a prompt is the prompt less what its prefix
cache already holds (``gateway.prefix_view``), so the queue a worker has and the work a hit
saves are weighed in one figure (the predicted TTFT, or queued plus uncached tokens); among
decode workers the prompt blocks each holds already come after the SLO and load keys, before
free blocks.
``--prefill-routing round_robin`` takes prefill workers in turn instead (a baseline).
"""

from __future__ import annotations

import time
from typing import Protocol

from common.slo.routing import RoundRobin, decode_order_by_vbs, least_loaded_order, prefill_order
from gateway.prefix_view import PromptBlocks
from gateway.registry import WorkerRecord, WorkerRegistry

PREFILL_ROUTINGS = ("kv_aware", "round_robin")


class Router(Protocol):
    ttft_guard: bool  # whether requests with a TTFT SLO are refused when predicted too late

    def prefill_candidates(self, registry: WorkerRegistry, prompt: PromptBlocks,
                           deadline: float = float("inf"), ttft_s: float = 0.0) -> list[WorkerRecord]:
        """Prefill workers to try, best first, for a request due at ``deadline`` (perf_counter
        time) with TTFT SLO ``ttft_s`` (0: none)."""
        ...

    def decode_candidates(self, registry: WorkerRegistry, tpot_s: float,
                          prompt: PromptBlocks | None = None) -> list[WorkerRecord]:
        """Decode workers to try for a reservation of a request with TPOT SLO ``tpot_s``, best first."""
        ...


class LeastLoadedRouter:
    ttft_guard = False

    def prefill_candidates(self, registry: WorkerRegistry, prompt: PromptBlocks,
                           deadline: float = float("inf"), ttft_s: float = 0.0) -> list[WorkerRecord]:
        workers = registry.routable("prefill")
        return _pick(workers, least_loaded_order([w.inflight for w in workers],
                                                 [w.guard.queued_tokens + prompt.uncached_tokens(w.prefix)
                                                  for w in workers]))

    def decode_candidates(self, registry: WorkerRegistry, tpot_s: float,
                          prompt: PromptBlocks | None = None) -> list[WorkerRecord]:
        workers = registry.routable("decode")
        # what was routed there counts from its ask (``DecodeReservations``), so a burst spreads
        return _pick(workers, least_loaded_order([len(w.view.routed) for w in workers], [-w.load.free_blocks for w in workers],
                                                 [_held(w, prompt) for w in workers]))


class SloAwareRouter(LeastLoadedRouter):
    """TTFT guard: prefill workers ordered by predicted time to first token, those where the
    request would make a queued request late last; decode workers by VBS headroom."""

    ttft_guard = True

    def prefill_candidates(self, registry: WorkerRegistry, prompt: PromptBlocks,
                           deadline: float = float("inf"), ttft_s: float = 0.0) -> list[WorkerRecord]:
        workers = registry.routable("prefill")
        return _pick(workers, prefill_order([w.guard for w in workers], [prompt.uncached_tokens(w.prefix) for w in workers],
                                            deadline, time.perf_counter(), ttft_s))

    def decode_candidates(self, registry: WorkerRegistry, tpot_s: float,
                          prompt: PromptBlocks | None = None) -> list[WorkerRecord]:
        workers = registry.routable("decode")
        return _pick(workers, decode_order_by_vbs([w.view for w in workers], [w.load.free_blocks for w in workers],
                                                  tpot_s, [_held(w, prompt) for w in workers]))


def _held(worker: WorkerRecord, prompt: PromptBlocks | None) -> int:
    """Blocks of the prompt a decode worker's prefix cache holds. They decide where the load ties,
    before free blocks: a heartbeat's free count lags the request that just left, and would
    send the next turn of a conversation away from the worker that holds it."""
    return len(prompt.cached_hashes(worker.prefix)) if prompt is not None else 0


def _pick(workers: list[WorkerRecord], order: list[int]) -> list[WorkerRecord]:
    return [workers[i] for i in order]


class RoundRobinPrefill:
    """Prefill workers in turn, whatever their load or cache; decode as ``base`` places it."""

    def __init__(self, base: Router) -> None:
        self.base = base
        self.ttft_guard = base.ttft_guard
        self._turn = RoundRobin()

    def prefill_candidates(self, registry: WorkerRegistry, prompt: PromptBlocks,
                           deadline: float = float("inf"), ttft_s: float = 0.0) -> list[WorkerRecord]:
        workers = registry.routable("prefill")
        return _pick(workers, self._turn.order(len(workers)))

    def decode_candidates(self, registry: WorkerRegistry, tpot_s: float,
                          prompt: PromptBlocks | None = None) -> list[WorkerRecord]:
        return self.base.decode_candidates(registry, tpot_s, prompt)


def router_for(ttft_guard: bool, prefill_routing: str = "kv_aware") -> Router:
    if prefill_routing not in PREFILL_ROUTINGS:
        raise ValueError(f"prefill_routing must be one of {', '.join(PREFILL_ROUTINGS)}, got {prefill_routing!r}")
    base: Router = SloAwareRouter() if ttft_guard else LeastLoadedRouter()
    return RoundRobinPrefill(base) if prefill_routing == "round_robin" else base
