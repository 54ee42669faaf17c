"""A request's own stamp of when it was sent (``x-request-start``) replaces the gateway's estimate
of the wait before its handler, and can only make its plan stricter."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import grpc
import pytest

from gateway.arrival_wait import ArrivalWait
from gateway.errors import RequestError
from gateway.front_door import Caller, FrontDoor
from gateway.request_start import OLDEST_S, waited_before, waited_s
from wire.request_start import HEADER, stamp
from gateway.validation import ModelLimits
from wire.v1 import gateway_pb2

RECEIVED = 1_732_650_000.5  # the wall-clock moment the request reached the gateway


@pytest.mark.parametrize("value", ["t=1732650000.42", "1732650000.42", "t=1732650000420", "t=1732650000420000",
                                   b"t=1732650000.42"])
def test_a_stamp_in_seconds_milliseconds_or_microseconds_gives_the_wait_before_the_gateway(value):
    assert waited_s([("authorization", "Bearer k"), (HEADER, value)], RECEIVED) == pytest.approx(0.08, abs=1e-6)


@pytest.mark.parametrize("value", ["", "t=", "t=soon", "t=nan", "t=-5", f"t={RECEIVED + 0.5}",
                                   f"t={RECEIVED - OLDEST_S - 1}"])
def test_a_stamp_that_is_malformed_in_the_future_or_too_old_is_ignored(value):
    assert waited_s([(HEADER, value)], RECEIVED) is None


def test_no_stamp_no_wait_and_the_header_name_is_case_blind():
    assert waited_s([("authorization", "Bearer k")], RECEIVED) is None
    assert waited_s([("X-Request-Start", "t=1732650000.3")], RECEIVED) == pytest.approx(0.2)
    name, value = stamp(now=lambda: 1732650000.25)
    assert (name, waited_s([(name, value)], RECEIVED)) == (HEADER, pytest.approx(0.25))


def test_the_front_plans_a_stamped_request_from_its_stamp_and_others_from_the_probe():
    clock = [0.0]
    probe = ArrivalWait(clock=lambda: clock[0])
    probe.sent()
    clock[0] += 0.01
    probe.answered()  # the probe estimates 10 ms before a handler
    front = FrontDoor(None, tokenizer=None, limits=ModelLimits(max_model_len=64, vocab_size=100), chat=None,  # type: ignore[arg-type]
                      arrival=probe)
    received_at = time.perf_counter() - 0.02  # the handler began 20 ms ago
    sent = time.time() - 0.02 - 0.07  # stamped 70 ms before that

    def allowance(caller: Caller) -> float:
        return front._front_allowance(caller, waited_before(caller.metadata, received_at))

    assert allowance(Caller(((HEADER, f"t={sent:.6f}"),))) == pytest.approx(0.07, abs=0.005)
    assert allowance(Caller(())) == pytest.approx(0.01)
    http = Caller(((HEADER, f"t={sent:.6f}"),), front="http")  # the OpenAI front reads the same header
    assert allowance(http) == pytest.approx(0.07, abs=0.005)
    ahead = Caller(((HEADER, f"t={time.time() + 5:.6f}"),))  # a client clock ahead: the estimate stands
    assert allowance(ahead) == pytest.approx(0.01)
    sample = front.metrics.registry.get_sample_value
    assert sample("pdserve:request_start_wait_seconds_count", {"role": "gateway"}) == 2  # the two stamps used
    assert sample("pdserve:request_start_wait_seconds_sum", {"role": "gateway"}) == pytest.approx(0.14, abs=0.01)


class _Flow:
    def __init__(self, ttft_guard: bool, seen: list[str]) -> None:
        self.router = SimpleNamespace(ttft_guard=ttft_guard)  # the policy's: whether it refuses late requests
        self.seen = seen

    async def run(self, req):  # type: ignore[no-untyped-def]
        self.seen.append(req.request_id)
        yield gateway_pb2.GenerateResponse(text="a", finish_reason="length")

    def abandon(self, req) -> None:  # type: ignore[no-untyped-def]
        pass


def test_a_stamped_request_already_past_its_ttft_is_refused_before_any_work():
    seen: list[str] = []
    limits = ModelLimits(max_model_len=64, vocab_size=100, default_slo=(100, 0))
    guarded = FrontDoor(_Flow(True, seen), tokenizer=None, limits=limits, chat=None)  # type: ignore[arg-type]

    def generate(front: FrontDoor, waited_s: float | None, ttft_ms: int = 0) -> list[str]:
        request = gateway_pb2.GenerateRequest(token_ids=gateway_pb2.TokenIds(ids=[1, 2]),
                                              sampling=gateway_pb2.SamplingParams(max_tokens=1),
                                              slo=gateway_pb2.SLO(ttft_ms=ttft_ms))
        metadata = () if waited_s is None else ((HEADER, f"t={time.time() - waited_s:.6f}"),)

        async def messages() -> list[str]:
            return [m.text async for m in front.generate(request, Caller(metadata))]

        return asyncio.run(messages())

    for waited_s, ttft_ms in ((0.15, 0), (0.06, 50)):  # the server's default 100 ms, then its own 50 ms
        with pytest.raises(RequestError) as refused:
            generate(guarded, waited_s, ttft_ms)
        assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and refused.value.reason == "ttft_unattainable"
        assert "waited" in refused.value.message
    assert seen == []
    assert generate(guarded, 0.03) == ["a"]  # time left: the TTFT guard decides, in the flow
    assert generate(guarded, None) == ["a"]  # not stamped: nothing known of its wait here
    assert generate(FrontDoor(_Flow(False, seen), None, limits, None), 0.15) == ["a"]  # fcfs: no TTFT guard  # type: ignore[arg-type]
    assert len(seen) == 3
    sample = guarded.metrics.registry.get_sample_value
    assert sample("pdserve:request_rejections_total", {"role": "gateway", "reason": "ttft_unattainable"}) == 2
