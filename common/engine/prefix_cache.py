"""Prefix caching: full KV blocks named by what they hold, so a prompt that repeats another's
beginning (the next turn of a chat, a shared system prompt) reuses its KV instead of
recomputing it.

A full block's hash is chained over every token before it::

    h(0) = H(salt, tokens[0:B])        h(i) = H(h(i-1), tokens[i*B:(i+1)*B])

so equal hashes mean equal whole prefixes, not only equal blocks; ``salt`` names the model, so
two models' caches (or digests at the gateway) never match each other. The hashes are stable
across processes (BLAKE2b, not Python's ``hash``): the gateway computes the same ones for a
prompt and compares them with what each prefill worker publishes.

``PrefixIndex`` maps hashes to the blocks that hold them. A block nobody owns any more but whose
hash is known is *parked* rather than freed: it is free space the pool hands out when it runs
out of blank blocks (least recently parked first, its hash forgotten then), and until then a
prompt with that prefix takes it back. Changes of the set of hashes are recorded for the
worker's digest (``drain_changes``); that record and the hash table are the parts read from
another thread, under the lock a threaded engine hands in (``guard_with``; plain code, as the
simulator runs it, needs none).
"""

from __future__ import annotations

import contextlib
import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from typing import ContextManager

DIGEST_MAX = 8192  # hashes one digest carries at most; beyond it a worker says "resynchronise"


def model_salt(identity: str) -> int:
    """The chain's starting value for one model (its directory or preset, and its dtype)."""
    return int.from_bytes(hashlib.blake2b(identity.encode(), digest_size=8).digest(), "little")


def block_hash(parent: int, tokens: Sequence[int]) -> int:
    data = parent.to_bytes(8, "little") + array("q", tokens).tobytes()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def chain_hashes(token_ids: Sequence[int], block_size: int, salt: int, known: Sequence[int] = (),
                 limit: int | None = None) -> list[int]:
    """Hashes of the full blocks of ``token_ids`` (at most ``limit`` of them), continuing from
    ``known``, the hashes of its first blocks already computed."""
    full = len(token_ids) // block_size if limit is None else min(limit, len(token_ids) // block_size)
    hashes = list(known[:full])
    parent = hashes[-1] if hashes else salt
    for i in range(len(hashes), full):
        parent = block_hash(parent, token_ids[i * block_size:(i + 1) * block_size])
        hashes.append(parent)
    return hashes


class PrefixIndex:
    def __init__(self) -> None:
        self._block_of: dict[int, int] = {}  # hash -> the block holding it
        self._hash_of: dict[int, int] = {}  # block -> its hash
        self.parked: OrderedDict[int, None] = OrderedDict()  # blocks nobody owns, least recently parked first
        self.queries = 0  # prompt tokens looked up (vLLM's prefix_cache_queries)
        self.hits = 0  # of which found cached (prefix_cache_hits)
        self._lock: ContextManager[object] = contextlib.nullcontext()
        self._changes: dict[int, bool] = {}  # hash -> True stored / False removed, since the last drain
        self._overflowed = False  # more changes than a digest carries: the reader must resynchronise

    def guard_with(self, lock: ContextManager[object]) -> None:
        """The lock to take around what another thread reads (a ``threading.Lock``)."""
        self._lock = lock

    def __len__(self) -> int:
        return len(self._block_of)

    def lookup(self, hashes: Sequence[int]) -> list[int]:
        """The blocks holding the longest cached run of ``hashes`` from the first."""
        blocks = []
        for h in hashes:
            block = self._block_of.get(h)
            if block is None:
                break
            blocks.append(block)
        return blocks

    def holds(self, block: int) -> bool:
        return block in self._hash_of

    def add(self, block: int, h: int) -> bool:
        """Names ``block`` by ``h``; False (nothing changes) when either already has a name: the
        same prefix computed twice at once keeps its first block, the other stays anonymous."""
        if h in self._block_of or block in self._hash_of:
            return False
        with self._lock:
            self._block_of[h], self._hash_of[block] = block, h
            self._record(h, True)
        return True

    def forget(self, block: int) -> None:
        """The block is reused for other KV: its hash no longer names anything."""
        with self._lock:
            h = self._hash_of.pop(block)
            del self._block_of[h]
            self._record(h, False)

    def park(self, block: int) -> None:
        self.parked[block] = None

    def unpark(self, block: int) -> None:
        del self.parked[block]

    def evict_oldest(self) -> int:
        block, _ = self.parked.popitem(last=False)
        self.forget(block)
        return block

    def count(self, prompt_tokens: int, hit_tokens: int) -> None:
        self.queries += prompt_tokens
        self.hits += hit_tokens

    def _record(self, h: int, stored: bool) -> None:
        """Under the lock (the caller holds it)."""
        if len(self._changes) >= DIGEST_MAX and h not in self._changes:
            self._overflowed = True
            self._changes.clear()
        if not self._overflowed:
            self._changes[h] = stored

    def drain_changes(self) -> tuple[list[int], list[int]] | None:
        """(stored, removed) hashes since the last drain; None when too many changed to say and
        the reader should take a ``snapshot`` instead. Safe from any thread."""
        with self._lock:
            if self._overflowed:
                self._overflowed = False
                self._changes.clear()
                return None
            changes, self._changes = self._changes, {}
        return [h for h, s in changes.items() if s], [h for h, s in changes.items() if not s]

    def held(self) -> list[int]:
        """Every hash held (at most ``DIGEST_MAX``), leaving the record of changes as it is (other
        readers drain it). Safe from any thread."""
        with self._lock:
            return list(self._block_of)[:DIGEST_MAX]

    def snapshot(self) -> list[int]:
        """Every hash held (at most ``DIGEST_MAX``), and a fresh start for ``drain_changes``.
        Safe from any thread: the engine thread's changes take the same lock."""
        with self._lock:
            self._changes.clear()
            self._overflowed = False
            return list(self._block_of)[:DIGEST_MAX]  # ``add``/``forget`` change it under this lock only

    def check_integrity(self, refcount: Sequence[int]) -> None:
        for block in self.parked:
            if block not in self._hash_of:
                raise AssertionError(f"parked block {block} has no hash")
            if refcount[block] != 0:
                raise AssertionError(f"parked block {block} is owned")
        for h, block in self._block_of.items():
            if self._hash_of.get(block) != h:
                raise AssertionError(f"hash table and block table disagree on block {block}")
