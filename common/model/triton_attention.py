"""Paged-attention decode kernel in Triton (the GPU path; tested on the CPU in interpreter mode).

Grid: one program per (request, KV head). A program loads the query heads that share that
KV head (GQA group, padded to a power of two), walks the request's block table, reads each
K/V block straight from the block-major cache and keeps a running max and sum (online
softmax), so no gathered copy of the context is ever made. One program per KV head rather than
per query head so that each K/V block is read from memory once for its whole group, not once
per query head.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from common.model.attention import paged_attention
from common.model.attention_metadata import AttentionMetadata
from common.model.kv_cache import PagedKVCache

NO_WINDOW = 1 << 30


@triton.jit
def _decode_kernel(q_ptr, out_ptr, cache_ptr, tables_ptr, lens_ptr, scale, window, layer,
                   stride_qb, stride_qh, stride_tb, s_blk, s_layer, s_kv, s_tok, s_head,
                   GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
                   BLOCK_SIZE: tl.constexpr):
    b = tl.program_id(0)
    kv_head = tl.program_id(1)
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, HEAD_DIM)
    t = tl.arange(0, BLOCK_SIZE)
    heads = kv_head * GROUP + g
    q_mask = g < GROUP
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + d[None, :], mask=q_mask[:, None], other=0.0)
    q = q.to(tl.float32) * scale
    ctx = tl.load(lens_ptr + b)
    first = tl.maximum(ctx - window, 0) // BLOCK_SIZE
    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
    base = cache_ptr + layer * s_layer + kv_head * s_head
    for i in range(first, tl.cdiv(ctx, BLOCK_SIZE)):
        block = tl.load(tables_ptr + b * stride_tb + i)
        pos = i * BLOCK_SIZE + t
        visible = (pos < ctx) & (ctx - 1 - pos < window)
        offs = block * s_blk + t[:, None] * s_tok + d[None, :]
        k = tl.load(base + offs, mask=visible[:, None], other=0.0).to(tl.float32)
        v = tl.load(base + s_kv + offs, mask=visible[:, None], other=0.0).to(tl.float32)
        scores = tl.sum(q[:, None, :] * k[None, :, :], axis=2)  # [GROUP_PAD, BLOCK_SIZE]
        scores = tl.where(visible[None, :], scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        p = tl.exp(scores - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(out_ptr + b * stride_qb + heads[:, None] * stride_qh + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=q_mask[:, None])


def decode_attention_triton(q: torch.Tensor, cache: PagedKVCache, layer: int, meta: AttentionMetadata,
                            scale: float, window: int | None) -> torch.Tensor:
    """Same contract as ``common.model.attention.decode_attention``: ``q [B, heads, d] -> [B, heads, d]``."""
    batch, heads, head_dim = q.shape
    data = cache.data  # [blocks, layers, 2, kv_heads, block_size, d], contiguous
    kv_heads = data.shape[3]
    for name, size in (("head_dim", head_dim), ("block_size", cache.block_size)):
        if size < 1 or size & (size - 1):
            raise ValueError(f"the Triton decode kernel needs a power-of-two {name}, got {size}")
    if data.stride(-1) != 1 or q.stride(-1) != 1:
        raise ValueError("the Triton decode kernel needs the cache and queries contiguous in head_dim")
    group = heads // kv_heads
    q = q.contiguous()
    out = torch.empty_like(q)
    tables = meta.decode_block_tables.contiguous()
    _decode_kernel[(batch, kv_heads)](
        q, out, data, tables, meta.decode_context_lens, scale, window or NO_WINDOW, layer,
        q.stride(0), q.stride(1), tables.stride(0), data.stride(0), data.stride(1), data.stride(2),
        data.stride(4), data.stride(3),
        GROUP=group, GROUP_PAD=triton.next_power_of_2(group), HEAD_DIM=head_dim, BLOCK_SIZE=cache.block_size,
    )
    return out


def paged_attention_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: PagedKVCache, layer: int,
                           meta: AttentionMetadata, scale: float, window: int | None) -> torch.Tensor:
    """``common.model.attention.paged_attention`` with the decode rows on the Triton kernel."""
    return paged_attention(q, k, v, cache, layer, meta, scale, window, decode_fn=decode_attention_triton)
