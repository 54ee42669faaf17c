"""Attention over the paged KV cache: the torch path (CPU, and the GPU reference)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from common.attention_metadata import AttentionMetadata, PrefillChunk
from common.kv_cache import PagedKVCache


DecodeFn = Callable[[torch.Tensor, PagedKVCache, int, AttentionMetadata, float, "int | None"], torch.Tensor]


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: PagedKVCache, layer: int,
                    meta: AttentionMetadata, scale: float, window: int | None,
                    decode_fn: DecodeFn | None = None) -> torch.Tensor:
    """``q [rows, heads, d]``, new ``k``/``v`` ``[rows, kv_heads, d]`` -> ``[rows, heads, d]``.

    The new K/V are written to the cache first, so every query sees its own token.
    Prefill chunks use SDPA; decode rows use ``decode_fn`` (the torch path by default).
    """
    cache.write(layer, meta.slot_blocks, meta.slot_offsets, k, v)
    out = torch.empty_like(q)
    for chunk in meta.prefills:
        rows = slice(chunk.row_start, chunk.row_start + chunk.query_len)
        out[rows] = _prefill_chunk(q[rows], k[rows], v[rows], cache, layer, chunk, scale, window)
    if meta.num_decodes:
        decode = decode_fn or decode_attention
        out[meta.num_prefill_rows:] = decode(q[meta.num_prefill_rows:], cache, layer, meta, scale, window)
    return out


def _prefill_chunk(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: PagedKVCache, layer: int,
                   chunk: PrefillChunk, scale: float, window: int | None) -> torch.Tensor:
    if chunk.context_start > 0:  # earlier tokens live only in the cache
        k = _gather(cache.keys(layer), chunk.block_ids, chunk.context_len)
        v = _gather(cache.values(layer), chunk.block_ids, chunk.context_len)
    mask = None
    if chunk.context_start > 0 or window is not None:
        mask = _causal_mask(chunk.query_len, chunk.context_start, window, q.device)
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0),
        attn_mask=mask, is_causal=mask is None, scale=scale, enable_gqa=True,
    )
    return out.squeeze(0).transpose(0, 1)


def _gather(layer_cache: torch.Tensor, block_ids: torch.Tensor, length: int) -> torch.Tensor:
    blocks = layer_cache[block_ids]  # [n, block_size, kv_heads, d]
    return blocks.reshape(-1, *blocks.shape[2:])[:length]


def _causal_mask(query_len: int, context_start: int, window: int | None, device: torch.device) -> torch.Tensor:
    query_pos = torch.arange(context_start, context_start + query_len, device=device)[:, None]
    key_pos = torch.arange(context_start + query_len, device=device)[None, :]
    allowed = key_pos <= query_pos
    if window is not None:
        allowed &= query_pos - key_pos < window
    return allowed


def decode_attention(q: torch.Tensor, cache: PagedKVCache, layer: int, meta: AttentionMetadata, scale: float,
                     window: int | None) -> torch.Tensor:
    """One query per request against its whole cached context, batched with padding."""
    batch, heads, d = q.shape
    tables = meta.decode_block_tables
    keys = cache.keys(layer)[tables].flatten(1, 2)[:, : meta.max_decode_context]  # [B, T, kvh, d]
    values = cache.values(layer)[tables].flatten(1, 2)[:, : meta.max_decode_context]
    kv_heads = keys.shape[2]
    grouped = q.view(batch, kv_heads, heads // kv_heads, d)
    scores = torch.matmul(grouped, keys.permute(0, 2, 3, 1)) * scale  # [B, kvh, g, T]
    scores.masked_fill_(_decode_mask(meta, window, q.device)[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.matmul(probs, values.transpose(1, 2))  # [B, kvh, g, d]
    return out.reshape(batch, heads, d)


def _decode_mask(meta: AttentionMetadata, window: int | None, device: torch.device) -> torch.Tensor:
    """True where a key position must be hidden: past the context, or outside the window."""
    key_pos = torch.arange(meta.max_decode_context, device=device)[None, :]
    lens = meta.decode_context_lens[:, None]
    hidden = key_pos >= lens
    if window is not None:
        hidden |= (lens - 1) - key_pos >= window
    return hidden
