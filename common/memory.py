"""How many KV blocks fit: an explicit count, or a fraction of the memory free after loading."""

from __future__ import annotations

import torch

from common.config import EngineConfig
from common.kv_cache import PagedKVCache
from common.model_config import ModelConfig


def free_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    with open("/proc/meminfo") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["MemAvailable"].split()[0]) * 1024


def num_kv_blocks(config: EngineConfig, model: ModelConfig, device: torch.device) -> int:
    if config.num_kv_blocks is not None:
        return config.num_kv_blocks
    fraction = config.kv_cache_memory_fraction or (0.9 if device.type == "cuda" else 0.1)
    per_block = PagedKVCache.bytes_per_block(model, config.block_size, config.torch_dtype)
    blocks = int(free_memory_bytes(device) * fraction) // per_block
    if blocks < 1:
        raise ValueError("not enough free memory for one KV block; lower max_model_len or use a smaller model")
    return blocks
