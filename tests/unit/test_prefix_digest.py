"""A prefill worker's prefix digest kept in step at the gateway, and what routing makes of it."""

from __future__ import annotations

from common.slo.load_report import LoadReport
from common.engine.block_pool import BlockPool
from common.engine.prefix_cache import PrefixIndex, chain_hashes
from common.worker.prefix_digest import DigestPublisher
from gateway.prefix_view import PrefixView, PromptBlocks
from wire.v1 import worker_pb2

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
    publisher, view = DigestPublisher(index).subscribe(), PrefixView(B, SALT)
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


def test_every_gateway_keeps_a_whole_copy_of_one_cache_as_each_heartbeats_at_its_own_pace():
    """A worker heartbeats to several gateways: each subscription sends what changed since its own
    last digest, however often the others drain the index, and one that joins late starts with a
    snapshot that leaves the others' changes in place."""
    index = PrefixIndex()
    pool = BlockPool(8, index)
    publisher = DigestPublisher(index)
    a, b = publisher.subscribe(), publisher.subscribe()
    view_a, view_b = PrefixView(B, SALT), PrefixView(B, SALT)
    view_a.apply(a.next())
    view_b.apply(b.next())
    _cache_prompt(pool, list(range(64)))
    view_a.apply(a.next())  # a hears twice ...
    _cache_prompt(pool, [7] * 80)  # (evicts one of the first prompt's blocks)
    view_a.apply(a.next())
    late = publisher.subscribe()  # a gateway that joins now
    view_late = PrefixView(B, SALT)
    view_late.apply(late.next())
    _cache_prompt(pool, [5] * 32)
    view_b.apply(b.next())  # ... b once, after everything
    view_a.apply(a.next())
    view_late.apply(late.next())
    held = set(index.held())
    assert len(held) == 8
    for view in (view_a, view_b, view_late):
        assert view.in_step and view.hashes == held
    publisher.unsubscribe(b)
    _cache_prompt(pool, [6] * 32)
    view_a.apply(a.next())
    assert view_a.hashes == set(index.held())


def test_a_prompt_finds_the_leading_run_of_its_blocks_and_never_its_last_token():
    index = PrefixIndex()
    pool = BlockPool(16, index)
    history = list(range(100, 164))  # 4 full blocks
    _cache_prompt(pool, history)
    view = PrefixView(B, SALT)
    view.apply(DigestPublisher(index).subscribe().next())
    assert PromptBlocks(history + [1, 2, 3]).cached_tokens(view) == 64
    assert PromptBlocks(history).cached_tokens(view) == 48, "the last token (in block 4) is computed"
    changed = history[:20] + [0] + history[21:]
    assert PromptBlocks(changed).cached_tokens(view) == 16, "the run stops at the first block that differs"
    assert PromptBlocks(history + [1]).uncached_tokens(PrefixView(B, SALT + 1)) == 65, "another model: no hit"
    assert PromptBlocks(history + [1]).cached_tokens(None) == 0


def _prefill_record(worker_id: str, cached: list[int]):  # type: ignore[no-untyped-def]
    from common.rpc.convert import prefill_model_from_proto
    from common.slo.class_margins import ClassMargins
    from common.slo.ttft_guard import TtftGuard
    from gateway.registry import WorkerRecord

    cost = worker_pb2.CostModel(present=True, prefill_threshold=0, prefill_base_s=0.010, prefill_per_token_s=1e-4)
    descriptor = worker_pb2.WorkerDescriptor(worker_id=worker_id, role="prefill", cost_model=cost, block_size=B,
                                             prefix_salt=SALT)
    record = WorkerRecord(descriptor=descriptor, load=LoadReport(), last_seen=0.0, heard_at=0.0, channel=None, stub=None, ready=True,  # type: ignore[arg-type]
                          ttft=TtftGuard(prefill_model_from_proto(cost), 0, headrooms=ClassMargins(1.0)),
                          prefix=PrefixView(B, SALT))
    record.prefix.apply(worker_pb2.PrefixDigest(seq=1, snapshot=True, stored=cached))
    record.guard.calibration.observe(0.010, 0.010)
    return record


