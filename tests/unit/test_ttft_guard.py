"""The TTFT guard of one prefill worker, driven on a virtual clock as a simulator drives it."""

from __future__ import annotations

import pytest

from common.slo.calibration import Calibration
from common.slo.cost_models import PrefillModel
from common.slo.class_margins import ClassMargins
from common.slo.ttft_decision import best_prefill_s, last_useful_admission
from common.slo.guard_reading import Readings
from common.slo.ttft_guard import TtftGuard

MODEL = PrefillModel(threshold=100, base_s=0.010, per_token_s=1e-4)  # 10 ms + 0.1 ms per token above 100
INF = float("inf")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _guard(clock: Clock, model: PrefillModel | None = MODEL, forward_tokens: int = 0) -> TtftGuard:
    return TtftGuard(model, forward_tokens, Calibration(quantile=0.9, clock=clock),
                     headrooms=ClassMargins(1.0))  # no margin: predictions as the fit and calibration say


def test_earlier_deadlines_are_ahead_and_of_later_ones_what_the_forward_under_way_may_hold():
    clock = Clock()
    guard = _guard(clock, forward_tokens=250)
    guard.sent("first", deadline=1.0, tokens=300)  # the oldest: may be in its forward whatever its deadline
    guard.sent("early", deadline=2.0, tokens=200)
    guard.sent("late", deadline=4.0, tokens=400)
    assert guard.queued_ahead(3.0) == 300 + 200 + 250  # one forward of the later ones may be running
    assert guard.queued_ahead(1.5) == 300 + 250
    assert guard.queued_ahead(0.5) == 300  # none earlier; the oldest whole (its chunks run first)
    assert guard.queued_ahead(INF) == 900
    # the prediction counts what is ahead, not what queues behind, one forward per 250 tokens
    assert guard.predict_s(100, deadline=3.0) == pytest.approx(MODEL.predict_forwards(750 + 100, 250))
    guard.dropped("first")
    assert guard.queued_ahead(1.5) == 250  # "early" is the oldest now, "late" perhaps beside it
    guard.dropped("first")  # twice: no harm
    assert guard.queued_ahead(3.0) == 200 + 250


def test_when_one_forward_takes_the_whole_queue_all_of_it_is_ahead():
    guard = _guard(Clock(), forward_tokens=0)
    guard.sent("first", deadline=1.0, tokens=300)
    guard.sent("late", deadline=4.0, tokens=400)
    assert guard.queued_ahead(0.5) == guard.queued_ahead(3.0) == 700


def test_work_the_worker_reports_beyond_what_was_sent_counts_as_ahead():
    guard = _guard(Clock())
    guard.sent("mine", deadline=1.0, tokens=200)
    guard.heard(queued_tokens=700, running=1)
    assert guard.queued_ahead(0.5) == 200 + 500
    guard.heard(queued_tokens=100, running=1)  # the worker already computed some of mine
    assert guard.queued_ahead(0.5) == 200


def test_a_long_queue_takes_one_forward_per_budget():
    guard = _guard(Clock(), forward_tokens=256)
    guard.sent("a", deadline=INF, tokens=600)
    # 600 + 40 tokens: two full forwards of 256, then 128
    assert guard.predict_s(40, calibrated=False) == pytest.approx(2 * (0.010 + 1e-4 * 156) + 0.010 + 1e-4 * 28)


def test_a_queue_of_several_prompts_is_predicted_with_their_own_attention_not_their_total_squared():
    quadratic = PrefillModel(threshold=0, base_s=0.005, per_token_s=5e-5, per_token2_s=2e-8)
    guard = _guard(Clock(), quadratic, forward_tokens=4096)
    for i in range(4):
        guard.sent(f"q{i}", deadline=INF, tokens=250)
    # one forward of 1,200 tokens whose attention is four prompts of 250 and this one of 200
    expected = 0.005 + 5e-5 * 1200 + 2e-8 * (4 * 250**2 + 200**2)
    assert guard.predict_s(200, calibrated=False) == pytest.approx(expected)
    assert expected < 0.8 * quadratic.predict(1200)  # as one prompt of 1,200 tokens: 1.3x that
    lone = _guard(Clock(), quadratic, forward_tokens=4096)
    lone.sent("long", deadline=INF, tokens=3000)
    # a long prompt queued alone is one prompt's work, in whatever forwards it is cut
    assert lone.predict_s(0, calibrated=False) == pytest.approx(quadratic.predict(3000))


