"""Choosing a prefill and a decode worker for a request, for the gateway and the simulator alike.

``Router`` is the seam where policies plug in, and the one switch of the TTFT guard:
``LeastLoadedRouter`` routes by load alone (fcfs, tpot_guard); ``SloAwareRouter`` orders
prefill workers by predicted time to first token and decode workers by VBS headroom, and the
request flow refuses, or holds in the admission queue, what it predicts too late (scorpio,
ttft_guard). The orders themselves are ``common.slo.routing``'s.

Routers read plain worker state (``RoutedWorker``: what is in flight, free blocks, the TTFT
guard, the decode view, the prefix view) from a ``WorkerPool``, on the clock they are given: the
gateway's registry is one pool (its records, on ``perf_counter``), the simulated gateway's
workers another (on the virtual clock), so the simulator routes by this code, not a copy of it.

Both are KV-aware: a prefill worker's cost for a prompt is the prompt less what its prefix
cache already holds (``gateway.prefix_view``), so the queue a worker has and the work a hit
saves are weighed in one figure (the predicted TTFT, or queued plus uncached tokens); among
decode workers the prompt blocks each holds already come after the SLO and load keys, before
free blocks.
``--prefill-routing round_robin`` takes prefill workers in turn instead (a baseline).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from common.slo.routing import RoundRobin, decode_order_by_vbs, least_loaded_order, prefill_order
from common.slo.tpot_guard import DecodeView
from common.slo.ttft_guard import TtftGuard
from gateway.prefix_view import PrefixView, PromptBlocks

PREFILL_ROUTINGS = ("kv_aware", "round_robin")


class RoutedWorker(Protocol):
    """What routing reads of one worker."""

    @property
    def worker_id(self) -> str: ...

    @property
    def inflight(self) -> int: ...  # prefill calls under way there (decode workers count ``view.routed``)

    @property
    def free_blocks(self) -> int: ...  # KV blocks free, as its latest load report says

    @property
    def guard(self) -> TtftGuard: ...  # the TTFT guard's view of its queue

    @property
    def view(self) -> DecodeView: ...  # decode: what was routed there, and ε

    @property
    def prefix(self) -> PrefixView | None: ...  # with prefix caching: what its cache holds


W = TypeVar("W", bound=RoutedWorker)


class WorkerPool(Protocol[W]):
    def routable(self, role: str) -> list[W]:
        """The workers of ``role`` ("prefill" or "decode") that may take a request now."""
        ...


class Router(Protocol):
    ttft_guard: bool  # whether requests with a TTFT SLO are refused when predicted too late

    def prefill_candidates(self, pool: WorkerPool[W], prompt: PromptBlocks,
                           deadline: float = float("inf"), ttft_s: float = 0.0) -> list[W]:
        """Prefill workers to try, best first, for a request due at ``deadline`` (the router's
        clock) with TTFT SLO ``ttft_s`` (0: none)."""
        ...

    def decode_candidates(self, pool: WorkerPool[W], tpot_s: float, prompt: PromptBlocks | None = None) -> list[W]:
        """Decode workers to try for a reservation of a request with TPOT SLO ``tpot_s``, best first."""
        ...


class LeastLoadedRouter:
    ttft_guard = False

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock

    def prefill_candidates(self, pool: WorkerPool[W], prompt: PromptBlocks,
                           deadline: float = float("inf"), ttft_s: float = 0.0) -> list[W]:
        workers = pool.routable("prefill")
        return _pick(workers, least_loaded_order([w.inflight for w in workers],
                                                 [w.guard.queued_tokens + prompt.uncached_tokens(w.prefix)
                                                  for w in workers]))

    def decode_candidates(self, pool: WorkerPool[W], tpot_s: float, prompt: PromptBlocks | None = None) -> list[W]:
        workers = pool.routable("decode")
        # what was routed there counts from its ask (``DecodeReservations``), so a burst spreads
        return _pick(workers, least_loaded_order([len(w.view.routed) for w in workers], [-w.free_blocks for w in workers],
                                                 [_held(w, prompt) for w in workers]))


class SloAwareRouter(LeastLoadedRouter):
    """TTFT guard: prefill workers ordered by predicted time to first token, those where the
    request would make a queued request late last; decode workers by VBS headroom."""

    ttft_guard = True

    def prefill_candidates(self, pool: WorkerPool[W], prompt: PromptBlocks,
                           deadline: float = float("inf"), ttft_s: float = 0.0) -> list[W]:
        workers = pool.routable("prefill")
        return _pick(workers, prefill_order([w.guard for w in workers], [prompt.uncached_tokens(w.prefix) for w in workers],
                                            deadline, self.clock(), ttft_s))

    def decode_candidates(self, pool: WorkerPool[W], tpot_s: float, prompt: PromptBlocks | None = None) -> list[W]:
        workers = pool.routable("decode")
        return _pick(workers, decode_order_by_vbs([w.view for w in workers], [w.free_blocks for w in workers],
                                                  tpot_s, [_held(w, prompt) for w in workers]))


def _held(worker: RoutedWorker, prompt: PromptBlocks | None) -> int:
    """Blocks of the prompt a decode worker's prefix cache holds. They decide where the load ties,
    before free blocks: a heartbeat's free count lags the request that just left, and would
    send the next turn of a conversation away from the worker that holds it."""
    return len(prompt.cached_hashes(worker.prefix)) if prompt is not None else 0


def _pick(workers: list[W], order: list[int]) -> list[W]:
    return [workers[i] for i in order]


class RoundRobinPrefill:
    """Prefill workers in turn, whatever their load or cache; decode as ``base`` places it."""

    def __init__(self, base: Router) -> None:
        self.base = base
        self.ttft_guard = base.ttft_guard
        self._turn = RoundRobin()

    def prefill_candidates(self, pool: WorkerPool[W], prompt: PromptBlocks,
                           deadline: float = float("inf"), ttft_s: float = 0.0) -> list[W]:
        workers = pool.routable("prefill")
        return _pick(workers, self._turn.order(len(workers)))

    def decode_candidates(self, pool: WorkerPool[W], tpot_s: float, prompt: PromptBlocks | None = None) -> list[W]:
        return self.base.decode_candidates(pool, tpot_s, prompt)


def router_for(ttft_guard: bool, prefill_routing: str = "kv_aware",
               clock: Callable[[], float] = time.perf_counter) -> Router:
    """The router of a policy (``ttft_guard``: scorpio, ttft_guard) and a prefill routing, on
    ``clock`` (the clock the TTFT guards' deadlines are on)."""
    if prefill_routing not in PREFILL_ROUTINGS:
        raise ValueError(f"prefill_routing must be one of {', '.join(PREFILL_ROUTINGS)}, got {prefill_routing!r}")
    base: Router = SloAwareRouter(clock) if ttft_guard else LeastLoadedRouter(clock)
    return RoundRobinPrefill(base) if prefill_routing == "round_robin" else base
