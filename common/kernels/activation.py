"""SiLU(gate) · up over the fused gate/up projection ``[rows, 2·width]`` -> ``[rows, width]``.

As in the torch path, SiLU is rounded to the model's dtype before the product.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _silu_mul_kernel(gate_up_ptr, out_ptr, width, stride_in, stride_out, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = cols < width
    gate = tl.load(gate_up_ptr + row * stride_in + cols, mask=inside, other=0.0).to(tl.float32)
    up = tl.load(gate_up_ptr + row * stride_in + width + cols, mask=inside, other=0.0).to(tl.float32)
    silu = (gate / (1.0 + tl.exp(-gate))).to(out_ptr.dtype.element_ty).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (silu * up).to(out_ptr.dtype.element_ty), mask=inside)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    rows, double = gate_up.shape
    width = double // 2
    if gate_up.stride(-1) != 1:
        raise ValueError("silu_mul needs rows contiguous in their last dimension")
    out = torch.empty((rows, width), dtype=gate_up.dtype, device=gate_up.device)
    if rows == 0:
        return out
    _silu_mul_kernel[(rows, triton.cdiv(width, BLOCK))](gate_up, out, width, gate_up.stride(0), out.stride(0),
                                                       BLOCK=BLOCK)
    return out
