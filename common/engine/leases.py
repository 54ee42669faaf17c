"""Reservations of KV blocks on a decode worker while a prefill worker fills them.

Each lease is a small state machine::

    RESERVED ──commit──▶ COMMITTED      (blocks handed to the decode scheduler)
       │
       ├──release──────▶ FREED          (the writer is known to be done or dead)
       └──release(unsure) / deadline ──▶ QUARANTINED ──quarantine period──▶ FREED

Fail closed: when a writer might still be copying into the blocks (its RPC broke
mid-transfer, or nobody committed before the deadline), the blocks are not reused until
the quarantine period has passed. A gateway renews the leases whose prefill it still awaits
(every third of ``lease_s``), so a lease outlives a long prefill queue, and after its gateway is
gone it still lives two thirds of ``lease_s``: longer than a writer may take to start its copy
after its prefill (``prefill_worker.servicer.TRANSFER_WINDOW_S``), so deadline + quarantine
bounds how long stray bytes can land.

A quarantine holds blocks, not its request: the request may reserve again at once (the gateway
retrying it after its prefill worker was lost mid-copy), and the quarantined blocks, which will
never decode, do not count as a request present for the TPOT guard.
"""

from __future__ import annotations

import enum
import time
import uuid
from dataclasses import dataclass

from common.engine.block_pool import BlockPool


class LeaseState(enum.Enum):
    RESERVED = "reserved"
    COMMITTED = "committed"
    QUARANTINED = "quarantined"
    FREED = "freed"


@dataclass(slots=True)
class Lease:
    request_id: str
    lease_id: str
    block_ids: list[int]
    deadline: float
    state: LeaseState = LeaseState.RESERVED
    # The request's TPOT SLO (0: none), prompt and output budget. The TPOT guard counts it from
    # reserve on, while the lease is in the table: the request it is reserved for will decode here.
    tpot_slo_ms: float = 0.0
    prompt_len: int = 0
    max_tokens: int = 0
    # Leading blocks shared from the prefix cache: they hold the prompt's KV already, are
    # read-only to writers (``reserved_blocks`` leaves them out) and owned by others too.
    cached: int = 0
    # admitted by the TPOT guard's idle rule (one request's step alone, under no margin)
    alone: bool = False
    # the handoff its TPOT carries beyond its steps, as its reservation brought it (``tpot_guard.Decoding.lag_s``)
    handoff_s: float = 0.0


class LeaseError(ValueError):
    """The lease is unknown, expired, or does not belong to this request."""


