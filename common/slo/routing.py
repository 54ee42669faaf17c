"""The order in which workers are tried for a request: the routers' policies as plain functions
of the guards' state, for the gateway's routers and the simulator alike.

- ``prefill_order`` (TTFT guard): least predicted time to first token first, workers where the
  request would make an already queued request late last.
- ``decode_order_by_vbs`` (TPOT guard): most VBS headroom first: the lowest virtual batch size
  of what was routed there, with the new request counted, then the fewest requests routed
  there (what decides among requests without a TPOT SLO), then the most of the prompt's blocks
  held already (a conversation returns where it was served), then the most free KV blocks.
- ``least_loaded_order`` (fcfs): fewest requests in flight first.
- ``RoundRobin``: each role's workers in turn, whatever their load (a baseline).
"""

from __future__ import annotations

from collections.abc import Sequence

from common.slo.tpot_guard import DecodeView
from common.slo.ttft_guard import TtftGuard


def prefill_order(guards: Sequence[TtftGuard], prompt_tokens: Sequence[int], deadline: float, now: float,
                  ttft_s: float = 0.0) -> list[int]:
    """Indices of ``guards``, best first; ``prompt_tokens[i]``: what worker i would compute of the
    prompt (less what its prefix cache holds); ``ttft_s``: the request's TTFT SLO (its class's headroom)."""
    keys = [(g.pushes_queued_past(n, deadline, now), g.predict_s(n, deadline, ttft_s=ttft_s) or float("inf"))
            for g, n in zip(guards, prompt_tokens)]
    return sorted(range(len(guards)), key=keys.__getitem__)


def decode_order_by_vbs(views: Sequence[DecodeView], free_blocks: Sequence[int], tpot_s: float,
                        held: Sequence[int] | None = None) -> list[int]:
    """Indices of ``views``, the most VBS headroom first; ``held``: blocks of the prompt each
    worker's prefix cache holds, the key before free blocks."""
    held = held or [0] * len(views)
    keys = [(v.vbs_with(tpot_s), len(v.routed), -h, -free) for v, free, h in zip(views, free_blocks, held)]
    return sorted(range(len(views)), key=keys.__getitem__)


def least_loaded_order(inflight: Sequence[int], tiebreak: Sequence[float], held: Sequence[int] | None = None) -> list[int]:
    """Indices by requests in flight, then by the most ``held`` (blocks of the prompt a worker's
    prefix cache holds), then by ``tiebreak`` (lower first)."""
    held = held or [0] * len(inflight)
    return sorted(range(len(inflight)), key=lambda i: (inflight[i], -held[i], tiebreak[i]))


class RoundRobin:
    def __init__(self) -> None:
        self._next = 0

    def order(self, count: int) -> list[int]:
        """Indices starting one past where the previous call started."""
        start, self._next = self._next % max(count, 1), self._next + 1
        return [(start + i) % count for i in range(count)]
