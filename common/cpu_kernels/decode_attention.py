"""Decode attention over the decode stage's slots by the C++ kernel (``decode_attention.cpp``):
what it covers, and the call."""

from __future__ import annotations

import torch

from common.cpu_kernels import build

HEAD_DIMS = (32, 64, 96, 128, 256)
DTYPES = (torch.float32, torch.bfloat16)


def unsupported(head_dim: int, dtype: torch.dtype) -> str | None:
    """Why the kernel cannot attend for this model and dtype (None: it can)."""
    if head_dim not in HEAD_DIMS:
        return f"head_dim {head_dim} (the kernel has {', '.join(map(str, HEAD_DIMS))})"
    if dtype not in DTYPES:
        return f"dtype {dtype} (the kernel has float32 and bfloat16)"
    return None


def dense_decode_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, slots: torch.Tensor,
                           lens: torch.Tensor, scale: float, window: int | None) -> torch.Tensor:
    """``q [batch, heads, d]`` against ``keys``/``values [slots, kv_heads, width, d]``: row i attends
    positions ``0 .. lens[i] - 1`` (the last ``window`` of them with a window) of slot ``slots[i]``."""
    return build.load().dense_decode_attention(q, keys, values, slots, lens, scale, window or 0)
