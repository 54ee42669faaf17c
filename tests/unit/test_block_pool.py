from __future__ import annotations

import pytest

from common.engine.block_pool import BlockPool


def test_allocate_returns_none_and_takes_nothing_when_too_few_blocks_are_free():
    pool = BlockPool(4)
    assert pool.allocate(3) == [0, 1, 2]
    assert pool.allocate(2) is None
    assert pool.num_free == 1
    pool.check_integrity()


def test_freed_blocks_come_back_in_their_original_order():
    pool = BlockPool(8)
    first = pool.allocate(5)
    pool.free(first)
    assert pool.allocate(5) == first
    pool.check_integrity()


def test_shared_block_returns_to_the_pool_only_when_its_last_owner_frees_it():
    pool = BlockPool(2)
    blocks = pool.allocate(1)
    pool.share(blocks)
    pool.free(blocks)
    assert pool.num_free == 1 and pool.refcount(blocks[0]) == 1
    pool.free(blocks)
    assert pool.num_free == 2
    pool.check_integrity()


def test_double_free_is_refused():
    pool = BlockPool(2)
    blocks = pool.allocate(1)
    pool.free(blocks)
    with pytest.raises(ValueError, match="freed twice"):
        pool.free(blocks)


def test_integrity_check_catches_a_block_both_free_and_owned():
    pool = BlockPool(3)
    blocks = pool.allocate(1)
    pool._free.append(blocks[0])  # corrupt on purpose
    with pytest.raises(AssertionError):
        pool.check_integrity()
