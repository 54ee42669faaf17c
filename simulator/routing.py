"""The simulated gateway's choice of workers: the router's own orders (``common.slo.routing``)
over what the simulated gateway knows of each worker, as ``gateway/router.py`` applies them over
its registry. ``scorpio`` (and the guards' own policies) order prefill workers by least predicted
TTFT and decode workers by VBS headroom; ``fcfs`` by fewest requests in flight; ``round_robin`` in
turn."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from common.slo.routing import RoundRobin, decode_order_by_vbs, least_loaded_order, prefill_order
from common.slo.tpot_guard import DecodeView
from common.slo.ttft_guard import TtftGuard
from simulator.workers import SimDecodeWorker, SimPrefillWorker


@dataclass
class SimRouter:
    policy: str
    ttft_guard: bool  # prefill workers by least predicted TTFT (else by fewest in flight)
    turns: dict[str, RoundRobin] = field(default_factory=lambda: {"prefill": RoundRobin(), "decode": RoundRobin()})

    def decode_order(self, workers: Sequence[SimDecodeWorker], views: Mapping[str, DecodeView],
                     free_blocks: Mapping[str, int], inflight: Mapping[str, int],
                     tpot_s: float) -> list[SimDecodeWorker]:
        if self.policy == "round_robin":
            order = self.turns["decode"].order(len(workers))
        elif self.policy == "scorpio":
            order = decode_order_by_vbs([views[w.worker_id] for w in workers],
                                        [free_blocks[w.worker_id] for w in workers], tpot_s)
        else:
            order = least_loaded_order([inflight[w.worker_id] for w in workers],
                                       [-free_blocks[w.worker_id] for w in workers])
        return [workers[i] for i in order]

    def prefill_order(self, workers: Sequence[SimPrefillWorker], guards: Mapping[str, TtftGuard],
                      inflight: Mapping[str, int], tokens: int, deadline: float, now: float,
                      ttft_s: float) -> list[SimPrefillWorker]:
        if self.policy == "round_robin":
            order = self.turns["prefill"].order(len(workers))
        elif self.ttft_guard:
            order = prefill_order([guards[w.worker_id] for w in workers], [tokens] * len(workers), deadline, now,
                                  ttft_s)
        else:
            order = least_loaded_order([inflight[w.worker_id] for w in workers],
                                       [guards[w.worker_id].queued_tokens for w in workers])
        return [workers[i] for i in order]
