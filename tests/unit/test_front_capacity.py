"""The gateway refuses new requests while its own event loop is nearly always busy."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace

import grpc
import pytest

from gateway.errors import RequestError
from gateway.front_capacity import FrontCapacity, LoopBusy
from gateway.front_door import Caller, FrontDoor
from gateway.validation import ModelLimits, ValidatedRequest
from wire.request_start import HEADER
from wire.v1 import gateway_pb2


def test_the_busy_share_is_cpu_time_over_wall_time_over_the_last_window():
    wall, cpu = [0.0], [0.0]
    busy = LoopBusy(window_s=0.5, wall=lambda: wall[0], cpu=lambda: cpu[0])
    for busy_share, seconds in ((0.3, 2.0), (1.0, 0.5)):
        for _ in range(round(seconds / 0.05)):
            wall[0] += 0.05
            cpu[0] += 0.05 * busy_share
            busy.sample()
        assert busy.fraction() == pytest.approx(busy_share, abs=0.11)  # at most one sample of the old share
    for _ in range(20):  # idle: the share falls back within a window
        wall[0] += 0.05
        busy.sample()
    assert busy.fraction() == pytest.approx(0.0)


def test_the_busy_share_counts_only_the_calling_threads_cpu():
    wall = [0.0]
    process_cpu = time.process_time()
    busy = LoopBusy(window_s=10.0, wall=lambda: wall[0])  # the CPU clock is its own: this thread's
    spinning = threading.Thread(target=lambda: [None for _ in range(3_000_000)])  # another thread's work
    spinning.start()
    spinning.join()
    wall[0] = time.process_time() - process_cpu  # as long as the process spent on the CPU: busy 100% by its count
    busy.sample()
    assert wall[0] > 0 and busy.fraction() < 0.5


def test_refusals_begin_at_the_low_share_and_take_every_request_at_the_high_one():
    share = [0.0]
    draws = itertools.cycle([i / 100 for i in range(100)])  # uniform over [0, 1)
    capacity = FrontCapacity(lambda: share[0], 0.8, 1.0, draw=lambda: next(draws))

    def refused(busy: float) -> int:
        share[0] = busy
        return sum(capacity.refusal() is not None for _ in range(100))

    assert refused(0.5) == 0 and refused(0.8) == 0
    assert refused(0.9) == 50
    assert refused(1.0) == 100
    share[0] = 0.97
    assert "busy 97%" in next(filter(None, (capacity.refusal() for _ in range(100))))
    with pytest.raises(ValueError, match="busy limits"):
        FrontCapacity(lambda: 0.0, 0.9, 0.9)


class _Flow:
    router = SimpleNamespace(ttft_guard=True)  # as scorpio's: a stamped request already late is refused first

    def __init__(self) -> None:
        self.seen: list[ValidatedRequest] = []

    async def run(self, req: ValidatedRequest) -> AsyncIterator[gateway_pb2.GenerateResponse]:
        self.seen.append(req)
        yield gateway_pb2.GenerateResponse(text="a", finish_reason="length")

    def abandon(self, req: ValidatedRequest) -> None:
        pass


def test_a_busy_gateway_refuses_with_resource_exhausted_before_any_work():
    flow, share = _Flow(), [0.99]
    front = FrontDoor(flow, tokenizer=None, limits=ModelLimits(max_model_len=64, vocab_size=100), chat=None,  # type: ignore[arg-type]
                      capacity=FrontCapacity(lambda: share[0]))
    request = gateway_pb2.GenerateRequest(token_ids=gateway_pb2.TokenIds(ids=[1, 2, 3]),
                                          sampling=gateway_pb2.SamplingParams(max_tokens=1))

    async def generate() -> list[gateway_pb2.GenerateResponse]:
        return [m async for m in front.generate(request, Caller(()))]

    with pytest.raises(RequestError) as refused:
        asyncio.run(generate())
    assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and refused.value.reason == "gateway_busy"
    assert flow.seen == []
    share[0] = 0.5
    assert [m.text for m in asyncio.run(generate())] == ["a"] and len(flow.seen) == 1


def test_a_stamped_request_is_never_refused_for_the_gateways_load_its_wait_is_known():
    flow = _Flow()
    front = FrontDoor(flow, tokenizer=None, limits=ModelLimits(max_model_len=64, vocab_size=100), chat=None,  # type: ignore[arg-type]
                      capacity=FrontCapacity(lambda: 0.99))
    request = gateway_pb2.GenerateRequest(token_ids=gateway_pb2.TokenIds(ids=[1, 2, 3]),
                                          sampling=gateway_pb2.SamplingParams(max_tokens=1))

    async def generate(*metadata: tuple[str, str]) -> list[str]:
        return [m.text async for m in front.generate(request, Caller(metadata))]

    sent = time.time() - 0.03
    assert asyncio.run(generate((HEADER, f"t={sent:.6f}"))) == ["a"]
    assert flow.seen[0].delivery_s >= 0.03  # its plan counts the 30 ms it waited before the gateway
    for unusable in ((), ((HEADER, "t=soon"),), ((HEADER, f"t={time.time() + 5:.6f}"),)):  # the guard stands
        with pytest.raises(RequestError) as refused:
            asyncio.run(generate(*unusable))
        assert refused.value.reason == "gateway_busy"
    assert len(flow.seen) == 1


def test_the_busy_limit_is_off_at_zero_and_otherwise_leaves_room_for_its_band():
    from gateway.config import GatewayConfig

    assert GatewayConfig(busy_limit=0).busy_limit == 0 and GatewayConfig().busy_limit == 0.9
    for bad in (0.05, -0.1, 1.5):
        with pytest.raises(ValueError, match="busy_limit"):
            GatewayConfig(busy_limit=bad)


def test_only_guarded_policies_with_a_limit_refuse_for_the_gateways_load():
    from gateway.config import GatewayConfig
    from gateway.server import _front_capacity

    busy = LoopBusy()
    assert _front_capacity(GatewayConfig(policy="fcfs"), busy) is None
    assert _front_capacity(GatewayConfig(busy_limit=0), busy) is None
    capacity = _front_capacity(GatewayConfig(policy="ttft_guard", busy_limit=0.8), busy)
    assert capacity is not None and (capacity.low, capacity.high) == pytest.approx((0.75, 0.85))
