"""Paged decode attention, split across the context (flash-decoding), in two kernels.

One query token per request attends to its whole cached context. A program per (request, KV
head, split) walks one of ``splits`` equal parts of the context: short batches with long
contexts still fill the GPU, where one program per (request, head) would leave most of it idle. Each
program loads the query heads that share its KV head (the GQA group, padded for ``tl.dot``),
so every K/V row is read from memory once for the whole group, and keeps a running max and
sum (online softmax). A second kernel merges the splits::

    split s of request b, head h:  m_s = max score,  l_s = Σ exp(score − m_s),  a_s = Σ exp(score − m_s)·v
    out[b, h] = Σ_s exp(m_s − M)·a_s / Σ_s exp(m_s − M)·l_s,   M = max_s m_s

Any number of splits covers any context (each request's context is cut into ``splits`` parts
of whole tiles), so the count only sets the parallelism: ``num_splits`` picks enough programs
to fill a GPU, and a CUDA graph fixes it per batch-size bucket. A split with nothing left of a
short context does nothing; a request whose context is 0 (a padding row) gets zeros.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from common.kernels.dot import dot, dot_flags

NO_WINDOW = 1 << 30
TILE = 64  # context tokens per step of a split's loop
PROGRAMS_PER_SM = 8  # (request, KV head, split) programs a launch aims for, per multiprocessor
MAX_SPLITS = 32
MIN_SPLIT_TOKENS = 128  # a split shorter than this costs more to merge than it saves


# The tables' width and the split count follow the batch: unspecialized, one compiled variant
# serves them all (see common.kernels.prefill_attention).
@triton.jit(do_not_specialize=["num_splits", "stride_tb"])
def _split_kernel(q_ptr, cache_ptr, tables_ptr, lens_ptr, acc_ptr, ml_ptr, scale, window, layer, num_splits,
                  num_heads, stride_qb, stride_qh, stride_tb, s_blk, s_layer, s_kv, s_head, s_tok,
                  GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, DIM_PAD: tl.constexpr,
                  BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, IEEE: tl.constexpr, WIDEN: tl.constexpr):
    b = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, DIM_PAD)
    heads = kv_head * GROUP + g
    q_mask = (g < GROUP)[:, None] & (d < HEAD_DIM)[None, :]
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + d[None, :], mask=q_mask, other=0.0)
    ctx = tl.load(lens_ptr + b)
    part = tl.cdiv(tl.cdiv(ctx, num_splits), TILE) * TILE
    part_start = split * part
    hi = tl.minimum(part_start + part, ctx)
    lo = tl.maximum(part_start, ctx - window)
    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, DIM_PAD], tl.float32)
    base = cache_ptr + layer * s_layer + kv_head * s_head
    for start in range(tl.maximum(part_start, (lo // TILE) * TILE), hi, TILE):
        pos = start + tl.arange(0, TILE)
        visible = (pos >= lo) & (pos < hi)
        block = tl.load(tables_ptr + b * stride_tb + pos // BLOCK_SIZE, mask=visible, other=0).to(tl.int64)
        rows = block * s_blk + (pos % BLOCK_SIZE) * s_tok
        kv_mask = visible[:, None] & (d < HEAD_DIM)[None, :]
        k = tl.load(base + rows[:, None] + d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(base + s_kv + rows[:, None] + d[None, :], mask=kv_mask, other=0.0)
        scores = dot(q, tl.trans(k), IEEE, WIDEN) * scale
        scores = tl.where(visible[None, :], scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        p = tl.exp(scores - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + dot(p.to(v.dtype), v, IEEE, WIDEN)
        m_i = m_new
    partial = (b * num_heads + heads) * num_splits + split
    tl.store(acc_ptr + partial[:, None] * DIM_PAD + d[None, :], acc, mask=(g < GROUP)[:, None])
    tl.store(ml_ptr + partial * 2, m_i, mask=g < GROUP)
    tl.store(ml_ptr + partial * 2 + 1, l_i, mask=g < GROUP)


@triton.jit(do_not_specialize=["num_splits"])
def _merge_kernel(acc_ptr, ml_ptr, out_ptr, num_splits, num_heads, stride_ob, stride_oh,
                  HEAD_DIM: tl.constexpr, DIM_PAD: tl.constexpr, SPLITS_PAD: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    s = tl.arange(0, SPLITS_PAD)
    d = tl.arange(0, DIM_PAD)
    partial = (b * num_heads + h) * num_splits + s
    present = s < num_splits
    m = tl.load(ml_ptr + partial * 2, mask=present, other=float("-inf"))
    l = tl.load(ml_ptr + partial * 2 + 1, mask=present, other=0.0)
    m_max = tl.max(m, axis=0)
    weight = tl.where(m > float("-inf"), tl.exp(m - tl.where(m_max > float("-inf"), m_max, 0.0)), 0.0)
    acc = tl.load(acc_ptr + partial[:, None] * DIM_PAD + d[None, :], mask=present[:, None], other=0.0)
    total = tl.sum(weight * l, axis=0)
    out = tl.sum(weight[:, None] * acc, axis=0) / tl.where(total > 0, total, 1.0)
    tl.store(out_ptr + b * stride_ob + h * stride_oh + d, out.to(out_ptr.dtype.element_ty), mask=d < HEAD_DIM)


def target_programs(device: torch.device) -> int:
    """Programs that fill ``device``: a few per multiprocessor (per core on a CPU, where the
    kernels run only in the interpreter)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count * PROGRAMS_PER_SM
    return (os.cpu_count() or 1) * PROGRAMS_PER_SM


