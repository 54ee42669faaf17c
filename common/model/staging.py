"""Host tensors to the device in one copy that does not wait for the device.

The tensors a step needs are built on the host, packed into one pinned buffer (kept and grown,
never freed per step), copied to the device without blocking, and handed back as views. On the
CPU they are returned as they are.

Each view starts on a 16-byte boundary. Triton specializes a kernel on whether each pointer
argument is 16-byte aligned, so views at offsets that follow the step's sizes would give a kernel
a new variant to compile (about a second on an H100) whenever a step's mix of sizes changes their
alignment: stalls that land on requests at the first steps of new shapes, under load.

The views are valid until the next ``to_device`` call. A buffer is reused only by its owner's
next call, one per step, and every step ends by reading its sampled tokens back (the step's one
synchronisation), so the previous copy out of it is over by then.
"""

from __future__ import annotations

import torch

ALIGN_ELEMENTS = 2  # 8-byte elements per 16 bytes: where every view starts


def aligned_offsets(sizes: list[int]) -> tuple[list[int], int]:
    """Each of ``sizes``' start in the buffer (a multiple of ``ALIGN_ELEMENTS``), and the length
    of buffer they take."""
    offsets, at = [], 0
    for n in sizes:
        offsets.append(at)
        at += -(-n // ALIGN_ELEMENTS) * ALIGN_ELEMENTS
    return offsets, at


class Staging:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._host = torch.empty(0, dtype=torch.int64)
        self._device = torch.empty(0, dtype=torch.int64, device=device)

    def to_device(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Host tensors of 8-byte dtypes (int64, float64) -> the same values on the device (views
        of one buffer)."""
        if self.device.type == "cpu":
            return tensors
        if any(t.element_size() != 8 for t in tensors):
            raise ValueError("staging carries 8-byte elements (int64, float64)")
        sizes = [t.numel() for t in tensors]
        offsets, total = aligned_offsets(sizes)
        if total > self._host.numel():
            grown = max(total, 2 * self._host.numel(), 4096)
            self._host = torch.empty(grown, dtype=torch.int64, pin_memory=True)
            self._device = torch.empty(grown, dtype=torch.int64, device=self.device)
        for t, at, n in zip(tensors, offsets, sizes):
            self._host[at:at + n].copy_(t.reshape(-1).view(torch.int64))
        self._device[:total].copy_(self._host[:total], non_blocking=True)
        views = [self._device[at:at + n].view(t.dtype).view(t.shape) for t, at, n in zip(tensors, offsets, sizes)]
        return tuple(views)


def pad_rows(rows: list[list[int]], width: int | None = None) -> torch.Tensor:
    """``[len(rows), width]`` int64, each row padded with 0 (width: the longest row's)."""
    width = max((len(r) for r in rows), default=0) if width is None else width
    return torch.tensor([r + [0] * (width - len(r)) for r in rows], dtype=torch.int64).reshape(len(rows), width)
