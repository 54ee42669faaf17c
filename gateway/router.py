"""Choosing a prefill and a decode worker for a request.

``Router`` is the seam where policies plug in; ``LeastLoadedRouter`` is the default.
"""

from __future__ import annotations

from typing import Protocol

from gateway.registry import WorkerRecord, WorkerRegistry


class Router(Protocol):
    def prefill_candidates(self, registry: WorkerRegistry, prompt_tokens: int) -> list[WorkerRecord]:
        """Prefill workers to try, best first."""
        ...

    def decode_candidates(self, registry: WorkerRegistry, total_tokens: int) -> list[WorkerRecord]:
        """Decode workers to try for a reservation, best first."""
        ...


class LeastLoadedRouter:
    def prefill_candidates(self, registry: WorkerRegistry, prompt_tokens: int) -> list[WorkerRecord]:
        return sorted(registry.routable("prefill"), key=lambda w: (w.inflight, w.load.queued_tokens))

    def decode_candidates(self, registry: WorkerRegistry, total_tokens: int) -> list[WorkerRecord]:
        workers = registry.routable("decode")
        return sorted(workers, key=lambda w: (w.inflight, -w.load.free_blocks))


def predicted_prefill_s(worker: WorkerRecord, prompt_tokens: int, calibrated: bool = True) -> float | None:
    """Queue ahead (what this gateway sent and the worker reported) plus this prompt, through the
    worker's fitted prefill model; None when the worker has no model."""
    cost = worker.descriptor.cost_model
    if not cost.present:
        return None
    queued = max(worker.inflight_tokens, worker.load.queued_tokens)
    ahead = queued + prompt_tokens
    raw = cost.prefill_base_s + cost.prefill_per_token_s * max(0.0, ahead - cost.prefill_threshold)
    return worker.ttft_calibration.scale(raw) if calibrated else raw


class SloAwareRouter(LeastLoadedRouter):
    """TTFT guard: prefill workers ordered by predicted time to first token."""

    def prefill_candidates(self, registry: WorkerRegistry, prompt_tokens: int) -> list[WorkerRecord]:
        workers = registry.routable("prefill")
        return sorted(workers, key=lambda w: predicted_prefill_s(w, prompt_tokens) or float("inf"))
