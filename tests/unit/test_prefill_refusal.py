"""A prefill worker refuses a prompt its whole queue (every gateway's prompts) would make late:
with several gateways none sees the others' prompts, so the worker's own check decides."""

from __future__ import annotations

import pytest

from common.engine.config import EngineConfig
from common.engine.core import AdmissionError, EngineCore
from common.model.sampling_params import SamplingParams
from common.slo.cost_models import CostModels, DecodeModel, PrefillModel

# 10 ms a forward plus 20 µs a prompt token
MODELS = CostModels(PrefillModel(0, 0.010, 2e-5), DecodeModel(0.0, 0.0, 0.0, 0.005))
PARAMS = SamplingParams(max_tokens=1, ignore_eos=True)


def _engine(policy: str) -> EngineCore:
    config = EngineConfig(policy=policy, max_num_tokens=4096, enable_prefix_caching=False)
    core = EngineCore(config, 4096, 8192, vocab_size=1, eos_token_ids=(), clock=lambda: 0.0)
    core.cost_models = MODELS
    return core


def test_a_prompt_is_refused_when_the_prompts_due_before_it_would_make_it_late():
    core = _engine("scorpio")
    # another gateway's prompt, due in 60 ms: 10 + 40 ms
    core.add_request("other-gateway", [0] * 2000, PARAMS, prefill_only=True, ttft_slo_ms=200, ttft_left_ms=60)
    # due after it: 2000 + 1000 tokens, 70 ms; due in 65 ms: late
    with pytest.raises(AdmissionError, match="prefill worker"):
        core.add_request("late", [0] * 1000, PARAMS, prefill_only=True, ttft_slo_ms=300, ttft_left_ms=65)
    # due in 75 ms: in time
    core.add_request("in-time", [0] * 1000, PARAMS, prefill_only=True, ttft_slo_ms=300, ttft_left_ms=75)
    # due before the queued prompts: it goes first (least slack first), so only its own 30 ms count
    core.add_request("urgent", [0] * 1000, PARAMS, prefill_only=True, ttft_slo_ms=40, ttft_left_ms=40)
    # no TTFT SLO: never refused
    core.add_request("no-slo", [0] * 3000, PARAMS, prefill_only=True)
    assert {r.request_id for r in core.scheduler.waiting} == {"other-gateway", "in-time", "urgent", "no-slo"}


def test_without_a_ttft_guard_nothing_is_refused():
    core = _engine("fcfs")
    core.add_request("a", [0] * 3000, PARAMS, prefill_only=True, ttft_slo_ms=200, ttft_left_ms=200)
    core.add_request("b", [0] * 1000, PARAMS, prefill_only=True, ttft_slo_ms=300, ttft_left_ms=1)
    assert len(core.scheduler.waiting) == 2
