"""The grpc KV transport's sender: every byte arrives, and a failure while producing the
stream ends the call with that error instead of leaving it waiting."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace

import grpc
import pytest
import torch

from common.kv_transfer.base import LeaseExpiredError, TransferTarget
from common.kv_transfer.grpc_stream import GrpcSender, write_chunk
from wire.v1 import worker_pb2, worker_pb2_grpc


class _WriteBlocksOnly(worker_pb2_grpc.DecodeWorkerServicer):
    """A real gRPC server doing the decode side of ``WriteBlocks`` into a pool."""

    def __init__(self, pool: torch.Tensor) -> None:
        self.pool = pool

    async def WriteBlocks(self, request_iterator: AsyncIterator[worker_pb2.BlockChunk],  # noqa: N802 - gRPC's name
                          context: grpc.aio.ServicerContext) -> worker_pb2.WriteBlocksResponse:
        written = 0
        async for chunk in request_iterator:
            written += write_chunk(SimpleNamespace(data=self.pool), chunk, set(range(len(self.pool))))  # type: ignore[arg-type]
        return worker_pb2.WriteBlocksResponse(bytes=written)


@pytest.fixture()
async def decode() -> AsyncIterator[Callable[[torch.Tensor], worker_pb2_grpc.DecodeWorkerStub]]:
    servers: list[grpc.aio.Server] = []
    channels: list[grpc.aio.Channel] = []

    async def start(pool: torch.Tensor) -> worker_pb2_grpc.DecodeWorkerStub:
        server = grpc.aio.server()
        worker_pb2_grpc.add_DecodeWorkerServicer_to_server(_WriteBlocksOnly(pool), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
        channels.append(grpc.aio.insecure_channel(f"127.0.0.1:{port}"))
        return worker_pb2_grpc.DecodeWorkerStub(channels[-1])

    yield start  # type: ignore[misc]
    for ch in channels:
        await ch.close()
    for server in servers:
        await server.stop(None)


def _target(blocks: list[int], revoked: bool = False) -> TransferTarget:
    return TransferTarget("decode-0", "", "r1", "lease", blocks, time.monotonic() + 30, revoked=lambda: revoked)


async def test_blocks_arrive_whole_in_the_reserved_blocks(decode):
    src = torch.randn(8, 2, 3, 4)
    dst = torch.zeros(8, 2, 3, 4)
    stats = await GrpcSender().send(SimpleNamespace(data=src), [1, 2, 5], _target([6, 7, 0]), await decode(dst))  # type: ignore[arg-type]
    assert torch.equal(dst[[6, 7, 0]], src[[1, 2, 5]]) and stats.bytes == 3 * src[0].numel() * 4


async def test_an_error_while_reading_the_pool_fails_the_send_instead_of_hanging(decode):
    src = torch.empty(8, 2, 3, 4, device="meta")  # its bytes cannot be read, as a device pool's could not
    stub = await decode(torch.zeros(8, 2, 3, 4))
    with pytest.raises(NotImplementedError):
        await asyncio.wait_for(GrpcSender().send(SimpleNamespace(data=src), [1], _target([2]), stub), 20)  # type: ignore[arg-type]


async def test_a_revoked_target_is_never_written(decode):
    dst = torch.zeros(8, 2, 3, 4)
    with pytest.raises(LeaseExpiredError, match="aborted"):
        await GrpcSender().send(SimpleNamespace(data=torch.randn(8, 2, 3, 4)), [1], _target([2], revoked=True),  # type: ignore[arg-type]
                                await decode(dst))
    assert not dst.any()
