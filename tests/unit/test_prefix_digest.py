"""A prefill worker's prefix digest kept in step at the gateway, and what routing makes of it."""

from __future__ import annotations

from common.engine.block_pool import BlockPool
from common.engine.prefix_cache import PrefixIndex, chain_hashes
from common.worker.prefix_digest import DigestPublisher
from gateway.prefix_view import PrefixView, PromptBlocks

B, SALT = 16, 99


def _cache_prompt(pool: BlockPool, tokens: list[int]) -> list[int]:
    """What an engine does after computing ``tokens``: names its full blocks, then frees them."""
    hashes = chain_hashes(tokens, B, SALT)
    blocks = pool.allocate(len(hashes))
    assert blocks is not None and pool.prefix_index is not None
    for block, h in zip(blocks, hashes):
        pool.prefix_index.add(block, h)
    pool.free(blocks)
    return hashes


def test_the_gateway_copy_follows_the_worker_cache_through_changes_and_a_lost_digest():
    index = PrefixIndex()
    pool = BlockPool(8, index)
    publisher, view = DigestPublisher(index), PrefixView(B, SALT)
    first = list(range(64))  # 4 blocks
    _cache_prompt(pool, first)
    view.apply(publisher.next())  # the first digest is a snapshot
    assert view.in_step and view.hashes == set(chain_hashes(first, B, SALT))

    second = [7] * 80  # 5 blocks: the pool (8) must evict 1 of the first prompt's
    _cache_prompt(pool, second)
    view.apply(publisher.next())
    held = {h for h in chain_hashes(first, B, SALT) + chain_hashes(second, B, SALT) if index.lookup([h])}
    assert view.hashes == held and len(held) == 8

    _cache_prompt(pool, [3] * 32)
    publisher.next()  # lost on the way: the gateway never sees it
    _cache_prompt(pool, [4] * 32)
    view.apply(publisher.next())
    assert not view.in_step, "a gap in seq puts the copy out of step"
    publisher.resync()  # what the heartbeat's reply asks for
    view.apply(publisher.next())
    assert view.in_step and view.hashes == set(index.snapshot())


def test_a_prompt_finds_the_leading_run_of_its_blocks_and_never_its_last_token():
    index = PrefixIndex()
    pool = BlockPool(16, index)
    history = list(range(100, 164))  # 4 full blocks
    _cache_prompt(pool, history)
    view = PrefixView(B, SALT)
    view.apply(DigestPublisher(index).next())
    assert PromptBlocks(history + [1, 2, 3]).cached_tokens(view) == 64
    assert PromptBlocks(history).cached_tokens(view) == 48, "the last token (in block 4) is computed"
    changed = history[:20] + [0] + history[21:]
    assert PromptBlocks(changed).cached_tokens(view) == 16, "the run stops at the first block that differs"
    assert PromptBlocks(history + [1]).uncached_tokens(PrefixView(B, SALT + 1)) == 65, "another model: no hit"
    assert PromptBlocks(history + [1]).cached_tokens(None) == 0
