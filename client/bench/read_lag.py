"""How late the load tester's own event loop ran while a request waited for its first token.

A token message that arrives while the tester's loop is busy relaying other streams is read,
and timed, only when the loop gets to it: the TTFT the tester records then carries the tester's
own backlog, which no server caused. ``send_late_s`` shows that lag at the moment of sending;
this shows it over the wait for the first token, where a fast server's streams pile up. A probe
sleeps ``PERIOD_S`` at a time and records how much later than asked each wake-up came; a
request's read lag is the largest of the wake-ups from its send to ``2 × PERIOD_S`` past its
first token (the probe wakes at the end of the same stall that delayed the read, just before or
just after it).

Only the wake-ups some request may still ask about are kept: from the earliest send still waiting
for its read lag (``watch``/``unwatch``) on. Keeping every one, a tester grows by the hour whatever
its load (docs/decisions.md, 'Read lag: only the wake-ups asked about').
"""

from __future__ import annotations

import asyncio
import bisect
import time

PERIOD_S = 0.005  # a few hundred wake-ups a second: nothing beside the thousands of messages relayed
TRIM_EVERY = 1024  # wake-ups recorded between two drops of those no request may ask about


class ReadLag:
    def __init__(self, started: float, period_s: float = PERIOD_S) -> None:
        self.period_s = period_s
        self._started = started  # the run's start on perf_counter: times below count from it
        self._woke: list[float] = []  # when each wake-up came, ascending
        self._late: list[float] = []  # how much later than asked it came
        self._watched: dict[float, int] = {}  # run times from which requests may ask, and how many from each
        self._trim_at = TRIM_EVERY  # the length at which the next drop comes

    def watch(self, since: float) -> None:
        """A request sent at or after ``since`` (run time) will ask for its ``worst``: the wake-ups
        from then on are kept until it ``unwatch``es."""
        self._watched[since] = self._watched.get(since, 0) + 1

    def unwatch(self, since: float) -> None:
        left = self._watched.pop(since, 0) - 1
        if left > 0:
            self._watched[since] = left

    def record(self, woke_at: float, late_s: float) -> None:
        self._woke.append(woke_at)
        self._late.append(max(0.0, late_s))
        if len(self._woke) >= self._trim_at:
            self._trim()

    def _trim(self) -> None:
        """Drops the wake-ups before the earliest watched time (all but the last when none is: a
        request not yet sent asks only about what comes after its send)."""
        horizon = min(self._watched, default=self._woke[-1])
        gone = bisect.bisect_left(self._woke, horizon)
        del self._woke[:gone], self._late[:gone]
        self._trim_at = len(self._woke) + TRIM_EVERY

    def __len__(self) -> int:
        """Wake-ups kept now."""
        return len(self._woke)

    def worst(self, since: float, until: float) -> float:
        """The largest lag of a wake-up from ``since`` to ``until + 2 × period`` (run time)."""
        lo = bisect.bisect_left(self._woke, since)
        hi = bisect.bisect_right(self._woke, until + 2 * self.period_s)
        return max(self._late[lo:hi], default=0.0)

    async def run(self) -> None:
        """Probes until cancelled."""
        while True:
            asked = time.perf_counter() + self.period_s
            await asyncio.sleep(self.period_s)
            now = time.perf_counter()
            self.record(now - self._started, now - asked)
