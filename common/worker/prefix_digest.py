"""A prefill worker's side of its prefix digest: what its cache holds, sent with each heartbeat
as changes since the previous one, or as a snapshot when the gateway has no copy yet (on
registration) or lost step (``HeartbeatResponse.prefix_resync``).

A worker heartbeats to every gateway it was given, and each gateway keeps its own copy: one
``DigestPublisher`` drains the index's record of changes for all of them and keeps, for each
gateway's ``DigestSubscription``, what changed since that gateway's last digest. Every digest a
subscription builds must be sent; one lost on the way shows at its gateway as a gap in ``seq``,
which asks for a snapshot.
"""

from __future__ import annotations

from common.engine.prefix_cache import DIGEST_MAX, PrefixIndex
from wire.v1 import worker_pb2


class DigestPublisher:
    def __init__(self, index: PrefixIndex | None) -> None:
        self.index = index
        self._subscriptions: list[DigestSubscription] = []

    def subscribe(self) -> DigestSubscription:
        """The digests for one more gateway (its first is a snapshot)."""
        subscription = DigestSubscription(self)
        self._subscriptions.append(subscription)
        return subscription

    def unsubscribe(self, subscription: DigestSubscription) -> None:
        if subscription in self._subscriptions:
            self._subscriptions.remove(subscription)

    def _drain(self) -> None:
        """The index's changes since the last drain, into every subscription's pending changes."""
        assert self.index is not None
        changes = self.index.drain_changes()
        for subscription in self._subscriptions:
            if changes is None:  # too many to say: every gateway takes a snapshot
                subscription.resync()
            else:
                subscription.pending.update(dict.fromkeys(changes[0], True))
                subscription.pending.update(dict.fromkeys(changes[1], False))
                if len(subscription.pending) > DIGEST_MAX:  # a gateway long unheard: a snapshot says it shorter
                    subscription.resync()


class DigestSubscription:
    """One gateway's digests: its own ``seq``, and what changed since its last one (hash: held)."""

    def __init__(self, publisher: DigestPublisher) -> None:
        self.publisher = publisher
        self.seq = 0
        self.pending: dict[int, bool] = {}
        self._snapshot_next = True

    def resync(self) -> None:
        """The next digest is a snapshot (before a registration, or when the gateway asks)."""
        self._snapshot_next = True

    def next(self) -> worker_pb2.PrefixDigest | None:
        """The digest to send this gateway now; None without a prefix cache."""
        index = self.publisher.index
        if index is None:
            return None
        self.publisher._drain()
        self.seq += 1
        if self._snapshot_next:
            # changes drained above are in the snapshot; any made since are drained again next time
            self._snapshot_next = False
            self.pending.clear()
            return worker_pb2.PrefixDigest(seq=self.seq, snapshot=True, stored=index.held())
        pending, self.pending = self.pending, {}
        return worker_pb2.PrefixDigest(seq=self.seq, stored=[h for h, held in pending.items() if held],
                                       removed=[h for h, held in pending.items() if not held])
