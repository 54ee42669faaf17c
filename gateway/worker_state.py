"""What a gateway knows of one worker, as plain state: its latest load report, the TTFT guard's
view of its queue, the TPOT guard's view of it, what is in flight there, its prefix cache. The
routers (``gateway.router``) and the request's path (``gateway.request_path``) read this alone;
the gateway's registry keeps one per worker over gRPC (``gateway.registry.WorkerRecord``, which
adds the connection and liveness), the simulated gateway one per simulated worker
(``simulator.worker_state``), and both take each heartbeat in by ``heard``."""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass

from common.slo.load_report import LoadReport
from common.slo.tpot_guard import DecodeView
from common.slo.ttft_guard import TtftGuard
from gateway.prefix_view import PrefixView


@dataclass(slots=True, eq=False, kw_only=True)
class WorkerState(abc.ABC):
    load: LoadReport  # its latest heartbeat's (or its registration's)
    # prefill: the TTFT guard's view of its queue; decode: the same of the prompts it computes
    # itself (local prefill on), else None
    ttft: TtftGuard | None = None
    # decode: the TPOT guard's view of it (what was routed there, ε for its admission); None for prefill
    decode_view: DecodeView | None = None
    inflight: int = 0  # prefill calls this gateway has under way there (decode workers count ``view.routed``)
    prefix: PrefixView | None = None  # with prefix caching: a copy of what its cache holds
    suspect: bool = False  # a call to it just failed: out of routing until it heartbeats again

    @property
    @abc.abstractmethod
    def worker_id(self) -> str:
        """Each keeper names its workers its own way (a descriptor's id, a simulated worker's)."""

    @property
    def guard(self) -> TtftGuard:
        """The TTFT guard of a prefill worker (every one has one), or of the prompts a decode
        worker computes itself."""
        if self.ttft is None:
            raise ValueError(f"worker {self.worker_id} has no TTFT guard")
        return self.ttft

    @property
    def view(self) -> DecodeView:
        """The TPOT guard's view of a decode worker (every one has one)."""
        if self.decode_view is None:
            raise ValueError(f"worker {self.worker_id} has no TPOT guard view")
        return self.decode_view

    @property
    def free_blocks(self) -> int:
        return self.load.free_blocks

    @property
    def tpot_alone_s(self) -> float | None:
        """A decode worker's step for one request alone, as it reports it (None: not yet known)."""
        return self.load.tpot_alone_ms / 1000 or None

    def heard(self, load: LoadReport) -> None:
        """A heartbeat's load: kept, and given to the guards. A decode worker's ε, every class's,
        is held to at most what its steps have shown and relaxes on time to where they say it
        starts (``tpot_margin_ceiling``, ``tpot_margin_start``; none reported: no cap, no return);
        the TTFT guard hears the queue it reports. A suspect worker proved alive is routed again."""
        self.load, self.suspect = load, False
        if self.decode_view is not None:
            self.decode_view.epsilons.bound(load.tpot_margin_ceiling or math.inf, load.tpot_margin_start or None)
        if self.ttft is not None:
            self.ttft.heard(load.queued_tokens, load.running)
