"""Attention on the Triton kernels (the GPU path; tested on the CPU in interpreter mode).

Same contract as ``common.model.attention.paged_attention``: the step's new K/V go into the
paged cache first (``common.kernels.cache_write``), then every prefill chunk attends in one
launch (``common.kernels.prefill_attention``) and every decode row in one split-context
launch pair (``common.kernels.decode_attention``). No Python loop over requests, no host
synchronisation, so a decode step can be captured in a CUDA graph.
"""

from __future__ import annotations

import torch

from common.kernels.cache_write import write_kv
from common.kernels.decode_attention import paged_decode
from common.kernels.prefill_attention import prefill_attention
from common.model.attention_metadata import AttentionMetadata
from common.model.kv_cache import PagedKVCache


def paged_attention_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: PagedKVCache, layer: int,
                           meta: AttentionMetadata, scale: float, window: int | None) -> torch.Tensor:
    """``q [rows, heads, d]``, new ``k``/``v`` ``[rows, kv_heads, d]`` -> ``[rows, heads, d]``."""
    write_kv(cache.data, layer, meta.slot_blocks, meta.slot_offsets, k, v)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if meta.packed is not None:
        prefill_attention(q, out, cache.data, layer, meta.packed, cache.block_size, scale, window)
    if meta.num_decodes:
        rows = slice(meta.num_prefill_rows, None)
        out[rows] = paged_decode(q[rows], cache.data, layer, meta.decode_block_tables, meta.decode_context_lens,
                                 cache.block_size, scale, window, meta.decode_splits)
    return out


def decode_attention_triton(q: torch.Tensor, cache: PagedKVCache, layer: int, meta: AttentionMetadata,
                            scale: float, window: int | None) -> torch.Tensor:
    """Same contract as ``common.model.attention.decode_attention``: ``q [B, heads, d] -> [B, heads, d]``."""
    return paged_decode(q, cache.data, layer, meta.decode_block_tables, meta.decode_context_lens, cache.block_size,
                        scale, window, meta.decode_splits)
