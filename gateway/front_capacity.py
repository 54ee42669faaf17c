"""The gateway's own capacity: refusing new requests while its event loop is nearly always busy.

One Python thread runs the gateway's event loop: every request's handler, every token relayed, every
call to a worker. When that thread is busy nearly all the time, the delay does not show where the
guards look. gRPC's asyncio server takes a new call from its core one at a time, each after a turn
of the loop, so as the loop's turns lengthen, arriving calls wait inside gRPC before any handler
runs: their TTFT grows by that wait, which no TTFT the gateway measures contains (its own count of
admitted requests in time then runs well above what its clients see: docs/decisions.md, 'Gateway
busy guard'). The TTFT guard cannot predict a wait it cannot see, so the gateway keeps the loop out
of that regime instead: above ``low`` of the loop thread's time busy (its CPU time over wall time,
``WINDOW_S`` back) it refuses a growing share of new requests, all of them at ``high``. A refusal
costs the loop one short call; an admitted request costs it a message for every token, so refusing
frees the loop.

A request its client stamped (``gateway.request_start``) is never refused here: its wait before
the handler is known, and the TTFT guard plans with it, refusing it only if that wait leaves too
little of its TTFT, so for a stamped request the busy guard would only refuse what can still be
served in time (chosen by measurement: docs/decisions.md, 'Gateway busy guard: stamped requests pass').

Only CPU the loop thread itself used counts: a loop waiting for a core that other processes hold
(the 2-core CPU host) is not busy by this measure, and its delays are the TTFT guard's to see
through the workers' calibration.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable

WINDOW_S = 0.5  # how far back the loop's busy share is measured: a few of its turns under load
LOW, HIGH = 0.85, 0.95  # busy shares where refusals begin and where every new request is refused


class LoopBusy:
    """The share of wall time this (the loop's) thread spent on the CPU over the last ``window_s``,
    sampled at each wake-up of the loop-lag probe (``LoopLag.run``'s ``on_wake``)."""

    def __init__(self, window_s: float = WINDOW_S, wall: Callable[[], float] = time.monotonic,
                 cpu: Callable[[], float] = time.thread_time) -> None:
        self.window_s = window_s
        self._wall, self._cpu = wall, cpu
        self._samples: deque[tuple[float, float]] = deque([(wall(), cpu())])

    def sample(self) -> None:
        """Called on the loop's thread (``cpu`` reads the calling thread's time)."""
        now = self._wall()
        self._samples.append((now, self._cpu()))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
            self._samples.popleft()

    def fraction(self) -> float:
        (wall_then, cpu_then), (wall_now, cpu_now) = self._samples[0], self._samples[-1]
        return (cpu_now - cpu_then) / (wall_now - wall_then) if wall_now > wall_then else 0.0


class FrontCapacity:
    """Whether to refuse a new request now: never below ``low`` busy, always at ``high``, in
    between with a probability that grows linearly (so admissions thin out instead of stopping)."""

    def __init__(self, busy: Callable[[], float], low: float = LOW, high: float = HIGH,
                 draw: Callable[[], float] = random.random) -> None:
        if not 0 < low < high:
            raise ValueError(f"busy limits must satisfy 0 < low < high, got {low} and {high}")
        self.busy, self.low, self.high, self._draw = busy, low, high, draw

    def refusal(self) -> str | None:
        """Why a request arriving now is refused, or None to admit it."""
        busy = self.busy()
        if busy <= self.low or self._draw() >= (busy - self.low) / (self.high - self.low):
            return None
        return (f"the gateway is at its capacity: its event loop was busy {busy:.0%} of the last "
                f"{WINDOW_S:g} s; retry later or on another replica")
