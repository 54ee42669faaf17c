"""CUDA IPC transport: the decode worker exports its pool tensor once; prefill maps it.

The pool is pickled with torch's multiprocessing reductions, which carry a CUDA IPC memory
handle; the prefill worker unpickles it once per decode worker (cached) and copies
device-to-device on a side stream. Needs both processes on one host with IPC allowed
between them (in containers: shared IPC and PID namespaces).
"""

from __future__ import annotations

import asyncio
import io
import time
from multiprocessing.reduction import ForkingPickler

import torch
import torch.multiprocessing  # noqa: F401  registers the CUDA tensor reductions

from common.model.kv_cache import PagedKVCache
from common.kv_transfer.base import TransferStats, TransferTarget
from common.kv_transfer.runs import block_runs
from wire.v1 import worker_pb2, worker_pb2_grpc


def export_pool(pool: torch.Tensor) -> bytes:
    if pool.device.type != "cuda":
        raise ValueError("cuda_ipc needs the decode worker's KV pool on a GPU")
    buffer = io.BytesIO()
    ForkingPickler(buffer).dump(pool)
    return buffer.getvalue()


def import_pool(handle: bytes) -> torch.Tensor:
    return ForkingPickler.loads(handle)  # type: ignore[no-any-return]


class CudaIpcReceiver:
    """Decode side: hands out the pool's IPC handle; senders copy into the pool directly, so
    writes need nothing from this worker. The pool goes with the process."""

    name = "cuda_ipc"
    not_offered = "this worker's pool is not on a GPU"

    def __init__(self) -> None:
        self._handle: bytes | None = None

    async def describe(self, cache: PagedKVCache, request: worker_pb2.TransportInfoRequest,
                       reply: worker_pb2.TransportInfoResponse) -> None:
        # Exported once: the pool tensor lives as long as the process, so one handle serves all.
        if self._handle is None:
            self._handle = export_pool(cache.data)
        reply.cuda_ipc_handle = self._handle

    def close(self) -> None:
        pass


class CudaIpcSender:
    name = "cuda_ipc"

    def __init__(self) -> None:
        self._pools: dict[str, torch.Tensor] = {}
        self._stream: torch.cuda.Stream | None = None

    async def send(self, cache: PagedKVCache, src_blocks: list[int], target: TransferTarget,
                   decode: worker_pb2_grpc.DecodeWorkerStub) -> TransferStats:
        pool = self._pools.get(target.decode_worker_id)
        if pool is None:
            info = await decode.TransportInfo(worker_pb2.TransportInfoRequest(transport="cuda_ipc"),
                                               timeout=target.call_timeout_s())
            pool = self._pools[target.decode_worker_id] = import_pool(info.cuda_ipc_handle)
        return await asyncio.to_thread(self._copy, cache.data, pool, src_blocks, target)

    def _copy(self, src: torch.Tensor, dst: torch.Tensor, src_blocks: list[int],
              target: TransferTarget) -> TransferStats:
        target.check_may_start()
        self._stream = self._stream or torch.cuda.Stream(device=src.device)
        started, moved = time.perf_counter(), 0
        with torch.cuda.stream(self._stream):
            for run in block_runs(src_blocks, target.block_ids):
                dst[run.dst:run.dst + run.length].copy_(src[run.src:run.src + run.length], non_blocking=True)
                moved += run.length * src[0].numel() * src.element_size()
        self._stream.synchronize()
        return TransferStats(self.name, moved, time.perf_counter() - started)

    def forget(self, decode_worker_id: str) -> None:
        self._pools.pop(decode_worker_id, None)

    async def close(self) -> None:
        self._pools.clear()
