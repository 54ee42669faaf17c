"""The paged KV cache tensor of one worker.

Layout, block-major so that one block holds every layer's K and V for its tokens::

    data[num_blocks, num_layers, 2 (K|V), block_size, num_kv_heads, head_dim]
          └─ block b ──────────────────────────────────────────────────────┘  one contiguous span

Moving a request's KV to another process is therefore one contiguous copy per run of
consecutive block ids (usually a handful), not one copy per layer per block.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from common.model_config import ModelConfig


StorageFactory = Callable[[tuple[int, ...], torch.dtype, torch.device], torch.Tensor]


def zeros_storage(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype, device=device)


class PagedKVCache:
    def __init__(self, model: ModelConfig, num_blocks: int, block_size: int, dtype: torch.dtype,
                 device: torch.device, storage: StorageFactory = zeros_storage) -> None:
        """``storage`` allocates the pool tensor (the decode worker puts it in shared memory)."""
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        shape = (num_blocks, model.num_layers, 2, block_size, model.num_kv_heads, model.head_dim)
        self.data = storage(shape, dtype, device)

    @staticmethod
    def bytes_per_block(model: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
        elem = torch.empty((), dtype=dtype).element_size()
        return model.num_layers * 2 * block_size * model.num_kv_heads * model.head_dim * elem

    def keys(self, layer: int) -> torch.Tensor:
        """``[num_blocks, block_size, kv_heads, head_dim]`` view of one layer's keys."""
        return self.data[:, layer, 0]

    def values(self, layer: int) -> torch.Tensor:
        return self.data[:, layer, 1]

    def write(self, layer: int, blocks: torch.Tensor, offsets: torch.Tensor, k: torch.Tensor,
              v: torch.Tensor) -> None:
        """Store ``k``/``v`` ``[tokens, kv_heads, head_dim]`` at (block, offset) slots."""
        self.data[blocks, layer, 0, offsets] = k
        self.data[blocks, layer, 1, offsets] = v
