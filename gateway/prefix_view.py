"""What the gateway knows of each worker's prefix cache, and what a prompt would find there.

A prefill worker's cached prefix is prefill work saved; a decode worker's (the earlier turns
of a conversation it served) is KV that need not be copied to it again.

A worker's digests (``worker.proto`` ``PrefixDigest``) keep ``PrefixView.hashes`` a copy of the
block hashes its cache holds: a snapshot replaces it, changes update it, and a gap in the
digests' ``seq`` marks it out of step until the next snapshot (which the heartbeat's reply asks
for). ``PromptBlocks`` hashes one prompt the way the workers do (``common.engine.prefix_cache``),
once per block size and model identity, and says how many of its tokens a worker would find
cached: the leading run of its full blocks in that worker's copy, never the last token (an
engine always computes it). The copy may be a heartbeat behind the worker: a block evicted
since is counted as a hit, which only makes that worker look a little cheaper than it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from common.engine.prefix_cache import chain_hashes


class Digest(Protocol):
    """A worker's report of its prefix cache (``worker_pb2.PrefixDigest``), as the view reads it."""

    snapshot: bool
    seq: int
    stored: Iterable[int]
    removed: Iterable[int]


@dataclass(slots=True)
class PrefixView:
    block_size: int
    salt: int
    hashes: set[int] = field(default_factory=set)
    seq: int = 0
    in_step: bool = False  # a snapshot arrived and no digest has been missed since

    def apply(self, digest: Digest) -> None:
        if digest.snapshot:
            self.hashes = set(digest.stored)
            self.seq, self.in_step = digest.seq, True
            return
        if not self.in_step or digest.seq != self.seq + 1:
            self.in_step = False  # a digest was lost: what it held is unknown until a snapshot
            self.seq = digest.seq
            return
        self.hashes.difference_update(digest.removed)
        self.hashes.update(digest.stored)
        self.seq = digest.seq


class PromptBlocks:
    """One prompt's full-block hashes, worked out once per (block size, model identity)."""

    def __init__(self, token_ids: list[int]) -> None:
        self.token_ids = token_ids
        self._hashes: dict[tuple[int, int], list[int]] = {}

    def __len__(self) -> int:
        return len(self.token_ids)

    def cached_hashes(self, view: PrefixView | None) -> list[int]:
        """The hashes of the leading run of the prompt's full blocks a worker with this view holds
        (none without a view in step)."""
        if view is None or not view.in_step or not view.hashes:
            return []
        key = (view.block_size, view.salt)
        if key not in self._hashes:
            usable = (len(self.token_ids) - 1) // view.block_size  # the last token is always computed
            self._hashes[key] = chain_hashes(self.token_ids[:usable * view.block_size], view.block_size, view.salt)
        run = []
        for h in self._hashes[key]:
            if h not in view.hashes:
                break
            run.append(h)
        return run

    def cached_tokens(self, view: PrefixView | None) -> int:
        """Prompt tokens a worker with this view would not compute (0 without a view in step)."""
        return len(self.cached_hashes(view)) * view.block_size if view is not None else 0

    def uncached_tokens(self, view: PrefixView | None) -> int:
        return len(self.token_ids) - self.cached_tokens(view)
