"""Each side's transport objects: the senders a prefill worker keeps, one per transport (see
``pairing`` for which transport a worker pair uses), and the receivers a decode worker offers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from common.kv_transfer.base import KVReceiver, KVSender, NotOffered
from common.model.kv_cache import StorageFactory, zeros_storage

if TYPE_CHECKING:  # imported where used: each transport module pulls in what it needs (torch.distributed, ...)
    from common.kv_transfer.collective import CollectiveReceiver
    from common.kv_transfer.grpc_stream import GrpcReceiver


def make_sender(name: str, worker_id: str) -> KVSender:
    if name == "shm":
        from common.kv_transfer.shm import ShmSender

        return ShmSender()
    if name == "grpc":
        from common.kv_transfer.grpc_stream import GrpcSender

        return GrpcSender()
    if name == "nccl":
        from common.kv_transfer.collective import CollectiveSender

        return CollectiveSender(worker_id)
    if name == "cuda_ipc":
        from common.kv_transfer.cuda_ipc import CudaIpcSender

        return CudaIpcSender()
    raise ValueError(f"unknown KV transport {name!r}")


@dataclass(frozen=True, slots=True)
class DecodeReceivers:
    """A decode worker's receivers, built once at start (before its pool: ``storage`` places
    the pool where they need it); its servicer and server delegate to them."""

    storage: StorageFactory  # allocates the pool (in /dev/shm when shm is offered)
    offered: dict[str, KVReceiver]  # by name, in the order of the worker's kv_receives
    refused: dict[str, str]  # transports this pool cannot receive by -> why
    stream: GrpcReceiver  # takes WriteBlocks; also in ``offered`` (every pool offers it)
    collective: CollectiveReceiver  # takes ReceiveBlocks; also in ``offered`` (every pool offers it)

    @property
    def names(self) -> tuple[str, ...]:
        """What the worker advertises as its kv_receives."""
        return tuple(self.offered)

    def get(self, name: str) -> KVReceiver | None:
        """The receiver for ``name``; None for a name no receiver has (TransportInfo then
        answers the common fields only). Raises ``NotOffered`` for one this pool cannot offer."""
        if name in self.refused:
            raise NotOffered(self.refused[name])
        return self.offered.get(name)

    def close(self) -> None:
        for receiver in self.offered.values():
            receiver.close()


def decode_receivers(worker_id: str, host: str, device: torch.device) -> DecodeReceivers:
    """The receivers a decode worker's pool on ``device`` can offer: what ``pairing.decode_receives``
    (the rule the gateway pairs workers by) says, given whether the pool can live in /dev/shm."""
    from common.kv_transfer.collective import CollectiveReceiver
    from common.kv_transfer.cuda_ipc import CudaIpcReceiver
    from common.kv_transfer.grpc_stream import GrpcReceiver
    from common.kv_transfer.pairing import decode_receives
    from common.kv_transfer.shm import ShmReceiver, pool_segment_name, shm_available

    shm = ShmReceiver(pool_segment_name(worker_id))
    in_shm = device.type == "cpu" and shm_available()  # /dev/shm is host memory: CPU pools only
    stream, collective = GrpcReceiver(), CollectiveReceiver(host, device)
    candidates: list[KVReceiver] = [shm, CudaIpcReceiver(), collective, stream]
    by_name = {receiver.name: receiver for receiver in candidates}
    names = decode_receives(device.type, in_shm)
    return DecodeReceivers(storage=shm.storage if in_shm else zeros_storage,
                           offered={name: by_name[name] for name in names},
                           refused={r.name: r.not_offered for r in candidates if r.name not in names},
                           stream=stream, collective=collective)
