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
    name: str  # "torch" | "triton"
    rms_norm: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]
    add_rms_norm: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor]
    rotary: Callable[[RotaryTable, torch.Tensor, torch.dtype], Rotary]  # once per forward
    silu_mul: Callable[[torch.Tensor], torch.Tensor]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Normalises in float32 and casts back before scaling, as the reference models do."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


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
        return RotaryTable.apply(q, self.cos, self.sin), RotaryTable.apply(k, self.cos, self.sin)


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
