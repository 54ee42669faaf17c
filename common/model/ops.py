"""The small ops of a decoder layer, as two interchangeable sets: torch (the CPU path and the
reference every test compares with) and Triton (fused kernels for the GPU, ``common.kernels``).

    x = rms_norm(h)                     first layer's input norm
    x = add_rms_norm(delta, h)          h += delta, then its norm: every later norm
    q, k = rotary(positions).apply(q, k)
    y = silu_mul(gate_up)

The torch set computes exactly what the reference models compute, in the same order, so CPU
float32 output stays token-identical to transformers; the Triton set does the same arithmetic
in fewer launches (each op one kernel) and rotates q and k in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch
import torch.nn.functional as F

from common.model.rope import RotaryTable


class Rotary(Protocol):
    def apply(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``q [tokens, heads, d]`` and ``k [tokens, kv_heads, d]`` rotated by each token's position."""
        ...


@dataclass(frozen=True, slots=True)
class ModelOps:
    name: str  # "torch" | "cpu" (C++ norms and RoPE, ``common.cpu_kernels``) | "triton"
    rms_norm: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]
    add_rms_norm: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor]
    rotary: Callable[[RotaryTable, torch.Tensor, torch.dtype], Rotary]  # once per forward
    silu_mul: Callable[[torch.Tensor], torch.Tensor]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Normalises in float32 and casts back before scaling, as the reference models do
    (``F.rms_norm`` computes ``x · rsqrt(mean(x²) + eps)`` with the same operations, in fewer calls)."""
    return weight * F.rms_norm(x.float(), x.shape[-1:], eps=eps).to(x.dtype)


def add_rms_norm(delta: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    residual.add_(delta)
    return rms_norm(residual, weight, eps)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


class TorchRotary:
    def __init__(self, table: RotaryTable, positions: torch.Tensor, dtype: torch.dtype) -> None:
        self.cos, self.sin = table.lookup(positions, dtype)

    def apply(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Where k's heads follow q's in one buffer (views of the qkv projection's rows), both are
        rotated as one tensor: the same arithmetic in half the calls."""
        heads = q.shape[1]
        if adjacent_heads(q, k):
            both = q.as_strided((q.shape[0], heads + k.shape[1], q.shape[2]), q.stride())
            rotated = RotaryTable.apply(both, self.cos, self.sin)
            return rotated[:, :heads], rotated[:, heads:]
        return RotaryTable.apply(q, self.cos, self.sin), RotaryTable.apply(k, self.cos, self.sin)


def adjacent_heads(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether ``k [rows, kv_heads, d]`` starts where ``q [rows, heads, d]``'s heads end, row by
    row, with the same strides: together they are one ``[rows, heads + kv_heads, d]`` view."""
    return (q.dim() == k.dim() == 3 and q.stride() == k.stride() and q.shape[0] == k.shape[0]
            and q.stride(2) == 1 and q.stride(1) == q.shape[2] and q.untyped_storage().data_ptr() ==
            k.untyped_storage().data_ptr() and k.data_ptr() == q.data_ptr() + q.shape[1] * q.stride(1) * q.element_size())


class TritonRotary:
    def __init__(self, table: RotaryTable, positions: torch.Tensor, dtype: torch.dtype) -> None:
        self.table, self.positions = table, positions

    def apply(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        from common.kernels.rope import apply_rope_

        return apply_rope_(q, k, self.positions, self.table.cos, self.table.sin)


TORCH_OPS = ModelOps("torch", rms_norm, add_rms_norm, TorchRotary, silu_mul)


def triton_ops() -> ModelOps:
    from common.kernels import activation, norm

    return ModelOps("triton", norm.rms_norm, norm.add_rms_norm, TritonRotary, activation.silu_mul)