def test_a_newcomer_that_would_make_a_queued_on_time_request_late_is_reported():
    clock = Clock()
    guard = _guard(clock)
    guard.sent("queued", deadline=0.050, tokens=300)  # 30 ms alone, due at 50 ms: on time
    assert not guard.pushes_queued_past(200, deadline=0.020, now=clock.now)  # 50 ms: just in time
    assert guard.pushes_queued_past(250, deadline=0.020, now=clock.now)  # 55 ms: late
    assert not guard.pushes_queued_past(5000, deadline=0.060, now=clock.now)  # behind it: delays nobody
    clock.now = 0.015  # time passes: now even 200 tokens ahead of it make it late
    assert guard.pushes_queued_past(200, deadline=0.020, now=clock.now)
    clock.now = 0.030  # it is already predicted late: no newcomer is blamed for it
    assert not guard.pushes_queued_past(250, deadline=0.020, now=clock.now)


def test_answers_teach_the_calibration_and_leave_the_queue():
    clock = Clock()
    guard = _guard(clock)
    assert guard.idle_and_untested()
    guard.sent("a", deadline=1.0, tokens=300)
    assert not guard.idle_and_untested()
    predicted = guard.predict_s(0, deadline=1.0, calibrated=False)
    assert predicted == pytest.approx(0.030)
    clock.now = 0.060
    guard.answered("a", observed_s=0.060, predicted_s=predicted)  # took twice the fit
    assert not guard.queued and guard.calibration.num_samples == 1
    assert guard.predict_s(300) == pytest.approx(0.060)
    assert not guard.idle_and_untested()  # tested now
    guard.answered("b", observed_s=1.0, predicted_s=None)  # no prediction made: nothing learnt
    assert guard.calibration.num_samples == 1


def test_a_worker_busy_by_its_own_report_is_not_idle():
    guard = _guard(Clock())
    guard.heard(queued_tokens=0, running=1)
    assert not guard.idle_and_untested()


def test_best_prefill_over_workers_skips_those_it_would_make_late():
    clock = Clock()
    crowded, idle = _guard(clock), _guard(clock)
    for guard in (crowded, idle):
        guard.calibration.observe(0.010, 0.010)  # tested, exactly as predicted
    crowded.sent("queued", deadline=0.050, tokens=300)
    assert best_prefill_s([crowded], 250, deadline=0.020, now=clock.now) == INF
    assert best_prefill_s([crowded, idle], 250, deadline=0.020, now=clock.now) == pytest.approx(0.025)
    assert best_prefill_s([], 250, deadline=0.020, now=clock.now) == 0.0
    assert best_prefill_s([_guard(clock, model=None)], 250, deadline=0.020, now=clock.now) == 0.0
    # an idle worker no call has tested never refuses on its model alone
    assert best_prefill_s([crowded, _guard(clock)], 250, deadline=0.020, now=clock.now) == 0.0


def test_the_overhead_a_prediction_adds_is_the_miss_budgets_quantile_of_recent_calls():
    """A request admitted with no slack misses when its call's overhead exceeds what was added:
    at a 0.99 target, with half the misses the TTFT's, a spike in one call of twenty counts."""
    from common.slo.ttft_guard import new_guard
    from common.slo.ttft_margins import overhead_quantile

    assert overhead_quantile(0.99) == pytest.approx(0.995)
    assert overhead_quantile(0.9) == pytest.approx(0.95)
    clock = Clock()
    guard = new_guard(MODEL, 0, target=0.99, clock=clock)
    for i in range(40):
        clock.now += 0.01
        raw = MODEL.predict_forwards(100, 0)
        guard.answered(f"r{i}", observed_s=raw + (0.300 if i in (7, 29) else 0.010), predicted_s=raw, worker_s=raw)
    assert guard.overhead.value() == pytest.approx(0.300)  # at p90 it was 0.010: the spikes unseen
    assert guard.predict_s(100) == pytest.approx(raw + 0.300)


