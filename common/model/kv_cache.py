"""The paged KV cache tensor of one worker.

Layout, block-major so that one block holds every layer's K and V for its tokens::

    data[num_blocks, num_layers, 2 (K|V), num_kv_heads, block_size, head_dim]
          └─ block b ──────────────────────────────────────────────────────┘  one contiguous span
                                          └─ one "row": block_size × head_dim ┘

Moving a request's KV to another process is therefore one contiguous copy per run of
consecutive block ids (usually a handful), not one copy per layer per block. Inside a block,
heads come before tokens, so decode attention can gather each (request, head)'s context as
consecutive rows and multiply without any further re-layout.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from common.model.config import ModelConfig


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
        self.model = model
        shape = (num_blocks, model.num_layers, 2, model.num_kv_heads, block_size, model.head_dim)
        self.data = storage(shape, dtype, device)
        self.num_layers, self.num_kv_heads = model.num_layers, model.num_kv_heads

    @staticmethod
    def bytes_per_block(model: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
        """Bytes of one block (every layer's K and V for ``block_size`` tokens); usable before
        a pool exists, to size one."""
        elem = torch.empty((), dtype=dtype).element_size()
        return model.num_layers * 2 * block_size * model.num_kv_heads * model.head_dim * elem

    @property
    def block_bytes(self) -> int:
        """Bytes of one block of this pool: what a worker advertises and a transport moves per block."""
        return self.bytes_per_block(self.model, self.block_size, self.data.dtype)

    def write(self, layer: int, blocks: torch.Tensor, offsets: torch.Tensor, k: torch.Tensor,
              v: torch.Tensor) -> None:
        """Store ``k``/``v`` ``[tokens, kv_heads, head_dim]`` at (block, offset) slots."""
        self.data[blocks, layer, 0, :, offsets] = k
        self.data[blocks, layer, 1, :, offsets] = v

    def gather(self, layer: int, kv: int, block_tables: torch.Tensor) -> torch.Tensor:
        """Contiguous ``[batch, kv_heads, blocks * block_size, head_dim]`` copy of K (kv=0) or V (kv=1)
        for every request's block table ``[batch, blocks]``: one index_select of whole rows."""
        batch, width = block_tables.shape
        rows = self.data.view(-1, self.block_size, self.data.shape[-1])
        heads = torch.arange(self.num_kv_heads, device=block_tables.device)
        index = (block_tables[:, None, :] * (self.num_layers * 2 * self.num_kv_heads)
                 + (layer * 2 + kv) * self.num_kv_heads + heads[None, :, None])
        picked = rows.index_select(0, index.reshape(-1))
        return picked.view(batch, self.num_kv_heads, width * self.block_size, -1)
