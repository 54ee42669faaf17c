"""Tokens waiting in a request's inbox merged into one message (``gateway.coalesce``)."""

from __future__ import annotations

import asyncio

import grpc

from gateway.coalesce import coalesce_waiting
from gateway.errors import ABORTED, RequestError
from wire.v1 import worker_pb2


def _event(*ids: int, finish: str = "", error: str = "") -> worker_pb2.TokenEvent:
    return worker_pb2.TokenEvent(request_id="r", token_ids=list(ids), finish_reason=finish, error=error)


def _inbox(*items: object) -> asyncio.Queue:  # type: ignore[type-arg]
    inbox: asyncio.Queue = asyncio.Queue()  # type: ignore[type-arg]
    for item in items:
        inbox.put_nowait(item)
    return inbox


def test_an_empty_inbox_sends_the_token_alone_at_once():
    first = _event(5)
    assert coalesce_waiting(first, _inbox()) == (first, None)


def test_waiting_tokens_merge_up_to_and_with_the_one_that_finishes():
    first = _event(5)
    inbox = _inbox(_event(6), _event(7, 8), _event(9, finish="length"), _event(10))
    merged, held = coalesce_waiting(first, inbox)
    assert list(merged.token_ids) == [5, 6, 7, 8, 9] and merged.finish_reason == "length" and held is None
    assert list(first.token_ids) == [5]  # the event itself is left as it was
    assert inbox.qsize() == 1  # what came after the finish stays where it was


def test_an_error_or_abort_stops_the_merge_and_is_handed_back():
    failure = _event(error="boom")
    merged, held = coalesce_waiting(_event(1), _inbox(_event(2), failure, _event(3)))
    assert list(merged.token_ids) == [1, 2] and held is failure
    lost = RequestError(grpc.StatusCode.UNAVAILABLE, "decode worker left")
    for stop in (ABORTED, lost):
        merged, held = coalesce_waiting(_event(1), _inbox(stop))
        assert list(merged.token_ids) == [1] and held is stop