def test_the_one_pass_check_of_queued_requests_agrees_with_predicting_each_in_turn():
    """``pushes_queued_past`` against its definition: each queued request with a later deadline
    predicted (``predict_s``, under its class's headroom or the boundary margin, the larger) with
    and without the newcomer, one at a time."""
    import random

    def predict(guard: TtftGuard, prompt: int, d: float, t: float) -> float:
        margin = guard.headrooms.margin(t)
        return guard.predict_s(prompt, d, ttft_s=t) * max(guard.boundary.margin, margin) / margin  # type: ignore[operator]

    def brute_force(guard: TtftGuard, prompt: int, deadline: float, now: float) -> bool:
        return any(d >= deadline and d != INF and now + predict(guard, 0, d, t) <= d
                   and now + predict(guard, prompt, d, t) > d for d, _, t in guard.queued.values())

    rng = random.Random(5)
    checked = pushed = 0
    for case in range(300):
        guard = _guard(Clock(), forward_tokens=rng.choice([0, 250, 1000]))
        for ttft_s in (0.1, 0.3, 1.0):  # each class's own headroom
            guard.headrooms.of(ttft_s).margin = rng.uniform(0.8, 1.5)
        guard.boundary.controller.margin = rng.choice([1.0, rng.uniform(1.0, 1.6)])
        for i in range(rng.randint(0, 12)):
            deadline = rng.choice([INF, round(rng.uniform(0.05, 1.0), 2), 0.5])  # repeats on purpose
            guard.sent(f"r{i}", deadline, rng.randint(1, 600), rng.choice([0.0, 0.1, 0.3, 1.0]))
        guard.others_tokens = rng.choice([0, 0, 300])
        for _ in range(5):
            prompt, deadline, now = rng.randint(1, 800), rng.uniform(0.0, 1.0), rng.uniform(0.0, 0.3)
            want = brute_force(guard, prompt, deadline, now)
            assert guard.pushes_queued_past(prompt, deadline, now) == want, case
            checked, pushed = checked + 1, pushed + want
    assert pushed > 50 and checked - pushed > 50  # both answers were exercised


def test_only_calls_no_later_send_could_delay_teach_the_guard():
    """A call that a later request may have joined or overtaken took longer for the load that
    followed it, not for any error of the model: learning from it would make every later
    prediction carry that delay. The calibration, a ratio to the model of the call's own
    prompt, learns only from calls sent with nothing ahead."""
    from common.slo.ttft_guard import new_guard

    clock = Clock()
    guard = new_guard(MODEL, 0, clock=clock)
    raw = MODEL.predict_forwards(300, 0)  # 30 ms
    guard.sent("alone", deadline=1.0, tokens=300)  # nothing ahead
    guard.sent("behind", deadline=2.0, tokens=300)  # "alone" ahead of it; it disturbs "alone"
    guard.answered("alone", observed_s=0.200, predicted_s=raw, worker_s=0.190)  # delayed by "behind"
    assert guard.calibration.num_samples == 0 and guard.overhead.value() == 0.0
    guard.answered("behind", observed_s=0.065, predicted_s=2 * raw, worker_s=0.060)  # undisturbed, not alone
    assert guard.calibration.num_samples == 0  # its prediction was of a queue, not of its prompt
    assert guard.overhead.value() == pytest.approx(0.005)  # 65 ms against 60 predicted (calibration 1)
    guard.sent("clean", deadline=3.0, tokens=300)
    guard.answered("clean", observed_s=0.046, predicted_s=raw, worker_s=0.045)
    assert guard.calibration.ratio == pytest.approx(1.5)  # 45 ms for 30 predicted
    assert not guard.disturbed and not guard.alone  # nothing kept of answered calls
    guard.sent("gone", deadline=4.0, tokens=300)
    guard.dropped("gone")
    assert not guard.alone


