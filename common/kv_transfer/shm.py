"""Shared-memory transport: the decode worker's KV pool is a file in /dev/shm.

The decode worker creates the file and builds its pool tensor over it; each prefill worker
maps the same file once (by name) and copies straight into the reserved blocks. One copy,
no serialization, nothing on the RPC path but the reserve/commit control messages.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from pathlib import Path

import torch

from common.model.kv_cache import PagedKVCache
from wire.v1 import worker_pb2, worker_pb2_grpc
from common.kv_transfer.base import TransferStats, TransferTarget
from common.kv_transfer.runs import block_runs

SHM_DIR = Path("/dev/shm")


def shm_available() -> bool:
    return SHM_DIR.is_dir() and os.access(SHM_DIR, os.W_OK)


def pool_segment_name(decode_worker_id: str) -> str:
    """The /dev/shm file holding a decode worker's pool (also removed by ``LocalCluster.stop``
    after a worker that could not unlink it itself)."""
    return f"pdserve-kv-{decode_worker_id}"


def create_shared_tensor(name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A zeroed tensor backed by ``/dev/shm/<name>``, which the creator must ``unlink_shared`` at exit."""
    path = SHM_DIR / name
    path.unlink(missing_ok=True)
    return torch.from_file(str(path), shared=True, size=math.prod(shape), dtype=dtype).view(shape)


def attach_shared_tensor(name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    path = SHM_DIR / name
    expected = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    if not path.is_file() or path.stat().st_size != expected:
        raise FileNotFoundError(f"shared KV pool {path} missing or of the wrong size (want {expected} bytes)")
    return torch.from_file(str(path), shared=True, size=math.prod(shape), dtype=dtype).view(shape)


def unlink_shared(name: str) -> None:
    (SHM_DIR / name).unlink(missing_ok=True)


class ShmReceiver:
    """Decode side: the pool is allocated in a /dev/shm file (``storage``), which senders map
    by name; writes need nothing from this worker. The file is removed at stop."""

    name = "shm"
    not_offered = "this worker's pool is not in shared memory"

    def __init__(self, segment: str) -> None:
        self.segment = segment

    def storage(self, shape: tuple[int, ...], dtype: torch.dtype, _device: torch.device) -> torch.Tensor:
        """A ``StorageFactory`` for the pool (CPU only: the file is host memory)."""
        return create_shared_tensor(self.segment, shape, dtype)

    async def describe(self, cache: PagedKVCache, request: worker_pb2.TransportInfoRequest,
                       reply: worker_pb2.TransportInfoResponse) -> None:
        reply.shm_name = self.segment

    def close(self) -> None:
        unlink_shared(self.segment)


class ShmSender:
    """Maps each decode worker's pool once (asking it for the segment name) and copies into it."""

    name = "shm"

    def __init__(self) -> None:
        self._pools: dict[str, torch.Tensor] = {}

    async def send(self, cache: PagedKVCache, src_blocks: list[int], target: TransferTarget,
                   decode: worker_pb2_grpc.DecodeWorkerStub) -> TransferStats:
        pool = self._pools.get(target.decode_worker_id)
        if pool is None:
            info = await decode.TransportInfo(worker_pb2.TransportInfoRequest(transport="shm"),
                                               timeout=target.call_timeout_s())
            shape = (info.num_blocks, *cache.data.shape[1:])
            pool = attach_shared_tensor(info.shm_name, shape, cache.data.dtype)
            self._pools[target.decode_worker_id] = pool
        return await asyncio.to_thread(copy_runs, cache.data, pool, src_blocks, target)

    def forget(self, decode_worker_id: str) -> None:
        self._pools.pop(decode_worker_id, None)

    async def close(self) -> None:
        self._pools.clear()


def copy_runs(src: torch.Tensor, dst: torch.Tensor, src_blocks: list[int], target: TransferTarget) -> TransferStats:
    """Block-run copies from one pool tensor into another; refuses to start past the deadline."""
    target.check_may_start()
    started = time.perf_counter()
    moved = 0
    for run in block_runs(src_blocks, target.block_ids):
        chunk = src[run.src:run.src + run.length]
        dst[run.dst:run.dst + run.length].copy_(chunk)
        moved += chunk.numel() * chunk.element_size()
    return TransferStats("shm", moved, time.perf_counter() - started)
