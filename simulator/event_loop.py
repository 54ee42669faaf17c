"""The gateway's event loop on the virtual clock: one thread, so one server in front of the cluster.

gRPC's asyncio server takes a call from its core only after a turn of the loop, so when the loop
has more work than time, calls queue before their handlers (``gateway.front_capacity``). Each
request gives the loop ``refused_s`` at its handler and, when it is served, ``served_s`` less that
(its worker calls and token messages, spread over its life, are charged when it is admitted); a
handler starts once the loop has done the work given it before (``SimConfig.gateway_loop_s``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class EventLoop:
    served_s: float = 0.0  # the loop's seconds a served request takes, its handler's included
    refused_s: float = 0.0  # ... and a refused one (its handler)
    free_at: float = 0.0  # when it has done the work given it so far
    busy_s: float = 0.0  # the work given it over the run

    @property
    def modelled(self) -> bool:
        """False: the gateway is never the bottleneck (both costs 0)."""
        return bool(self.served_s or self.refused_s)

    def handler(self, now: float) -> float:
        """A call reached the gateway at ``now``: when its handler runs."""
        return self._take(self.refused_s, now)

    def served(self, now: float) -> None:
        """A request was admitted at ``now``: the rest of its work."""
        self._take(max(0.0, self.served_s - self.refused_s), now)

    def busy(self, first: float, span: float) -> float:
        """The share of the run it worked, the run ``span`` seconds from ``first`` or until the loop
        was done, if later (refusals at handlers it reached after the last token)."""
        return self.busy_s / max(span, self.free_at - first, 1e-9)

    def _take(self, work_s: float, now: float) -> float:
        start = max(self.free_at, now)
        self.free_at = start + work_s
        self.busy_s += work_s
        return start
