"""Launch helpers shared by the kernels: block sizes and warp counts from a row's width."""

from __future__ import annotations

import triton


def row_block(width: int) -> int:
    """The power-of-two tile that holds a whole row of ``width`` elements."""
    return triton.next_power_of_2(max(width, 1))


def warps_for(block: int) -> int:
    """Warps for a program that reduces one row of ``block`` elements."""
    return 4 if block <= 1024 else 8 if block <= 4096 else 16
