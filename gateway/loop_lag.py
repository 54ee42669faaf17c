"""How late this process's own event loop runs, so its lateness is not blamed on others.

A worker's heartbeat that arrived while the loop was busy is read late; counting that delay
as the worker's silence would drop healthy workers from routing whenever the gateway itself
stalls. The registry subtracts the stall time measured here from each worker's silence.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

PERIOD_S = 0.05  # how often the loop is probed; a later wake-up than this is lag


class LoopLag:
    def __init__(self, period_s: float = PERIOD_S) -> None:
        self.period_s = period_s
        self.worst_recent_s = 0.0  # the largest lag of the last second, for metrics
        self._stalled_s = 0.0  # summed lag of all past probes
        self._expected = time.monotonic() + period_s  # when the pending probe should wake
        self._recent: list[tuple[float, float]] = []

    def stalled_s(self, now: float | None = None) -> float:
        """Total seconds the loop has been late, including a stall still going on now."""
        now = time.monotonic() if now is None else now
        return self._stalled_s + max(0.0, now - self._expected)

    def clock(self, now: float | None = None) -> float:
        """Monotonic time the loop spent responsive: differences of it are time in which the
        loop could have read a heartbeat."""
        now = time.monotonic() if now is None else now
        return now - self.stalled_s(now)

    def record(self, woke_at: float) -> None:
        lag = max(0.0, woke_at - self._expected)
        self._stalled_s += lag
        self._recent = [(t, v) for t, v in self._recent if woke_at - t < 1.0] + [(woke_at, lag)]
        self.worst_recent_s = max(v for _, v in self._recent)
        self._expected = woke_at + self.period_s

    async def run(self, on_wake: Callable[[], None] = lambda: None) -> None:
        """Probes until cancelled; ``on_wake`` runs at every wake-up too (on the loop's thread)."""
        while True:
            await asyncio.sleep(self.period_s)
            self.record(time.monotonic())
            on_wake()
