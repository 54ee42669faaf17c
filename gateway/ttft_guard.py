"""The TTFT guard's decision at the gateway: how soon the best prefill worker can return a
request's first token, and a refusal when that is too late.

A worker counts only if sending the request there makes no request already queued there late:
least slack first puts a newcomer ahead of every later deadline, and a promise made to an
admitted request is kept before a new one is made.
"""

from __future__ import annotations

import time

import grpc

from gateway.errors import RequestError
from gateway.registry import WorkerRecord, WorkerRegistry
from gateway.router import predicted_prefill_s, pushes_queued_past_deadline


def best_prefill_s(registry: WorkerRegistry, prompt_tokens: int, deadline: float) -> float:
    """The least predicted prefill call (seconds) over the workers where the request makes no
    queued request late; inf when there is none; 0 when no worker has a cost model, or when
    one is idle and no call to it has been observed yet: a worker with nothing to do never
    refuses on a model's word alone, and its first call teaches the calibration."""
    workers, now = registry.routable("prefill"), time.perf_counter()
    if any(_idle_and_untested(w) for w in workers):
        return 0.0
    predictions = [predicted_prefill_s(w, prompt_tokens, deadline) for w in workers
                   if not pushes_queued_past_deadline(w, prompt_tokens, deadline, now)]
    if not predictions:
        return float("inf") if workers else 0.0
    return min((s for s in predictions if s is not None), default=0.0)


def check_ttft(registry: WorkerRegistry, prompt_tokens: int, ttft_ms: int, started: float) -> None:
    """RESOURCE_EXHAUSTED, naming the reason, when no prefill worker is predicted to return the
    first token of a request that arrived at ``started`` (perf_counter) within ``ttft_ms``."""
    best = best_prefill_s(registry, prompt_tokens, started + ttft_ms / 1000)
    if best == float("inf"):
        raise RequestError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                           f"TTFT SLO of {ttft_ms} ms is unattainable: on every prefill worker the request "
                           f"would make queued requests miss theirs", reason="ttft_unattainable")
    if (time.perf_counter() - started) * 1000 + best * 1000 > ttft_ms:
        raise RequestError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                           f"TTFT SLO of {ttft_ms} ms is unattainable: the best prefill worker is "
                           f"predicted to need {best * 1000:.0f} ms", reason="ttft_unattainable")


def _idle_and_untested(worker: WorkerRecord) -> bool:
    return (worker.ttft_calibration.num_samples == 0 and worker.inflight == 0 and not worker.queued
            and worker.load.queued_tokens == 0 and worker.load.running == 0)
