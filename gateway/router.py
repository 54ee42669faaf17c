"""Choosing a prefill and a decode worker for a request.

``Router`` is the seam where policies plug in; ``LeastLoadedRouter`` is the default.
"""

from __future__ import annotations

import time
from typing import Protocol

from common.slo.cost_models import PrefillModel
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
    """The queue ahead plus this prompt through the worker's fitted prefill model, one forward
    per ``max_num_tokens`` (corrected by what its calls have been taking); None when the
    worker has no model."""
    cost = worker.descriptor.cost_model
    if not cost.present:
        return None
    model = PrefillModel(cost.prefill_threshold, cost.prefill_base_s, cost.prefill_per_token_s)
    raw = model.predict_forwards(queued_ahead(worker, deadline) + prompt_tokens, worker.descriptor.max_num_tokens)
    return worker.ttft_calibration.scale(raw) if calibrated else raw


def pushes_queued_past_deadline(worker: WorkerRecord, prompt_tokens: int, deadline: float, now: float) -> bool:
    """Whether sending a request with this TTFT deadline to ``worker`` would make a request
    already queued there, predicted to be on time, late.

    Least slack first puts the newcomer ahead of every queued request with a later deadline,
    so each of those waits for its tokens too. Admitting it anyway would trade a request that
    was promised its SLO for one that was not, and make the promises worth less.
    """
    for queued_deadline, _ in list(worker.queued.values()):
        if queued_deadline < deadline or queued_deadline == float("inf"):
            continue
        on_time_now = now + (predicted_prefill_s(worker, 0, queued_deadline) or 0.0) <= queued_deadline
        if on_time_now and now + (predicted_prefill_s(worker, prompt_tokens, queued_deadline) or 0.0) > queued_deadline:
            return True
    return False


class SloAwareRouter(LeastLoadedRouter):
    """TTFT guard: prefill workers ordered by predicted time to first token, those where the
    request would make a queued request late last."""

    def prefill_candidates(self, registry: WorkerRegistry, prompt_tokens: int,
                           deadline: float = float("inf")) -> list[WorkerRecord]:
        now = time.perf_counter()
        return sorted(registry.routable("prefill"),
                      key=lambda w: (pushes_queued_past_deadline(w, prompt_tokens, deadline, now),
                                     predicted_prefill_s(w, prompt_tokens, deadline) or float("inf")))
