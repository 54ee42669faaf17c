"""Bandwidth of the engine's decode attention at given (batch, context) shapes.

One layer's call over a pool of random K/V, each request's context in its own shuffled blocks;
bytes = the K and V it must read (batch × context × kv_heads × head_dim × 2 × element size).
The kernel is the one the engine runs on this device: the split-context Triton kernel with the
Triton backend (GPU), the C++ kernel over the decode stage's slots with the CPU backend (the K/V
laid out as the stage holds them), the torch path's pool gather otherwise.
"""

from __future__ import annotations

import torch

from bench.lib.roofline import best_seconds
from common.engine.llm_engine import LLMEngine
from common.model.attention import decode_attention
from common.model.attention_metadata import AttentionMetadata
from common.model.kv_cache import PagedKVCache

SHAPES = ((32, 600), (1, 8000))  # (batch, context): many short, one long


def decode_attention_figures(engine: LLMEngine, mem_bw_gb_s: float, shapes: tuple[tuple[int, int], ...] = SHAPES,
                             repeats: int = 20) -> list[dict[str, float | int]]:
    return [_one_shape(engine, batch, context, mem_bw_gb_s, repeats) for batch, context in shapes]


def _one_shape(engine: LLMEngine, batch: int, context: int, mem_bw_gb_s: float, repeats: int) -> dict[str, float | int]:
    cfg, bs, device = engine.model.config, engine.config.block_size, engine.device
    per_request = -(-context // bs)
    cache = PagedKVCache(cfg, batch * per_request, bs, engine.config.torch_dtype, device)
    cache.data.normal_()
    tables = torch.randperm(batch * per_request).view(batch, per_request).to(device)
    lens = torch.full((batch,), context, dtype=torch.int64, device=device)
    q = torch.randn(batch, cfg.num_heads, cfg.head_dim, device=device, dtype=engine.config.torch_dtype)
    attend = _attention(engine, cache, tables, lens, context)
    seconds = best_seconds(lambda: attend(q), device.type, repeats)
    bytes_read = batch * context * cfg.kv_size * 2 * cache.data.element_size()
    gb_s = bytes_read / seconds / 1e9
    return {"batch": batch, "context": context, "microseconds": seconds * 1e6, "gb_s": gb_s,
            "fraction_of_hbm": gb_s / mem_bw_gb_s}


def _attention(engine: LLMEngine, cache: PagedKVCache, tables: torch.Tensor, lens: torch.Tensor, context: int):  # type: ignore[no-untyped-def]
    scale = engine.model.scale
    if engine.backend == "triton":
        from common.kernels.decode_attention import num_splits, paged_decode, target_programs

        splits = num_splits(len(lens), cache.num_kv_heads, target_programs(cache.data.device), context)
        return lambda q: paged_decode(q, cache.data, 0, tables, lens, cache.block_size, scale, None, splits)
    if engine.backend == "cpu":
        from common.cpu_kernels.decode_attention import dense_decode_attention

        keys, values = (cache.gather(0, kv, tables).contiguous() for kv in (0, 1))  # one slot per request
        slots = torch.arange(len(lens))
        return lambda q: dense_decode_attention(q, keys, values, slots, lens, scale, None)
    meta = AttentionMetadata(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), (), 0, tables, lens)
    return lambda q: decode_attention(q, cache, 0, meta, scale, None)
