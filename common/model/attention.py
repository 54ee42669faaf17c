"""Attention over the paged KV cache: the torch path (CPU, and the GPU reference)."""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from common.model import cpu_prefill_attention
from common.model.attention_metadata import AttentionMetadata, PrefillChunk
from common.model.cpu_prefill_attention import PrefillKernel
from common.model.kv_cache import PagedKVCache


GPU_SDPA_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: PagedKVCache, layer: int,
                    meta: AttentionMetadata, scale: float, window: int | None,
                    prefill_kernel: PrefillKernel | None = None) -> torch.Tensor:
    """``q [rows, heads, d]``, new ``k``/``v`` ``[rows, kv_heads, d]`` -> ``[rows, heads, d]``.

    The new K/V are written to the cache first, so every query sees its own token.
    Prefill chunks use SDPA (on a CPU in bfloat16, ``cpu_prefill_attention``); decode rows read
    the dense decode stage where the runner keeps one (the CPU), else gather their context from
    the pool. ``prefill_kernel``: the causal attention of a chunk without a window (the CPU backend's
    kernel, in both dtypes).
    """
    cache.write(layer, meta.slot_blocks, meta.slot_offsets, k, v)
    out = torch.empty_like(q)
    for chunk in meta.prefills:
        rows = slice(chunk.row_start, chunk.row_start + chunk.query_len)
        out[rows] = _prefill_chunk(q[rows], k[rows], v[rows], cache, layer, chunk, scale, window, prefill_kernel)
    if meta.num_decodes:
        rows = slice(meta.num_prefill_rows, None)
        if meta.stage is not None:
            stage, plan = meta.stage
            out[rows] = stage.attend(q[rows], k[rows], v[rows], layer, plan, scale, window)
        else:
            out[rows] = decode_attention(q[rows], cache, layer, meta, scale, window)
    return out


def _prefill_chunk(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: PagedKVCache, layer: int,
                   chunk: PrefillChunk, scale: float, window: int | None,
                   prefill_kernel: PrefillKernel | None) -> torch.Tensor:
    if chunk.context_start > 0:  # earlier tokens live only in the cache: [1, kv_heads, ctx, d]
        keys = cache.gather(layer, 0, chunk.block_ids[None])[:, :, : chunk.context_len]
        values = cache.gather(layer, 1, chunk.block_ids[None])[:, :, : chunk.context_len]
    else:
        keys, values = k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0)
    if prefill_kernel is not None and window is None:
        return prefill_kernel(q, keys[0], values[0], scale)
    if cpu_prefill_attention.applies(q, window):
        return cpu_prefill_attention.blocked_causal_attention(q, keys[0], values[0], scale)
    mask = None
    if chunk.context_start > 0 or window is not None:
        mask = _causal_mask(chunk.query_len, chunk.context_start, window, q.device)
    with _sdpa_backends(q.device):
        out = F.scaled_dot_product_attention(q.transpose(0, 1).unsqueeze(0), keys, values,
                                             attn_mask=mask, is_causal=mask is None, scale=scale, enable_gqa=True)
    return out.squeeze(0).transpose(0, 1)


def _sdpa_backends(device: torch.device) -> contextlib.AbstractContextManager[None]:
    """On a GPU, SDPA without cuDNN: its cuDNN backend builds a plan for every new sequence
    length (milliseconds of host time per call when prompt lengths vary)."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    return sdpa_kernel(GPU_SDPA_BACKENDS)


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
    keys = cache.gather(layer, 0, meta.decode_block_tables)  # [B, kvh, T, d], T = blocks * block_size
    values = cache.gather(layer, 1, meta.decode_block_tables)
    kv_heads, width = keys.shape[1], keys.shape[2]
    grouped = q.view(batch, kv_heads, heads // kv_heads, d)
    scores = torch.matmul(grouped, keys.transpose(2, 3)) * scale  # [B, kvh, g, T]
    scores.masked_fill_(_decode_mask(meta, width, window, q.device)[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs, values).reshape(batch, heads, d)


def _decode_mask(meta: AttentionMetadata, width: int, window: int | None, device: torch.device) -> torch.Tensor:
    """True where a key position must be hidden: past the context, or outside the window."""
    key_pos = torch.arange(width, device=device)[None, :]
    lens = meta.decode_context_lens[:, None]
    hidden = key_pos >= lens
    if window is not None:
        hidden |= (lens - 1) - key_pos >= window
    return hidden
