"""A sliding window of observations kept both in arrival order and in value order.

The guards read a high quantile of a window's values once per request or more (a prefill call's
calibration, the overhead beyond the model, the delivery and arrival allowances), and every request
also adds a value, so a quantile computed by sorting the window costs a sort per request: at
hundreds of requests a second a 2 s window holds hundreds of values, and the sort grows with the
rate (docs/decisions.md, 'Ordered window: kept sorted'). Kept sorted as values come and go, a
quantile is one index and an update a binary search and a list shift.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque


class OrderedWindow:
    """Values with the time each was observed: ``drop_oldest`` removes in arrival order,
    ``quantile`` reads in value order. NaN is not an observation (it has no place in an order)
    and is ignored."""

    def __init__(self) -> None:
        self._arrivals: deque[tuple[float, float]] = deque()  # (when, value), oldest first
        self._ordered: list[float] = []  # the same values, ascending

    def __len__(self) -> int:
        return len(self._arrivals)

    def add(self, when: float, value: float) -> bool:
        """Adds an observation; False (nothing added) for NaN."""
        if math.isnan(value):
            return False
        self._arrivals.append((when, value))
        insort(self._ordered, value)
        return True

    def oldest_time(self) -> float:
        return self._arrivals[0][0]

    def drop_oldest(self) -> float:
        """Removes the oldest observation; returns its value."""
        _, value = self._arrivals.popleft()
        del self._ordered[bisect_left(self._ordered, value)]  # equal values are interchangeable
        return value

    def quantile(self, q: float) -> float:
        """The smallest value with at least ``q`` of the window at or below it (0 when empty)."""
        n = len(self._ordered)
        return self._ordered[min(n - 1, math.ceil(q * n) - 1)] if n else 0.0
