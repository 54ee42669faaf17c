"""The decode cost model is corrected by the step *period* a request experiences, not by the
forward alone: work between steps (handling calls, delivering outputs, other processes on the
same cores) is part of every token's wait."""

from __future__ import annotations

import time

import pytest

from common.engine.config import EngineConfig
from common.engine.llm_engine import LLMEngine
from common.engine.sampling_params import SamplingParams
from common.slo.cost_models import CostModels, DecodeModel, PrefillModel

BETWEEN_STEPS_S = 0.02


def _engine(predicted_step_s: float) -> LLMEngine:
    engine = LLMEngine(EngineConfig(num_kv_blocks=64, policy="scorpio"))
    engine.cost_models = CostModels(PrefillModel(0, 0.001, 0.0), DecodeModel(0.0, 0.0, 0.0, predicted_step_s))
    return engine


def test_decode_calibration_counts_the_time_between_steps():
    engine = _engine(predicted_step_s=0.001)
    engine.add_request("r", [1, 2, 3, 4], SamplingParams(max_tokens=8, ignore_eos=True))
    engine.step()  # the prompt
    while engine.has_unfinished_requests():
        time.sleep(BETWEEN_STEPS_S)  # e.g. the engine thread handling calls between steps
        engine.step()
    # each period is at least 20 ms against a 1 ms model
    assert engine.step_calibration.ratio >= BETWEEN_STEPS_S / 0.001
    engine.check_integrity()


def test_an_idle_engine_does_not_count_its_idle_time_as_a_step():
    engine = _engine(predicted_step_s=0.05)  # far slower than a real step of this model
    engine.step_calibration.spread = 0.0
    engine.add_request("a", [1, 2, 3], SamplingParams(max_tokens=3, ignore_eos=True))
    while engine.has_unfinished_requests():
        engine.step()
    time.sleep(0.3)  # nothing to do: the engine thread would block here
    # a decode worker's request starts with a decode step (its prompt KV was written by a prefill worker)
    lease = engine.reserve("b", 3, 3)
    assert lease is not None
    engine.commit("b", lease.lease_id, [1, 2, 3], 7, SamplingParams(max_tokens=3, ignore_eos=True))
    while engine.has_unfinished_requests():
        engine.step()
    # had the idle 300 ms been taken for a step period (6x the model) among these few steps, the
    # mean ratio would exceed 1; counted right, real steps (a few ms) scale the model down
    assert engine.step_calibration.ratio < 1.0
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