def num_splits(batch: int, kv_heads: int, target: int, max_context: int | None = None) -> int:
    """Splits per context for a launch over ``batch`` requests: about ``target`` programs in all,
    no split shorter than ``MIN_SPLIT_TOKENS`` when the longest context is known."""
    wanted = triton.cdiv(target, max(1, batch * kv_heads))
    if max_context is not None:
        wanted = min(wanted, triton.cdiv(max_context, MIN_SPLIT_TOKENS))
    return max(1, min(MAX_SPLITS, wanted))


def paged_decode(q: torch.Tensor, data: torch.Tensor, layer: int, block_tables: torch.Tensor,
                 context_lens: torch.Tensor, block_size: int, scale: float, window: int | None, splits: int,
                 tile: int = TILE) -> torch.Tensor:
    """``q [batch, heads, head_dim]`` against each request's paged context -> ``[batch, heads, head_dim]``.

    ``data``: the cache tensor; ``block_tables [batch, >= blocks of the longest context]``."""
    batch, heads, head_dim = q.shape
    kv_heads = data.shape[3]
    if q.stride(-1) != 1 or data.stride(-1) != 1:
        raise ValueError("decode attention needs the queries and the cache contiguous in head_dim")
    if tile & (tile - 1) or tile < 16:
        raise ValueError(f"tile must be a power of two >= 16, got {tile}")
    group = heads // kv_heads
    dim_pad = max(16, triton.next_power_of_2(head_dim))
    out = torch.empty_like(q)
    if batch == 0:
        return out
    acc = torch.empty((batch, heads, splits, dim_pad), dtype=torch.float32, device=q.device)
    ml = torch.empty((batch, heads, splits, 2), dtype=torch.float32, device=q.device)
    _split_kernel[(batch, kv_heads, splits)](
        q, data, block_tables, context_lens, acc, ml, scale, window or NO_WINDOW, layer, splits, heads,
        q.stride(0), q.stride(1), block_tables.stride(0), data.stride(0), data.stride(1), data.stride(2),
        data.stride(3), data.stride(4),
        GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HEAD_DIM=head_dim, DIM_PAD=dim_pad,
        BLOCK_SIZE=block_size, TILE=tile,
        **dot_flags(q.dtype == torch.float32))
    _merge_kernel[(batch, heads)](acc, ml, out, splits, heads, out.stride(0), out.stride(1), HEAD_DIM=head_dim,
                                  DIM_PAD=dim_pad, SPLITS_PAD=triton.next_power_of_2(splits))
    return out
