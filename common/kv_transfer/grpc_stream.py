"""gRPC transport: block bytes streamed over ``DecodeWorker.WriteBlocks``, works anywhere."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import torch

from common.kv_cache import PagedKVCache
from common.kv_transfer.base import DecodeStub, LeaseExpiredError, TransferStats, TransferTarget
from common.kv_transfer.runs import block_runs
from pdserve.v1 import worker_pb2

CHUNK_BYTES = 4 << 20  # per message; servers accept up to MAX_MESSAGE_BYTES
MAX_MESSAGE_BYTES = 64 << 20


def pool_bytes(pool: torch.Tensor, first: int, count: int) -> torch.Tensor:
    """The raw bytes of blocks ``first .. first+count`` as a flat uint8 view (no copy)."""
    return pool[first:first + count].reshape(count, -1).view(torch.uint8).reshape(-1)


def write_chunk(cache: PagedKVCache, chunk: worker_pb2.BlockChunk, allowed: set[int]) -> int:
    """Decode side: stores one chunk into reserved blocks; refuses blocks outside the lease."""
    blocks = set(range(chunk.first_block, chunk.first_block + chunk.num_blocks))
    if not blocks <= allowed:
        raise ValueError(f"chunk writes blocks outside the lease of {chunk.request_id}")
    dst = pool_bytes(cache.data, chunk.first_block, chunk.num_blocks)
    if len(chunk.data) != dst.numel():
        raise ValueError(f"chunk carries {len(chunk.data)} bytes for {chunk.num_blocks} blocks of "
                         f"{dst.numel() // max(chunk.num_blocks, 1)} bytes")
    dst.copy_(torch.frombuffer(bytearray(chunk.data), dtype=torch.uint8))
    return len(chunk.data)


class GrpcSender:
    name = "grpc"

    async def send(self, cache: PagedKVCache, src_blocks: list[int], target: TransferTarget,
                   decode: DecodeStub) -> TransferStats:
        if time.monotonic() > target.deadline:
            raise LeaseExpiredError(f"lease for {target.request_id} expired before the copy started")
        started = time.perf_counter()
        reply = await decode.WriteBlocks(self._chunks(cache, src_blocks, target))
        return TransferStats(self.name, reply.bytes, time.perf_counter() - started)

    async def _chunks(self, cache: PagedKVCache, src_blocks: list[int],
                      target: TransferTarget) -> AsyncIterator[worker_pb2.BlockChunk]:
        per_block = pool_bytes(cache.data, 0, 1).numel()
        step = max(1, CHUNK_BYTES // per_block)
        for run in block_runs(src_blocks, target.block_ids):
            for offset in range(0, run.length, step):
                count = min(step, run.length - offset)
                data = pool_bytes(cache.data, run.src + offset, count).numpy().tobytes()
                yield worker_pb2.BlockChunk(request_id=target.request_id, lease_id=target.lease_id,
                                            first_block=run.dst + offset, num_blocks=count, data=data)

    def forget(self, decode_worker_id: str) -> None:
        pass

    async def close(self) -> None:
        pass
