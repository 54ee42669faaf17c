"""New K/V rows into the paged cache at their (block, offset) slots, one program per token.

A row whose block is negative is padding (a CUDA-graph bucket wider than the batch) and writes
nothing. The cache is ``common.model.kv_cache.PagedKVCache``'s block-major tensor.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _cache_write_kernel(k_ptr, v_ptr, cache_ptr, blocks_ptr, offsets_ptr, layer, kv_heads, head_dim,
                        stride_kt, stride_kh, stride_vt, stride_vh, s_blk, s_layer, s_kv, s_head, s_tok,
                        HEADS_PAD: tl.constexpr, DIM_PAD: tl.constexpr):
    t = tl.program_id(0)
    block = tl.load(blocks_ptr + t)
    if block >= 0:
        offset = tl.load(offsets_ptr + t)
        h = tl.arange(0, HEADS_PAD)[:, None]
        d = tl.arange(0, DIM_PAD)[None, :]
        inside = (h < kv_heads) & (d < head_dim)
        dst = cache_ptr + block.to(tl.int64) * s_blk + layer * s_layer + h * s_head + offset * s_tok + d
        k = tl.load(k_ptr + t * stride_kt + h * stride_kh + d, mask=inside)
        v = tl.load(v_ptr + t * stride_vt + h * stride_vh + d, mask=inside)
        tl.store(dst, k, mask=inside)
        tl.store(dst + s_kv, v, mask=inside)


def write_kv(data: torch.Tensor, layer: int, blocks: torch.Tensor, offsets: torch.Tensor, k: torch.Tensor,
             v: torch.Tensor) -> None:
    """``k``/``v [tokens, kv_heads, head_dim]`` into ``data[block, layer, 0|1, :, offset]``."""
    tokens, kv_heads, head_dim = k.shape
    if tokens == 0:
        return
    if k.stride(-1) != 1 or v.stride(-1) != 1 or data.stride(-1) != 1:
        raise ValueError("the cache write needs K, V and the cache contiguous in head_dim")
    _cache_write_kernel[(tokens,)](
        k, v, data, blocks, offsets, layer, kv_heads, head_dim, k.stride(0), k.stride(1), v.stride(0),
        v.stride(1), data.stride(0), data.stride(1), data.stride(2), data.stride(3), data.stride(4),
        HEADS_PAD=triton.next_power_of_2(kv_heads), DIM_PAD=triton.next_power_of_2(head_dim))
