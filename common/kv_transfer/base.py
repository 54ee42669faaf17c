"""The prefill side's view of a transport."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from common.model.kv_cache import PagedKVCache


COPY_GRACE_S = 30.0  # a copy started just before its deadline finishes within this


@dataclass(frozen=True, slots=True)
class TransferTarget:
    """Where the blocks go: a decode worker's reserved blocks under a lease."""

    decode_worker_id: str
    address: str
    request_id: str
    lease_id: str
    block_ids: list[int]
    deadline: float  # time.monotonic() after which no copy may start (the lease may be gone)
    revoked: Callable[[], bool] = lambda: False  # True once the request was aborted: no copy may start

    def check_may_start(self) -> None:
        """Raises LeaseExpiredError unless a copy into the target may still start. Called right
        before copying (on the copying thread), so an abort that revokes the target either comes
        before the check or finds the copy under way and waits for it."""
        if self.revoked():
            raise LeaseExpiredError(f"the transfer of {self.request_id} was aborted before the copy started")
        if time.monotonic() > self.deadline:
            raise LeaseExpiredError(f"lease for {self.request_id} expired before the copy started")

    def call_timeout_s(self) -> float:
        """Deadline of a transport's RPC: a copy may start until ``deadline`` and then needs time
        to finish; no call to the decode worker waits longer than that."""
        return max(0.0, self.deadline - time.monotonic()) + COPY_GRACE_S


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
