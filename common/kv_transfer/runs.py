"""Pairing source and destination blocks into runs that are consecutive on both sides.

With the block-major pool layout each run is a single contiguous copy::

    src 4 5 6 9 10      dst 20 21 22 23 24   ->  runs (4→20, 3), (9→23, 2)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BlockRun:
    src: int
    dst: int
    length: int


def block_runs(src_blocks: list[int], dst_blocks: list[int]) -> list[BlockRun]:
    if len(src_blocks) != len(dst_blocks):
        raise ValueError(f"{len(src_blocks)} source blocks but {len(dst_blocks)} destination blocks")
    runs: list[BlockRun] = []
    for s, d in zip(src_blocks, dst_blocks):
        last = runs[-1] if runs else None
        if last is not None and s == last.src + last.length and d == last.dst + last.length:
            runs[-1] = BlockRun(last.src, last.dst, last.length + 1)
        else:
            runs.append(BlockRun(s, d, 1))
    return runs
