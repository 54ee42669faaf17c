"""Where the staging buffer puts each of a step's tensors (``common.model.staging``)."""

from __future__ import annotations

import random

from common.model.staging import ALIGN_ELEMENTS, aligned_offsets


def test_every_view_starts_on_16_bytes_and_none_overlap():
    rng = random.Random(3)
    for _ in range(200):
        sizes = [rng.randint(0, 41) for _ in range(rng.randint(1, 9))]
        offsets, total = aligned_offsets(sizes)
        assert all(at * 8 % 16 == 0 for at in offsets), (sizes, offsets)  # int64 elements
        ends = [at + n for at, n in zip(offsets, sizes)]
        assert all(end <= nxt for end, nxt in zip(ends, offsets[1:])), (sizes, offsets)
        assert max(ends) <= total < max(ends) + ALIGN_ELEMENTS * len(sizes)


def test_offsets_pad_only_odd_sizes():
    assert aligned_offsets([3, 5, 1, 4]) == ([0, 4, 10, 12], 16)
