"""The sender objects a prefill worker keeps, one per transport (see ``pairing`` for which
transport a worker pair uses)."""

from __future__ import annotations

from common.kv_transfer.base import KVSender


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
