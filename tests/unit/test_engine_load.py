"""What other threads read of a live engine (``LLMEngine.load``), and the typed calls an event
loop makes into it (``AsyncEngine``)."""

from __future__ import annotations

import dataclasses

import pytest

from common.engine.config import EngineConfig
from common.engine.leases import LeaseError
from common.engine.llm_engine import AdmissionError, LLMEngine
from common.model.sampling_params import SamplingParams
from common.engine.async_engine import AsyncEngine
from common.engine.thread import EngineThread
from common.slo.cost_models import CostModels, DecodeModel, PrefillModel

PARAMS = SamplingParams(max_tokens=3, ignore_eos=True)


def test_the_load_snapshot_is_replaced_after_every_call_and_step_and_never_changed():
    engine = LLMEngine(EngineConfig(num_kv_blocks=64, quarantine_s=0.0))
    idle = engine.load
    assert (idle.running, idle.waiting, idle.reserved, idle.in_flight, idle.free_blocks) == (0, 0, 0, 0, 64)
    lease = engine.reserve("b", 3, 3, tpot_slo_ms=50.0)
    assert lease is not None
    reserved = engine.load
    assert (reserved.reserved, reserved.in_flight, reserved.free_blocks) == (1, 1, 63)
    assert dict(reserved.tpot_slos) == {"b": 0.05}  # the lease's SLO counts before its commit
    assert idle.reserved == 0 and idle.free_blocks == 64  # a snapshot already read stays as it was
    with pytest.raises(dataclasses.FrozenInstanceError):
        reserved.running = 5  # type: ignore[misc]
    engine.commit("b", lease.lease_id, [1, 2, 3], 7, PARAMS, tpot_slo_ms=50.0)
    engine.add_request("a", [1, 2, 3, 4, 5], PARAMS, ttft_slo_ms=1000.0)
    queued = engine.load
    assert (queued.reserved, queued.waiting, queued.in_flight) == (0, 2, 2)
    assert queued.queued_tokens == 5 + 1  # a's prompt; b's first token, its prompt KV written already
    assert queued.earliest_ttft_deadline is not None
    engine.step()
    running = engine.load
    assert (running.running, running.waiting, running.steps) == (2, 0, engine.steps_completed)
    assert dict(running.tpot_slos) == {"b": 0.05}
    assert running.mean_len == pytest.approx((5 + 1 + 4 + 1) / 2) and running.earliest_ttft_deadline is None
    while engine.has_unfinished_requests():
        engine.step()
    assert (engine.load.running, engine.load.in_flight, engine.load.free_blocks) == (0, 0, 64)
    assert not engine.load.tpot_slos and engine.load.kv_usage == 0.0
    # an abort takes the reservation (quarantined: its writer may still write; for no time here)
    assert engine.reserve("c", 3, 3) is not None and engine.abort("c") and not engine.abort("unknown")
    assert (engine.load.reserved, engine.load.in_flight, engine.load.free_blocks) == (0, 0, 64)
    engine.check_integrity()


async def test_typed_engine_calls_return_their_results_and_raise_the_engines_errors():
    engine = LLMEngine(EngineConfig(num_kv_blocks=64, policy="scorpio"))
    engine.cost_models = CostModels(PrefillModel(0, 0.001, 0.0), DecodeModel(0.0, 0.0, 0.0, 1.0))  # 1 s a step
    thread = EngineThread(engine)
    thread.start()
    calls = AsyncEngine(thread)
    try:
        with pytest.raises(AdmissionError):
            await calls.reserve("slow", 3, 3, tpot_slo_ms=10.0)
        with pytest.raises(ValueError, match="prompt is empty"):
            await calls.reserve("empty", 0, 3)
        lease = await calls.reserve("a", 3, 3)
        assert lease is not None
        with pytest.raises(LeaseError):
            await calls.commit("a", "not-the-lease", [1, 2, 3], 7, PARAMS)
        assert not await calls.release_reservation("a", "not-the-lease", writer_may_still_write=False)
        assert await calls.release_reservation("a", lease.lease_id, writer_may_still_write=False)
        lease = await calls.reserve("b", 3, 3)
        assert lease is not None
        await calls.commit("b", lease.lease_id, [1, 2, 3], 7, PARAMS)
        assert await calls.abort("b") and not await calls.abort("unknown")
        assert not await calls.release_held("unknown")
    finally:
        thread.stop()
    assert engine.load.in_flight == 0 and engine.load.free_blocks == 64
    engine.check_integrity()


