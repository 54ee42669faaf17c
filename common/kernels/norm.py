"""RMSNorm, alone or fused with the residual add before it, one program per token row.

Rounding follows the torch path (``common.model.llama.rms_norm``): the sum of squares and the
scaling run in float32, the normalised row is cast to the model's dtype before it is multiplied
by the weight, and the residual sum is rounded to the model's dtype before it is normalised.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from common.kernels.launch import row_block, warps_for


@triton.jit
def _rms_norm_kernel(x_ptr, residual_ptr, weight_ptr, out_ptr, width, stride_x, stride_res, stride_out, eps,
                     HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < width
    x = tl.load(x_ptr + row * stride_x + cols, mask=inside, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        summed = x + tl.load(residual_ptr + row * stride_res + cols, mask=inside, other=0.0).to(tl.float32)
        rounded = summed.to(residual_ptr.dtype.element_ty)
        tl.store(residual_ptr + row * stride_res + cols, rounded, mask=inside)
        x = rounded.to(tl.float32)
    mean_square = tl.sum(x * x, axis=0) / width
    normed = (x * tl.rsqrt(mean_square + eps)).to(out_ptr.dtype.element_ty).to(tl.float32)
    weight = tl.load(weight_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (weight * normed).to(out_ptr.dtype.element_ty), mask=inside)


def _launch(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float) -> torch.Tensor:
    rows, width = x.shape
    if x.stride(-1) != 1 or (residual is not None and residual.stride(-1) != 1):
        raise ValueError("rms_norm needs rows contiguous in their last dimension")
    out = torch.empty((rows, width), dtype=x.dtype, device=x.device)
    if rows == 0:
        return out
    block = row_block(width)
    res = residual if residual is not None else x
    _rms_norm_kernel[(rows,)](x, res, weight, out, width, x.stride(0), res.stride(0), out.stride(0), eps,
                              HAS_RESIDUAL=residual is not None, BLOCK=block, num_warps=warps_for(block))
    return out


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x [rows, width]`` normalised and scaled by ``weight``."""
    return _launch(x, None, weight, eps)


def add_rms_norm(delta: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``residual += delta`` (in place), then ``rms_norm(residual)``: one read of each, one write."""
    return _launch(delta, residual, weight, eps)
