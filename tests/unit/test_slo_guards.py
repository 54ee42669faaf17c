"""SCORPIO's guards as pure functions: credit batching, VBS admission, fitted cost models."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from common.slo.cost_models import DecodeModel, PrefillModel, attention_work
from common.slo.credit import CreditBatcher, trp, virtual_batch_size
from common.slo.tpot_guard import Decoding, admits, projected_tpots


def _runs(batcher: CreditBatcher, slos: dict[str, float], steps: int) -> dict[str, list[int]]:
    ran: dict[str, list[int]] = {rid: [] for rid in slos}
    for step in range(steps):
        for rid in batcher.select(slos):
            ran[rid].append(step)
    return ran


def test_credit_batching_runs_slos_2_4_6_every_1_2_and_3_steps():
    ran = _runs(CreditBatcher(), {"a": 2.0, "b": 4.0, "c": 6.0}, 12)
    assert ran["a"] == list(range(12))
    assert np.diff(ran["b"]).tolist() == [2] * (len(ran["b"]) - 1) and len(ran["b"]) == 6
    assert np.diff(ran["c"]).tolist() == [3] * (len(ran["c"]) - 1) and len(ran["c"]) == 4


def test_trp_is_recomputed_when_the_tightest_request_leaves():
    batcher = CreditBatcher()
    _runs(batcher, {"a": 2.0, "b": 4.0, "c": 6.0}, 6)
    ran = _runs(batcher, {"b": 4.0, "c": 6.0}, 12)
    assert len(ran["b"]) == 12  # now the tightest: every step
    assert len(ran["c"]) == 8  # TRP 4/6: two steps in three
    assert trp({"b": 4.0, "c": 6.0}) == {"b": 1.0, "c": pytest.approx(2 / 3)}


def _same(n: int, slo_s: float, remaining: int = 10, length: int = 100) -> list[Decoding]:
    return [Decoding(slo_s, remaining, length) for _ in range(n)]


def test_vbs_admission_accepts_and_rejects_at_the_boundary():
    model = DecodeModel(alpha=0.0, beta=0.010, gamma=0.0, delta=0.0)  # 10 ms per virtual request
    # equal budgets: the set stays whole to the end, so every step is the step at VBS
    # a third 100 ms request: VBS 3 -> 30 ms x 1.3 = 39 ms <= 100 ms
    assert admits(_same(3, 0.100), model)
    # tightest 40 ms: VBS = 1 + 0.4 + 0.4 = 1.8 -> 18 ms per step; the 40 ms request gets a token
    # every step (18 x 1.3 = 23.4 ms), the 100 ms ones every 2.5 steps (45 x 1.3 = 58.5 ms)
    assert admits([*_same(2, 0.100, remaining=4), Decoding(0.040, 10, 100)], model)
    assert virtual_batch_size({"a": 0.1, "b": 0.1, "c": 0.02}) == pytest.approx(1.4)
    # 8 requests at 0.1: VBS 8 -> 80 ms x 1.3 = 104 ms > 100 ms -> rejected; 7 -> 91 ms -> admitted
    assert admits(_same(7, 0.1), model)
    assert not admits(_same(8, 0.1), model)


def test_the_guard_projects_each_decode_to_its_end_where_contexts_keep_growing():
    model = DecodeModel(alpha=0.0, beta=0.0, gamma=1e-4, delta=0.001)  # 1 ms + 0.1 ms per token of context
    running, new = Decoding(0.050, 900, 100), Decoding(0.050, 900, 100)
    # now, at 100 tokens, a step is 11 ms (x 1.3 = 14.3 ms: a one-step check admits); over the
    # 900 steps both run, the contexts reach 1,000 tokens: 1 ms + 0.1 ms x 550 on average
    assert projected_tpots([running, new], model) == pytest.approx([0.056, 0.056])
    assert not admits([running, new], model)
    # the same pair with 100 tokens to go: 1 ms + 0.1 ms x 150 = 16 ms (x 1.3 = 20.8 ms)
    assert admits([Decoding(0.050, 100, 100), Decoding(0.050, 100, 100)], model)


def _step_by_step(requests: list[Decoding], model: DecodeModel) -> list[float]:
    """Brute force: the real credit batcher picks each step's batch; a step costs the model at
    that batch's size and mean length; each request's time until its last token / its tokens."""
    slos = {i: r.slo_s for i, r in enumerate(requests)}
    left = {i: r.remaining for i, r in enumerate(requests)}
    length = {i: r.length for i, r in enumerate(requests)}
    batcher, now, done = CreditBatcher(), 0.0, {}
    while left:
        present = {i: slos[i] for i in left}
        tightest = min(present.values())
        chosen = batcher.select({i: s or tightest for i, s in present.items()})
        now += model.predict(len(chosen), sum(length[i] for i in chosen) / len(chosen))
        for i in chosen:
            left[i] -= 1
            length[i] += 1
            if left[i] == 0:
                del left[i]
                done[i] = now / requests[i].remaining
    return [done[i] for i in range(len(requests))]


@pytest.mark.parametrize("seed", range(4))
def test_the_projection_matches_a_step_by_step_run_of_the_credit_batcher(seed):
    rng = np.random.default_rng(seed)
    model = DecodeModel(alpha=2e-7, beta=0.004, gamma=2e-6, delta=0.003)
    requests = [Decoding(float(rng.choice([0.02, 0.04, 0.06])), int(rng.integers(20, 200)), int(rng.integers(10, 900)))
                for _ in range(int(rng.integers(2, 12)))]
    projected, brute = projected_tpots(requests, model), _step_by_step(requests, model)
    assert np.allclose(projected, brute, rtol=0.06), list(zip(projected, brute))


def test_decode_model_recovers_known_coefficients():
    rng = np.random.default_rng(0)
    b = rng.integers(1, 64, 300).astype(float)
    length = rng.integers(16, 2048, 300).astype(float)
    truth = DecodeModel(2e-7, 3e-4, 1e-6, 4e-3)
    seconds = [truth.predict(x, y) * (1 + rng.normal(0, 0.01)) for x, y in zip(b, length)]
    fit = DecodeModel.fit(b.tolist(), length.tolist(), seconds)
    assert fit.alpha == pytest.approx(2e-7, rel=0.05) and fit.beta == pytest.approx(3e-4, rel=0.1)
    assert fit.delta == pytest.approx(4e-3, rel=0.1) and fit.r2 > 0.99


def test_decode_fit_keeps_every_cost_non_negative_where_plain_least_squares_would_not():
    # Six grid points like the warm-up's, where the batch-1 steps were slowed by a neighbour:
    # unconstrained least squares answers with a negative fixed cost.
    batch = [1, 1, 4, 4, 16, 16]
    length = [64, 256, 64, 256, 64, 256]
    seconds = [0.0030, 0.0031, 0.0018, 0.0022, 0.0040, 0.0060]
    design = np.stack([np.multiply(batch, length), batch, length, np.ones(6)], axis=1)
    plain, *_ = np.linalg.lstsq(design, np.asarray(seconds), rcond=None)
    assert (plain < 0).any()
    fit = DecodeModel.fit(batch, length, seconds)
    assert min(fit.alpha, fit.beta, fit.gamma, fit.delta) >= 0
    assert all(fit.predict(b, n) > 0.001 for b, n in zip(batch, length))
    # no non-negative coefficients fit the points better (relative squared error, the fit's
    # objective): compare against a brute-force grid around the answer
    def relative_sse(model: DecodeModel) -> float:
        return sum(((model.predict(b, n) - t) / t) ** 2 for b, n, t in zip(batch, length, seconds))

    grid = itertools.product(*(np.linspace(0, 2 * max(c, 1e-6 if i < 3 else 1e-3), 9)
                               for i, c in enumerate((fit.alpha, fit.beta, fit.gamma, fit.delta))))
    best = relative_sse(fit)
    for coef in grid:
        assert relative_sse(DecodeModel(*coef)) >= best - 1e-9


def test_prefill_model_finds_the_threshold_and_slope():
    tokens = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    truth = PrefillModel(threshold=256, base_s=0.02, per_token_s=1e-4)
    fit = PrefillModel.fit(tokens, [truth.predict(n) for n in tokens])
    assert fit.threshold == 256 and fit.base_s == pytest.approx(0.02) and fit.per_token_s == pytest.approx(1e-4)
    assert fit.predict(100) == pytest.approx(0.02) and fit.r2 > 0.999


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_calibration_scales_predictions_by_the_windowed_ratio_plus_its_spread():
    from common.slo.calibration import Calibration

    clock = _Clock()
    cal = Calibration(window_s=1.0, spread=0.5, min_samples=2, clock=clock)
    assert cal.scale(0.010) == pytest.approx(0.010)  # nothing observed: the model as fitted
    ratios = [1.5, 2.5, 2.0, 3.0, 1.0]
    for r in ratios:
        cal.observe(0.010, 0.010 * r)
        clock.now += 0.1
    expected = np.mean(ratios) + 0.5 * np.std(ratios)  # brute force over the window
    assert cal.scale(0.010) == pytest.approx(0.010 * expected)


def test_calibration_forgets_what_is_older_than_its_window_but_keeps_the_newest_samples():
    from common.slo.calibration import Calibration

    clock = _Clock()
    cal = Calibration(window_s=1.0, spread=0.0, min_samples=2, clock=clock)
    for _ in range(10):
        cal.observe(0.010, 0.040)  # a busy spell: 4x the model
    clock.now = 5.0
    for _ in range(3):
        cal.observe(0.010, 0.020)
    assert cal.ratio == pytest.approx(2.0)  # the busy spell left the window
    clock.now = 60.0  # a long idle time: the newest two samples still stand
    assert cal.ratio == pytest.approx(2.0)


def test_calibration_corrects_a_model_too_slow_as_well_as_one_too_fast_within_its_bounds():
    from common.slo.calibration import Calibration

    slow = Calibration(spread=0.0)
    for _ in range(20):
        slow.observe(0.250, 0.005)  # the model is 50x too slow
    assert slow.scale(0.250) == pytest.approx(0.005)
    fast = Calibration(spread=0.0)
    for _ in range(20):
        fast.observe(0.005, 0.015)  # 3x too fast
    assert fast.scale(0.005) == pytest.approx(0.015)
    wild = Calibration(spread=0.0, bounds=(0.1, 10.0))
    wild.observe(0.010, 0.0)  # one step of no time at all cannot make predictions free
    assert wild.ratio == pytest.approx(0.1)
    wild = Calibration(spread=0.0, bounds=(0.1, 10.0))
    wild.observe(0.001, 5.0)  # nor one stall infinite
    assert wild.ratio == pytest.approx(10.0)


def test_calibrated_admission_turns_away_what_the_idle_model_would_admit():
    model = DecodeModel(alpha=0.0, beta=0.010, gamma=0.0, delta=0.0)
    assert admits(_same(6, 0.1), model)  # 60 ms x 1.3 = 78 ms
    assert not admits(_same(6, 0.1), model, calibration=lambda s: 2 * s)  # 156 ms


def test_a_fit_that_reproduces_its_points_is_sound_and_one_that_does_not_is_made_conservative():
    batch, length = [1, 1, 4, 4, 16, 16], [74, 266, 74, 266, 74, 266]
    truth = DecodeModel(6e-10, 8e-5, 0.0, 1.6e-3)
    clean = [truth.predict(b, n) for b, n in zip(batch, length)]
    fit = DecodeModel.fit(batch, length, clean)
    assert fit.sound and fit.worst_ratio == pytest.approx(1.0, abs=1e-6)
    # contention while measuring: two points 3x slower than the rest explain
    noisy = [t * (3.0 if i in (1, 2) else 1.0) for i, t in enumerate(clean)]
    bad = DecodeModel.fit(batch, length, noisy)
    predicted = [bad.predict(b, n) for b, n in zip(batch, length)]
    brute_worst = max(max(p / t, t / p) for p, t in zip(predicted, noisy))
    assert bad.worst_ratio == pytest.approx(brute_worst) and brute_worst > 1.5 and not bad.sound
    safe = bad.conservative(batch, length, noisy)
    assert all(safe.predict(b, n) >= t * (1 - 1e-9) for b, n, t in zip(batch, length, noisy))


def test_flat_timings_are_a_sound_fit_whatever_their_r2():
    from common.slo.cost_models import sound

    assert sound(r2=0.02, worst_ratio=1.08)  # a GPU step flat in batch size: R² says nothing
    assert not sound(r2=0.02, worst_ratio=1.4)
    assert sound(r2=0.9, worst_ratio=1.4) and not sound(r2=0.99, worst_ratio=1.6)


def test_the_prefill_fit_reproduces_small_prompts_too():
    # measured on a 2-core CPU, one thread: a least-squares fit of absolute error put 16 tokens at 1.6x
    tokens = [16, 64, 128, 256, 512, 1024]
    seconds = [0.0039, 0.0065, 0.0105, 0.0188, 0.0449, 0.1002]
    fit = PrefillModel.fit(tokens, seconds)
    assert fit.sound, fit.describe()
    assert all(1 / 1.5 <= fit.predict(n) / t <= 1.5 for n, t in zip(tokens, seconds))



def test_tpot_guard_admits_an_idle_worker_by_its_unloaded_step_and_a_busy_one_by_the_model():
    from common.slo.tpot_guard import TPOT_MARGIN, admits_request

    model = DecodeModel(alpha=0.0, beta=0.010, gamma=0.0, delta=0.0)  # 10 ms per virtual request
    step = 0.005  # one request alone, measured: half what the model says

    def new(slo_ms: float) -> Decoding:
        return Decoding(slo_ms / 1000, 20, 9)

    assert admits_request(new(0.0), _same(1, 0.001), model, step)  # no TPOT SLO: never refused
    # idle: the measured step decides (5 ms), under no margin, whatever the model (10 ms) or ε says
    assert admits_request(new(step * 1000 * 1.01), [], model, step, epsilon=4.0)
    assert not admits_request(new(step * 1000 * 0.99), [], model, step)
    # a reservation alone makes the worker busy: the model decides (VBS 1 + 10/30 -> 17.3 ms > 10 ms)
    assert not admits_request(new(10.0), _same(1, 0.030, remaining=20), model, step)
    assert admits_request(new(30.0), _same(1, 0.030, remaining=20), model, step)  # VBS 2: 26 ms
    assert not admits_request(new(30.0), _same(2, 0.030, remaining=20), model, step)  # VBS 3: 39 ms
    # nothing measured: the model decides even when idle (10 ms x 1.3 = 13 ms)
    assert admits_request(new(13.1), [], model, None) and not admits_request(new(12.9), [], model, None)
    # ε is the caller's: the gateway's closed loop steers it
    assert admits_request(new(30.0), _same(2, 0.030, remaining=20), model, step, epsilon=0.9)


def test_a_handoff_ahead_of_the_newcomer_is_spread_over_its_output_idle_or_busy():
    """A client's TPOT runs from the prefill's first token, so the gap before the first decode step
    counts too: over ``remaining`` tokens it adds ``lag / remaining`` to each."""
    from common.slo.tpot_guard import admits_request

    model = DecodeModel(alpha=0.0, beta=0.010, gamma=0.0, delta=0.0)
    step = 0.010

    def admitted(slo_ms: float, lag_s: float, present: list[Decoding] | None = None) -> bool:
        return admits_request(Decoding(slo_ms / 1000, 20, 9, lag_s=lag_s), present or [], model, step, epsilon=1.0)

    # idle: 10 ms a step + 40 ms over 20 tokens = 12 ms a token
    assert admitted(12.01, 0.0) and admitted(12.01, 0.040) and not admitted(11.99, 0.040)
    # busy (the model, VBS 2: 20 ms a step, the one present leaving with the newcomer): 20 + 2 = 22 ms
    present = [Decoding(0.0, 20, 9)]  # no SLO: it runs every step
    assert admitted(22.01, 0.040, present) and not admitted(21.99, 0.040, present)
    # a reservation's handoff is its own: the newcomer's projection does not carry it
    tpots = projected_tpots([Decoding(0.05, 20, 9, lag_s=0.040), Decoding(0.05, 20, 9)], model)
    assert tpots[0] == pytest.approx(tpots[1] + 0.040 / 20)


def test_a_handoff_extra_is_what_makes_a_tpot_differ_from_the_mean_of_its_later_gaps():
    from common.slo.tpot_guard import handoff_extra

    rng = np.random.default_rng(3)
    for _ in range(20):
        tokens = int(rng.integers(3, 80))
        gaps = rng.uniform(0.01, 0.03, tokens - 1)
        gaps[0] = rng.uniform(0.03, 0.13)  # the handoff: longer than any later gap
        times = np.concatenate([[0.0], np.cumsum(gaps)])
        extra = handoff_extra(times[0], times[1], times[-1], tokens)
        tpot = (times[-1] - times[0]) / (tokens - 1)  # as a client measures it
        rest = (times[-1] - times[1]) / (tokens - 2)
        assert tpot == pytest.approx(rest + extra / (tokens - 1))
    assert handoff_extra(0.0, 0.001, 0.1, 10) == 0.0  # a first gap shorter than the rest: nothing to add
    assert handoff_extra(0.0, 0.05, 0.05, 2) is None  # no later gap to compare with


def test_tpot_guard_admits_past_the_batch_only_where_places_free_before_the_newcomer_commits():
    """Past ``max_running`` a committed request would wait for a place in the batch with its first
    token out. Worked by hand with 1 ms steps whatever the batch, every SLO alike (so every request
    runs every step): those present leave after 10, 20 and 30 ms. k past the limit, the newcomer is
    admitted only if the k-th of them leaves within ``soonest_commit_s``."""
    from common.slo.tpot_guard import admits_request

    model = DecodeModel(alpha=0.0, beta=0.0, gamma=0.0, delta=0.001)

    def admitted(max_running: int | None, soonest_commit_s: float, slo_ms: float = 50.0) -> bool:
        present = [Decoding(slo_ms / 1000, remaining, 100) for remaining in (10, 20, 30)]
        return admits_request(Decoding(slo_ms / 1000, 20, 9), present, model, 0.001, max_running=max_running,
                              soonest_commit_s=soonest_commit_s)

    assert admitted(4, 0.0)  # a place at once
    assert not admitted(3, 0.0)  # no time for a place to free: refused, however cheap the steps
    assert not admitted(3, 0.0099) and admitted(3, 0.0101)  # one past: the first leaves at 10 ms
    assert not admitted(2, 0.0199) and admitted(2, 0.0201)  # two past: the second at 20 ms
    assert not admitted(2, 1.0, slo_ms=1.29)  # places or not, the TPOT projection still decides (1 ms x 1.3)
    assert admitted(None, 0.0)  # no limit given: time alone
    # no SLO: never refused, whatever the batch holds
    assert admits_request(Decoding(0.0, 20, 9), [Decoding(0.05, 10, 100)], model, 0.001, max_running=1)


def test_tpot_guard_projects_growing_lengths_and_applies_the_calibration():
    from common.slo.tpot_guard import admits_request

    model = DecodeModel(alpha=0.0, beta=0.0, gamma=0.001, delta=0.0)  # 1 ms per token of mean length
    # a request without an SLO runs every step beside the new one; both have 11 tokens to go and
    # grow by one a step from 10 and 40 tokens: the mean length halfway is (15.5 + 45.5) / 2 =
    # 30.5 -> 30.5 ms a token, x 1.3 = 39.65 ms
    present = [Decoding(0.0, 11, 10)]
    assert admits_request(Decoding(0.0397, 11, 40), present, model, 0.001)
    assert not admits_request(Decoding(0.0396, 11, 40), present, model, 0.001)
    assert not admits_request(Decoding(0.0397, 11, 40), present, model, 0.001, calibration=lambda s: 1.1 * s)


def test_the_slos_the_tpot_guard_keeps_are_the_running_and_reserved_ones_with_an_slo():
    from common.slo.tpot_guard import guarded_slos

    assert guarded_slos({"a": 50.0, "b": 0.0}, {"c": 100.0}) == {"a": 0.05, "c": 0.1}
    assert guarded_slos({}, {}) == {}


def test_a_gpu_like_decode_step_flat_until_its_knee_is_fitted_with_the_knee():
    batch = [1, 4, 16, 32, 64, 1, 4, 16, 32, 64]
    length = [64] * 5 + [256] * 5
    truth = DecodeModel(alpha=1e-8, beta=2e-4, gamma=1e-6, delta=0.006, knee=16)  # flat to 16, then 0.2 ms a request
    fit = DecodeModel.fit(batch, length, [truth.predict(b, n) for b, n in zip(batch, length)])
    assert fit.knee == 16 and fit.sound
    assert all(fit.predict(b, n) == pytest.approx(truth.predict(b, n), rel=1e-6) for b, n in zip(batch, length))
    # the knee-less fit of the old model form misses the flat part by more
    linear = DecodeModel.fit(batch[:3] + batch[5:8], length[:3] + length[5:8],
                             [truth.predict(b, n) for b, n in zip(batch[:3] + batch[5:8], length[:3] + length[5:8])])
    assert linear.predict(64, 64) < 0.9 * truth.predict(64, 64)  # extrapolated past its range: far too fast


def test_the_prefill_fit_finds_attention_quadratic_part_and_says_where_it_extrapolates():
    tokens = [16, 64, 128, 256, 512, 1024, 2048, 4096]
    truth = PrefillModel(threshold=128, base_s=0.005, per_token_s=5e-5, per_token2_s=2e-9)
    fit = PrefillModel.fit(tokens, [truth.predict(n) for n in tokens])
    assert fit.per_token2_s == pytest.approx(2e-9, rel=1e-3) and fit.threshold == 128
    assert fit.max_tokens == 4096 and not fit.extrapolates(4096) and fit.extrapolates(4097)
    assert not PrefillModel(0, 0.01, 1e-4).extrapolates(10**6)  # written by hand: range unknown


@pytest.mark.parametrize("tokens,start", [(1, 0), (7, 0), (64, 0), (16, 48), (100, 3)])
def test_attention_work_counts_the_causal_pairs_a_chunk_attends_to(tokens, start):
    pairs = sum(1 for q in range(start, start + tokens) for k in range(start + tokens) if k <= q)  # brute force
    assert attention_work(tokens, start) == 2 * pairs - tokens
    # a prompt run in chunks does the work of the whole prompt
    cuts = [0, 5, 33, 34, 90, 128]
    assert sum(attention_work(b - a, a) for a, b in itertools.pairwise(cuts)) == attention_work(128)


def test_a_forward_of_several_prompts_is_predicted_by_the_sum_of_their_attention():
    model = PrefillModel(threshold=0, base_s=0.005, per_token_s=5e-5, per_token2_s=2e-8)
    one = model.predict(2048)  # a single prompt of 2048 tokens: what the profile measures
    eight = model.predict(2048, 8 * attention_work(256))
    assert one == pytest.approx(0.005 + 5e-5 * 2048 + 2e-8 * 2048**2)
    assert eight == pytest.approx(0.005 + 5e-5 * 2048 + 2e-8 * 8 * 256**2)
    # a queue's work is its prompts', however it is cut into forwards; the fixed cost is per forward
    assert model.predict_forwards(2048, 512, 8 * attention_work(256)) == pytest.approx(
        4 * (0.005 + 5e-5 * 512) + 2e-8 * 8 * 256**2)
    assert model.predict_forwards(2048, 512) == pytest.approx(4 * model.predict(512))  # each forward as one prompt
    # past a threshold, with a last forward shorter than the budget, and all in one forward
    hinge = PrefillModel(threshold=100, base_s=0.01, per_token_s=1e-4, per_token2_s=3e-9)
    assert hinge.predict_forwards(1300, 512, 5e5) == pytest.approx(
        2 * (0.01 + 1e-4 * 412) + (0.01 + 1e-4 * 176) + 3e-9 * 5e5)
    assert hinge.predict_forwards(80, 0, 5e5) == pytest.approx(0.01 + 3e-9 * 5e5)