class LeaseTable:
    def __init__(self, pool: BlockPool, lease_s: float = 60.0, quarantine_s: float = 10.0) -> None:
        self.pool = pool
        self.lease_s = lease_s
        self.quarantine_s = quarantine_s
        self._leases: dict[str, Lease] = {}  # RESERVED, by request id
        self._quarantined: dict[str, Lease] = {}  # QUARANTINED, by lease id

    def reserve(self, request_id: str, num_blocks: int, now: float | None = None,
                tpot_slo_ms: float = 0.0, prompt_len: int = 0, max_tokens: int = 0,
                cached_blocks: list[int] | None = None, lease_id: str = "") -> Lease | None:
        """``num_blocks`` for the request, the first of them ``cached_blocks`` (shared, already
        holding the prompt's leading KV) and the rest fresh; None (nothing taken) if too few are free.
        ``lease_id``: the caller's name for it (empty: a fresh one); a name in use is refused."""
        if request_id in self._leases:
            raise LeaseError(f"request {request_id!r} already holds a lease")
        if lease_id and lease_id in self._quarantined:
            raise LeaseError(f"lease {lease_id!r} exists already")
        cached = list(cached_blocks or [])[:num_blocks]
        self.pool.share(cached)  # first: a parked block taken back must not be handed out below
        blocks = self.pool.allocate(num_blocks - len(cached))
        if blocks is None:
            self.pool.free(cached)
            return None
        lease = Lease(request_id, lease_id or uuid.uuid4().hex[:16], cached + blocks, _now(now) + self.lease_s,
                      tpot_slo_ms=tpot_slo_ms, prompt_len=prompt_len, max_tokens=max_tokens, cached=len(cached))
        self._leases[request_id] = lease
        return lease

    def renew(self, request_id: str, lease_id: str, now: float | None = None) -> bool:
        """Moves a live reservation's deadline to ``lease_s`` from now (its prefill is still queued
        and its gateway still waits for it); False when it is not live (expired, released, unknown)."""
        lease = self._leases.get(request_id)
        if lease is None or lease.lease_id != lease_id:
            return False
        lease.deadline = max(lease.deadline, _now(now) + self.lease_s)
        return True

    def commit(self, request_id: str, lease_id: str) -> Lease:
        """Hands the lease's blocks over to its request; the table forgets the lease."""
        lease = self._live(request_id, lease_id)
        lease.state = LeaseState.COMMITTED
        del self._leases[request_id]
        return lease

    def release(self, request_id: str, lease_id: str | None, writer_may_still_write: bool,
                now: float | None = None) -> bool:
        """Ends the request's reservation (``lease_id``: that one; None: its live one): freed, or
        quarantined while a writer may still write. Its quarantined leases (``lease_id``: that
        one) are freed once their writer is known done. False if there is no such lease."""
        lease = self._leases.get(request_id)
        if lease is not None and (not lease_id or lease.lease_id == lease_id):
            if writer_may_still_write:
                self._quarantine(lease, _now(now))
            else:
                self._free(lease)
            return True
        quarantined = [q for q in self._quarantined.values()
                       if q.request_id == request_id and (not lease_id or q.lease_id == lease_id)]
        if not writer_may_still_write:  # else: still unsure, they stay until their quarantine ends
            for lease in quarantined:
                self._free(lease)
        return bool(quarantined)

    def expire(self, now: float | None = None) -> list[str]:
        """Quarantines reservations past their deadline, frees quarantines past theirs."""
        now = _now(now)
        expired = []
        for lease in list(self._leases.values()):
            if lease.deadline <= now:
                self._quarantine(lease, now)
                expired.append(lease.request_id)
        for lease in list(self._quarantined.values()):
            if lease.deadline <= now:
                self._free(lease)
        return expired

    def reserved_blocks(self, request_id: str, lease_id: str) -> set[int] | None:
        """The blocks a live reservation may receive writes into (not its cached ones), or None
        if there is none."""
        lease = self._leases.get(request_id)
        if lease is None or lease.lease_id != lease_id or lease.state != LeaseState.RESERVED:
            return None
        return set(lease.block_ids[lease.cached:])

    def num_reserved(self) -> int:
        """Reservations still waiting for their commit (quarantines do not count)."""
        return len(self._leases)

    def tpot_slos_ms(self) -> dict[str, float]:
        """TPOT SLOs of the reservations that have one: each will decode here once committed."""
        return {lease.request_id: lease.tpot_slo_ms for lease in self._leases.values() if lease.tpot_slo_ms}

    def leases(self) -> list[Lease]:
        """The reservations awaiting their commit (not the quarantines: they will never decode)."""
        return list(self._leases.values())

    def held_blocks(self) -> list[int]:
        """Every block a lease holds, reserved or quarantined."""
        return [b for table in (self._leases, self._quarantined) for lease in table.values() for b in lease.block_ids]

    def state(self, request_id: str) -> LeaseState | None:
        """Its reservation's state, else that of a quarantine of its; None with neither."""
        lease = self._leases.get(request_id) or next(
            (q for q in self._quarantined.values() if q.request_id == request_id), None)
        return lease.state if lease else None

    def _live(self, request_id: str, lease_id: str) -> Lease:
        lease = self._leases.get(request_id)
        if lease is None or lease.lease_id != lease_id:
            raise LeaseError(f"no live lease {lease_id!r} for request {request_id!r}")
        if lease.state != LeaseState.RESERVED:
            raise LeaseError(f"lease for request {request_id!r} is {lease.state.value}")
        return lease

    def _quarantine(self, lease: Lease, now: float) -> None:
        del self._leases[lease.request_id]
        lease.state = LeaseState.QUARANTINED
        lease.deadline = now + self.quarantine_s
        if self.quarantine_s <= 0:
            self._free(lease)
            return
        self._quarantined[lease.lease_id] = lease

    def _free(self, lease: Lease) -> None:
        self.pool.free(lease.block_ids)
        if lease.state == LeaseState.QUARANTINED:
            self._quarantined.pop(lease.lease_id, None)
        else:
            del self._leases[lease.request_id]
        lease.state = LeaseState.FREED


def _now(now: float | None) -> float:
    return time.monotonic() if now is None else now
