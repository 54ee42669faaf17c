"""Choosing a prefill and a decode worker for a request.

``Router`` is the seam where policies plug in; ``LeastLoadedRouter`` is the default.
"""

from __future__ import annotations

from typing import Protocol

from gateway.registry import WorkerRecord, WorkerRegistry


class Router(Protocol):
    def prefill_candidates(self, registry: WorkerRegistry, prompt_tokens: int,
                           deadline: float = float("inf")) -> list[WorkerRecord]:
        """Prefill workers to try, best first."""
        ...

    def decode_candidates(self, registry: WorkerRegistry, total_tokens: int) -> list[WorkerRecord]:
        """Decode workers to try for a reservation, best first."""
        ...


class LeastLoadedRouter:
    def prefill_candidates(self, registry: WorkerRegistry, prompt_tokens: int,
                           deadline: float = float("inf")) -> list[WorkerRecord]:
        return sorted(registry.routable("prefill"), key=lambda w: (w.inflight, w.load.queued_tokens))

    def decode_candidates(self, registry: WorkerRegistry, total_tokens: int) -> list[WorkerRecord]:
        workers = registry.routable("decode")
        return sorted(workers, key=lambda w: (w.inflight, -w.load.free_blocks))


def queued_ahead(worker: WorkerRecord, deadline: float) -> int:
    """Prompt tokens a prefill worker will compute before a request with this TTFT deadline.

    Prefill queues run least slack first, so only queued requests with an earlier deadline
    are ahead, plus the oldest one, which may already be in its (non-preemptible) forward.
    Work the worker reports beyond what this gateway sent (other gateways') counts as ahead.
    """
    mine = list(worker.queued.values())
    ahead = sum(tokens for d, tokens in mine if d <= deadline)
    if mine and mine[0][0] > deadline:
        ahead += mine[0][1]
    others = max(0, worker.load.queued_tokens - sum(tokens for _, tokens in mine))
    return ahead + others


def predicted_prefill_s(worker: WorkerRecord, prompt_tokens: int, deadline: float = float("inf"),
                        calibrated: bool = True) -> float | None:
    """The queue ahead plus this prompt through the worker's fitted prefill model (corrected by
    what its calls have been taking); None when the worker has no model."""
    cost = worker.descriptor.cost_model
    if not cost.present:
        return None
    ahead = queued_ahead(worker, deadline) + prompt_tokens
    raw = cost.prefill_base_s + cost.prefill_per_token_s * max(0.0, ahead - cost.prefill_threshold)
    return worker.ttft_calibration.scale(raw) if calibrated else raw


class SloAwareRouter(LeastLoadedRouter):
    """TTFT guard: prefill workers ordered by predicted time to first token."""

    def prefill_candidates(self, registry: WorkerRegistry, prompt_tokens: int,
                           deadline: float = float("inf")) -> list[WorkerRecord]:
        workers = registry.routable("prefill")
        return sorted(workers, key=lambda w: predicted_prefill_s(w, prompt_tokens, deadline) or float("inf"))
