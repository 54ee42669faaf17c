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
