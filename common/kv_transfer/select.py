"""Choosing a transport per worker pair, and the sender objects a prefill worker keeps."""

from __future__ import annotations

from common.kv_transfer.base import KVSender


def choose_transport(requested: str, same_host: bool, device_type: str) -> str:
    """``auto``: CUDA IPC or shared memory on one host, a collective group across hosts."""
    if requested != "auto":
        return requested
    if same_host:
        return "cuda_ipc" if device_type == "cuda" else "shm"
    return "nccl"


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
