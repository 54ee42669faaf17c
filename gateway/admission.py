"""Requests waiting at the gateway for a decode worker to admit them (the TPOT guard's queue).

A request that no decode worker admits now waits here while its TTFT deadline still allows
a prefill after admission. Waiters are not polled: they are tried again when capacity may
have come free (a request on a decode worker finished, a reservation was given back), and
at the latest every ``tick_s``. Each such round gives turns one at a time in the order of
``common.slo.admission_round`` (least slack first, skipping every waiter at least as hard to
admit as one already refused in the round), so a round costs a few ``Reserve`` calls, not one per waiter. (Polling each waiter every few milliseconds costs the decode
worker more event-loop time than its steps can spare: every call competes with the engine
thread for the interpreter.)

    flow:   try at once ── refused ──▶ queue.waiting(...) ──▶ turn ──▶ Reserve ──▶ report
            (a waiter no harder to admit is waiting: straight to queue.waiting)
    pump:   notify()/tick ──▶ round: for each waiter, least slack first: give turn, await report
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from common.slo.admission_pump import AdmissionPump
from common.slo.admission_round import Demand
from common.slo.guard_reading import Readings

TURN_TIMEOUT_S = 15.0  # a turn is reported within one Reserve call (10 s timeout) or the waiter leaves


@dataclass(eq=False)
class Waiter:
    """One request's place in the queue. ``deadline`` (perf_counter seconds) orders the queue:
    the latest moment its admission can still lead to a first token in time."""

    deadline: Callable[..., float]  # (readings: ``Readings`` of the round, or none) -> perf_counter seconds
    demand: Demand  # its TPOT SLO (0: none, the easiest) and sizes
    _turn: asyncio.Event = field(default_factory=asyncio.Event)
    _outcome: asyncio.Future[bool | None] | None = None

    async def next_turn(self, timeout_s: float) -> bool:
        """True when the queue gives this waiter a turn; False after ``timeout_s`` without one."""
        try:
            await asyncio.wait_for(self._turn.wait(), max(0.0, timeout_s))
        except TimeoutError:
            return False
        self._turn.clear()
        return True

    def report(self, admitted: bool | None) -> None:
        """The outcome of the turn just taken (None: the waiter left without trying): the queue
        goes on with the round."""
        if self._outcome is not None and not self._outcome.done():
            self._outcome.set_result(admitted)



class AdmissionQueue:
    def __init__(self, tick_s: float = 0.025) -> None:
        self.tick_s = tick_s
        self._pump: AdmissionPump[Waiter] = AdmissionPump(lambda w: w.demand)
        self._wake = asyncio.Event()
        self._rounds: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._pump)

    def holds_one_no_harder(self, demand: Demand) -> bool:
        """A waiter no harder to admit than a request of ``demand`` is waiting (``AdmissionPump``)."""
        return self._pump.holds_one_no_harder(demand)

    def notify(self) -> None:
        """Capacity may have come free on some decode worker: run a round soon."""
        self._wake.set()

    @contextlib.asynccontextmanager
    async def waiting(self, deadline: Callable[..., float], demand: Demand) -> AsyncIterator[Waiter]:
        waiter = Waiter(deadline, demand)
        self._pump.join(waiter)
        self._ensure_rounds()
        try:
            yield waiter
        finally:
            self._pump.leave(waiter)
            waiter.report(None)  # a turn it held (cancelled mid-call) must not stall the round

    async def close(self) -> None:
        if self._rounds is not None:
            self._rounds.cancel()
            await asyncio.gather(self._rounds, return_exceptions=True)

    def _ensure_rounds(self) -> None:
        if self._rounds is None or self._rounds.done():
            self._rounds = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while len(self._pump):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.tick_s)
            self._wake.clear()
            await self._round()

    async def _round(self) -> None:
        readings: Readings = {}  # each prefill worker read once for the order of every waiter
        if not self._pump.begin(lambda w: w.deadline(readings)):
            return
        while (waiter := self._pump.turn()) is not None:
            self._pump.report(waiter, await self._give_turn(waiter))
        self._pump.owed()  # one task runs the rounds: a wake during this one already asks for the next

    async def _give_turn(self, waiter: Waiter) -> bool | None:
        waiter._outcome = asyncio.get_running_loop().create_future()
        waiter._turn.set()
        try:
            return await asyncio.wait_for(asyncio.shield(waiter._outcome), TURN_TIMEOUT_S)
        except TimeoutError:
            return None
        finally:
            waiter._outcome = None
