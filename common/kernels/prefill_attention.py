"""Causal attention for every prefill chunk of a step in one kernel launch (variable lengths).

The packed batch holds each chunk's new query rows back to back (``common.model.attention_metadata``).
The host cuts every chunk into tiles of ``BLOCK_M`` query rows; a program per (tile, query head)
attends its rows to the chunk's keys, all read from the paged cache, where the step's new K/V
were written before attention runs. So a chunk that starts after a cached prefix (chunked
prefill, a shared prefix) needs no special case: its keys are positions ``0 .. start + len``.

    key position p is visible to query position i  ⇔  p ≤ i  and  i − p < window

GQA: query head h reads KV head ``h // group``. Online softmax over ``BLOCK_N``-token key tiles.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from common.kernels.dot import dot, dot_flags

from common.kernels.decode_attention import NO_WINDOW

BLOCK_M = 64
BLOCK_N = 64


@dataclass(frozen=True, slots=True)
class PackedPrefill:
    """Where each chunk's rows and keys are, for one launch (device tensors, int64)."""

    tiles: torch.Tensor  # [tiles, 2]: (chunk, first query row of the tile within the chunk)
    chunks: torch.Tensor  # [chunks, 3]: (first row in the packed batch, query rows, context start)
    block_tables: torch.Tensor  # [chunks, blocks], covering context start + query rows
    block_m: int = BLOCK_M  # query rows per tile: what ``tiles`` was cut with


def prefill_tiles(query_lens: list[int], block_m: int = BLOCK_M) -> torch.Tensor:
    """Host ``[tiles, 2]`` int64: every chunk cut into tiles of ``block_m`` query rows."""
    tiles = [(i, m0) for i, q_len in enumerate(query_lens) for m0 in range(0, q_len, block_m)]
    return torch.tensor(tiles, dtype=torch.int64).reshape(len(tiles), 2)


# The block tables' width follows the step's longest chunk: left unspecialized, so it compiles one
# variant (Triton would compile one each for 1, multiples of 16 and the rest, at first sight, mid-load).
@triton.jit(do_not_specialize=["stride_tables"])
def _prefill_kernel(q_ptr, out_ptr, cache_ptr, tiles_ptr, chunks_ptr, tables_ptr, scale, window, layer,
                    stride_qt, stride_qh, stride_ot, stride_oh, stride_tables, s_blk, s_layer, s_kv, s_head, s_tok,
                    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, DIM_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IEEE: tl.constexpr, WIDEN: tl.constexpr):
    tile = tl.program_id(0)
    head = tl.program_id(1)
    chunk = tl.load(tiles_ptr + tile * 2)
    m0 = tl.load(tiles_ptr + tile * 2 + 1)
    row_start = tl.load(chunks_ptr + chunk * 3)
    q_len = tl.load(chunks_ptr + chunk * 3 + 1)
    ctx_start = tl.load(chunks_ptr + chunk * 3 + 2)
    offs_m = m0 + tl.arange(0, BLOCK_M)
    d = tl.arange(0, DIM_PAD)
    in_dim = d < HEAD_DIM
    rows_valid = offs_m < q_len
    q_pos = ctx_start + offs_m
    rows = (row_start + offs_m).to(tl.int64)
    q = tl.load(q_ptr + rows[:, None] * stride_qt + head * stride_qh + d[None, :],
                mask=rows_valid[:, None] & in_dim[None, :], other=0.0)
    hi = ctx_start + tl.minimum(m0 + BLOCK_M, q_len)
    lo = (tl.maximum(0, ctx_start + m0 - window + 1) // BLOCK_N) * BLOCK_N
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, DIM_PAD], tl.float32)
    base = cache_ptr + layer * s_layer + (head // GROUP) * s_head
    for start in range(lo, hi, BLOCK_N):
        pos = start + tl.arange(0, BLOCK_N)
        in_ctx = pos < hi
        block = tl.load(tables_ptr + chunk * stride_tables + pos // BLOCK_SIZE, mask=in_ctx, other=0).to(tl.int64)
        kv_rows = block * s_blk + (pos % BLOCK_SIZE) * s_tok
        kv_mask = in_ctx[:, None] & in_dim[None, :]
        k = tl.load(base + kv_rows[:, None] + d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(base + s_kv + kv_rows[:, None] + d[None, :], mask=kv_mask, other=0.0)
        scores = dot(q, tl.trans(k), IEEE, WIDEN) * scale
        visible = (pos[None, :] <= q_pos[:, None]) & in_ctx[None, :] & (q_pos[:, None] - pos[None, :] < window)
        scores = tl.where(visible, scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        m_safe = tl.where(m_new > float("-inf"), m_new, 0.0)  # a row with nothing visible yet
        p = tl.exp(scores - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + dot(p.to(v.dtype), v, IEEE, WIDEN)
        m_i = m_new
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(out_ptr + rows[:, None] * stride_ot + head * stride_oh + d[None, :], out.to(out_ptr.dtype.element_ty),
             mask=rows_valid[:, None] & in_dim[None, :])


def prefill_attention(q: torch.Tensor, out: torch.Tensor, data: torch.Tensor, layer: int, packed: PackedPrefill,
                      block_size: int, scale: float, window: int | None, block_n: int = BLOCK_N) -> None:
    """Writes ``out[rows]`` for every prefill row of ``q [rows, heads, head_dim]`` (decode rows, after
    the prefill rows, are left alone)."""
    heads, head_dim = q.shape[1], q.shape[2]
    if q.stride(-1) != 1 or out.stride(-1) != 1 or data.stride(-1) != 1:
        raise ValueError("prefill attention needs q, out and the cache contiguous in head_dim")
    tiles = packed.tiles.shape[0]
    if tiles == 0:
        return
    _prefill_kernel[(tiles, heads)](
        q, out, data, packed.tiles, packed.chunks, packed.block_tables, scale, window or NO_WINDOW, layer,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), packed.block_tables.stride(0), data.stride(0),
        data.stride(1), data.stride(2), data.stride(3), data.stride(4),
        GROUP=heads // data.shape[3], HEAD_DIM=head_dim, DIM_PAD=max(16, triton.next_power_of_2(head_dim)),
        BLOCK_SIZE=block_size, BLOCK_M=packed.block_m, BLOCK_N=block_n, **dot_flags(q.dtype == torch.float32))
