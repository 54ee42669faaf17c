"""What a front spends delivering a first token after the gateway has it comes out of the request's
TTFT budget (``gateway.delivery``): measured per front by the front door, planned for by the
request flow's TTFT deadline, counted by the closed loop's TTFT outcome."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace

import pytest

import gateway.front_door as front_door
from gateway.delivery import DeliveryAllowance
from gateway.front_door import Caller, FrontDoor
from gateway.request_flow import planned_start
from gateway.path_rules import ttft_deadline
from gateway.validation import ModelLimits, ValidatedRequest
from wire.v1 import gateway_pb2


def test_the_allowance_is_a_high_quantile_of_each_fronts_own_deliveries():
    delivery = DeliveryAllowance(target=0.99, clock=lambda: 0.0)  # one moment: every delivery in the window
    assert delivery.allowance("http") == 0.0  # nothing measured: nothing allowed
    for _ in range(100):
        delivery.observe("http", 0.001)
    delivery.observe("http", 0.040)
    delivery.observe("grpc", 0.002)
    # the miss budget's quantile (0.995 at 0.99) of 101: the one slow delivery sets it
    assert delivery.allowance("http") == pytest.approx(0.040)
    assert delivery.allowance("grpc") == pytest.approx(0.002)  # each front its own
    for _ in range(400):
        delivery.observe("http", 0.001)  # the slow one becomes one in 501: past the quantile
    assert delivery.allowance("http") == pytest.approx(0.001)


class _Flow:
    """The request flow's face to the front door: a first message, then the rest."""

    def __init__(self) -> None:
        self.seen: list[ValidatedRequest] = []

    async def run(self, req: ValidatedRequest) -> AsyncIterator[gateway_pb2.GenerateResponse]:
        self.seen.append(req)
        yield gateway_pb2.GenerateResponse(text="a")
        yield gateway_pb2.GenerateResponse(text="b", finish_reason="length")

    def abandon(self, req: ValidatedRequest) -> None:
        pass


def _request() -> gateway_pb2.GenerateRequest:
    return gateway_pb2.GenerateRequest(token_ids=gateway_pb2.TokenIds(ids=[1, 2, 3]),
                                       sampling=gateway_pb2.SamplingParams(max_tokens=2),
                                       slo=gateway_pb2.SLO(ttft_ms=300, tpot_ms=50))


class _Clock:
    """The front door's perf_counter, moved on by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def _consume(front: FrontDoor, caller: Caller, pause_s: float, clock: _Clock) -> None:
    """A front that takes ``pause_s`` (on ``clock``) to put the first message on its transport."""
    first = True
    async for _ in front.generate(_request(), caller):
        if first:
            first = False
            clock.now += pause_s


def test_the_front_door_measures_each_fronts_delivery_and_plans_the_next_request_by_it(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(front_door, "time", SimpleNamespace(perf_counter=clock))  # what it times deliveries by
    flow = _Flow()
    front = FrontDoor(flow, tokenizer=None, limits=ModelLimits(max_model_len=64, vocab_size=100), chat=None)  # type: ignore[arg-type]

    async def scenario() -> None:
        await _consume(front, Caller((), front="http"), 0.05, clock)  # a slow HTTP write of the first chunk
        await _consume(front, Caller((), front="http"), 0.0, clock)
        await _consume(front, Caller((), front="grpc"), 0.0, clock)

    asyncio.run(scenario())
    assert flow.seen[0].delivery_s == 0.0  # nothing measured yet
    assert flow.seen[1].delivery_s == pytest.approx(0.05)  # the HTTP front's measured write, allowed for
    assert flow.seen[2].delivery_s == 0.0  # gRPC's deliveries are its own
    assert front.delivery.allowance("http") == pytest.approx(0.05)


def test_a_requests_ttft_deadline_is_earlier_by_its_fronts_allowance():
    req = ValidatedRequest("r", [1, 2, 3], None, (), ttft_ms=300, tpot_ms=50, tenant="",  # type: ignore[arg-type]
                           received_at=10.0, delivery_s=0.02)
    assert ttft_deadline(planned_start(req, 10.0), req.ttft_ms / 1000) == pytest.approx(10.28)
