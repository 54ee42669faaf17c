"""A fault of the gateway's own reaches the client as INTERNAL, not as grpc's UNKNOWN."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace

import grpc
import pytest

from gateway.front_door import Caller
from gateway.servicer import GatewayServicer
from wire.v1 import gateway_pb2, gateway_pb2_grpc


class _BrokenFront:
    flow = limits = tenants = None

    async def generate(self, request: gateway_pb2.GenerateRequest,
                       caller: Caller) -> AsyncIterator[gateway_pb2.GenerateResponse]:
        yield gateway_pb2.GenerateResponse(text="a")
        raise TypeError("a bug, say")


async def test_an_unexpected_error_in_the_gateway_ends_the_stream_with_internal() -> None:
    server = grpc.aio.server()
    gateway_pb2_grpc.add_GatewayServicer_to_server(GatewayServicer(_BrokenFront(), SimpleNamespace(), "m"),  # type: ignore[arg-type]
                                                   server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = gateway_pb2_grpc.GatewayStub(channel).Generate(gateway_pb2.GenerateRequest(text="hi"))
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                async for _ in call:
                    pass
        assert failed.value.code() == grpc.StatusCode.INTERNAL
        assert "TypeError" in (failed.value.details() or "")
    finally:
        await server.stop(None)
