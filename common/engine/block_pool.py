"""Reference-counted pool of KV cache block ids.

Free ids form a stack. Freeing pushes a request's blocks in reverse order, so the next
allocation pops them back in their original order: a request that reuses them gets
ascending, mostly consecutive ids, which keeps KV transfers to a few contiguous copies.

With a prefix index (``common.engine.prefix_cache``), a block whose content has a hash is
parked instead of freed when its last owner lets go: it counts as free, is handed out only
when no blank block is left (least recently parked first), and ``share`` takes it back while
it still holds its prefix. Every block is exactly one of: free, parked, owned.
"""

from __future__ import annotations

from common.engine.prefix_cache import PrefixIndex


class BlockPool:
    def __init__(self, num_blocks: int, prefix_index: PrefixIndex | None = None) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.prefix_index = prefix_index  # None: no prefix caching, nothing is ever parked
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))
        self._refcount: list[int] = [0] * num_blocks

    @property
    def num_free(self) -> int:
        """Blocks an ``allocate`` can hand out: blank ones and parked ones."""
        return len(self._free) + (len(self.prefix_index.parked) if self.prefix_index else 0)

    def allocate(self, n: int) -> list[int] | None:
        """``n`` fresh blocks with reference count 1, or None (nothing taken) if too few are free.
        Blank blocks go first; then parked ones, whose cached prefix is lost."""
        if n < 0:
            raise ValueError(f"cannot allocate {n} blocks")
        if n > self.num_free:
            return None
        blank = min(n, len(self._free))
        blocks = [self._free.pop() for _ in range(blank)]
        if blank < n:
            assert self.prefix_index is not None
            blocks += [self.prefix_index.evict_oldest() for _ in range(n - blank)]
        for b in blocks:
            self._refcount[b] = 1
        return blocks

    def share(self, blocks: list[int]) -> None:
        """Adds one owner to each block (a second request reading the same KV); a parked block
        is taken back with its prefix."""
        for b in blocks:
            if self._refcount[b] == 0 and self.prefix_index is not None and b in self.prefix_index.parked:
                self.prefix_index.unpark(b)
            elif self._refcount[b] <= 0:
                raise ValueError(f"block {b} is free and cannot be shared")
            self._refcount[b] += 1

    def free(self, blocks: list[int]) -> None:
        """Drops one owner from each block; blocks nobody owns return to the pool (parked, if
        the prefix index names them)."""
        for b in reversed(blocks):
            if self._refcount[b] <= 0:
                raise ValueError(f"block {b} freed twice")
            self._refcount[b] -= 1
            if self._refcount[b] == 0:
                if self.prefix_index is not None and self.prefix_index.holds(b):
                    self.prefix_index.park(b)
                else:
                    self._free.append(b)

    def refcount(self, block: int) -> int:
        return self._refcount[block]

    def check_integrity(self) -> None:
        """Raises AssertionError unless free + parked + used == total and no block is in two of them."""
        free = set(self._free)
        if len(free) != len(self._free):
            raise AssertionError("a block appears twice in the free list")
        parked = set(self.prefix_index.parked) if self.prefix_index else set()
        if free & parked:
            raise AssertionError(f"blocks both free and parked: {sorted(free & parked)[:8]}")
        owned = {b for b, count in enumerate(self._refcount) if count > 0}
        if (free | parked) & owned:
            raise AssertionError(f"blocks both free and owned: {sorted((free | parked) & owned)[:8]}")
        if len(free) + len(parked) + len(owned) != self.num_blocks:
            raise AssertionError(f"free {len(free)} + parked {len(parked)} + used {len(owned)} != total {self.num_blocks}")
        if self.prefix_index is not None:
            self.prefix_index.check_integrity(self._refcount)
        if any(count < 0 for count in self._refcount):
            raise AssertionError("negative reference count")
