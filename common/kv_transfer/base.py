"""The prefill side's view of a transport."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from common.kv_cache import PagedKVCache


@dataclass(frozen=True, slots=True)
class TransferTarget:
    """Where the blocks go: a decode worker's reserved blocks under a lease."""

    decode_worker_id: str
    address: str
    request_id: str
    lease_id: str
    block_ids: list[int]
    deadline: float  # time.monotonic() after which no copy may start (the lease may be gone)


@dataclass(frozen=True, slots=True)
class TransferStats:
    transport: str
    bytes: int
    seconds: float


class LeaseExpiredError(RuntimeError):
    """The lease's deadline passed before the copy could start; nothing was written."""


DecodeStub = Any  # worker_pb2_grpc.DecodeWorkerStub on a grpc.aio channel


class KVSender(Protocol):
    name: str

    async def send(self, cache: PagedKVCache, src_blocks: list[int], target: TransferTarget,
                   decode: DecodeStub) -> TransferStats:
        """Copies ``cache`` blocks ``src_blocks`` into ``target.block_ids`` on the decode worker.

        Setup a transport needs per decode worker (mapping its pool, a process group) is done
        lazily on the first send and cached.
        """
        ...

    def forget(self, decode_worker_id: str) -> None:
        """Drops what was cached for a decode worker that left."""
        ...

    async def close(self) -> None: ...
