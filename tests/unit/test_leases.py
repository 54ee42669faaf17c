"""The reservation state machine: reserved -> committed | freed | quarantined -> freed."""

from __future__ import annotations

import pytest

from common.engine.block_pool import BlockPool
from common.engine.leases import LeaseError, LeaseState, LeaseTable


def test_commit_hands_the_blocks_to_the_request_and_forgets_the_lease():
    table = LeaseTable(BlockPool(8))
    lease = table.reserve("a", 3, now=0)
    assert table.commit("a", lease.lease_id).block_ids == lease.block_ids
    assert table.state("a") is None and table.pool.num_free == 5


def test_reservation_fails_without_taking_blocks_when_the_pool_is_short():
    table = LeaseTable(BlockPool(2))
    assert table.reserve("a", 3) is None and table.pool.num_free == 2


def test_an_expired_reservation_is_quarantined_then_freed():
    table = LeaseTable(BlockPool(8), lease_s=5, quarantine_s=2)
    lease = table.reserve("a", 4, now=0)
    assert table.expire(now=4.9) == []
    assert table.expire(now=5.0) == ["a"] and table.state("a") == LeaseState.QUARANTINED
    assert table.pool.num_free == 4  # not reused while a writer might still write
    with pytest.raises(LeaseError):
        table.commit("a", lease.lease_id)
    table.expire(now=7.0)
    assert table.state("a") is None and table.pool.num_free == 8
    table.pool.check_integrity()


def test_release_when_the_writer_may_still_write_quarantines_instead_of_freeing():
    table = LeaseTable(BlockPool(8), quarantine_s=3)
    lease = table.reserve("a", 2, now=0)
    assert table.release("a", lease.lease_id, writer_may_still_write=True, now=1)
    assert table.state("a") == LeaseState.QUARANTINED and table.pool.num_free == 6
    assert table.release("a", lease.lease_id, writer_may_still_write=False)  # writer known dead
    assert table.pool.num_free == 8


def test_commit_with_a_wrong_lease_id_is_refused():
    table = LeaseTable(BlockPool(8))
    table.reserve("a", 1)
    with pytest.raises(LeaseError):
        table.commit("a", "not-the-lease")


def test_a_lease_carries_its_tpot_slo_while_it_awaits_its_commit():
    table = LeaseTable(BlockPool(8), quarantine_s=3)
    a = table.reserve("a", 1, now=0, tpot_slo_ms=50.0)
    b = table.reserve("b", 1, now=0, tpot_slo_ms=80.0)
    table.reserve("c", 1, now=0)  # no TPOT SLO
    assert a is not None and a.tpot_slo_ms == 50.0
    assert table.tpot_slos_ms() == {"a": 50.0, "b": 80.0}
    table.commit("a", a.lease_id)  # the request now counts as running, not reserved
    assert b is not None and table.release("b", b.lease_id, writer_may_still_write=True, now=1)
    assert table.tpot_slos_ms() == {}  # quarantined: its blocks are held, but it will never decode here
    assert set(b.block_ids) <= set(table.held_blocks()) and table.pool.num_free == 5


def test_a_quarantine_ends_early_only_when_the_writer_is_known_done():
    table = LeaseTable(BlockPool(8), quarantine_s=3)
    lease = table.reserve("a", 2, now=0)
    table.release("a", None, writer_may_still_write=True, now=1)  # e.g. its stream closed
    # a second caller, still unsure whether the writer is done, must not free the blocks
    assert table.release("a", lease.lease_id, writer_may_still_write=True, now=2)
    assert table.state("a") == LeaseState.QUARANTINED and table.pool.num_free == 6
    # the writer's worker confirms no copy runs: the blocks come back at once
    assert table.release("a", lease.lease_id, writer_may_still_write=False, now=2)
    assert table.state("a") is None and table.pool.num_free == 8
    table.pool.check_integrity()


def test_a_request_whose_reservation_is_quarantined_may_reserve_again_at_once():
    """The gateway retrying a request whose prefill worker died mid-copy: the first reservation
    stays quarantined (its writer's fate unknown), the retry gets fresh blocks under the same id."""
    table = LeaseTable(BlockPool(8), quarantine_s=10)
    first = table.reserve("a", 2, now=0)
    assert first is not None and table.release("a", first.lease_id, writer_may_still_write=True, now=1)
    again = table.reserve("a", 3, now=1)
    assert again is not None and not set(again.block_ids) & set(first.block_ids)
    assert table.num_reserved() == 1 and table.pool.num_free == 3
    assert table.release("a", first.lease_id, writer_may_still_write=False)  # the old writer confirmed dead
    assert table.pool.num_free == 5 and table.state("a") == LeaseState.RESERVED
    assert table.commit("a", again.lease_id).block_ids == again.block_ids
    table.expire(now=20)
    assert table.pool.num_free == 5  # the retry's blocks are the request's now
    table.pool.check_integrity()


def test_a_caller_named_lease_keeps_its_name_and_a_name_still_held_is_refused():
    table = LeaseTable(BlockPool(8), quarantine_s=3)
    assert table.reserve("a", 2, lease_id="named-1").lease_id == "named-1"
    # a release by that name frees exactly it (what a caller whose Reserve got no reply sends)
    assert not table.release("a", "named-2", writer_may_still_write=False)
    assert table.pool.num_free == 6
    assert table.release("a", "named-1", writer_may_still_write=True, now=0)  # quarantined under its name
    with pytest.raises(LeaseError):
        table.reserve("b", 1, lease_id="named-1")
    assert table.reserve("a", 1, lease_id="named-3").lease_id == "named-3"  # the request itself may go on
