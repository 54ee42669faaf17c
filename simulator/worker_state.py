"""What the simulated gateway knows of each worker, in the shape the gateway's router reads
(``gateway.router.RoutedWorker``), and the pool of them it routes over (``WorkerPool``): the
simulator routes by the gateway's router, over this state as its registry keeps it."""

from __future__ import annotations

from dataclasses import dataclass, field

from common.slo.tpot_guard import DecodeView
from common.slo.ttft_guard import TtftGuard
from gateway.prefix_view import PrefixView
from simulator.workers import SimWorker


@dataclass(eq=False)
class SimWorkerState:
    worker: SimWorker
    ttft: TtftGuard | None = None  # prefill: its queue's guard; decode: of the prompts it computes, or None
    decode_view: DecodeView | None = None  # decode: what was routed there, and ε
    inflight: int = 0  # prefill calls under way there
    free_blocks: int = 0  # as its latest heartbeat reported
    prefix: PrefixView | None = None  # the simulator models no prefix cache

    @property
    def worker_id(self) -> str:
        return self.worker.worker_id

    @property
    def guard(self) -> TtftGuard:
        if self.ttft is None:
            raise ValueError(f"worker {self.worker_id} has no TTFT guard")
        return self.ttft

    @property
    def view(self) -> DecodeView:
        if self.decode_view is None:
            raise ValueError(f"worker {self.worker_id} is no decode worker")
        return self.decode_view


@dataclass
class SimPool:
    """Every simulated worker is routable: the simulator models no failures of registration."""

    prefill: list[SimWorkerState] = field(default_factory=list)
    decode: list[SimWorkerState] = field(default_factory=list)

    def routable(self, role: str) -> list[SimWorkerState]:
        return list(self.prefill if role == "prefill" else self.decode)

    def of(self, worker: SimWorker) -> SimWorkerState:
        return next(s for s in (*self.prefill, *self.decode) if s.worker is worker)