def test_a_worker_slower_in_its_forwards_than_idle_calls_showed_scales_the_predictions():
    """Only calls sent with nothing ahead teach the calibration; the worker's own account of all
    its forwards (busy ones too) raises it when higher, and never lowers it."""
    from common.slo.ttft_guard import new_guard

    clock = Clock()
    guard = new_guard(MODEL, 0, clock=clock)
    raw = MODEL.predict_forwards(300, 0)
    guard.sent("quiet", deadline=1.0, tokens=300)
    guard.answered("quiet", observed_s=1.1 * raw, predicted_s=raw, worker_s=1.1 * raw, forward_ratio=1.0)
    assert guard.ratio() == pytest.approx(1.1)  # the quiet call's
    guard.sent("busy", deadline=2.0, tokens=300)
    guard.sent("behind", deadline=3.0, tokens=300)
    guard.answered("busy", observed_s=2 * raw, predicted_s=raw, worker_s=2 * raw, forward_ratio=1.6)
    assert guard.calibration.num_samples == 1  # disturbed: nothing learnt from the call itself
    queue_and_prompt = MODEL.predict_forwards(600, 0)  # "behind" is still queued
    assert guard.ratio() == pytest.approx(1.6) and guard.predict_s(300, deadline=0.5) == pytest.approx(
        (1.6 * queue_and_prompt + guard.overhead.value()) * guard.headrooms.margin(0.0))
    guard.answered("behind", observed_s=raw, predicted_s=raw, worker_s=raw, forward_ratio=0.9)
    assert guard.ratio() == pytest.approx(1.1)  # the worker's lower figure does not lower it


def test_a_refusal_the_class_headroom_alone_caused_relaxes_it_and_no_other():
    """A class margin hears only its class's outcomes, so one high enough to refuse the class whole
    would never come down; refusals that the margin alone caused (its probe would have admitted
    the request) count toward stepping it down, and one the work alone causes does not."""
    from common.slo.ttft_decision import ttft_refusal

    guard = _guard(Clock())
    guard.calibration.observe(0.010, 0.010)  # tested: its predictions decide
    predicted = MODEL.predict_forwards(300, 0)  # 30 ms
    tight = guard.headrooms.of(0.033)
    tight.margin = 1.2  # 36 ms > 33 ms; its probe (1.0): 30 ms would fit
    assert ttft_refusal([guard], 300, 0.033, arrived=0.0, now=0.0) is not None
    assert tight.shut_out == 1 and tight.outcomes == 0
    assert guard.headrooms.margin(1.0) == 1.0  # no other class's
    tighter = guard.headrooms.of(0.025)
    tighter.margin = 1.2  # 36 ms, and 30 ms under its probe: the work alone misses 25 ms
    assert ttft_refusal([guard], 300, 0.025, arrived=0.0, now=0.0) is not None
    assert tighter.shut_out == 0
    assert ttft_refusal([guard], 300, 0.040, arrived=0.0, now=0.0) is None and predicted == pytest.approx(0.030)


def test_a_promise_at_its_boundary_is_checked_under_a_headroom_of_at_least_one():
    """A loose class's headroom relaxes on outcomes met with room; a queued request of it, and a
    waiter at its last useful moment, have none, and are checked under at least BOUNDARY_HEADROOM."""
    from common.slo.boundary import BOUNDARY_HEADROOM
    from common.slo.ttft_decision import last_useful_admission

    clock = Clock()
    guard = _guard(clock)
    guard.calibration.observe(0.010, 0.010)  # tested: its predictions decide
    guard.headrooms.of(0.050).margin = 0.5  # the queued request's class, relaxed
    guard.sent("queued", deadline=0.050, tokens=300, ttft_s=0.050)  # 30 ms alone, due at 50 ms
    # 250 tokens ahead of it: 55 ms, late by the prediction itself, in time under its class's 0.5
    assert BOUNDARY_HEADROOM == 1.0
    assert guard.pushes_queued_past(250, deadline=0.020, now=clock.now)
    assert not guard.pushes_queued_past(150, deadline=0.020, now=clock.now)  # 45 ms: in time
    # a waiter of that class: its last useful moment leaves the whole prediction (65 ms: the queue
    # ahead by deadline and its own 350 tokens), not half of it
    guard.headrooms.of(0.200).margin = 0.5
    predicted = MODEL.predict_forwards(650, 0, attention=300 ** 2 + 350 ** 2)
    assert last_useful_admission([guard], 350, deadline=0.200, now=0.0, ttft_s=0.200) == pytest.approx(0.200 - predicted)
    # where the class's headroom is above it, that one applies
    guard.headrooms.of(0.200).margin = 1.5
    assert last_useful_admission([guard], 350, deadline=0.200, now=0.0, ttft_s=0.200) == pytest.approx(
        0.200 - 1.5 * predicted)


