"""A scheduler's KV blocks: a request's cached prefix shared into it, its full blocks named for
later turns (``common.engine.prefix_sharing``), blocks grown as its tokens come, and, when none
are free, the newest running requests preempted (their KV dropped, recomputed later).
``Scheduler`` is built with it.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from common.engine import prefix_sharing
from common.engine.block_pool import BlockPool
from common.engine.request import Request, RequestStatus
from common.model.batch import blocks_for

if TYPE_CHECKING:
    from common.engine.scheduler import SchedulerConfig


class SchedulerBlocks:
    """What block keeping reads and changes of a scheduler (``Scheduler`` sets these)."""

    config: SchedulerConfig
    pool: BlockPool
    running: list[Request]
    waiting: deque[Request]
    match_prefixes: bool

    def _attach_cached_prefix(self, request: Request) -> int | None:
        """Shares the cached blocks of the request's longest cached prefix into it; returns how
        many (None when it is not looked up: no cache, a hand-off, or KV already computed)."""
        if self.pool.prefix_index is None or not self.match_prefixes or not request.cacheable or request.block_ids:
            return None
        if request.params.prompt_logprobs is not None:  # every prompt token's logits are wanted: computed whole
            return None
        return prefix_sharing.attach_cached_prefix(self.pool, self.config.block_size, self.config.prefix_salt, request)

    def register_full_blocks(self, request: Request) -> None:
        """Names the request's newly full blocks in the prefix index (``prefix_sharing``)."""
        prefix_sharing.register_full_blocks(self.pool, self.config.block_size, self.config.prefix_salt, request)

    def _drop_blocks(self, request: Request) -> None:
        """Gives back every block of a request and forgets its computed KV (it starts over)."""
        self.pool.free(request.block_ids)
        request.block_ids = []
        request.num_computed_tokens = request.num_registered = 0

    def _admission_tokens(self, request: Request, n: int) -> int:
        if self.config.memory_policy == "guaranteed_no_evict":
            return min(request.max_total_tokens, self.config.max_model_len)
        return request.num_computed_tokens + n

    def _make_room(self, request: Request, tokens: int) -> int:
        """Preempts the newest running requests until ``request`` has blocks for ``tokens``."""
        count = 0
        while not self._grow_blocks(request, tokens):
            victim = self.running[-1]
            self._preempt(victim)
            count += 1
            if victim is request:
                break
        return count

    def _grow_blocks(self, request: Request, tokens: int) -> bool:
        missing = blocks_for(tokens, self.config.block_size) - len(request.block_ids)
        if missing <= 0:
            return True
        blocks = self.pool.allocate(missing)
        if blocks is None:
            return False
        request.block_ids.extend(blocks)
        return True

    def _preempt(self, request: Request) -> None:
        self.running.remove(request)
        self._drop_blocks(request)  # named blocks stay parked: its re-admission may find them
        request.num_preemptions += 1
        request.status = RequestStatus.PREEMPTED
        self.waiting.appendleft(request)
