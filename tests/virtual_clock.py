"""An asyncio event loop on a virtual clock, for unit tests of code timed only by its loop
(``asyncio.sleep``, ``asyncio.wait_for``, ``loop.call_later``): when nothing is ready and the
next timer is ``t`` seconds away, the clock jumps ``t`` ahead instead of the loop waiting, so a
test that lets seconds pass takes none, and the order of timers is exactly as they were set.

Only for tests with no other thread or process to wait for: while the loop waits on such work
with a timer set, the clock would jump to the timer. With no timer set, the loop waits on its
file descriptors as usual (a callback from another thread still wakes it).

    from tests.virtual_clock import on_virtual_clock, run

    def test_it_gives_up_after_a_minute():
        assert run(waits_for_a_minute()) is False  # instantly

    @on_virtual_clock  # an ``async def`` test (sync fixtures only) run by ``run``
    async def test_it_ticks(queue):
        await asyncio.sleep(60)
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import heapq
import itertools
import selectors
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _JumpingSelector(selectors.DefaultSelector):
    """Answers what is ready now; where the loop would wait ``timeout`` seconds for more,
    moves the virtual clock on by that much instead."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:  # no timer set: only I/O or another thread can wake the loop
            return super().select(None)
        ready = super().select(0)
        if not ready and timeout > 0:
            self._loop.now += timeout
        return ready


class _InOrder(asyncio.TimerHandle):
    """A timer that, due at the same moment as another, runs after those set before it."""

    __slots__ = ("_order",)

    def __init__(self, order: int, *args: Any) -> None:
        super().__init__(*args)
        self._order = order

    def __lt__(self, other: object) -> bool:
        if isinstance(other, _InOrder) and self._when == other._when:
            return self._order < other._order
        return super().__lt__(other)


class VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self.now = 0.0
        self._set = itertools.count()
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[..., Any], *args: Any,  # type: ignore[override]
                context: contextvars.Context | None = None) -> asyncio.TimerHandle:
        """As asyncio's, but timers due at one moment run in the order they were set (asyncio's
        heap leaves ties in no set order), as in the simulator's event queue."""
        self._check_closed()  # type: ignore[attr-defined]
        timer = _InOrder(next(self._set), when, callback, args, self, context)
        heapq.heappush(self._scheduled, timer)  # type: ignore[attr-defined]
        timer._scheduled = True
        return timer


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on a fresh ``VirtualClockLoop`` (its clock starts at 0)."""
    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        return runner.run(coro)


def on_virtual_clock(test: Callable[..., Coroutine[Any, Any, T]]) -> Callable[..., T]:
    """An ``async def`` test as a plain one that ``run``s it: pytest-asyncio leaves it alone, and
    pytest still passes it the (sync) fixtures its signature names."""

    @functools.wraps(test)
    def on_the_virtual_clock(*args: Any, **kwargs: Any) -> T:
        return run(test(*args, **kwargs))

    return on_the_virtual_clock
