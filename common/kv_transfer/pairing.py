"""Which transport a worker pair uses, decided when the pair first meets (torch-free: the
gateway decides).

Each worker advertises where its KV pool lives (host, device kind, GPU); the decode worker
also says which transports its pool can receive by. ``pair_transport`` turns that into one
transport per pair: ``auto`` picks the best that works; an explicit choice that cannot work
is refused with a message naming the flag and what would work instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

TRANSPORTS = ("shm", "cuda_ipc", "nccl", "grpc")


@dataclass(frozen=True, slots=True)
class PoolLocation:
    worker_id: str
    host_id: str
    device_kind: str  # "cpu" | "cuda"
    gpu_uuid: str = ""  # the pool's GPU; equal for two workers on one GPU


class TransportMismatch(ValueError):
    """An explicitly chosen transport cannot move KV between this pair, or the pair's KV layouts
    differ so that no transport could (``layout_mismatch``)."""


@dataclass(frozen=True, slots=True)
class KvLayout:
    """What decides how a pool's bytes read: two workers must agree on all of it to hand KV over."""

    worker_id: str
    model: str  # a digest of the model's config (its architecture: layers, heads, sizes)
    kv_dtype: str
    block_size: int  # tokens a block
    block_bytes: int  # bytes a block, every layer's K and V


def layout_mismatch(prefill: KvLayout, decode: KvLayout) -> str:
    """Why ``decode`` cannot read KV that ``prefill`` writes, naming both sides' values; empty when it can."""
    differences = [f"{name} {getattr(prefill, name)} against {getattr(decode, name)}"
                   for name in ("model", "kv_dtype", "block_size", "block_bytes")
                   if getattr(prefill, name) and getattr(decode, name) and getattr(prefill, name) != getattr(decode, name)]
    if not differences:
        return ""
    return (f"{prefill.worker_id} and {decode.worker_id} lay out KV differently ({'; '.join(differences)}): "
            "start both with the same model, --dtype and --block-size")


def decode_receives(device_kind: str, pool_in_shared_memory: bool) -> tuple[str, ...]:
    """The transports a decode worker's pool can be written by."""
    return (*(("shm",) if pool_in_shared_memory else ()), *(("cuda_ipc",) if device_kind == "cuda" else ()),
            "nccl", "grpc")


def why_not(transport: str, prefill: PoolLocation, decode: PoolLocation, receives: Sequence[str]) -> str:
    """Why ``transport`` cannot move KV from ``prefill`` to ``decode``; empty when it can."""
    if transport not in receives:
        return f"{decode.worker_id}'s pool cannot receive by {transport} (it receives by {', '.join(receives)})"
    same_host = prefill.host_id == decode.host_id
    if transport in ("shm", "cuda_ipc") and not same_host:
        return f"{prefill.worker_id} and {decode.worker_id} are on different hosts"
    if transport == "cuda_ipc" and prefill.device_kind != "cuda":
        return f"{prefill.worker_id}'s pool is not on a GPU"
    if transport == "nccl":
        if prefill.device_kind != decode.device_kind:
            return f"a collective group needs both pools on one kind of device ({prefill.device_kind} and " \
                   f"{decode.device_kind})"
        if prefill.device_kind == "cuda" and prefill.gpu_uuid and prefill.gpu_uuid == decode.gpu_uuid:
            return "both workers use the same GPU, and NCCL refuses a group of two ranks on one GPU"
    return ""


def pair_transport(requested: str, prefill: PoolLocation, decode: PoolLocation, receives: Sequence[str]) -> str:
    """The transport for this pair: ``requested`` if it works, the best that works for ``auto``."""
    if requested == "auto":
        return next(t for t in TRANSPORTS if not why_not(t, prefill, decode, receives))  # grpc always works
    if requested not in TRANSPORTS:
        raise TransportMismatch(f"unknown KV transport {requested!r}")
    reason = why_not(requested, prefill, decode, receives)
    if reason:
        works = pair_transport("auto", prefill, decode, receives)
        raise TransportMismatch(f"--kv-transport {requested} of {prefill.worker_id} cannot move KV to "
                                f"{decode.worker_id}: {reason}; use --kv-transport auto (here: {works})")
    return requested
