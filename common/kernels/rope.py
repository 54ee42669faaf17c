"""Rotary position embedding applied in place to q and k, one program per token.

``q [tokens, heads, head_dim]`` and ``k [tokens, kv_heads, head_dim]`` may be views into the
fused qkv projection (any row and head stride, contiguous in head_dim). The cos/sin tables are
``common.model.rope.RotaryTable``'s ``[positions, head_dim]`` (each half the same), rounded to
the model's dtype first as the torch path rounds them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rotate(ptr, stride_t, stride_h, t, heads, cos, sin, HALF: tl.constexpr, HEADS_PAD: tl.constexpr,
            HALF_PAD: tl.constexpr):
    h = tl.arange(0, HEADS_PAD)[:, None]
    j = tl.arange(0, HALF_PAD)[None, :]
    inside = (h < heads) & (j < HALF)
    first = ptr + t * stride_t + h * stride_h + j
    x1 = tl.load(first, mask=inside, other=0.0).to(tl.float32)
    x2 = tl.load(first + HALF, mask=inside, other=0.0).to(tl.float32)
    tl.store(first, (x1 * cos - x2 * sin).to(ptr.dtype.element_ty), mask=inside)
    tl.store(first + HALF, (x2 * cos + x1 * sin).to(ptr.dtype.element_ty), mask=inside)


@triton.jit
def _rope_kernel(q_ptr, k_ptr, positions_ptr, cos_ptr, sin_ptr, stride_qt, stride_qh, stride_kt, stride_kh,
                 stride_table, heads, kv_heads, HALF: tl.constexpr, HALF_PAD: tl.constexpr,
                 HEADS_PAD: tl.constexpr, KV_HEADS_PAD: tl.constexpr):
    t = tl.program_id(0)
    position = tl.load(positions_ptr + t)
    j = tl.arange(0, HALF_PAD)[None, :]
    in_half = j < HALF
    dtype = q_ptr.dtype.element_ty
    cos = tl.load(cos_ptr + position * stride_table + j, mask=in_half, other=0.0).to(dtype).to(tl.float32)
    sin = tl.load(sin_ptr + position * stride_table + j, mask=in_half, other=0.0).to(dtype).to(tl.float32)
    _rotate(q_ptr, stride_qt, stride_qh, t, heads, cos, sin, HALF, HEADS_PAD, HALF_PAD)
    _rotate(k_ptr, stride_kt, stride_kh, t, kv_heads, cos, sin, HALF, KV_HEADS_PAD, HALF_PAD)


def apply_rope_(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotates ``q`` and ``k`` in place by each token's position; returns them."""
    tokens, heads, head_dim = q.shape
    if q.stride(-1) != 1 or k.stride(-1) != 1 or cos.stride(-1) != 1 or head_dim % 2:
        raise ValueError("rope needs an even head_dim, contiguous in q, k and the tables")
    if tokens:
        half = head_dim // 2
        _rope_kernel[(tokens,)](q, k, positions, cos, sin, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
                                cos.stride(0), heads, k.shape[1], HALF=half, HALF_PAD=triton.next_power_of_2(half),
                                HEADS_PAD=triton.next_power_of_2(heads),
                                KV_HEADS_PAD=triton.next_power_of_2(k.shape[1]))
    return q, k
