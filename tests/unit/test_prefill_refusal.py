"""A prefill worker refuses a prompt its whole queue (every gateway's prompts) would make late:
with several gateways none sees the others' prompts, so the worker's own check decides."""

from __future__ import annotations

import pytest

from common.engine.config import EngineConfig
from common.engine.core import AdmissionError, EngineCore
from common.model.sampling_params import SamplingParams
from common.slo.cost_models import CostModels, DecodeModel, PrefillModel
from common.slo.ttft_margins import left_for_worker_ms
from prefill_worker.copy_times import CopyTimes

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
    # due before the queued prompts: it goes first (least slack first), so only its own 12 ms count for
    # it (and the queued ones, still on time with its tokens before theirs, do not refuse it)
    core.add_request("urgent", [0] * 100, PARAMS, prefill_only=True, ttft_slo_ms=40, ttft_left_ms=40)
    # no TTFT SLO: never refused
    core.add_request("no-slo", [0] * 3000, PARAMS, prefill_only=True)
    assert {r.request_id for r in core.scheduler.waiting} == {"other-gateway", "in-time", "urgent", "no-slo"}


def test_without_a_ttft_guard_nothing_is_refused():
    core = _engine("fcfs")
    core.add_request("a", [0] * 3000, PARAMS, prefill_only=True, ttft_slo_ms=200, ttft_left_ms=200)
    core.add_request("b", [0] * 1000, PARAMS, prefill_only=True, ttft_slo_ms=300, ttft_left_ms=1)
    assert len(core.scheduler.waiting) == 2


def test_the_check_keeps_time_for_the_prompts_kv_copy():
    copies = CopyTimes(clock=lambda: 0.0)
    assert copies.left_for_compute_ms(65, 10) == 65  # no copy seen yet: nothing kept aside
    for seconds in (0.010, 0.010, 0.020):  # 1, 1 and 2 ms a block
        copies.copied(10, seconds)
    assert copies.expected_ms(10) == pytest.approx(20)  # the high quantile: 2 ms a block
    assert copies.left_for_compute_ms(0, 10) == 0  # no TTFT budget stays none
    core = _engine("scorpio")
    # 1000 tokens compute in 30 ms: in time with 45 ms left, late once 20 ms of copy are kept aside
    core.add_request("fits", [0] * 1000, PARAMS, prefill_only=True, ttft_slo_ms=300, ttft_left_ms=45)
    with pytest.raises(AdmissionError):
        core.add_request("late", [0] * 1000, PARAMS, prefill_only=True, ttft_slo_ms=300,
                         ttft_left_ms=copies.left_for_compute_ms(45, 10))


def test_the_worker_is_told_its_budget_less_the_calls_overhead():
    assert left_for_worker_ms(deadline=10.5, now=10.0, overhead_s=0.1) == pytest.approx(400)
    assert left_for_worker_ms(deadline=10.05, now=10.0, overhead_s=0.1) == 0.001  # late already: refused there


def test_the_worker_is_told_its_budget_under_the_guards_margin():
    # the guard admits (own time + 0.1 s) x 1.25 within 0.5 s: own time up to 0.3 s
    assert left_for_worker_ms(deadline=10.5, now=10.0, overhead_s=0.1, margin=1.25) == pytest.approx(300)
    # a margin under one loosens only the guard: the worker keeps the time really left
    assert left_for_worker_ms(deadline=10.5, now=10.0, overhead_s=0.1, margin=0.6) == pytest.approx(400)


def test_a_prompt_that_would_make_a_queued_one_late_is_refused():
    core = _engine("scorpio")
    # another gateway's prompt: 2000 tokens (50 ms), due in 60 ms: on time alone
    core.add_request("queued", [0] * 2000, PARAMS, prefill_only=True, ttft_slo_ms=300, ttft_left_ms=60)
    # due sooner, so it would go first: itself in time (10 + 10 ms), but the queued one then needs 60 ms + a forward
    with pytest.raises(AdmissionError, match="queued"):
        core.add_request("pusher", [0] * 500, PARAMS, prefill_only=True, ttft_slo_ms=50, ttft_left_ms=50)
    # a smaller one leaves the queued prompt on time (one forward of 2100 tokens: 52 ms)
    core.add_request("small", [0] * 100, PARAMS, prefill_only=True, ttft_slo_ms=50, ttft_left_ms=50)
    assert {r.request_id for r in core.scheduler.waiting} == {"queued", "small"}


def test_a_queued_prompt_late_already_refuses_nobody():
    core = _engine("scorpio")
    # computed here (not a prefill worker's call, so not checked): due in 20 ms, needs 50
    core.add_request("late", [0] * 2000, PARAMS, ttft_slo_ms=300, ttft_left_ms=20)
    core.add_request("before-it", [0] * 100, PARAMS, prefill_only=True, ttft_slo_ms=15, ttft_left_ms=15)
    assert {r.request_id for r in core.scheduler.waiting} == {"late", "before-it"}
