"""The TPOT guard's margin ε can never shut a decode worker out: an idle worker admits by its own
step under no margin, ε is bounded by what the worker's steps have shown and comes back down as
they age, and an SLO no load could meet is refused as such, not as load."""

from __future__ import annotations

import pytest

from common.engine.config import EngineConfig
from common.engine.core import AdmissionError, EngineCore
from common.slo.cost_models import CostModels, DecodeModel, PrefillModel
from common.slo.epsilon_bound import ALONE_FRESH_S, EVIDENCE_WINDOW_S, StepEvidence
from common.slo.class_margins import ClassMargins
from common.slo.tpot_guard import TPOT_MARGIN, never_met, never_met_anywhere

STEP_S = 0.035  # one request's step alone, as a real default-model decode worker measures it


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _core(clock: Clock) -> EngineCore:
    core = EngineCore(EngineConfig(num_kv_blocks=256, policy="scorpio", max_batch_size=8), 256, 2048, 1000, (0,),
                      clock=clock)
    # the model: 35 ms + 4 ms a request, as the default model's profile reads on a CPU core
    core.cost_models = CostModels(PrefillModel(0, 0.05, 0.0), DecodeModel(0.0, 0.004, 0.0, STEP_S - 0.004))
    core.unloaded_step_s = STEP_S
    return core


def test_an_idle_decode_worker_admits_by_its_own_step_whatever_the_margin_asks():
    core = _core(Clock())
    slo_ms = STEP_S * 1000 * 1.3  # tight: 1.3x the step alone
    lease = core.reserve("a", 256, 64, tpot_slo_ms=slo_ms, epsilon=1.84)  # the margin that locked the cluster
    assert lease is not None


def test_the_ceiling_a_worker_reports_is_what_its_steps_showed():
    """The ceiling rises past where ε starts only on steps that outran their predictions; the
    worker applies the ε a reservation carries (the gateway bounds it: ``ClassMargins.limit``)."""
    clock = Clock()
    core = _core(clock)
    assert core.epsilon_ceiling == TPOT_MARGIN  # nothing seen: ε may not pass where it starts
    for _ in range(64):  # a slow stretch: steps at 2x their calibrated prediction
        clock.now += 0.1
        core.step_costs.evidence.observe(4, 0.050, 0.100)
    assert core.epsilon_ceiling == pytest.approx(2.0)
    core.reserve("b", 256, 64, tpot_slo_ms=200.0, epsilon=2.5)
    assert core.tpot_margin(0.2) == pytest.approx(2.5)  # what the gateway asked, its evidence its own


def test_the_ceiling_comes_back_down_on_the_steps_run_after_a_slow_stretch():
    clock = Clock()
    evidence = StepEvidence(clock)
    for _ in range(100):
        clock.now += 0.05
        evidence.observe(4, 0.050, 0.092)  # an overload: 1.84x the prediction
    assert evidence.ceiling(TPOT_MARGIN) == pytest.approx(1.84)
    steps = 0
    while evidence.ceiling(TPOT_MARGIN) > TPOT_MARGIN:  # the load gone: steps as predicted
        clock.now += 0.05
        evidence.observe(1, 0.035, 0.034)
        steps += 1
    assert clock.now - 5.0 <= EVIDENCE_WINDOW_S + 0.1  # no later than the window's length
    assert steps > 0


def test_a_tpot_slo_below_one_request_alone_is_refused_as_never_not_as_load():
    core = _core(Clock())
    with pytest.raises(AdmissionError) as refused:
        core.reserve("a", 256, 64, tpot_slo_ms=STEP_S * 1000 * 0.8)
    assert refused.value.never and "can never be met" in str(refused.value)
    with pytest.raises(AdmissionError) as by_load:  # one running: a loose-enough SLO is load's to refuse
        assert core.reserve("b", 256, 64, tpot_slo_ms=STEP_S * 1000 * 1.01) is not None
        core.reserve("c", 256, 64, tpot_slo_ms=STEP_S * 1000 * 1.01)
    assert not by_load.value.never


def test_one_request_alone_is_the_least_of_its_warm_up_step_and_its_recent_batch_one_steps():
    clock = Clock()
    evidence = StepEvidence(clock)
    assert evidence.alone_s(0.050) == 0.050  # nothing run yet: the warm-up's
    for _ in range(8):
        clock.now += 0.04
        evidence.observe(1, 0.050, 0.040)
    assert evidence.alone_s(0.050) == pytest.approx(0.040)  # a warm-up slowed by a neighbour is not kept
    assert evidence.alone_s(0.030) == 0.030


