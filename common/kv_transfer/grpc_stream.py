"""gRPC transport: block bytes streamed over ``DecodeWorker.WriteBlocks``, works anywhere."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import torch

from common.model.kv_cache import PagedKVCache
from common.kv_transfer.base import NoLiveLease, ReservedBlocks, TransferStats, TransferTarget
from common.kv_transfer.runs import block_runs
from wire.v1 import worker_pb2, worker_pb2_grpc

CHUNK_BYTES = 4 << 20  # per message; servers accept up to common.rpc.server.MAX_MESSAGE_BYTES


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


class GrpcReceiver:
    """Decode side: stores each ``WriteBlocks`` chunk into the blocks its lease reserved."""

    name = "grpc"
    not_offered = ""  # every pool can be written this way

    async def describe(self, cache: PagedKVCache, request: worker_pb2.TransportInfoRequest,
                       reply: worker_pb2.TransportInfoResponse) -> None:
        pass  # nothing beyond the common fields

    async def accept(self, cache: PagedKVCache, chunks: AsyncIterator[worker_pb2.BlockChunk],
                     reserved: ReservedBlocks) -> int:
        """Stores the stream's chunks as they come (on the event loop); returns the bytes stored.
        Raises ``NoLiveLease`` for a chunk whose lease is not live, ``ValueError`` for one that
        writes outside its lease or carries the wrong number of bytes; the stream is not read
        any further then."""
        written = 0
        async for chunk in chunks:
            allowed = reserved(chunk.request_id, chunk.lease_id)
            if allowed is None:
                raise NoLiveLease(f"no live lease for {chunk.request_id}")
            written += write_chunk(cache, chunk, allowed)
        return written

    def close(self) -> None:
        pass


class GrpcSender:
    """Streams the blocks as chunks. Whatever fails while producing a chunk (reading device
    memory, an abort) ends the stream early and is raised here: the call never waits on a
    stream that will not go on, and it has a deadline besides."""

    name = "grpc"

    async def send(self, cache: PagedKVCache, src_blocks: list[int], target: TransferTarget,
                   decode: worker_pb2_grpc.DecodeWorkerStub) -> TransferStats:
        target.check_may_start()
        started = time.perf_counter()
        failure: list[BaseException] = []
        reply = await decode.WriteBlocks(self._chunks(cache, src_blocks, target, failure),
                                         timeout=target.call_timeout_s())
        if failure:
            raise failure[0]
        expected = len(src_blocks) * pool_bytes(cache.data, 0, 1).numel()
        if reply.bytes != expected:
            raise RuntimeError(f"decode worker stored {reply.bytes} of {expected} bytes for {target.request_id}")
        return TransferStats(self.name, reply.bytes, time.perf_counter() - started)

    async def _chunks(self, cache: PagedKVCache, src_blocks: list[int], target: TransferTarget,
                      failure: list[BaseException]) -> AsyncIterator[worker_pb2.BlockChunk]:
        try:
            per_block = pool_bytes(cache.data, 0, 1).numel()
            step = max(1, CHUNK_BYTES // per_block)
            for run in block_runs(src_blocks, target.block_ids):
                for offset in range(0, run.length, step):
                    count = min(step, run.length - offset)
                    target.check_may_start()
                    data = host_bytes(pool_bytes(cache.data, run.src + offset, count))
                    yield worker_pb2.BlockChunk(request_id=target.request_id, lease_id=target.lease_id,
                                                first_block=run.dst + offset, num_blocks=count, data=data)
        except Exception as exc:  # noqa: BLE001 - handed to send(), which raises it
            failure.append(exc)

    def forget(self, decode_worker_id: str) -> None:
        pass  # nothing is cached per decode worker

    async def close(self) -> None:
        pass


def host_bytes(chunk: torch.Tensor) -> bytes:
    """The bytes of a (possibly device) tensor: device memory is copied to the host first."""
    return chunk.cpu().numpy().tobytes()
