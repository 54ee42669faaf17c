"""The TTFT guard's decision at the gateway: a refusal when the best prefill worker cannot
return a request's first token in time (the prediction itself: ``common.slo.ttft_guard``).

A worker counts only if sending the request there makes no request already queued there late:
least slack first puts a newcomer ahead of every later deadline, and a promise made to an
admitted request is kept before a new one is made.
"""

from __future__ import annotations

import time

import grpc

from common.slo.ttft_guard import TtftGuard, best_prefill_s
from gateway.errors import RequestError
from gateway.registry import WorkerRegistry


def routable_guards(registry: WorkerRegistry) -> list[TtftGuard]:
    return [w.guard for w in registry.routable("prefill")]


def best_prefill_now_s(registry: WorkerRegistry, prompt_tokens: int, deadline: float) -> float:
    """``best_prefill_s`` over the routable prefill workers, now (deadline: perf_counter time)."""
    return best_prefill_s(routable_guards(registry), prompt_tokens, deadline, time.perf_counter())


def check_ttft(registry: WorkerRegistry, prompt_tokens: int, ttft_ms: int, started: float) -> None:
    """RESOURCE_EXHAUSTED, naming the reason, when no prefill worker is predicted to return the
    first token of a request that arrived at ``started`` (perf_counter) within ``ttft_ms``."""
    best = best_prefill_now_s(registry, prompt_tokens, started + ttft_ms / 1000)
    if best == float("inf"):
        raise RequestError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                           f"TTFT SLO of {ttft_ms} ms is unattainable: on every prefill worker the request "
                           f"would make queued requests miss theirs", reason="ttft_unattainable")
    if (time.perf_counter() - started) * 1000 + best * 1000 > ttft_ms:
        raise RequestError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                           f"TTFT SLO of {ttft_ms} ms is unattainable: the best prefill worker is "
                           f"predicted to need {best * 1000:.0f} ms", reason="ttft_unattainable")
