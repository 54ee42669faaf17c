"""What the simulated gateway knows of each worker: the gateway's own plain state of a worker
(``gateway.worker_state.WorkerState``, each heartbeat taken in by its ``heard``, the load as the
wire carries it), and the pool of them it routes over (``WorkerPool``): the simulator routes by
the gateway's router, over this state as its registry keeps it."""

from __future__ import annotations

from dataclasses import dataclass, field

from common.rpc.convert import load_from_proto, load_to_proto
from gateway.worker_state import WorkerState
from simulator.workers import SimWorker


@dataclass(slots=True, eq=False, kw_only=True)
class SimWorkerState(WorkerState):
    worker: SimWorker

    @property
    def worker_id(self) -> str:
        return self.worker.worker_id

    def heartbeat(self, policy: str) -> None:
        """The worker's heartbeat reaches the gateway: its load as a worker reports it (through
        the wire message, so what the guards read is what a cluster's gateway reads)."""
        self.heard(load_from_proto(load_to_proto(self.worker.load(), policy)))


@dataclass
class SimPool:
    """Every simulated worker is registered (the simulator models no failures of registration);
    one a call to failed is out of routing until its next heartbeat, as at the gateway."""

    prefill: list[SimWorkerState] = field(default_factory=list)
    decode: list[SimWorkerState] = field(default_factory=list)

    def routable(self, role: str) -> list[SimWorkerState]:
        return [w for w in (self.prefill if role == "prefill" else self.decode) if not w.suspect]

    def local_prefills(self, decode: SimWorkerState | None = None) -> list[SimWorkerState]:
        """The decode workers that may compute a prompt themselves (``WorkerRegistry.local_prefills``)."""
        return [w for w in ([decode] if decode is not None else self.decode) if w.ttft is not None]
