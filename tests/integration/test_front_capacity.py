"""A gateway whose event loop is busy past its limit refuses new requests with RESOURCE_EXHAUSTED
(reason ``gateway_busy``) and serves every request it admitted.

The limit is set as low as it goes (``--busy-limit 0.051``: refusals from 0.1% of the loop thread's
time busy, with a probability growing to 1 at 10.1%). On two cores shared with both workers the
gateway's loop thread gets only ~2-7% of its time on a CPU while relaying a few dozen streams (it
waits for cores the workers hold, which the measure leaves out), so a real limit would refuse
nothing here; at this one the waves meet refusals whatever the machine, and the first requests,
sent to an idle loop, are admitted.
"""

from __future__ import annotations

import asyncio

import grpc

from common.process.scrape import scrape_metrics
from wire.v1 import gateway_pb2, gateway_pb2_grpc
from tests.integration.conftest import start_cluster

WAVE = 40


async def _one(stub: gateway_pb2_grpc.GatewayStub, i: int) -> str:
    request = gateway_pb2.GenerateRequest(token_ids=gateway_pb2.TokenIds(ids=[1 + i % 50, 7, 9, 11]),
                                          sampling=gateway_pb2.SamplingParams(max_tokens=32, ignore_eos=True))
    reason = ""
    try:
        async for message in stub.Generate(request, timeout=120):
            reason = message.finish_reason or reason
    except grpc.aio.AioRpcError as exc:
        assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc
        assert "the gateway is at its capacity" in (exc.details() or "")
        return "refused"
    return reason


async def _two_waves(address: str) -> list[str]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        first = [asyncio.create_task(_one(stub, i)) for i in range(WAVE)]
        await asyncio.sleep(1.0)  # the first wave is streaming: the gateway's loop is busy
        second = [asyncio.create_task(_one(stub, WAVE + i)) for i in range(WAVE)]
        return list(await asyncio.gather(*first, *second))


def test_a_gateway_past_its_busy_limit_refuses_new_requests_and_serves_those_it_admitted(tmp_path):
    cluster = start_cluster(tmp_path, policy="scorpio", metrics=True, gateway_args=("--busy-limit", "0.051"))
    try:
        outcomes = asyncio.run(_two_waves(cluster.address))
        refusals = {k: v for k, v in scrape_metrics(cluster.metrics_ports["gateway"]).items()
                    if k.startswith("pdserve:request_rejections_total{") and 'reason="gateway_busy"' in k}
    finally:
        cluster.stop()
    refused = outcomes.count("refused")
    assert 0 < refused < len(outcomes), f"refused {refused} of {len(outcomes)}"
    assert outcomes.count("length") == len(outcomes) - refused, "every admitted request runs to its length"
    assert sum(refusals.values()) == refused
