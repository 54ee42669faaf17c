"""A transport's two halves: ``KVSender`` on the prefill side, ``KVReceiver`` on the decode side."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from common.model.kv_cache import PagedKVCache

if TYPE_CHECKING:
    from wire.v1 import worker_pb2
    from wire.v1.worker_pb2_grpc import DecodeWorkerStub


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


class KVSender(Protocol):
    """Prefill side. A prefill worker keeps one per transport (``select.make_sender``)."""

    name: str

    async def send(self, cache: PagedKVCache, src_blocks: list[int], target: TransferTarget,
                   decode: DecodeWorkerStub) -> TransferStats:
        """Copies ``cache`` blocks ``src_blocks`` into ``target.block_ids`` on the decode worker.

        Setup a transport needs per decode worker (mapping its pool, a process group) is done
        lazily on the first send and cached.
        """
        ...

    def forget(self, decode_worker_id: str) -> None:
        """Drops what was cached for a decode worker that left."""
        ...

    async def close(self) -> None: ...


# (request id, lease id) -> the blocks reserved under that live lease; None when there is none.
# Read on the event loop (see DecodeServicer._reserved_blocks).
ReservedBlocks = Callable[[str, str], set[int] | None]


class NoLiveLease(Exception):
    """A write names a lease that is not live (for ``ReceiveBlocks``, also: blocks outside
    it); nothing was written. The decode servicer answers it with FAILED_PRECONDITION."""


class NotOffered(Exception):
    """``TransportInfo`` asked for a transport this decode worker's pool cannot receive by; the
    message says why. The decode servicer answers it with FAILED_PRECONDITION."""


class KVReceiver(Protocol):
    """Decode side. A decode worker builds the receivers its pool can offer once, at start
    (``select.decode_receivers``), and its servicer delegates to them. The pool is passed in
    (as ``KVSender.send`` is given it) since some receivers exist before the pool does.

    How a receiver accepts a write is its own: shm and cuda_ipc accept nothing (the sender
    copies straight into the mapped pool), grpc takes ``WriteBlocks`` chunks, the collective
    one posts receives for ``ReceiveBlocks``.
    """

    name: str  # its entry in the worker's kv_receives and in TransportInfoRequest.transport
    # Why a pool that does not offer this transport cannot receive by it (TransportInfo's
    # FAILED_PRECONDITION detail there); "" for transports every pool offers.
    not_offered: str

    async def describe(self, cache: PagedKVCache, request: worker_pb2.TransportInfoRequest,
                       reply: worker_pb2.TransportInfoResponse) -> None:
        """Fills this transport's fields of ``reply`` (the common ones are filled already)."""
        ...

    def close(self) -> None:
        """Releases what the transport holds for the pool (a shared-memory file, collective
        groups); called once, when the worker stops."""
        ...
