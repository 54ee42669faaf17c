"""The gateway's queue of requests waiting for decode admission: event-driven, least slack
first, and a round never asks again for what it has just been refused."""

from __future__ import annotations

import asyncio

from common.slo.admission_round import Demand
from gateway.admission import AdmissionQueue
from tests.virtual_clock import on_virtual_clock


class FakeDecodeWorker:
    """Admits a request when a slot is free and its TPOT SLO is at least ``min_tpot_ms``."""

    def __init__(self, slots: int = 0, min_tpot_ms: float = 0.0) -> None:
        self.slots = slots
        self.min_tpot_ms = min_tpot_ms
        self.calls: list[str] = []
        self.admitted: list[str] = []

    def reserve(self, name: str, tpot_ms: float) -> bool:
        self.calls.append(name)
        ok = self.slots > 0 and (tpot_ms == 0 or tpot_ms >= self.min_tpot_ms)
        if ok:
            self.slots -= 1
            self.admitted.append(name)
        return ok


async def wait_and_reserve(queue: AdmissionQueue, worker: FakeDecodeWorker, name: str, deadline: float,
                           tpot_ms: float, give_up_after_s: float = 5.0) -> bool:
    """What the request flow does: wait for a turn, try, report."""
    async with queue.waiting(lambda *_: deadline, Demand(tpot_ms)) as waiter:
        while True:
            if not await waiter.next_turn(give_up_after_s):
                return False
            admitted = worker.reserve(name, tpot_ms)
            waiter.report(admitted)
            if admitted:
                return True


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


@on_virtual_clock  # tick_s, the sleeps and each give_up_after_s pass on the loop's virtual clock
async def test_waiters_are_tried_least_slack_first_when_capacity_frees():
    queue, worker = AdmissionQueue(tick_s=60), FakeDecodeWorker()
    tasks = [asyncio.create_task(wait_and_reserve(queue, worker, name, deadline, 20))
             for name, deadline in (("late", 3.0), ("urgent", 1.0), ("middle", 2.0))]
    await settle()
    for _ in range(3):
        worker.slots += 1  # a request finished on the decode worker
        queue.notify()
        await settle()
    assert await asyncio.gather(*tasks) == [True, True, True]
    assert worker.admitted == ["urgent", "middle", "late"]
    await queue.close()


@on_virtual_clock
async def test_a_round_skips_waiters_at_least_as_tight_as_one_refused():
    queue, worker = AdmissionQueue(tick_s=60), FakeDecodeWorker(slots=1, min_tpot_ms=50)
    tasks = [asyncio.create_task(wait_and_reserve(queue, worker, name, deadline, tpot, give_up_after_s=0.5))
             for name, deadline, tpot in (("tight-1", 1.0, 10), ("tight-2", 2.0, 10), ("tighter", 2.5, 5),
                                          ("loose", 3.0, 50))]
    await settle()
    queue.notify()
    await settle()
    # one round: the most urgent is refused, so every waiter at least as tight is skipped
    assert worker.calls == ["tight-1", "loose"]
    assert worker.admitted == ["loose"]
    assert await asyncio.gather(*tasks) == [False, False, False, True]
    await queue.close()


@on_virtual_clock
async def test_waiting_makes_no_calls_until_capacity_may_have_changed():
    queue, worker = AdmissionQueue(tick_s=60), FakeDecodeWorker()
    tasks = [asyncio.create_task(wait_and_reserve(queue, worker, f"r{i}", float(i), 20, give_up_after_s=0.3))
             for i in range(8)]
    await asyncio.sleep(0.1)
    assert worker.calls == []  # nobody polls
    queue.notify()
    await settle()
    assert worker.calls == ["r0"]  # refused: the other seven are as tight, so not asked this round
    assert not any(await asyncio.gather(*tasks))  # each gives up at its own deadline
    assert len(queue) == 0
    await queue.close()


@on_virtual_clock
async def test_the_tick_retries_without_a_notification():
    queue, worker = AdmissionQueue(tick_s=0.02), FakeDecodeWorker()
    task = asyncio.create_task(wait_and_reserve(queue, worker, "r", 1.0, 20))
    await asyncio.sleep(0.05)
    worker.slots = 1  # freed by something this gateway did not see (another gateway's request)
    assert await asyncio.wait_for(task, 2.0)
    await queue.close()


@on_virtual_clock
async def test_a_waiter_cancelled_during_its_turn_does_not_stall_the_round():
    queue, worker = AdmissionQueue(tick_s=60), FakeDecodeWorker(slots=1)
    stuck = asyncio.Event()

    async def leaves_mid_call() -> None:
        async with queue.waiting(lambda *_: 1.0, Demand(20)) as waiter:
            await waiter.next_turn(5.0)
            stuck.set()
            await asyncio.Event().wait()  # the client goes away while its Reserve is in flight

    first = asyncio.create_task(leaves_mid_call())
    second = asyncio.create_task(wait_and_reserve(queue, worker, "next", 2.0, 20))
    await settle()
    queue.notify()
    await asyncio.wait_for(stuck.wait(), 1.0)
    first.cancel()
    assert await asyncio.wait_for(second, 2.0)
    assert worker.admitted == ["next"]
    await queue.close()
