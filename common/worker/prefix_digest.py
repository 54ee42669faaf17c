"""A prefill worker's side of its prefix digest: what its cache holds, sent with each heartbeat
as changes since the previous one, or as a snapshot when the gateway has no copy yet (on
registration) or lost step (``HeartbeatResponse.prefix_resync``).

Each digest drains the index's record of changes, so every digest built must be sent; one
lost on the way shows at the gateway as a gap in ``seq``, which asks for a snapshot.
"""

from __future__ import annotations

from common.engine.prefix_cache import PrefixIndex
from wire.v1 import worker_pb2


class DigestPublisher:
    def __init__(self, index: PrefixIndex | None) -> None:
        self.index = index
        self.seq = 0
        self._snapshot_next = True

    def resync(self) -> None:
        """The next digest is a snapshot (before a registration, or when the gateway asks)."""
        self._snapshot_next = True

    def next(self) -> worker_pb2.PrefixDigest | None:
        """The digest to send now; None without a prefix cache."""
        if self.index is None:
            return None
        self.seq += 1
        changes = None if self._snapshot_next else self.index.drain_changes()
        self._snapshot_next = False
        if changes is None:
            return worker_pb2.PrefixDigest(seq=self.seq, snapshot=True, stored=self.index.snapshot())
        stored, removed = changes
        return worker_pb2.PrefixDigest(seq=self.seq, stored=stored, removed=removed)
