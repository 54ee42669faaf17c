"""The matrix product the attention kernels use, with the precision their inputs call for.

float32 inputs multiply in IEEE float32 (not TF32), so the GPU path stays as exact as the
torch path it is checked against. Under ``TRITON_INTERPRET=1`` half-precision operands are
widened to float32 first: the interpreter computes ``tl.dot`` with NumPy, which has no
bfloat16. On a GPU they go to the tensor cores as they are.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def dot(a, b, IEEE: tl.constexpr, WIDEN: tl.constexpr):
    if WIDEN:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    if IEEE:
        return tl.dot(a, b, input_precision="ieee")
    return tl.dot(a, b)


def dot_flags(dtype_is_float32: bool) -> dict[str, bool]:
    """The constexpr arguments a kernel passes on to ``dot`` for inputs of this dtype."""
    return {"IEEE": dtype_is_float32 or INTERPRETED, "WIDEN": INTERPRETED and not dtype_is_float32}
