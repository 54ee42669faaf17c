"""How many KV blocks fit: an explicit count, or a fraction of the device's memory.

A worker alone on its device takes ``fraction`` of the memory free after loading its model.
Workers sharing one GPU (``--device-workers N``) cannot all do that: the first one started
would take nearly the whole GPU from the others. Each takes its share of the GPU's total
instead, less what its own process already holds there (weights, the allocator's cache):

    total × fraction / N − held,   and never more than free × fraction

so the workers' pools and weights together stay within ``total × fraction`` whatever the order
they start in, and a worker never counts on memory someone else already uses. The rest
(``1 − fraction``) is left to CUDA contexts, activations and graphs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from common.engine.config import EngineConfig
from common.model.kv_cache import PagedKVCache
from common.model.config import ModelConfig

CUDA_FRACTION = 0.9
CPU_FRACTION = 0.1


@dataclass(frozen=True, slots=True)
class DeviceMemory:
    free: int  # bytes nobody holds now
    total: int  # the device's (or host's) bytes
    held: int  # bytes this process already holds on the device (0 on the CPU)


def kv_cache_bytes(memory: DeviceMemory, fraction: float, device_workers: int = 1) -> int:
    """Bytes for this worker's KV pool; ``device_workers`` workers share the device."""
    from_free = int(memory.free * fraction)
    if device_workers == 1:
        return from_free
    share = int(memory.total * fraction) // device_workers - memory.held
    return max(0, min(share, from_free))


def device_memory(device: torch.device) -> DeviceMemory:
    if device.type == "cuda":
        torch.cuda.empty_cache()  # blocks cached but unused are free for the pool, not held
        free, total = torch.cuda.mem_get_info(device)
        return DeviceMemory(int(free), int(total), int(torch.cuda.memory_reserved(device)))
    with open("/proc/meminfo") as f:
        fields = dict(line.split(":", 1) for line in f)
    kib = {name: int(fields[name].split()[0]) * 1024 for name in ("MemAvailable", "MemTotal")}
    return DeviceMemory(kib["MemAvailable"], kib["MemTotal"], 0)


def free_memory_bytes(device: torch.device) -> int:
    return device_memory(device).free


def num_kv_blocks(config: EngineConfig, model: ModelConfig, device: torch.device, reserved_bytes: int = 0) -> int:
    """``reserved_bytes``: what the worker will still allocate after the pool (its decode graphs)."""
    if config.num_kv_blocks is not None:
        return config.num_kv_blocks
    fraction = config.kv_cache_memory_fraction or (CUDA_FRACTION if device.type == "cuda" else CPU_FRACTION)
    # On the CPU a worker sizes from what is available, shared or not: there is no total to split.
    workers = config.device_workers if device.type == "cuda" else 1
    per_block = PagedKVCache.bytes_per_block(model, config.block_size, config.torch_dtype)
    blocks = max(0, kv_cache_bytes(device_memory(device), fraction, workers) - reserved_bytes) // per_block
    if blocks < 1:
        where = f"this worker's share (1/{workers}) of the GPU" if workers > 1 else "free memory"
        raise ValueError(f"not enough {where} for one KV block; use a smaller model or --block-size, "
                         "or give --num-kv-blocks")
    return blocks
