"""What the simulated gateway knows of each worker, in the shape the gateway's router reads
(``gateway.router.RoutedWorker``), and the pool of them it routes over (``WorkerPool``): the
simulator routes by the gateway's router, over this state as its registry keeps it."""

from __future__ import annotations

from dataclasses import dataclass, field

from common.slo.tpot_guard import DecodeView
from common.slo.ttft_guard import TtftGuard
from gateway.prefix_view import PrefixView
from gateway.router import GuardViews
from simulator.workers import SimWorker


@dataclass(eq=False)
class SimWorkerState(GuardViews):
    worker: SimWorker
    ttft: TtftGuard | None = None  # prefill: its queue's guard; decode: of the prompts it computes, or None
    decode_view: DecodeView | None = None  # decode: what was routed there, and ε
    inflight: int = 0  # prefill calls under way there
    free_blocks: int = 0  # as its latest heartbeat reported
    prefix: PrefixView | None = None  # the simulator models no prefix cache

    @property
    def worker_id(self) -> str:  # type: ignore[override]
        return self.worker.worker_id


@dataclass
class SimPool:
    """Every simulated worker is routable: the simulator models no failures of registration."""

    prefill: list[SimWorkerState] = field(default_factory=list)
    decode: list[SimWorkerState] = field(default_factory=list)

    def routable(self, role: str) -> list[SimWorkerState]:
        return list(self.prefill if role == "prefill" else self.decode)

    def local_prefills(self, decode: SimWorkerState | None = None) -> list[SimWorkerState]:
        """The decode workers that may compute a prompt themselves (``WorkerRegistry.local_prefills``)."""
        return [w for w in ([decode] if decode is not None else self.decode) if w.ttft is not None]
