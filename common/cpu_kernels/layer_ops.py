"""The CPU backend's layer ops: the norms and the rotary embedding by the C++ kernels
(``layer_ops.cpp``), each one call where the torch set makes several; SiLU·mul is torch's.
Rows that are not contiguous go the torch way."""

from __future__ import annotations

import torch

from common.cpu_kernels import build
from common.model import ops
from common.model.rope import RotaryTable


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if not x.is_contiguous():
        return ops.rms_norm(x, weight, eps)
    return build.load().rms_norm(x, weight, eps)


def add_rms_norm(delta: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if not (delta.is_contiguous() and residual.is_contiguous()):
        return ops.add_rms_norm(delta, residual, weight, eps)
    return build.load().add_rms_norm(delta, residual, weight, eps)


class CpuRotary:
    """Rotates q and k in place (they are the qkv projection's rows, read by nothing else)."""

    def __init__(self, table: RotaryTable, positions: torch.Tensor, dtype: torch.dtype) -> None:
        cos, sin = table.lookup(positions, dtype)  # [tokens, 1, head_dim]
        self.cos, self.sin = cos[:, 0], sin[:, 0]

    def apply(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kernels = build.load()
        if ops.adjacent_heads(q, k):  # one call over both
            kernels.rope_(q.as_strided((q.shape[0], q.shape[1] + k.shape[1], q.shape[2]), q.stride()), self.cos,
                          self.sin)
        else:
            for x in (q, k):
                kernels.rope_(x, self.cos, self.sin)
        return q, k


CPU_OPS = ops.ModelOps("cpu", rms_norm, add_rms_norm, CpuRotary, ops.silu_mul)
