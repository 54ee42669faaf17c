"""A request's token events merged into messages, and held for a stream interval (``gateway.coalesce``)."""

from __future__ import annotations

import asyncio
import time
from collections import deque

import grpc
import pytest

from gateway.coalesce import TokenInbox, next_message
from gateway.errors import ABORTED, RequestError
from gateway.stream_interval import HIGH, LOW, MAX_AUTO_S, StreamInterval
from tests.virtual_clock import on_virtual_clock
from wire.v1 import worker_pb2


def _event(*ids: int, finish: str = "", error: str = "") -> worker_pb2.TokenEvent:
    return worker_pb2.TokenEvent(request_id="r", token_ids=list(ids), finish_reason=finish, error=error)


def test_a_lone_event_goes_as_it_is():
    first = _event(5)
    items = deque([first])
    assert next_message(items) is first and not items


def test_waiting_tokens_merge_up_to_and_with_the_one_that_finishes():
    first = _event(5)
    items = deque([first, _event(6), _event(7, 8), _event(9, finish="length"), _event(10)])
    merged = next_message(items)
    assert list(merged.token_ids) == [5, 6, 7, 8, 9] and merged.finish_reason == "length"
    assert list(first.token_ids) == [5]  # the event itself is left as it was
    assert len(items) == 1  # what came after the finish stays where it was


def test_an_error_or_abort_stops_the_merge_and_stays_for_the_caller():
    failure = _event(error="boom")
    items = deque([_event(1), _event(2), failure, _event(3)])
    assert list(next_message(items).token_ids) == [1, 2] and items[0] is failure
    lost = RequestError(grpc.StatusCode.UNAVAILABLE, "decode worker left")
    for stop in (ABORTED, lost):
        items = deque([_event(1), stop])
        assert list(next_message(items).token_ids) == [1] and items[0] is stop
        assert next_message(items) is stop  # handled next, as it is


def test_without_merging_each_event_stays_apart():
    items = deque([_event(1), _event(2)])
    assert list(next_message(items, merge=False).token_ids) == [1] and len(items) == 1


async def test_take_returns_what_waits_at_once_without_a_hold():
    inbox = TokenInbox()
    inbox.put(_event(1))
    inbox.put(_event(2))
    items = await asyncio.wait_for(inbox.take(), 1)
    assert [list(e.token_ids) for e in items] == [[1], [2]] and len(inbox) == 0


# The timed tests run on the loop's virtual clock (``tests.virtual_clock``): items come and holds
# end by its timers. ``hold_until`` is still perf_counter time, which ``take`` turns into a
# delay on the loop (``call_later``) as soon as it is called, so it is given as now + the hold.

@on_virtual_clock
async def test_take_waits_for_the_first_item_and_is_woken_by_it():
    inbox = TokenInbox()
    loop = asyncio.get_running_loop()
    loop.call_later(0.02, inbox.put, _event(3))
    started = loop.time()
    items = await asyncio.wait_for(inbox.take(), 1)
    assert [list(e.token_ids) for e in items] == [[3]] and loop.time() - started == pytest.approx(0.02)


@on_virtual_clock
async def test_a_hold_gathers_tokens_until_it_ends():
    inbox = TokenInbox()
    loop = asyncio.get_running_loop()
    inbox.put(_event(1))
    for i, at in enumerate((0.01, 0.02, 0.03)):
        loop.call_later(at, inbox.put, _event(10 + i))
    started = loop.time()
    items = await asyncio.wait_for(inbox.take(hold_until=time.perf_counter() + 0.08), 1)
    waited = loop.time() - started
    assert [list(e.token_ids) for e in items] == [[1], [10], [11], [12]]
    assert waited >= 0.075  # plain tokens did not end the hold


@pytest.mark.parametrize("ending", [_event(9, finish="stop"), _event(error="boom"), ABORTED])
@on_virtual_clock
async def test_an_item_that_ends_the_stream_ends_the_hold_at_once(ending):
    inbox = TokenInbox()
    loop = asyncio.get_running_loop()
    inbox.put(_event(1))
    loop.call_later(0.02, inbox.put, ending)
    started = loop.time()
    items = await asyncio.wait_for(inbox.take(hold_until=time.perf_counter() + 5.0), 1)
    assert items[-1] is ending and loop.time() - started == pytest.approx(0.02)  # not the 5 s hold


async def test_a_hold_already_over_takes_at_once_and_ending_items_skip_it():
    inbox = TokenInbox()
    inbox.put(_event(1))
    assert len(await asyncio.wait_for(inbox.take(hold_until=time.perf_counter() - 1), 1)) == 1
    inbox.put(_event(2, finish="length"))
    assert len(await asyncio.wait_for(inbox.take(hold_until=time.perf_counter() + 5), 1)) == 1


async def test_last_arrival_is_when_the_newest_item_came():
    inbox = TokenInbox()
    before = time.perf_counter()
    inbox.put(_event(1))
    assert before <= inbox.last_arrival <= time.perf_counter()


def test_stream_interval_fixed_auto_and_its_ramp():
    assert StreamInterval.parse("0").seconds() == 0.0
    assert StreamInterval.parse("12.5").seconds() == pytest.approx(0.0125)
    busy = [0.0]
    auto = StreamInterval.parse("auto", lambda: busy[0])
    for share, expected in ((0.0, 0.0), (LOW, 0.0), ((LOW + HIGH) / 2, MAX_AUTO_S / 2), (HIGH, MAX_AUTO_S),
                            (1.0, MAX_AUTO_S)):
        busy[0] = share
        assert auto.seconds() == pytest.approx(expected)
    for bad in ("-1", "fast", "", "nan"):
        with pytest.raises(ValueError):
            StreamInterval.parse(bad)


def test_the_gateway_config_checks_its_stream_interval():
    from gateway.config import GatewayConfig

    assert GatewayConfig().stream_interval_ms == "auto" and GatewayConfig(stream_interval_ms="20").stream_interval_ms == "20"
    with pytest.raises(ValueError, match="stream_interval_ms"):
        GatewayConfig(stream_interval_ms="soon")
