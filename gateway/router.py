"""Choosing a prefill and a decode worker for a request.

``Router`` is the seam where policies plug in, and the one switch of the TTFT guard:
``LeastLoadedRouter`` routes by load alone (fcfs, tpot_guard); ``SloAwareRouter`` orders
prefill workers by predicted time to first token and decode workers by VBS headroom, and the
request flow refuses, or holds in the admission queue, what it predicts too late (scorpio,
ttft_guard). The orders themselves are ``common.slo.routing``'s, which the simulator runs too.
"""

from __future__ import annotations

import time
from typing import Protocol

from common.slo.routing import decode_order_by_vbs, least_loaded_order, prefill_order
from gateway.registry import WorkerRecord, WorkerRegistry


class Router(Protocol):
    ttft_guard: bool  # whether requests with a TTFT SLO are refused when predicted too late

    def prefill_candidates(self, registry: WorkerRegistry, prompt_tokens: int,
                           deadline: float = float("inf")) -> list[WorkerRecord]:
        """Prefill workers to try, best first."""
        ...

    def decode_candidates(self, registry: WorkerRegistry, tpot_s: float) -> list[WorkerRecord]:
        """Decode workers to try for a reservation of a request with TPOT SLO ``tpot_s``, best first."""
        ...


class LeastLoadedRouter:
    ttft_guard = False

    def prefill_candidates(self, registry: WorkerRegistry, prompt_tokens: int,
                           deadline: float = float("inf")) -> list[WorkerRecord]:
        workers = registry.routable("prefill")
        return _pick(workers, least_loaded_order([w.inflight for w in workers],
                                                 [w.load.queued_tokens for w in workers]))

    def decode_candidates(self, registry: WorkerRegistry, tpot_s: float) -> list[WorkerRecord]:
        workers = registry.routable("decode")
        return _pick(workers, least_loaded_order([w.inflight for w in workers], [-w.load.free_blocks for w in workers]))


class SloAwareRouter(LeastLoadedRouter):
    """TTFT guard: prefill workers ordered by predicted time to first token, those where the
    request would make a queued request late last; decode workers by VBS headroom."""

    ttft_guard = True

    def prefill_candidates(self, registry: WorkerRegistry, prompt_tokens: int,
                           deadline: float = float("inf")) -> list[WorkerRecord]:
        workers = registry.routable("prefill")
        return _pick(workers, prefill_order([w.guard for w in workers], prompt_tokens, deadline, time.perf_counter()))

    def decode_candidates(self, registry: WorkerRegistry, tpot_s: float) -> list[WorkerRecord]:
        workers = registry.routable("decode")
        return _pick(workers, decode_order_by_vbs([w.view for w in workers], [w.load.free_blocks for w in workers],
                                                  tpot_s))


def _pick(workers: list[WorkerRecord], order: list[int]) -> list[WorkerRecord]:
    return [workers[i] for i in order]


def router_for(ttft_guard: bool) -> Router:
    return SloAwareRouter() if ttft_guard else LeastLoadedRouter()