def _cold_and_warm():  # type: ignore[no-untyped-def]
    """Two prefill workers, "p0" holding nothing, "p1" a 10-block history; the prompt that follows it."""
    from gateway.registry import WorkerRegistry

    history = list(range(300, 460))  # 10 blocks
    registry = WorkerRegistry(1.5)
    cold, warm = _prefill_record("p0", []), _prefill_record("p1", chain_hashes(history, B, SALT))
    registry.workers = {"p0": cold, "p1": warm}
    return registry, warm, PromptBlocks(history + [1, 2, 3])


def test_both_routers_send_a_prompt_where_its_prefix_is_cached_and_round_robin_does_not_look():
    from gateway.router import router_for

    registry, warm, prompt = _cold_and_warm()
    for ttft_guard in (True, False):
        assert [w.worker_id for w in router_for(ttft_guard).prefill_candidates(registry, prompt)] == ["p1", "p0"]
    # a long enough queue outweighs the hit: 5,000 tokens ahead on the warm worker
    warm.guard.heard(5000, 1)
    assert [w.worker_id for w in router_for(True).prefill_candidates(registry, prompt)] == ["p0", "p1"]
    rr = router_for(True, "round_robin")
    assert [rr.prefill_candidates(registry, prompt)[0].worker_id for _ in range(4)] == ["p0", "p1", "p0", "p1"]


def test_least_loaded_routing_counts_no_answered_call_a_heartbeat_still_reports():
    from gateway.router import router_for

    registry, warm, prompt = _cold_and_warm()
    fcfs = router_for(False)
    # the previous turn, 163 tokens, was queued on the warm worker when it last heartbeat
    warm.guard.sent("turn-1", float("inf"), 163)
    warm.load = LoadReport(queued_tokens=163, running=1)
    warm.guard.heard(163, 1)
    assert [w.worker_id for w in fcfs.prefill_candidates(registry, prompt)] == ["p0", "p1"], "163 + 3 queued behind it"
    warm.guard.answered("turn-1", 0.02, 0.02, 0.015)  # its answer came: the report now speaks of nothing queued
    assert [w.worker_id for w in fcfs.prefill_candidates(registry, prompt)] == ["p1", "p0"]
    # another gateway's queue, as reported, still counts
    warm.guard.heard(5000, 1)
    assert [w.worker_id for w in fcfs.prefill_candidates(registry, prompt)] == ["p0", "p1"]


def test_a_decode_worker_holding_the_conversation_wins_where_load_ties():
    from common.slo.tpot_guard import DecodeView
    from gateway.registry import WorkerRecord, WorkerRegistry
    from gateway.router import router_for

    history = list(range(500, 660))  # 10 blocks
    registry = WorkerRegistry(1.5)
    for worker_id, free, cached in (("d0", 100, []), ("d1", 95, chain_hashes(history, B, SALT))):
        descriptor = worker_pb2.WorkerDescriptor(worker_id=worker_id, role="decode", block_size=B, prefix_salt=SALT)
        record = WorkerRecord(descriptor=descriptor, load=LoadReport(free_blocks=free), last_seen=0.0, heard_at=0.0, channel=None, stub=None,  # type: ignore[arg-type]
                              ready=True, decode_view=DecodeView(), prefix=PrefixView(B, SALT))
        record.prefix.apply(worker_pb2.PrefixDigest(seq=1, snapshot=True, stored=cached))
        registry.workers[worker_id] = record
    prompt = PromptBlocks(history + [7] * 20)
    for ttft_guard in (True, False):
        router = router_for(ttft_guard)
        assert [w.worker_id for w in router.decode_candidates(registry, 0.0, prompt)] == ["d1", "d0"]
        assert [w.worker_id for w in router.decode_candidates(registry, 0.0)] == ["d0", "d1"], "more free blocks"
    registry.workers["d1"].view.routed["another"] = 0.0  # load first: a busier worker loses whatever it holds
    assert [w.worker_id for w in router_for(False).decode_candidates(registry, 0.0, prompt)] == ["d0", "d1"]
