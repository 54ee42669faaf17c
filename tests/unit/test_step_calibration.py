"""The decode cost model is corrected by the step *period* a request experiences, not by the
forward alone: work between steps (handling calls, delivering outputs, other processes on the
same cores) is part of every token's wait."""

from __future__ import annotations

import pytest

from common.engine.config import EngineConfig
from common.engine.core import EngineCore
from common.model.sampling_params import SamplingParams
from common.slo.cost_models import CostModels, DecodeModel, PrefillModel

BETWEEN_STEPS_S = 0.02


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _engine(predicted_step_s: float, clock: Clock) -> EngineCore:
    """The engine's scheduling, leases and cost models on ``clock`` (``LLMEngine.step`` is this
    core's ``schedule_step``, a forward and its ``finish_step``)."""
    engine = EngineCore(EngineConfig(num_kv_blocks=64, policy="scorpio"), 64, 2048, vocab_size=1000,
                        eos_token_ids=(), clock=clock)
    engine.cost_models = CostModels(PrefillModel(0, 0.001, 0.0), DecodeModel(0.0, 0.0, 0.0, predicted_step_s))
    return engine


def _step(engine: EngineCore, clock: Clock, forward_s: float) -> None:
    """One step whose forward takes ``forward_s``, every scheduled request sampling token 7."""
    _, batch = engine.schedule_step()
    started = clock.now
    clock.now += forward_s
    engine.finish_step(batch, {s.request_id: 7 for s in batch.seqs if s.sample}, started, clock.now)


def test_decode_calibration_counts_the_time_between_steps():
    clock = Clock()
    engine = _engine(predicted_step_s=0.001, clock=clock)
    engine.add_request("r", [1, 2, 3, 4], SamplingParams(max_tokens=8, ignore_eos=True))
    _step(engine, clock, 0.001)  # the prompt
    while engine.has_unfinished_requests():
        clock.now += BETWEEN_STEPS_S  # e.g. the engine thread handling calls between steps
        _step(engine, clock, 0.001)  # a forward as fast as the model says
    # each period is at least 20 ms against a 1 ms model
    assert engine.step_costs.calibration.ratio >= BETWEEN_STEPS_S / 0.001
    # and so in the histogram of every step's ratio: 7 decode steps (the first token came with the
    # prompt), each at least 20x, so past the bucket of 10x; the prompt's one forward in its own
    steps = engine.step_costs.ratios.cumulative()
    assert steps[-1][1] == 7 and dict(steps)[10.0] == 0
    assert engine.forward_ratios.cumulative()[-1][1] == 1
    engine.check_integrity()


def test_an_idle_engine_does_not_count_its_idle_time_as_a_step():
    clock = Clock()
    engine = _engine(predicted_step_s=0.05, clock=clock)  # far slower than a real step of this model
    engine.step_costs.calibration.spread = 0.0
    engine.add_request("a", [1, 2, 3], SamplingParams(max_tokens=3, ignore_eos=True))
    while engine.has_unfinished_requests():
        _step(engine, clock, 0.002)
    clock.now += 0.3  # nothing to do: the engine thread would block here
    # a decode worker's request starts with a decode step (its prompt KV was written by a prefill worker)
    lease = engine.reserve("b", 3, 3)
    assert lease is not None
    engine.commit("b", lease.lease_id, [1, 2, 3], 7, SamplingParams(max_tokens=3, ignore_eos=True))
    while engine.has_unfinished_requests():
        _step(engine, clock, 0.002)
    # had the idle 300 ms been taken for a step period (6x the model) among these few steps, the
    # mean ratio would exceed 1; counted right, real steps (a few ms) scale the model down
    assert engine.step_costs.calibration.ratio < 1.0
    engine.check_integrity()


def test_a_worker_refits_its_decode_model_from_the_steps_it_runs():
    """Steps logged across batch sizes and lengths refit the model; a refit needs enough of them."""
    from common.slo.cost_models import DecodeModel
    from common.slo.refit import REFIT_PERIOD_S, StepLog

    truth = DecodeModel(alpha=2e-8, beta=3e-4, gamma=4e-6, delta=0.002, knee=8)
    log = StepLog()
    assert not log.refit_due(0.0)
    for batch in (1, 2, 4):
        log.observe(batch, 300.0, truth.predict(batch, 300.0))
    assert log.refit(REFIT_PERIOD_S) is None  # three bins: too few to trust
    for batch in (1, 2, 4, 8, 16, 32):
        for length in (100.0, 400.0, 900.0):
            for _ in range(4):
                log.observe(batch, length, truth.predict(batch, length))
    assert log.refit_due(2 * REFIT_PERIOD_S)  # 10 s and 72 new steps since the last refit
    refit = log.refit(2 * REFIT_PERIOD_S)
    assert refit is not None and refit.knee == 8
    assert refit.predict(24, 500.0) == pytest.approx(truth.predict(24, 500.0), rel=0.02)


def test_a_refit_after_a_quiet_spell_takes_the_profiles_shape_past_the_batches_it_ran():
    """Batches of 1-3, the largest a little slow (the machine was busy), fit alone extrapolate a
    slope from that noise to large batches; anchored on the start-up profile past the largest
    batch run, the refit keeps the profile's shape there at the scale the steps showed."""
    from common.slo.cost_models import DecodeModel
    from common.slo.refit import StepLog

    profile = DecodeModel(alpha=4e-7, beta=1e-4, gamma=2e-7, delta=0.002)

    def quiet_spell() -> StepLog:
        log = StepLog()
        for batch, slower in ((1, 1.4), (2, 1.4), (3, 1.4 * 1.3)):
            for length in (100.0, 300.0):
                for _ in range(5):
                    log.observe(batch, length, profile.predict(batch, length) * slower)
        return log

    alone, anchored = quiet_spell().refit(100.0), quiet_spell().refit(100.0, profile, max_batch=64)
    assert alone is not None and anchored is not None
    expected = profile.predict(16, 300.0) * 1.4 * 1.3  # the scale the largest batch run showed
    assert anchored.predict(16, 300.0) == pytest.approx(expected, rel=0.1)
    assert alone.predict(16, 300.0) > 2 * expected  # what the guard would have refused large batches on
    for batch in (1, 2):  # where steps were observed, they decide
        assert anchored.predict(batch, 300.0) == pytest.approx(profile.predict(batch, 300.0) * 1.4, rel=0.2)