def test_an_idle_worker_admits_by_what_one_request_alone_takes_now_not_at_its_fastest():
    """A host that ran faster at warm-up than under load (another process on the decode core):
    the idle rule reads the recent batch-1 steps while they are fresh, and the least only once
    they are old, so a slow moment refuses alone-admissions it would miss but cannot shut it out."""
    clock = Clock()
    core = _core(clock)
    slo_ms = STEP_S * 1000 * 1.15
    for _ in range(16):  # the load's steps: one request alone takes 1.3x its warm-up step
        clock.now += STEP_S * 1.3
        core.step_costs.evidence.observe(1, STEP_S * 1.3, STEP_S * 1.3)
    assert core.tpot_alone_s == pytest.approx(STEP_S)  # the least: what never is decided on
    with pytest.raises(AdmissionError) as refused:
        core.reserve("a", 256, 64, tpot_slo_ms=slo_ms)
    assert not refused.value.never  # load's, not the SLO's
    clock.now += ALONE_FRESH_S + 0.1  # nothing run since: the slow steps say nothing of now
    assert core.reserve("b", 256, 64, tpot_slo_ms=slo_ms) is not None


def test_never_is_decided_over_every_decode_worker():
    assert never_met(0.030, 0.035) and not never_met(0.040, 0.035) and not never_met(0.0, 0.035)
    assert never_met_anywhere(0.030, [0.035, 0.040])
    assert not never_met_anywhere(0.030, [0.035, 0.025])  # one worker can
    assert not never_met_anywhere(0.030, [0.035, None])  # one has not measured: it may
    assert not never_met_anywhere(0.030, [])


def test_class_margins_are_bounded_by_the_steps_and_for_a_while_by_what_a_miss_needed():
    clock = Clock()
    margins = ClassMargins(TPOT_MARGIN, clock=clock)
    margins.bound(1.5)
    tight = margins.of(0.050)
    tight.warn(1.1, admitted_at=1.3)  # missed by 10% under 1.3: 1.43 would have kept it, within the steps' 1.5
    assert tight.margin == pytest.approx(1.5) and margins.limit() == pytest.approx(1.5)
    tight.warn(3.0, admitted_at=1.3)  # a request 3x its SLO under 1.3: it needed 3.9, past what the steps show
    assert margins.limit() == pytest.approx(3.9)
    assert tight.margin == pytest.approx(1.3 * 1.5)  # one miss raises by at most ``most``, now past the steps' 1.5
    assert margins.margin(0.100) <= 3.9  # the surge of that miss on another class: capped too
    clock.now += margins.shown_s + 0.1  # the miss's evidence aged out: back to what the steps show
    assert margins.limit() == pytest.approx(1.5) and margins.margin(0.050) == pytest.approx(1.5)
    assert tight.margin == pytest.approx(1.5)
    margins.bound(1.3)  # the slow steps aged out
    assert tight.margin == pytest.approx(1.3) and margins.margin(0.050) == pytest.approx(1.3)
    margins.bound(4.0)  # a ceiling rising again lets new raises through, not old ones back
    assert tight.margin == pytest.approx(1.3)


def test_a_reservation_says_whether_the_idle_rule_admitted_it_under_no_margin():
    core = _core(Clock())
    first = core.reserve("a", 256, 64, tpot_slo_ms=STEP_S * 1000 * 3)
    second = core.reserve("b", 256, 64, tpot_slo_ms=STEP_S * 1000 * 3)
    assert first is not None and first.alone  # nothing here: its outcome says nothing of ε
    assert second is not None and not second.alone
    unmeasured = _core(Clock())
    unmeasured.unloaded_step_s = None  # no step alone measured: the model decided, under its margin
    lease = unmeasured.reserve("c", 256, 64, tpot_slo_ms=STEP_S * 1000 * 3)
    assert lease is not None and not lease.alone


def test_one_request_alone_now_is_a_high_quantile_of_its_fresh_steps_and_never_is_decided_on_their_median():
    clock = Clock()
    evidence = StepEvidence(clock)
    for i in range(20):  # one step in four slow: a host that moves under a request's decode
        clock.now += 0.05
        evidence.observe(1, 0.030, 0.040 if i % 4 == 0 else 0.030)
    assert evidence.alone_now_s(0.030) == pytest.approx(0.040)  # what an idle worker admits by
    assert evidence.alone_s(None) == pytest.approx(0.030)  # what no load can beat: the median
