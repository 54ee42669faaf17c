"""What every admission check of one prefill worker's TTFT guard reads of its state, read once.

A check (does a newcomer make a queued request late; its predicted prefill) reads the worker's
queue, its forward cut, the calibration ratio, the overhead quantile and the attention work per
queued token. An admission round orders every waiting request by its last useful moment at one
moment, so the round reads each worker once (``Readings``), not once per waiter.
"""

from __future__ import annotations

from dataclasses import dataclass

Queued = tuple[float, int, float]  # (TTFT deadline, inf without one; prompt tokens; TTFT SLO s, 0: none)


@dataclass(frozen=True, slots=True)
class GuardReading:
    mine: list[Queued]  # what this gateway sent there and awaits, in sending order
    cut: int  # prompt tokens per forward (``TtftGuard.forward_cut``)
    ratio: float  # what predictions are scaled by (``TtftGuard.ratio``)
    overhead: float  # seconds a call adds beyond the worker's own time
    per_token: float  # attention work per queued token (``TtftGuard._queued_len``)


Readings = dict[int, GuardReading]  # id(guard) -> its reading, filled as a round first asks each worker
