"""A discrete-event loop on a virtual clock: callbacks at times, run in time order."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any


class Simulation:
    def __init__(self) -> None:
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[..., Any], tuple[Any, ...]]] = []
        self._order = itertools.count()  # ties run in the order they were scheduled

    def clock(self) -> float:
        return self.now

    def at(self, when: float, callback: Callable[..., Any], *args: Any) -> None:
        heapq.heappush(self._queue, (max(when, self.now), next(self._order), callback, args))

    def after(self, delay: float, callback: Callable[..., Any], *args: Any) -> None:
        self.at(self.now + delay, callback, *args)

    def run(self, until: float = float("inf")) -> None:
        queue = self._queue
        while queue and queue[0][0] <= until:
            self.now, _, callback, args = heapq.heappop(queue)
            callback(*args)

    @property
    def pending(self) -> int:
        return len(self._queue)