def test_a_decode_worker_admits_past_its_batch_only_where_a_place_frees_before_the_prefill():
    """Running and reserved requests both count: one more than ``max_batch_size`` would wait for a
    place in the batch after its first token, unless one is projected to free before its KV can
    be committed (at least a prefill forward's fixed cost away). 10 ms steps; "a" has 2 tokens to go,
    so its place frees in 20 ms."""
    engine = LLMEngine(EngineConfig(num_kv_blocks=64, policy="scorpio", max_batch_size=2))
    decode = DecodeModel(0.0, 0.0, 0.0, 0.010)  # 10 ms a step
    engine.cost_models = CostModels(PrefillModel(0, 0.001, 0.0), decode)  # a forward: 1 ms at least
    first = engine.reserve("a", 3, 4, tpot_slo_ms=50.0)
    engine.commit("a", first.lease_id, [1, 2, 3], 7, PARAMS, tpot_slo_ms=50.0)  # 3 tokens, the first out
    assert engine.reserve("b", 3, 4, tpot_slo_ms=50.0) is not None  # a place at once
    with pytest.raises(AdmissionError):
        engine.reserve("c", 3, 4, tpot_slo_ms=50.0)  # a's place frees in 20 ms, c could commit in 1
    engine.cost_models = CostModels(PrefillModel(0, 0.025, 0.0), decode)  # a forward: 25 ms at least
    assert engine.reserve("c", 3, 4, tpot_slo_ms=50.0) is not None
    assert engine.reserve("d", 3, 4) is not None  # no TPOT SLO: nothing to promise, never refused


def _steps_ran_slower_than_predicted(engine: LLMEngine, factor: float) -> None:
    """The evidence that bounds ε (``StepEvidence``): steps of ``factor`` times their calibrated
    prediction, as many as its window keeps."""
    for _ in range(64):
        engine.step_costs.evidence.observe(2, 0.010, 0.010 * factor)


def test_each_request_here_is_held_to_the_margin_of_its_own_tpot_class():
    """ε comes with each reservation, steered per TPOT SLO class by the gateway: a request already
    here is held to its class's latest ε, not to the newcomer's."""
    def holding_a_30_ms_request(epsilon: float) -> LLMEngine:
        engine = LLMEngine(EngineConfig(num_kv_blocks=64, policy="scorpio", max_batch_size=8))
        engine.cost_models = CostModels(PrefillModel(0, 0.001, 0.0), DecodeModel(0.0, 0.010, 0.0, 0.0))  # 10 ms a VBS
        _steps_ran_slower_than_predicted(engine, 2.5)  # what lets ε rise past its start
        assert engine.reserve("a", 3, 20, tpot_slo_ms=30.0, epsilon=epsilon) is not None  # alone: 10 ms x ε
        return engine

    # a 50 ms request joins: VBS 1 + 30/50, "a" steps at 16 ms (x 1.5 = 24 ms kept, x 2 = 32 ms not);
    # the newcomer itself needs 20 ms a token (x 1.0, its class's ε) of its 50
    assert holding_a_30_ms_request(1.5).reserve("b", 3, 20, tpot_slo_ms=50.0, epsilon=1.0) is not None
    strict = holding_a_30_ms_request(2.0)
    with pytest.raises(AdmissionError):
        strict.reserve("b", 3, 20, tpot_slo_ms=50.0, epsilon=1.0)
    assert strict.tpot_margin(0.030) == 2.0 and strict.tpot_margin(0.050) == 1.0 and strict.tpot_margin(0.015) == 1.3


def test_a_tpot_refusal_says_whether_the_margin_alone_refused():
    """Refused under its class's ε, a request that ε probed lower would admit was refused by the
    margin alone (the gateway relaxes that ε); one the work here cannot fit was not."""
    engine = LLMEngine(EngineConfig(num_kv_blocks=64, policy="scorpio", max_batch_size=8))
    engine.cost_models = CostModels(PrefillModel(0, 0.001, 0.0), DecodeModel(0.0, 0.010, 0.0, 0.0))  # 10 ms a VBS
    _steps_ran_slower_than_predicted(engine, 2.5)
    assert engine.reserve("a", 3, 20, tpot_slo_ms=30.0, epsilon=1.0) is not None
    # with "b" (30 ms too): VBS 2, 20 ms a step; x 1.6 = 32 ms refuses, x 1.6 / 1.2 = 26.7 ms would not
    with pytest.raises(AdmissionError) as by_margin:
        engine.reserve("b", 3, 20, tpot_slo_ms=30.0, epsilon=1.6)
    assert by_margin.value.margin_alone
    with pytest.raises(AdmissionError) as by_work:  # 20 ms x 2.0 / 1.2 = 33 ms: refused still
        engine.reserve("c", 3, 20, tpot_slo_ms=30.0, epsilon=2.0)
    assert not by_work.value.margin_alone
    assert engine.tpot_margin(0.030) == 2.0  # the class's ε as sent, not the probe's
