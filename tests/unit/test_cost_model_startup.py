"""A worker's cost models at start-up: measured once, cached per what decides them, and an idle
worker that admits by what it measured, not by a model's word alone."""

from __future__ import annotations

import json

import pytest

from common.engine.config import EngineConfig
from common.engine.llm_engine import LLMEngine
from common.worker import startup
from common.slo.cost_models import CostModels, DecodeModel, PrefillModel


@pytest.fixture(scope="module")
def engine() -> LLMEngine:
    return LLMEngine(EngineConfig(num_kv_blocks=256, policy="scorpio"))


SOUND = CostModels(PrefillModel(0, 0.002, 1e-4, r2=0.99, worst_ratio=1.1), DecodeModel(1e-9, 1e-4, 0, 0.0015, 0.98, 1.1))
UNSOUND = CostModels(SOUND.prefill, DecodeModel(1e-9, 1e-4, 0, 0.0015, 0.2, 1.8))


def test_a_sound_fit_is_cached_and_the_next_start_loads_it_instead_of_measuring(engine, tmp_path, monkeypatch):
    measured = []
    monkeypatch.setattr(startup, "profile_checked", lambda *a, **k: measured.append(1) or SOUND)
    assert startup.cost_models_at_start(engine, cache=str(tmp_path)) == SOUND
    assert [p.name for p in tmp_path.iterdir()] == [f"{startup.cache_key(engine)}.json"]
    assert startup.cost_models_at_start(engine, cache=str(tmp_path)) == SOUND
    assert len(measured) == 1
    startup.cost_models_at_start(engine, cache="off")
    assert len(measured) == 2


def test_an_unsound_fit_is_used_but_never_cached(engine, tmp_path, monkeypatch):
    monkeypatch.setattr(startup, "profile_checked", lambda *a, **k: UNSOUND)
    assert startup.cost_models_at_start(engine, cache=str(tmp_path)) == UNSOUND
    assert not list(tmp_path.iterdir())


def test_the_cache_key_changes_with_what_decides_the_figures(engine, monkeypatch):
    import torch

    key = startup.cache_key(engine)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        assert startup.cache_key(engine) != key
    finally:
        torch.set_num_threads(threads)
    assert startup.cache_key(engine) == key
    monkeypatch.setattr(startup, "PROFILE_VERSION", startup.PROFILE_VERSION + 1)
    assert startup.cache_key(engine) != key


def test_an_unreadable_cost_model_file_is_refused_with_its_name(engine, tmp_path):
    bad = tmp_path / "model.json"
    bad.write_text(json.dumps({"prefill": {"threshold": 0}}))
    with pytest.raises(ValueError, match="model.json"):
        startup.cost_models_at_start(engine, path=str(bad))


def test_an_idle_decode_worker_admits_by_its_unloaded_step_not_by_a_model_50x_too_slow(engine):
    from common.model.sampling_params import SamplingParams
    from common.worker.profile import unloaded_step_seconds

    engine.unloaded_step_s = unloaded_step_seconds(engine)
    slow = DecodeModel(0.0, 0.0, 0.0, 50 * engine.unloaded_step_s)
    engine.cost_models = CostModels(PrefillModel(0, 0.001, 0.0), slow)
    tpot_ms = engine.unloaded_step_s * 1000 * 3  # easily met alone; the model says 50x the step
    try:
        assert engine.tpot_admits(tpot_ms, 8, 64)  # idle: the measured step decides
        assert engine.tpot_admits(engine.unloaded_step_s * 1000, 8, 64)  # at it: admitted, under no margin
        assert not engine.tpot_admits(engine.unloaded_step_s * 900, 8, 64)  # below what it measured: refused
        # a handoff ahead of it (the gateway's figure) counts, over its 63 decoded tokens
        handoff_s = engine.unloaded_step_s * 63 * 0.5
        assert not engine.tpot_admits(engine.unloaded_step_s * 1000 * 1.49, 8, 64, handoff_s=handoff_s)
        assert engine.tpot_admits(engine.unloaded_step_s * 1000 * 1.51, 8, 64, handoff_s=handoff_s)
        lease = engine.reserve("r", 8, 64, tpot_slo_ms=tpot_ms, handoff_s=handoff_s)
        assert lease is not None
        assert [d.lag_s for d in engine.decodings()] == [handoff_s]  # its projection carries it until it decodes
        assert not engine.tpot_admits(tpot_ms, 8, 64)  # one reserved: no longer idle, the model (uncorrected) decides
        engine.commit("r", lease.lease_id, list(range(1, 9)), 5, SamplingParams(max_tokens=64, ignore_eos=True),
                      tpot_slo_ms=tpot_ms)
        # steps observed at the measured step's time scale the model down (observed, not timed here:
        # the steps' real periods on a shared CPU would make the figures below the machine's noise)
        for i in range(40):
            engine.observe_decode_step(1, 9 + i, engine.unloaded_step_s)
        # now a second request is admitted beside the first
        assert engine.step_costs.calibration.ratio < 0.2
        assert 1 / 1.5 <= engine.step_costs.prediction_error <= 1.5
        assert engine.tpot_admits(tpot_ms, 8, 64)
    finally:
        engine.abort_request("r")
        while engine.has_unfinished_requests():
            engine.step()
        engine.cost_models = None
    engine.check_integrity()