def _tested(clock: Clock) -> TtftGuard:
    guard = _guard(clock)
    guard.calibration.observe(0.010, 0.010)  # calibrated at 1: predictions are the model's (no overhead yet)
    return guard


def test_a_call_is_expected_to_wait_for_every_later_send_that_goes_before_it():
    """300 tokens queued (30 ms by the model), then 200 with an earlier deadline go before them:
    the queued call is now expected to take 50 ms, and taking that teaches the boundary margin no
    miss; taking 1.3 times it raises the margin to 1.3."""
    clock = Clock()
    guard = _tested(clock)
    guard.sent("late", deadline=1.0, tokens=300, ttft_s=1.0)
    assert guard.boundary.expected["late"] == pytest.approx(0.030)
    guard.sent("early", deadline=0.5, tokens=200, ttft_s=0.5)
    assert guard.boundary.expected["late"] == pytest.approx(0.050)
    assert guard.boundary.expected["early"] == pytest.approx(MODEL.predict_forwards(500, 0))  # the oldest is ahead
    guard.answered("late", observed_s=0.050, predicted_s=0.030)
    assert guard.boundary.margin == 1.0 and guard.boundary.controller.misses == 0
    guard.answered("early", observed_s=1.3 * guard.boundary.expected["early"], predicted_s=0.050)
    assert guard.boundary.margin == pytest.approx(1.3) and guard.boundary.controller.misses == 1
    assert not guard.boundary.expected
    guard.sent("gone", deadline=1.0, tokens=100)
    guard.dropped("gone")  # no answer: nothing learnt, nothing kept
    assert not guard.boundary.expected and guard.boundary.controller.outcomes == 2


def test_calls_that_outrun_their_predictions_make_a_queued_promise_harder_to_push_and_fast_ones_never_easier():
    clock = Clock()
    guard = _tested(clock)
    guard.sent("queued", deadline=0.065, tokens=300, ttft_s=1.0)  # 30 ms alone, due at 65 ms
    assert not guard.pushes_queued_past(300, deadline=0.020, now=0.0)  # 60 ms with it: on time
    for i in range(40):  # calls answered in half their predicted time: the margin stays at the model's word
        guard.sent(f"quick{i}", deadline=INF, tokens=100)
        clock.now += 0.01
        guard.answered(f"quick{i}", observed_s=0.5 * guard.boundary.expected[f"quick{i}"], predicted_s=0.010)
    assert guard.boundary.margin == 1.0
    assert not guard.pushes_queued_past(300, deadline=0.020, now=0.0)
    guard.sent("slow", deadline=INF, tokens=100)
    guard.answered("slow", observed_s=1.25 * guard.boundary.expected["slow"], predicted_s=0.010)
    assert guard.boundary.margin == pytest.approx(1.25)
    # 60 ms × 1.25 is past the queued request's 65 ms, while the 30 ms it is expected alone is not
    assert guard.pushes_queued_past(300, deadline=0.020, now=0.0)


