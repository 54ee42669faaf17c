"""A request's blocks and the pool's prefix index (``common.engine.prefix_cache``).

A request admitted with nothing computed first takes the longest cached run of its full blocks
(shared, not copied) and starts computing after it, always leaving at least its last token to
compute (the step samples after it). Every block a step fills is named in the index, so
preempted, finished and later requests find it. A request's hashes are worked out once each:
its tokens never change (a prompt, then what it sampled).
"""

from __future__ import annotations

from common.engine.block_pool import BlockPool
from common.engine.prefix_cache import chain_hashes
from common.engine.request import Request


def attach_cached_prefix(pool: BlockPool, block_size: int, salt: int, request: Request) -> int:
    """Shares the cached blocks of the request's longest cached prefix into it (the pool has a
    prefix index, the request is cacheable and holds no blocks yet); returns how many."""
    assert pool.prefix_index is not None and not request.block_ids
    usable = (request.num_tokens - 1) // block_size  # the last token is always computed: it is sampled after
    blocks = pool.prefix_index.lookup(block_hashes(request, usable, block_size, salt)[:usable])
    if blocks:
        pool.share(blocks)
        request.block_ids = list(blocks)
        request.num_computed_tokens = len(blocks) * block_size
        request.num_registered = len(blocks)
    request.num_cached_tokens = len(blocks) * block_size
    return len(blocks)


def register_full_blocks(pool: BlockPool, block_size: int, salt: int, request: Request) -> None:
    """Names in the prefix index each full block of the request not named yet (after a step
    filled them, or when a committed request arrives with its prompt's KV written)."""
    index = pool.prefix_index
    full = request.num_computed_tokens // block_size
    if index is None or not request.cacheable or full <= request.num_registered:
        return
    hashes = block_hashes(request, full, block_size, salt)
    for i in range(request.num_registered, full):
        index.add(request.block_ids[i], hashes[i])
    request.num_registered = full


def block_hashes(request: Request, blocks: int, block_size: int, salt: int) -> list[int]:
    """The request's hashes of at least its first ``blocks`` full blocks."""
    if len(request.block_hashes) < blocks:
        request.block_hashes = chain_hashes(request.token_ids(0, blocks * block_size), block_size, salt,
                                            request.block_hashes)
    return request.block_hashes
