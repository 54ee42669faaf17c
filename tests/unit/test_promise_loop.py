"""The closed loop on the promise: margins tighten fast when admitted requests miss their SLOs
and relax slowly when they meet them with room, settling where each guard's misses are at most
its share of 1 − target (a request must meet both SLOs, each held by its own margin)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from common.slo.promise import EARLY_TOKENS, Attainment, MarginController, decoding_late, outcome


def test_a_miss_tightens_at_once_and_comfortable_outcomes_relax_slowly():
    controller = MarginController(margin=1.3, target=0.99, step=0.1)
    controller.observe(1.2)  # a miss
    assert controller.margin == pytest.approx(1.43)
    for _ in range(199):  # 199 comfortable outcomes undo one miss: half of the 1% the target allows
        controller.observe(0.5)
    assert controller.margin == pytest.approx(1.3)
    whole = MarginController(margin=1.3, target=0.99, step=0.1, share=1.0)  # a margin alone with the target
    whole.observe(1.2)
    for _ in range(99):
        whole.observe(0.5)
    assert whole.margin == pytest.approx(1.3)
    controller.observe(0.95)  # met, but without room to spare: no change
    assert controller.margin == pytest.approx(1.3)


def test_only_comfortable_outcomes_predicted_near_their_slo_relax_the_margin_and_every_miss_tightens():
    controller = MarginController(margin=1.0, target=0.99, step=0.1)
    for _ in range(500):  # met far inside the SLO, and predicted far inside it: the margin decided nothing
        controller.observe(0.05, predicted=0.2)
    assert controller.margin == 1.0
    controller.observe(0.5, predicted=0.9)  # predicted near the SLO under the margin, met with room
    assert controller.margin < 1.0
    before = controller.margin
    controller.observe(0.5)  # no prediction known: taken as at the boundary, as before
    assert controller.margin < before
    tight = MarginController(margin=1.0, target=0.99, step=0.1)
    tight.observe(1.2, predicted=0.2)  # a miss is a miss, however far inside it was predicted
    assert tight.margin == pytest.approx(1.1)
    relaxed = MarginController(margin=1.0, target=0.99, step=0.1)
    assert outcome(0.05, 1.0, relaxed, predicted_s=0.2) and relaxed.margin == 1.0  # seconds, as a share of the SLO
    assert outcome(0.5, 1.0, relaxed, predicted_s=0.9) and relaxed.margin < 1.0


def test_margins_stay_within_their_bounds():
    controller = MarginController(margin=1.0, low=0.5, high=2.0)
    for _ in range(50):
        controller.observe(3.0)
    assert controller.margin == 2.0
    for _ in range(100_000):
        controller.observe(0.1)
    assert controller.margin == 0.5


@pytest.mark.parametrize("target, share", [(0.9, 0.5), (0.99, 0.5), (0.99, 1.0)])
def test_the_margin_settles_where_the_planted_miss_rate_meets_its_budget(target, share):
    """Latency / SLO = prediction error × (1 / margin): a guard admitting on a margin m serves a
    request in ``error / m`` of its SLO. With errors drawn from a known distribution, the margin
    that spends the miss budget ``share × (1 − target)`` is that distribution's ``1 − budget``
    quantile (brute force over the draws)."""
    rng = np.random.default_rng(1)
    errors = rng.lognormal(mean=0.0, sigma=0.3, size=200_000)
    controller = MarginController(margin=1.0, target=target, step=0.05, share=share)
    budget = share * (1 - target)
    misses = 0
    for i, error in enumerate(errors):
        ratio = error / controller.margin
        controller.observe(ratio)
        misses += ratio > 1 and i >= 100_000
    miss_rate = misses / 100_000
    assert miss_rate <= budget * 1.15, miss_rate  # within the budget
    assert miss_rate >= budget * 0.3, miss_rate  # not by refusing far more than needed
    assert controller.margin == pytest.approx(np.quantile(errors, 1 - budget), rel=0.25)


def test_a_burst_of_misses_admitted_under_one_margin_tightens_it_once_by_what_it_missed_by():
    """Requests in flight together miss together; they were admitted under one margin, and are
    one piece of evidence against it: compounding would lift the margin (1 + step)^k at once and
    shut the class out. (What the other misses would have added is owed instead: next test.)"""
    controller = MarginController(margin=1.3, target=0.99, step=0.2)
    for ratio in (1.05, 1.3, 1.1, 1.3, 1.05):
        controller.observe(ratio, admitted_at=1.3)
    assert controller.margin == pytest.approx(1.3 * 1.3)  # what the worst of them missed by
    controller.observe(1.05, admitted_at=1.69)  # admitted under the raised margin, and still missed
    assert controller.margin == pytest.approx(1.69 * 1.2)  # by at least one step
    controller.observe(3.0, admitted_at=1.0)  # an older admission: raised by at most ``most``
    assert controller.margin == pytest.approx(1.69 * 1.2)
    controller.observe(3.0, admitted_at=2.028)
    assert controller.margin == pytest.approx(2.028 * 1.5)
    unknown = MarginController(margin=1.3, target=0.99, step=0.2)
    for _ in range(3):
        unknown.observe(1.5)  # where the admitting margin is unknown, each miss counts one step
    assert unknown.margin == pytest.approx(1.3 * 1.2 ** 3)


def test_a_burst_s_misses_beyond_its_one_raise_are_owed_and_paid_before_the_margin_relaxes():
    """Each miss is worth one (1 + step) of raise: what a burst's one raise did not add is a debt
    that comfortable outcomes pay before they relax the margin, so a burst of k misses holds the
    margin up for as many outcomes as k misses cost; a debt is forgotten with its window."""
    now = [0.0]
    controller = MarginController(margin=1.3, target=0.99, step=0.2, window_s=60.0, clock=lambda: now[0])
    for ratio in (1.05, 1.3, 1.1, 1.3, 1.05):
        controller.observe(ratio, admitted_at=1.3)
    assert controller.margin == pytest.approx(1.69)
    # the first raised one step (1.56), the second to 1.69 (short of a step), the other three nothing
    owed = 4 * math.log(1.2) - math.log(1.69 / 1.56)
    assert controller.owed == pytest.approx(owed)
    relax = math.log(1.2) * 0.005 / 0.995  # what one comfortable outcome relaxes by
    outcomes = math.floor(owed / relax)
    for _ in range(outcomes):
        controller.observe(0.5)
    assert controller.margin == pytest.approx(1.69)  # all of them went to the debt
    controller.observe(0.5)
    controller.observe(0.5)
    assert controller.margin < 1.69 and controller.owed == 0.0
    # a debt lasts as long as the window: past it, comfortable outcomes relax at once
    controller.observe(1.1, admitted_at=controller.margin)
    controller.observe(1.1, admitted_at=controller.margin / 1.2)
    assert controller.owed == pytest.approx(math.log(1.2))
    before = controller.margin
    now[0] = 61.0
    controller.observe(0.5)
    assert controller.owed == 0.0 and controller.margin == pytest.approx(before * math.exp(-relax))
    # a miss raised by at least a step owes nothing
    fresh = MarginController(margin=1.0, clock=lambda: now[0])
    fresh.observe(1.4, admitted_at=1.0)
    assert fresh.margin == pytest.approx(1.4) and fresh.owed == 0.0


@pytest.mark.parametrize("in_flight", [1, 64])
def test_with_requests_in_flight_the_margin_still_settles_at_the_target_quantile(in_flight):
    """As above, but each outcome comes back ``in_flight`` admissions later, judged against the
    margin that admitted it, and errors come in bursts (a slow stretch slows every request in
    flight): the margin still holds the target, and does not run off to its bound."""
    rng = np.random.default_rng(2)
    n, target = 200_000, 0.99
    slow = np.repeat(rng.random(n // 100) < 0.01, 100)  # 1% of stretches of 100 requests are slow
    errors = rng.lognormal(mean=0.0, sigma=0.2, size=n) * np.where(slow, 1.6, 1.0)
    now = [0.0]  # an admission a millisecond: the debts' window covers 60,000 of them
    controller = MarginController(margin=1.0, target=target, step=0.05, clock=lambda: now[0])
    admitted: list[float] = []
    misses = 0
    for i, error in enumerate(errors):
        now[0] = i / 1000
        admitted.append(controller.margin)
        if i >= in_flight:
            j = i - in_flight
            ratio = errors[j] / admitted[j]
            controller.observe(ratio, admitted_at=admitted[j])
            misses += ratio > 1 and j >= n // 2
    miss_rate = misses / (n // 2 - in_flight)
    budget = controller.share * (1 - target)
    # a burst's misses owe what they did not raise: the budget holds for misses, not raises
    assert budget * 0.3 <= miss_rate <= budget, miss_rate
    held = np.mean(admitted[n // 2:])  # right after a burst the margin is high; over time it is not
    assert held < 1.3 * np.quantile(errors, 1 - budget), held


def test_attainment_counts_outcomes_inside_its_window_only():
    attained = Attainment(window_s=10.0)
    assert attained.value(0.0) is None
    for t in range(10):
        attained.observe(float(t), met=t != 3)
    assert attained.value(9.0) == pytest.approx(0.9)
    assert attained.value(13.5) == pytest.approx(1.0)  # the miss at t=3 left the window
    assert attained.value(100.0) is None


def test_an_outcome_feeds_the_margin_that_admitted_it():
    headroom, epsilon = MarginController(1.0), MarginController(1.3)
    assert not outcome(0.3, 0.2, headroom)  # a TTFT missed
    assert headroom.margin == pytest.approx(1.2)
    assert outcome(0.010, 0.05, epsilon) and epsilon.margin < 1.3  # a TPOT met with room
    assert outcome(0.3, 0.0, headroom) and headroom.margin == pytest.approx(1.2)  # no SLO: teaches nothing
    assert outcome(0.3, 0.2, None) is False  # no guard there: only the verdict
    assert not outcome(0.3, 0.2, headroom, admitted_at=1.0)  # admitted under the margin before
    assert headroom.margin == pytest.approx(1.5)
    assert not outcome(0.08, 0.05, epsilon, admitted_at=1.3)
    assert epsilon.margin == pytest.approx(1.3 * 1.5)


def test_a_request_decoding_late_raises_epsilon_before_it_ends_and_its_miss_does_not_raise_it_again():
    epsilon = MarginController(1.3)
    # too few tokens to tell: a TPOT of 26 ms against 20 ms over 15 tokens is no evidence yet
    assert not decoding_late(EARLY_TOKENS - 1, (EARLY_TOKENS - 1) * 0.026, 0.020, epsilon, 1.3)
    assert epsilon.margin == 1.3
    # on time so far: nothing
    assert not decoding_late(EARLY_TOKENS, EARLY_TOKENS * 0.019, 0.020, epsilon, 1.3)
    assert epsilon.margin == 1.3
    # late by 1.3 after 16 tokens: raised from the margin that admitted it, as a miss would, counted as no outcome
    assert decoding_late(EARLY_TOKENS, EARLY_TOKENS * 0.026, 0.020, epsilon, 1.3)
    assert epsilon.margin == pytest.approx(1.3 * 1.3)
    assert (epsilon.outcomes, epsilon.misses) == (0, 0)
    # it then ends missed by as much: the margin already holds what would have kept it, and the
    # miss was told once (no debt either)
    epsilon.observe(1.3, admitted_at=1.3, warned=True)
    assert epsilon.margin == pytest.approx(1.3 * 1.3) and epsilon.owed == 0.0
    assert (epsilon.outcomes, epsilon.misses) == (1, 1)
    # no TPOT SLO: never late
    assert not decoding_late(100, 100.0, 0.0, epsilon)


def test_a_margin_that_shuts_its_class_out_steps_down_after_as_many_refusals_as_a_miss_costs():
    """199 refusals by the margin alone with no outcome between them (at a 0.99 target, half the
    budget each: what one miss costs in comfortable outcomes) step it down to its probe; an
    outcome in between starts the count again, so a class still admitted at all is steered by
    its outcomes alone."""
    margin = MarginController(1.5)
    for _ in range(198):
        margin.refused()
    assert margin.margin == 1.5 and margin.outcomes == 0
    margin.refused()
    assert margin.margin == pytest.approx(1.5 / 1.2)
    for _ in range(150):
        margin.refused()
    margin.observe(0.9)  # met without room: no change, but an outcome
    for _ in range(150):
        margin.refused()
    assert margin.margin == pytest.approx(1.5 / 1.2)


def test_a_miss_of_any_class_surges_every_class_for_a_moment_without_compounding():
    """The requests in flight at a bad moment miss together, whatever their class: for ``moment_s``
    after a miss every class is admitted with that miss's raise on top (the largest of the
    moment's, not their product), and then with what its own outcomes set."""
    from common.slo.class_margins import ClassMargins

    now = [0.0]
    margins = ClassMargins(1.0, clock=lambda: now[0], moment_s=2.0)
    tight, loose = margins.of(0.100), margins.of(1.0)
    tight.observe(1.3, admitted_at=1.0)  # missed by 30%
    assert tight.margin == pytest.approx(1.3) and loose.margin == 1.0
    assert margins.margin(1.0) == pytest.approx(1.3) and margins.margin(0.100) == pytest.approx(1.3 * 1.3)
    now[0] = 1.0
    tight.observe(1.25, admitted_at=1.3)  # a smaller one in the same moment: the surge stays 1.3
    loose.observe(1.4, admitted_at=1.0)
    assert margins.surge() == pytest.approx(1.4)  # the largest of the moment, not 1.3 x 1.25 x 1.4
    now[0] = 3.5  # the moment (2 s from the last miss) is over
    assert margins.surge() == 1.0 and margins.margin(1.0) == pytest.approx(loose.margin)
    assert margins.margin(0.500) == 1.0  # a class never seen: its start
