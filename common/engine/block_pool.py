"""Reference-counted pool of KV cache block ids.

Free ids form a stack. Freeing pushes a request's blocks in reverse order, so the next
allocation pops them back in their original order: a request that reuses them gets
ascending, mostly consecutive ids, which keeps KV transfers to a few contiguous copies.
"""

from __future__ import annotations


def blocks_for(tokens: int, block_size: int) -> int:
    """How many blocks of ``block_size`` tokens hold ``tokens`` tokens (the last one partly filled)."""
    return -(-tokens // block_size)


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))
        self._refcount: list[int] = [0] * num_blocks

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self, n: int) -> list[int] | None:
        """``n`` fresh blocks with reference count 1, or None (nothing taken) if too few are free."""
        if n < 0:
            raise ValueError(f"cannot allocate {n} blocks")
        if n > len(self._free):
            return None
        blocks = [self._free.pop() for _ in range(n)]
        for b in blocks:
            self._refcount[b] = 1
        return blocks

    def share(self, blocks: list[int]) -> None:
        """Adds one owner to each block (for a second request reading the same KV)."""
        for b in blocks:
            if self._refcount[b] <= 0:
                raise ValueError(f"block {b} is free and cannot be shared")
            self._refcount[b] += 1

    def free(self, blocks: list[int]) -> None:
        """Drops one owner from each block; blocks nobody owns return to the pool."""
        for b in reversed(blocks):
            if self._refcount[b] <= 0:
                raise ValueError(f"block {b} freed twice")
            self._refcount[b] -= 1
            if self._refcount[b] == 0:
                self._free.append(b)

    def refcount(self, block: int) -> int:
        return self._refcount[block]

    def check_integrity(self) -> None:
        """Raises AssertionError unless free + used == total and no block is both free and owned."""
        free = set(self._free)
        if len(free) != len(self._free):
            raise AssertionError("a block appears twice in the free list")
        owned = {b for b, count in enumerate(self._refcount) if count > 0}
        if free & owned:
            raise AssertionError(f"blocks both free and owned: {sorted(free & owned)[:8]}")
        if len(free) + len(owned) != self.num_blocks:
            raise AssertionError(f"free {len(free)} + used {len(owned)} != total {self.num_blocks}")
        if any(count < 0 for count in self._refcount):
            raise AssertionError("negative reference count")
