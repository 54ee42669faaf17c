"""Choosing a prefill and a decode worker for a request.

``Router`` is the seam where policies plug in, and the one switch of the TTFT guard:
``LeastLoadedRouter`` routes by load alone (fcfs, tpot_guard); ``SloAwareRouter`` orders
prefill workers by predicted time to first token, and the request flow refuses, or holds in
the admission queue, what it predicts too late (scorpio, ttft_guard).
"""

from __future__ import annotations

import time
from typing import Protocol

from gateway.registry import WorkerRecord, WorkerRegistry


class Router(Protocol):
    ttft_guard: bool  # whether requests with a TTFT SLO are refused when predicted too late

    def prefill_candidates(self, registry: WorkerRegistry, prompt_tokens: int,
                           deadline: float = float("inf")) -> list[WorkerRecord]:
        """Prefill workers to try, best first."""
        ...

    def decode_candidates(self, registry: WorkerRegistry, total_tokens: int) -> list[WorkerRecord]:
        """Decode workers to try for a reservation, best first."""
        ...


class LeastLoadedRouter:
    ttft_guard = False

    def prefill_candidates(self, registry: WorkerRegistry, prompt_tokens: int,
                           deadline: float = float("inf")) -> list[WorkerRecord]:
        return sorted(registry.routable("prefill"), key=lambda w: (w.inflight, w.load.queued_tokens))

    def decode_candidates(self, registry: WorkerRegistry, total_tokens: int) -> list[WorkerRecord]:
        workers = registry.routable("decode")
        return sorted(workers, key=lambda w: (w.inflight, -w.load.free_blocks))


class SloAwareRouter(LeastLoadedRouter):
    """TTFT guard: prefill workers ordered by predicted time to first token, those where the
    request would make a queued request late last."""

    ttft_guard = True

    def prefill_candidates(self, registry: WorkerRegistry, prompt_tokens: int,
                           deadline: float = float("inf")) -> list[WorkerRecord]:
        now = time.perf_counter()
        return sorted(registry.routable("prefill"),
                      key=lambda w: (w.guard.pushes_queued_past(prompt_tokens, deadline, now),
                                     w.guard.predict_s(prompt_tokens, deadline) or float("inf")))


def router_for(ttft_guard: bool) -> Router:
    return SloAwareRouter() if ttft_guard else LeastLoadedRouter()