def test_a_newcomers_wait_for_the_queue_ahead_is_predicted_under_at_least_the_boundary_margin():
    """How far calls outran their predictions (``boundary``) is how far a queue may drain slower
    than predicted; the newcomer's own forward keeps its class's headroom."""
    from common.slo.ttft_decision import best_prefill_s

    guard = _tested(Clock())
    guard.boundary.controller.margin = 1.5
    own = guard.predict_s(300)
    assert own is not None and best_prefill_s([guard], 300, 1.0, 0.0, 1.0) == pytest.approx(own)  # no queue
    guard.sent("ahead", deadline=0.010, tokens=500, ttft_s=0.010)  # due first: ahead of a 1 s newcomer
    whole = guard.predict_s(300, deadline=1.0, ttft_s=1.0)  # the queue and its own, under its headroom (1)
    assert whole is not None and whole > own
    assert best_prefill_s([guard], 300, 1.0, 0.0, 1.0) == pytest.approx(own + 1.5 * (whole - own))
    guard.headrooms.of(1.0).margin = 2.0  # a class headroom above the boundary margin: that one, whole
    assert best_prefill_s([guard], 300, 1.0, 0.0, 1.0) == pytest.approx(2.0 * whole)


def test_a_round_reads_each_worker_once_and_orders_its_waiters_as_reads_of_their_own_would():
    clock = Clock()
    guards = [_guard(clock, forward_tokens=250), _guard(clock, forward_tokens=500)]
    for i, guard in enumerate(guards):
        guard.calibration.observe(0.010, 0.013 + 0.002 * i)
        for k in range(6):
            guard.sent(f"q{i}-{k}", deadline=0.2 + 0.15 * k, tokens=120 + 40 * k, ttft_s=0.3)
    waiters = [(80 + 60 * w, 0.15 + 0.1 * w, 0.1 * (1 + w % 3)) for w in range(8)]  # tokens, deadline, TTFT SLO
    alone = [last_useful_admission(guards, n, d, clock.now, t) for n, d, t in waiters]
    readings: Readings = {}
    shared = [last_useful_admission(guards, n, d, clock.now, t, readings) for n, d, t in waiters]
    assert shared == alone  # the same answers, waiter by waiter
    assert sorted(readings) == sorted(id(g) for g in guards)  # each worker read once for the whole round
    assert readings[id(guards[0])].mine == list(guards[0].queued.values())
    assert any(s != shared[0] for s in shared)  # (the waiters' moments differ: the order is not trivial)


def test_one_slow_call_cannot_shut_an_idle_prefill_worker_out():
    """A call that took far longer than its prediction (another process on the cores at that
    moment) raises the overhead's tail: the next requests are refused on it while it is recent,
    and once it is older than ``OVERHEAD_MAX_AGE_S`` it no longer counts, though no call came since
    to push it out of the window (every request was refused)."""
    from common.slo.ttft_guard import new_guard
    from common.slo.ttft_margins import OVERHEAD_MAX_AGE_S

    clock = Clock()
    guard = new_guard(MODEL, 0, clock=clock)
    prompt, ttft_s = 300, 0.090  # its forward: 30 ms; the SLO 3x that
    raw = MODEL.predict(prompt)
    for i in range(15):  # calls as predicted, a millisecond of hops each
        guard.sent(f"r{i}", deadline=clock.now + ttft_s, tokens=prompt, ttft_s=ttft_s)
        guard.answered(f"r{i}", raw + 0.001, raw, worker_s=raw)
        clock.now += 0.1
    guard.sent("slow", deadline=clock.now + ttft_s, tokens=prompt, ttft_s=ttft_s)
    guard.answered("slow", 0.150, raw, worker_s=0.149)  # 5x: the worker's core was taken
    assert guard.overhead.value() > 0.1  # the tail: that one call
    assert best_prefill_s([guard], prompt, clock.now + ttft_s, clock.now, ttft_s) > ttft_s  # refused on it
    clock.now += OVERHEAD_MAX_AGE_S + 0.1  # nothing sent since
    assert guard.overhead.value() == 0.0
    assert best_prefill_s([guard], prompt, clock.now + ttft_s, clock.now, ttft_s) <= ttft_s  # admitted again
